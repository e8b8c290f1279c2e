"""trainfleet backends."""
