"""Reading a submitted job's text: its media type, a size limit, UTF-8."""

from __future__ import annotations

from fastapi import Request

from trainfleet.server.errors import ApiError
from trainfleet.spec.errors import SpecError

JOB_MEDIA_TYPES = (
    "application/yaml",
    "application/x-yaml",
    "text/yaml",
    "text/x-yaml",
    "application/json",
    "text/plain",
)
"""A job is YAML or JSON text; YAML reads both, but one declared JSON must be JSON."""


def check_media_type(request: Request) -> str:
    """The declared media type ("" if none); 415 unless it is one of JOB_MEDIA_TYPES."""
    declared = request.headers.get("content-type", "")
    media_type = declared.split(";", 1)[0].strip().lower()
    if media_type and media_type not in JOB_MEDIA_TYPES:
        raise ApiError(
            415, f"cannot read a job sent as {media_type}: use {', '.join(JOB_MEDIA_TYPES)}"
        )
    return media_type


async def read_limited(request: Request, limit: int) -> bytes:
    """The whole body; 413 as soon as it is known to be over ``limit`` bytes."""
    too_large = ApiError(413, f"the job is larger than the server's limit of {limit} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise too_large
    return bytes(body)


def decode(raw: bytes, filename: str) -> str:
    """The body as text, as ``load_job_file`` reads a file; SpecError (422) if not UTF-8."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise SpecError.one("is not UTF-8 text", file=filename, line=line) from None
