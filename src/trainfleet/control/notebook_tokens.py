"""A notebook's API token: a real token of its job's owner, so that ``Client()`` in the
notebook needs no arguments (``backends.launch.ServerAccess``).

It is made when the notebook first starts, named ``notebook <job id>`` (its owner sees it
in ``trainfleet token list``, and may revoke it), and revoked when its job ends, in any
final state, before that state is written (``JobController``), when a job that never
started or whose controller died is ended (``Engine``), when the job is deleted, and, for
one whose end a killed server did not live to follow, when the next server resumes
(``sweep``). Its secret is a keyed hash of the job's id and the token's id
(``vault.service_tokens.owner_token``): a task started again gets the same one, and the
store keeps its digest only, as of every token. That hash also tells this module's tokens
from a user's own that happens to have such a name: those are never revoked here.
"""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

from trainfleet.control.services.tokens import digest
from trainfleet.domain.records import Audited, AuditRecord, State, TokenRecord
from trainfleet.store.errors import StoreConflict
from trainfleet.vault.service_tokens import owner_token

if TYPE_CHECKING:
    from trainfleet.store.database import Store

log = logging.getLogger("trainfleet.control")

PREFIX = "notebook "
SOURCE = "local"
"""The audit records' source: the server itself, not a request."""


def name_of(job_id: str) -> str:
    """The token's name, as its owner sees it.

    >>> name_of("nb-1a2b3c4d")
    'notebook nb-1a2b3c4d'
    """
    return f"{PREFIX}{job_id}"


def issue(store: Store, data_root: Path, job_id: str, owner: str) -> str | None:
    """The secret of the token that notebook job ``job_id`` holds of ``owner``, made (and
    audited) where it has none yet; None where the owner has a token of that name of their
    own (the notebook then gets none)."""
    name = name_of(job_id)
    for record in store.list_tokens(user=owner):
        if record.name == name and not record.revoked:
            if _ours(record, data_root, job_id):
                return owner_token(data_root, job_id, record.id)
            log.warning("job %s: %s has a token named %r already: none made", job_id, owner, name)
            return None
    token_id = secrets.token_hex(4)
    secret = owner_token(data_root, job_id, token_id)
    record = TokenRecord(
        id=token_id, name=name, digest=digest(secret), user=owner, created_at=time.time()
    )
    try:
        store.add_token(record)
    except StoreConflict as error:  # a name taken meanwhile, or an id drawn twice
        log.warning("job %s: no token of %s made: %s", job_id, owner, error)
        return None
    _audit(store, Audited.TOKEN_CREATE, record, f"for notebook job {job_id}, until it ends")
    return secret


def revoke(store: Store, data_root: Path, job_id: str, owner: str | None = None) -> None:
    """Revoke the token notebook job ``job_id`` holds (of ``owner``, where known), if any."""
    name = name_of(job_id)
    for record in store.list_tokens(user=owner):
        if record.name == name and not record.revoked and _ours(record, data_root, job_id):
            _revoke(store, record, f"notebook job {job_id} ended")


def sweep(store: Store, data_root: Path) -> list[str]:
    """Revoke the tokens of notebook jobs that ended, or are gone, while no server followed
    them (a server killed between a job's end and its token's); the jobs' ids."""
    ended = []
    for record in store.list_tokens():
        if record.revoked or not record.name.startswith(PREFIX):
            continue
        job_id = record.name.removeprefix(PREFIX)
        job = store.get_job(job_id)
        if job is not None and not State(job.state).is_final:
            continue
        if _ours(record, data_root, job_id):
            _revoke(store, record, f"notebook job {job_id} ended while no server ran")
            ended.append(job_id)
    return ended


def _ours(record: TokenRecord, data_root: Path, job_id: str) -> bool:
    """Whether ``record`` is the token this module made for ``job_id``."""
    return hmac.compare_digest(record.digest, digest(owner_token(data_root, job_id, record.id)))


def _revoke(store: Store, record: TokenRecord, why: str) -> None:
    if store.revoke_token(record.id):
        _audit(store, Audited.TOKEN_REVOKE, record, why)


def _audit(store: Store, action: Audited, record: TokenRecord, detail: str) -> None:
    """One record of the trail, by the token's owner, whose job made the change (the trail
    never raises: a record it cannot write goes to the log)."""
    store.audit.record(
        AuditRecord(
            time=time.time(),
            user=record.user,
            action=action,
            target=record.id,
            source=SOURCE,
            detail=detail,
        )
    )
