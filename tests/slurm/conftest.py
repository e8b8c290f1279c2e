"""The ``slurm_user`` fixture (see slurm_cluster.py) for every test of this folder."""

from slurm_cluster import slurm_user

__all__ = ["slurm_user"]
