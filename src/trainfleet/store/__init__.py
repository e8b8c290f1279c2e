"""Persistence: jobs, tasks, events, labels and API tokens in SQL (SQLite or PostgreSQL, see
``database.Store``), task logs in files under the data directory (``layout``, ``logs``)."""
