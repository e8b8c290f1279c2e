"""The control side's services: the one door through which the faces (the API's routes, the
CLI) reach jobs, accounts, queues, secrets and the audit trail.

Each module holds one service; ``bundle.Services`` builds them all over one engine. A face
checks nothing itself: who may see or do what is decided here, by ``access.RULES``, and
which team owns what by ``ownership``. The package's ``__init__`` imports nothing, so that
a command loads only the service it calls.
"""
