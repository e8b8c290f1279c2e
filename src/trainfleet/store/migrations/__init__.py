"""Alembic's scripts for the store's schema; ``trainfleet.store.migrate`` runs them."""
