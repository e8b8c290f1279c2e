"""SQL tables of the store (SQLAlchemy Core), shared by SQLite and PostgreSQL."""

from __future__ import annotations

from sqlalchemy import Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(80), primary_key=True),
    Column("name", String(63), nullable=False),
    Column("framework", String(20), nullable=False),
    Column("state", String(20), nullable=False),
    Column("reason", Text, nullable=False, default=""),
    Column("spec", Text, nullable=False),
    Column("source", String(40), nullable=False),
    Column("workdir", Text, nullable=False),
    Column("user", String(200), nullable=False, default=""),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float),
    Column("finished_at", Float),
    Index("ix_jobs_created_at", "created_at"),
)

tasks = Table(
    "tasks",
    metadata,
    Column("job_id", String(80), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("role", String(63), primary_key=True),
    Column("index", Integer, primary_key=True, autoincrement=False),
    Column("state", String(20), nullable=False),
    Column("address", String(300), nullable=False, default=""),
    Column("gpus", String(200), nullable=False, default=""),
    Column("pid", Integer),
    Column("restarts", Integer, nullable=False, default=0),
    Column("exit_code", Integer),
    Column("reason", Text, nullable=False, default=""),
    Column("started_at", Float),
    Column("finished_at", Float),
)

events = Table(
    "events",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", String(80), ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
    Column("time", Float, nullable=False),
    Column("task", String(80), nullable=False, default=""),
    Column("state", String(20), nullable=False),
    Column("message", Text, nullable=False, default=""),
    Index("ix_events_job_id", "job_id", "id"),
)
