"""trainfleet store."""
