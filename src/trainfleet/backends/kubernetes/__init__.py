"""The Kubernetes backend: trainfleet as the controller, one Pod per task (see ``backend``)."""
