"""``/api/v1/workdirs/{tree}``: job directories sent by clients, stored by team and digest.

A client asks whether the server has a tree (``HEAD``) and sends it only when not
(``PUT``, a tar.gz of at most ``--max-workdir`` bytes, its unpacked files at most that
too); a submission naming the tree (``?tree=``) runs in a copy of it of its own.

A tree is stored for the teams the caller may submit jobs in (an administrator's, for the
administrators), and a digest names nothing for anyone else: ``HEAD`` answers 404 until
the caller's own teams have the tree.
"""

import tempfile
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request, Response
from fastapi.concurrency import run_in_threadpool

from trainfleet.control.services.ownership import tree_owners
from trainfleet.datadir.space import require_free
from trainfleet.domain.errors import Forbidden
from trainfleet.server.auth import Who, authenticate
from trainfleet.server.errors import ApiError, responses
from trainfleet.server.params import known_query_only
from trainfleet.server.state import WorkdirsDep
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
