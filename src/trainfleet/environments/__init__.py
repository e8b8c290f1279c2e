"""Per-job Python environments: built with uv, cached by content under the data directory."""
