"""Secrets: their encryption at rest (``keys``) and their masking in task logs (``masking``)."""
