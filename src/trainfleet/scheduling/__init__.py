"""Placement maths: pure functions from jobs and resources to places. No I/O."""
