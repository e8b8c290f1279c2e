"""trainfleet frameworks."""
