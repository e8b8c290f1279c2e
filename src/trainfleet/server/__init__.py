"""The shared server: a REST API over the engine, run by ``trainfleet server``.

Importing this package is cheap; FastAPI loads only with ``server.app``.
"""
