"""``/api/v1/jobs/{id}/outputs``: the files a job's tasks left in its output folder
(``$TRAINFLEET_OUTPUT_DIR``), listed and read as the job's logs are (READ_JOB)."""

from collections.abc import Iterator
from typing import BinaryIO

from fastapi import APIRouter, Depends
from fastapi.responses import StreamingResponse

from trainfleet.server.auth import authenticate
from trainfleet.server.errors import ERROR_RESPONSES, responses
from trainfleet.server.params import OutputName, known_query_only
from trainfleet.server.state import JobsDep, Readable
from trainfleet.wire import OutputFile

CHUNK = 1 << 20
"""Bytes of an output sent at a time."""

router = APIRouter(
    prefix="/jobs/{job_id}/outputs",
    tags=["outputs"],
    dependencies=[Depends(authenticate), Depends(known_query_only)],
    responses=ERROR_RESPONSES,
)
"""The output endpoints, each behind a token: outputs are read as their job is."""


@router.get("")
def list_outputs(job: Readable, jobs: JobsDep) -> list[OutputFile]:
    """The job's outputs, by name: the regular files with a plain name directly in its
    output folder (no link, folder or FIFO; at most 1000)."""
    return [OutputFile(name=o.name, size=o.size, modified=o.modified) for o in jobs.outputs(job)]


@router.get(
    "/{name:path}",
    response_class=StreamingResponse,
    responses={
        200: {
            "description": "The output's bytes.",
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        },
        **responses(_409="The output cannot be read (its task made it unreadable)."),
    },
)
def read_output(job: Readable, jobs: JobsDep, name: OutputName) -> StreamingResponse:
    """The output's bytes (at most 256 MiB: a larger one is refused with its size)."""
    file, size = jobs.open_output(job, name)
    headers = {
        "Content-Length": str(size),
        "Content-Disposition": f'attachment; filename="{name}"',  # OUTPUT_NAME: no quote
    }
    return StreamingResponse(
        _chunks(file, size), media_type="application/octet-stream", headers=headers
    )


def _chunks(file: BinaryIO, size: int) -> Iterator[bytes]:
    """The first ``size`` bytes of ``file``, as its Content-Length said; then it is closed.
    A file cut short meanwhile ends the answer early (a broken one, not a short one)."""
    with file:
        left = size
        while left > 0:
            chunk = file.read(min(CHUNK, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk
