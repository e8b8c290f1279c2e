"""The database, and only it: jobs, tasks, events, labels, queues, accounts, tokens, secrets
and the audit trail in SQL (SQLite or PostgreSQL, see ``database.Store``), each state change
through ``transitions``. The data directory's files are ``datadir``'s."""
