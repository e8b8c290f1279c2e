"""Secrets: their encryption at rest (``keys``) and each team's secrets (``secrets``); their
masking in task logs is the shim's (``backends/supervision/masking.py``)."""
