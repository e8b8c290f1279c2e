"""What the user writes: job models, loading and importers."""

from trainfleet.spec.models import (
    Framework,
    JobSpec,
    Resources,
    RestartPolicy,
    RestartSpec,
    RoleSpec,
)

__all__ = ["Framework", "JobSpec", "Resources", "RestartPolicy", "RestartSpec", "RoleSpec"]
