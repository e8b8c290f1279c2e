"""``python -m trainfleet``."""

from trainfleet.cli.main import main
from trainfleet.process_exit import run_and_exit

run_and_exit(main)
