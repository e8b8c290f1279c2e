"""``python -m trainfleet``."""

from trainfleet.cli.main import main

main()
