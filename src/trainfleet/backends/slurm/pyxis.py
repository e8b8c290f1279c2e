"""A task in a container through pyxis: ``srun --container-image`` from the task's shim.

For clusters whose nodes have NVIDIA's pyxis (a Slurm SPANK plugin) and enroot instead of
podman: the config's ``slurm: {containers: pyxis}``. The shim, which runs on the task's node
inside the job's step, starts one more step there (``--overlap``: it shares the resources the
task's step holds), and pyxis runs it in the image. The job's folder is mounted as with
podman (at its own path, or at the job file's ``workdir_mount``) and the task runs there
(in ``working_dir`` inside it, where relative), as on Slurm with podman (``image_workdir``
is not followed: the image is on the nodes, not here to ask); ``mounts`` are pyxis's
``--container-mounts``; the task's environment reaches it through srun (the task's alone: the
bootstrap gave the shim nothing else). ``--container-entrypoint`` runs the image's ENTRYPOINT
where the role gives only args (pyxis 0.16 and later). GPUs are the step's, as Slurm gave
them. enroot imports the image as it does (its own cache: ``pull`` is not used). Stop, kill
and the attempt's mark work as for any process of the task: srun passes SIGTERM on to the
step, and what is left carries the mark.
"""

from __future__ import annotations

import shutil

from trainfleet.backends.launch import TaskLaunch


def pyxis_argv(launch: TaskLaunch, node: str) -> list[str]:
    """The ``srun`` that runs ``launch`` in its image on ``node`` (the task's own)."""
    assert launch.image is not None
    mounts = [  # the job's folder among them, where the job file mounts it
        f"{mount.source}:{mount.target}" + (":ro" if mount.read_only else "")
        for mount in launch.mounts
    ]
    argv = [
        # Found here, as sbatch is: the task's environment is the image's (no PATH of ours).
        shutil.which("srun") or "srun",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--export=ALL",
        "--kill-on-bad-exit=1",
        f"--container-image={launch.image}",
        f"--container-mounts={','.join(mounts)}",
        f"--container-workdir={launch.cwd}",
    ]
    if launch.entrypoint:
        argv.append("--container-entrypoint")
    return [*argv, "--", *launch.argv]
