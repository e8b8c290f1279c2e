"""The domain vocabulary every layer shares: job and task states, and the records of jobs."""
