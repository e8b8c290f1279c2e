"""Moved to ``trainfleet.control.services.audit``; kept for ``server/serve.py`` until it
imports from there."""

from trainfleet.control.services.audit import AuditPruner as AuditPruner
