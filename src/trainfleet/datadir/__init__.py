"""The data directory's files, apart from the database: how they are safely written."""
