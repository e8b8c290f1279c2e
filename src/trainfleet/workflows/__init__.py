"""Workflows: steps that are ordinary jobs, started as their ``needs`` allow.

``plan`` decides, from the steps' states alone, which step starts, which is skipped and
which is stopped (``on_failure``, ``when``, ``retries``); ``steps`` makes each step's job;
``run`` drives one run of a workflow on any job service, in the foreground.
"""
