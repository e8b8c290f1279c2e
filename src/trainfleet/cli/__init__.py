"""trainfleet cli."""
