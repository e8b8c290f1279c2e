"""The tokens of jobs' own services (a notebook's Jupyter), known to this installation only.

Each is a keyed hash of its job's id (``spec.notebook.token_of``) under the key in
``<data dir>/service.key`` (made on first use, 0600): the launch gives the task its token,
the proxy finds the same one to present, and no token is ever stored or sent to a browser.
A new key file changes every token: running notebooks then refuse the proxy until restarted.
"""

from __future__ import annotations

from pathlib import Path

from trainfleet.spec.notebook import token_of
from trainfleet.vault.keys import read_key_file

KEY_FILE = "service.key"


def notebook_token(data_root: Path, job_id: str) -> str:
    """The Jupyter token of notebook job ``job_id`` of the data directory ``data_root``."""
    return token_of(read_key_file(data_root / KEY_FILE, create=True)[0], job_id)
