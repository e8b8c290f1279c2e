"""A job's TensorBoard: the ``tensorboard`` package on the task's port, on loopback only,
under ``/jobs/<job id>/tensorboard`` (where a trainfleet server proxies it), reading the
job's ``TRAINFLEET_TENSORBOARD_DIR``.

Run as ``python tensorboard_serve.py [extra tensorboard flags]`` by the job's service role.
"""

from __future__ import annotations

import os
import sys


def logdir_of(env: dict[str, str] | os._Environ[str]) -> str:
    """The folder (or a URL TensorBoard reads: ``gs://``, ``s3://``) of the job's events."""
    logdir = env["TRAINFLEET_TENSORBOARD_DIR"]
    return logdir if "://" in logdir else os.path.abspath(logdir)


def argv(env: dict[str, str] | os._Environ[str], extra: list[str]) -> list[str]:
    """TensorBoard's own command line for this task."""
    logdir = logdir_of(env)
    return [
        "tensorboard",
        "--logdir",
        logdir,
        "--host",
        "127.0.0.1",
        "--port",
        env["TRAINFLEET_PORT"],
        "--path_prefix",
        f"/jobs/{env['TRAINFLEET_JOB']}/tensorboard",
        "--reload_interval",
        "2",
        *extra,
    ]


def main() -> int:
    try:
        from tensorboard import main as tensorboard_main  # type: ignore[import-untyped]
    except ImportError:
        print(
            "trainfleet: the tensorboard package is not installed beside trainfleet "
            f"({sys.executable}): pip install 'trainfleet[tensorboard]'",
            file=sys.stderr,
        )
        return 1
    logdir = logdir_of(os.environ)
    if "://" not in logdir:
        os.makedirs(logdir, exist_ok=True)  # TensorBoard waits for the job's first events
    sys.argv = argv(os.environ, sys.argv[1:])
    print(f"trainfleet: TensorBoard of {logdir} on 127.0.0.1:{os.environ['TRAINFLEET_PORT']}")
    sys.stdout.flush()
    tensorboard_main.run_main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
