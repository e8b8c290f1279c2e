"""Programs that trainfleet ships for tasks to run, such as ``trainfleet tf-server``."""
