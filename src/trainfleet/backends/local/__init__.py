"""trainfleet backends/local."""
