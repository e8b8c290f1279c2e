"""The data directory's files, apart from the database: where each lives (``layout``),
how they are safely written (``files``), task logs (``logs``), free space (``space``), and
the records of task attempts and of the processes running jobs (``records``, ``runners``)."""
