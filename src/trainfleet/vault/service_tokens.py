"""The tokens of jobs' own services (a notebook's Jupyter), of their Pods' fetch of the
job's folder (``workdir_token``) and of a notebook's API token of its owner
(``owner_token``), known to this installation only.

Each is a keyed hash of its job's id (``spec.notebook.token_of``) under the key in
``<data dir>/service.key`` (made on first use, 0600): the launch gives the task its token,
the proxy finds the same one to present, and no token is ever stored (of the owner's, its
digest only, as of every API token) or sent to a browser.
A new key file changes every token: running notebooks then refuse the proxy until restarted.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from trainfleet.spec.notebook import token_of
from trainfleet.vault.keys import read_key_file

KEY_FILE = "service.key"


def notebook_token(data_root: Path, job_id: str) -> str:
    """The Jupyter token of notebook job ``job_id`` of the data directory ``data_root``."""
    return token_of(read_key_file(data_root / KEY_FILE, create=True)[0], job_id)


def workdir_token(data_root: Path, job_id: str) -> str:
    """The token that fetches job ``job_id``'s folder from the server, and nothing else
    (``GET /api/v1/jobs/{job}/workdir``): a keyed hash apart from the notebook's."""
    key = read_key_file(data_root / KEY_FILE, create=True)[0]
    return hmac.new(key, f"workdir/{job_id}".encode(), hashlib.sha256).hexdigest()


def owner_token(data_root: Path, job_id: str, token_id: str) -> str:
    """The secret of the API token ``token_id`` that notebook job ``job_id`` holds of its
    owner (``control.notebook_tokens``): a keyed hash apart from the others, so that a
    restarted task gets it again and only its digest is stored, as of every token."""
    key = read_key_file(data_root / KEY_FILE, create=True)[0]
    return hmac.new(key, f"owner/{job_id}/{token_id}".encode(), hashlib.sha256).hexdigest()


def is_workdir_token(data_root: Path, job_id: str, token: str) -> bool:
    """Whether ``token`` is job ``job_id``'s (compared in constant time)."""
    return hmac.compare_digest(workdir_token(data_root, job_id), token)
