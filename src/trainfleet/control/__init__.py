"""trainfleet control."""
