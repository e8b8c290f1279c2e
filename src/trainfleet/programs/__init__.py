"""Programs that trainfleet ships for tasks to run, such as ``trainfleet tf-server``."""

from pathlib import Path

TF_SERVER = Path(__file__).with_name("tf_server.py")
"""``trainfleet tf-server``'s file, which tasks run with their own python (stdlib only)."""

TENSORBOARD = Path(__file__).with_name("tensorboard_serve.py")
"""A job's TensorBoard service (``tensorboard:``), run by trainfleet's own python, which has
the ``tensorboard`` package (``trainfleet[tensorboard]``)."""

NOTEBOOK = Path(__file__).with_name("notebook_serve.py")
"""A notebook job's JupyterLab (``notebook:``), run by the task's own ``python3`` (stdlib
only), which needs ``jupyterlab``."""

RENDEZVOUS = Path(__file__).with_name("rendezvous_store.py")
"""An elastic PyTorch job's c10d store (role ``rendezvous``), run by the task's own
``python3``, which has torch."""

RUN_FUNCTION = Path(__file__).with_name("run_function.py")
"""A function sent as a job (``trainfleet run-function``), run by the task's python:
trainfleet's own where the role has no image or environment, else that one's ``python3``."""

RUN_NOTEBOOK = Path(__file__).with_name("run_notebook.py")
"""A notebook run headless (a role's ``notebook:``), by the task's own ``python3``, which
needs nbclient and ipykernel."""

WRITABLE_PROBE = str(Path(__file__).with_name("writable.sh"))
"""``writable.sh FOLDER``: run as a job's account, says whether it could make ``FOLDER`` (or
write in it), from what that account can see."""
