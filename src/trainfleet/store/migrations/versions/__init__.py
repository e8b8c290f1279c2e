"""The schema's revisions, oldest first; each is listed in ``migrate.REVISIONS`` too."""
