"""Persistence: jobs, tasks and events in SQL, logs in files under the data directory."""
