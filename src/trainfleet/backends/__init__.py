"""Where tasks run: one contract (``api``), a task's launch as data (``launch``), backends
found by name (``registry``): ``local``, ``slurm``, and ``supervision`` (the task's shim and
its containers). Backends read no environment variables: the assembly hands them settings."""
