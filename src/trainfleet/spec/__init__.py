"""What the user writes: job models, loading and importers."""

from trainfleet.spec.frameworks import Framework
from trainfleet.spec.models import (
    JobSpec,
    Resources,
    RestartPolicy,
    RestartSpec,
    RoleSpec,
)

__all__ = ["Framework", "JobSpec", "Resources", "RestartPolicy", "RestartSpec", "RoleSpec"]
