"""A task for tests: listens on its trainfleet port until a file appears (or forever).

usage: serve.py [DONE_FILE] [--ignore-term | --save-on-term] [--exit CODE]
"""

import os
import signal
import socket
import sys
import time
from pathlib import Path

args = sys.argv[1:]
if "--ignore-term" in args:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    args.remove("--ignore-term")


def _save_and_exit(*_: object) -> None:
    time.sleep(0.3)  # a checkpoint takes a while
    print("saved on SIGTERM", flush=True)
    sys.exit(0)


if "--save-on-term" in args:
    signal.signal(signal.SIGTERM, _save_and_exit)
    args.remove("--save-on-term")
code = 0
if "--exit" in args:
    code = int(args[args.index("--exit") + 1])
    del args[args.index("--exit") : args.index("--exit") + 2]
done = Path(args[0]) if args else None

server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", int(os.environ["TRAINFLEET_PORT"])))
server.listen()
print(f"listening on {os.environ['TRAINFLEET_ADDRESS']} as pid {os.getpid()}", flush=True)
while done is None or not done.exists():
    time.sleep(0.05)
print("done", flush=True)
sys.exit(code)
