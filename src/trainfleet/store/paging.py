"""Opaque cursors for keyset pagination over ``(created_at, id)``, newest first."""

from __future__ import annotations

import base64
import binascii
import json
import math


def encode_cursor(created_at: float, job_id: str) -> str:
    """The cursor that resumes a listing just after the job ``(created_at, job_id)``."""
    raw = json.dumps([created_at, job_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[float, str]:
    """The position a cursor stands for; ValueError("invalid cursor") for anything else."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, job_id = json.loads(raw)
    except (ValueError, TypeError, binascii.Error):
        raise ValueError("invalid cursor") from None
    if isinstance(created_at, bool) or not isinstance(created_at, int | float):
        raise ValueError("invalid cursor")
    try:
        position = float(created_at)  # a huge integer overflows here
    except OverflowError:
        raise ValueError("invalid cursor") from None
    if not (math.isfinite(position) and isinstance(job_id, str)):
        raise ValueError("invalid cursor")
    return position, job_id
