"""``/api/v1/workdirs/{tree}``: job directories sent by clients, stored by team and digest.

A client asks whether the server has a tree (``HEAD``) and sends it only when not
(``PUT``, a tar.gz of at most ``--max-workdir`` bytes, its unpacked files at most that
too); a submission naming the tree (``?tree=``) runs in a copy of it of its own.

A tree is stored for the teams the caller may submit jobs in (an administrator's, for the
administrators), and a digest names nothing for anyone else: ``HEAD`` answers 404 until
the caller's own teams have the tree.

``GET /api/v1/jobs/{job}/workdir`` sends a running job's tree back, to its Pods on a
cluster that shares no storage with the server (``backends.kubernetes.volumes``): they
hold that job's token alone (``vault.service_tokens.workdir_token``), no member's.
"""

import io
import re
import tarfile
import tempfile
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials

from trainfleet.control.services.ownership import tree_owners
from trainfleet.datadir.space import require_free
from trainfleet.domain.errors import Forbidden, Unauthorized
from trainfleet.server.auth import TokenRefused, Who, authenticate, bearer
from trainfleet.server.errors import ApiError, responses
from trainfleet.server.params import JobId, known_query_only
from trainfleet.server.state import JobsDep, WorkdirsDep
from trainfleet.wire import API_PREFIX
from trainfleet.workdirs.store import DIGEST

Tree = Annotated[
    str, Path(pattern=DIGEST.pattern, description="The tree's digest (sha256 of its files).")
]
SPOOL = 8 << 20
"""Bytes of an upload kept in memory before it goes to a temporary file."""


router = APIRouter(
    prefix="/workdirs",
    tags=["workdirs"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=responses(),
)
"""Any member may ask for and send trees, its teams' own; a tree holds nothing until a
job runs in it."""


@router.head("/{tree}", responses={200: {"description": "Stored."}})
def has_tree(tree: Tree, who: Who, store: WorkdirsDep) -> Response:
    """200 when the server has this tree for each of the caller's teams (nothing to
    send), 404 when not."""
    try:
        mine = tree_owners(who.caller)
    except Forbidden:  # no team to send for: nothing is stored for it
        mine = []
    if not mine or not all(store.has(name, tree) for name in mine):
        raise ApiError(404, f"no stored tree {tree}")
    return Response(status_code=200)


@router.put(
    "/{tree}",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}
            },
        }
    },
    responses=responses(
        _403="The caller may submit jobs in no team.",
        _413="Over --max-workdir, sent or unpacked.",
        _422="Not a tar.gz, a member it may not hold, or not the tree named.",
        _507="The server's disk has no room.",
    ),
)
async def put_tree(
    tree: Tree,
    request: Request,
    response: Response,
    who: Who,
    store: WorkdirsDep,
) -> None:
    """Store a job's directory for the caller's teams, sent as a tar.gz of its files
    (200: stored already)."""
    mine = tree_owners(who.caller)
    if all(store.has(name, tree) for name in mine):
        response.status_code = 200
        return
    require_free(store.root.parent)
    with tempfile.SpooledTemporaryFile(SPOOL) as upload:
        async for chunk in request.stream():  # bounded by the request guard
            upload.write(chunk)
        upload.seek(0)
        if not await run_in_threadpool(store.add, mine, tree, upload):
            response.status_code = 200


pods = APIRouter(prefix="/jobs", tags=["workdirs"], dependencies=[Depends(known_query_only)])
"""What a job's Pods fetch with the job's own token."""
POD_PATHS = re.compile(rf"{API_PREFIX}/jobs/[^/]+/workdir")
"""Its paths, which take no member's token (``guard.RequestGuard``)."""


@pods.get(
    "/{job_id}/workdir",
    response_class=FileResponse,
    responses=responses(
        _200="The job's folder as a tar.gz (empty where the job was sent no tree).",
        _401="Not this job's folder token.",
        _409="The job has ended.",
    ),
)
async def job_tree(
    job_id: JobId,
    request: Request,
    jobs: JobsDep,
    store: WorkdirsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Response:
    """The tree a running job's folder was copied from, for its Pods to unpack."""
    token = credentials.credentials if credentials is not None else ""
    try:
        stored = await run_in_threadpool(jobs.tree_for_pods, job_id, token)
    except Unauthorized as error:  # answered, and recorded, as any refused token
        refused = TokenRefused("not the job's folder token", str(error))
        await request.app.state.auditor.refused(request.scope, refused)
        raise refused from None
    if stored is None:  # the job was sent no folder: it starts empty
        return Response(EMPTY_ARCHIVE, media_type="application/gzip")
    archive = await run_in_threadpool(store.archive, stored)
    return FileResponse(archive, media_type="application/gzip")


def _empty_archive() -> bytes:
    out = io.BytesIO()
    tarfile.open(fileobj=out, mode="w:gz").close()
    return out.getvalue()


EMPTY_ARCHIVE = _empty_archive()
