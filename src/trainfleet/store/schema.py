"""The store's tables, as SQL that SQLite runs as it is.

``user_version`` records the schema version, so a store opened by a newer trainfleet can
tell what it has to add.
"""

from __future__ import annotations

VERSION = 1

TABLES = """
CREATE TABLE IF NOT EXISTS jobs (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    framework   TEXT NOT NULL,
    state       TEXT NOT NULL,
    reason      TEXT NOT NULL DEFAULT '',
    spec        TEXT NOT NULL,
    source      TEXT NOT NULL,
    workdir     TEXT NOT NULL,
    user        TEXT NOT NULL DEFAULT '',
    created_at  REAL NOT NULL,
    started_at  REAL,
    finished_at REAL
);
CREATE INDEX IF NOT EXISTS ix_jobs_created_at ON jobs (created_at);

CREATE TABLE IF NOT EXISTS tasks (
    job_id      TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    role        TEXT NOT NULL,
    "index"     INTEGER NOT NULL,
    state       TEXT NOT NULL,
    address     TEXT NOT NULL DEFAULT '',
    gpus        TEXT NOT NULL DEFAULT '',
    pid         INTEGER,
    restarts    INTEGER NOT NULL DEFAULT 0,
    exit_code   INTEGER,
    reason      TEXT NOT NULL DEFAULT '',
    started_at  REAL,
    finished_at REAL,
    PRIMARY KEY (job_id, role, "index")
);

CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    time        REAL NOT NULL,
    task        TEXT NOT NULL DEFAULT '',
    state       TEXT NOT NULL,
    message     TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS ix_events_job_id ON events (job_id, id);
"""

JOB_COLUMNS = (
    "id", "name", "framework", "state", "reason", "spec", "source", "workdir", "user",
    "created_at", "started_at", "finished_at",
)  # fmt: skip
TASK_COLUMNS = (
    "job_id", "role", "index", "state", "address", "gpus", "pid", "restarts", "exit_code",
    "reason", "started_at", "finished_at",
)  # fmt: skip
