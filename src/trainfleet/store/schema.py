"""The columns the store reads and writes; the tables themselves are Alembic revisions.

See ``migrations/versions``: the SQL in ``database.py`` names these columns, quoted.
"""

from __future__ import annotations

JOB_COLUMNS = (
    "id", "name", "framework", "state", "code", "reason", "waiting_code", "waiting", "spec",
    "source", "workdir", "user", "team", "queue", "created_at", "started_at", "finished_at",
)  # fmt: skip
TASK_COLUMNS = (
    "job_id", "role", "index", "state", "address", "gpus", "pid", "restarts", "exit_code",
    "code", "reason", "started_at", "finished_at",
)  # fmt: skip
TOKEN_COLUMNS = ("id", "name", "digest", "admin", "created_at", "revoked_at", "user")
EVENT_COLUMNS = ("id", "job_id", "time", "task", "state", "code", "message", "team")
USER_COLUMNS = ("name", "admin", "created_at", "disabled_at")
TEAM_COLUMNS = ("name", "default_queue", "created_at")
SECRET_COLUMNS = ("team", "name", "keys", "data", "user", "created_at")
AUDIT_COLUMNS = (
    "time", "user", "token", "action", "target", "team", "source", "outcome", "detail",
)  # fmt: skip
"""Without ``id``, which the store gives."""
