"""Kubeflow manifests (TFJob, PyTorchJob, JAXJob, XGBoostJob) become the same JobSpec."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from trainfleet.spec.errors import SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.loading import LoadedJob, load_job_file
from trainfleet.spec.models import RestartPolicy, SecretRef

# Shaped like kubeflow/training-operator's examples, with an explicit command (the image's
# entrypoint cannot be known here) and the usual Kubernetes-only fields left in.
TFJOB = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata:
  name: dist-mnist
  namespace: kubeflow
  labels: {team: vision, tier: 2}
spec:
  runPolicy:
    cleanPodPolicy: None
    backoffLimit: 4
    activeDeadlineSeconds: 3600
  successPolicy: AllWorkers
  tfReplicaSpecs:
    PS:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: tensorflow
              image: kubeflow/tf-dist-mnist-test:1.0
              command: [trainfleet, tf-server]
    Worker:
      replicas: 3
      restartPolicy: OnFailure
      template:
        metadata:
          annotations: {sidecar.istio.io/inject: "false"}
        spec:
          nodeSelector: {accelerator: nvidia-tesla-v100}
          volumes: [{name: data, emptyDir: {}}]
          containers:
            - name: log-shipper
              image: fluent/fluent-bit:2.0
              command: [/fluent-bit/bin/fluent-bit]
            - name: tensorflow
              image: kubeflow/tf-dist-mnist-test:1.0
              imagePullPolicy: IfNotPresent
              command: [python, /var/tf_dist_mnist/dist_mnist.py]
              args: [--train_steps=1000, --batch_size=64]
              workingDir: /var/tf_dist_mnist
              ports:
                - containerPort: 2222
                  name: tfjob-port
              env:
                - name: TF_CPP_MIN_LOG_LEVEL
                  value: "1"
                - name: EMPTY
              resources:
                limits:
                  nvidia.com/gpu: 1
                  memory: 4Gi
                requests:
                  cpu: 500m
                  memory: 1Gi
              volumeMounts: [{name: data, mountPath: /data}]
"""

PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: pytorch-simple
  namespace: kubeflow
spec:
  nprocPerNode: "2"
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              imagePullPolicy: Always
              command:
                - "python3"
                - "/opt/pytorch-mnist/mnist.py"
                - "--epochs=1"
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: pytorch
              image: docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727
              imagePullPolicy: Always
              command:
                - "python3"
                - "/opt/pytorch-mnist/mnist.py"
                - "--epochs=1"
"""

ELASTIC_PYTORCHJOB = """\
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata:
  name: elastic-example-imagenet
spec:
  elasticPolicy:
    rdzvBackend: c10d
    minReplicas: 1
    maxReplicas: 3
    maxRestarts: 100
    nProcPerNode: 4
  pytorchReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: pytorch
              image: kubeflow/pytorch-elastic-example-imagenet:latest
              env:
                - name: LOGLEVEL
                  value: DEBUG
              command: [torchrun, /workspace/examples/imagenet.py]
              args:
                - "--arch=resnet18"
                - "--epochs=20"
                - "--batch-size=32"
                - /workspace/data/tiny-imagenet-200
"""

JAXJOB = """\
apiVersion: kubeflow.org/v1
kind: JAXJob
metadata:
  name: jaxjob-simple
  namespace: kubeflow
spec:
  jaxReplicaSpecs:
    Worker:
      replicas: 2
      restartPolicy: OnFailure
      template:
        spec:
          containers:
            - name: jax
              image: docker.io/kubeflow/jaxjob-simple:latest
              command: ["python3", "train.py"]
              imagePullPolicy: Always
"""

XGBOOSTJOB = """\
apiVersion: kubeflow.org/v1
kind: XGBoostJob
metadata:
  name: xgboost-dist-iris-test-train
spec:
  xgbReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: xgboost
              image: docker.io/merlintang/xgboost-dist-iris:1.1
              ports: [{containerPort: 9991, name: xgboostjob-port}]
              command: [python, /opt/mlkube/main.py]
              args:
                - --job_type=Train
                - --xgboost_parameter=objective:multi:softprob,num_class:3
                - --n_estimators=10
                - --learning_rate=0.1
                - --model_path=/tmp/xgboost-model
                - --model_storage_type=local
    Worker:
      replicas: 2
      restartPolicy: ExitCode
      template:
        spec:
          containers:
            - name: xgboost
              image: docker.io/merlintang/xgboost-dist-iris:1.1
              command: [python, /opt/mlkube/main.py]
              args: [--job_type=Train]
              resources:
                requests: {cpu: "1.5", memory: 2G}
"""


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def load(tmp_path: Path, text: str) -> LoadedJob:
    return load_job_file(write(tmp_path, text))


def error_of(tmp_path: Path, text: str, *replace: tuple[str, str]) -> str:
    for old, new in replace:
        assert old in text, old
        text = text.replace(old, new, 1)
    with pytest.raises(SpecError) as caught:
        load(tmp_path, text)
    return str(caught.value)


def test_tfjob(tmp_path: Path) -> None:
    job = load(tmp_path, TFJOB)
    spec = job.spec
    assert job.source == "TFJob"
    assert spec.name == "dist-mnist"
    assert spec.framework is Framework.TENSORFLOW
    assert spec.labels == {"team": "vision", "tier": "2"}
    assert list(spec.roles) == ["ps", "worker"]
    assert spec.roles["ps"].argv() == ["trainfleet", "tf-server"]
    worker = spec.roles["worker"]
    assert worker.replicas == 3
    assert worker.argv() == [
        "python",
        "/var/tf_dist_mnist/dist_mnist.py",
        "--train_steps=1000",
        "--batch_size=64",
    ]
    assert worker.working_dir == "/var/tf_dist_mnist"
    assert worker.env == {"TF_CPP_MIN_LOG_LEVEL": "1", "EMPTY": ""}
    assert worker.resources.gpu == 1
    assert worker.resources.memory == 4 * 2**30  # the limit wins over the request
    assert worker.resources.cpu == 500  # only requested
    assert worker.image == "kubeflow/tf-dist-mnist-test:1.0"
    assert worker.port is None  # container ports are not used: local ports are free ones
    assert spec.restart.policy is RestartPolicy.ON_FAILURE
    assert spec.restart.max_restarts == 4
    assert spec.deadline == 3600
    assert spec.success == "all-workers"
    assert worker.pull == "if-missing"  # imagePullPolicy: IfNotPresent
    assert job.warnings == [  # the image is run, not ignored; an emptyDir has no meaning here
        "spec.tfReplicaSpecs.Worker.template.spec.volumes[0]: emptyDir volume 'data' is not "
        "supported here (only hostPath): its mount at /data is left out"
    ]


def test_tfjob_as_json(tmp_path: Path) -> None:
    path = tmp_path / "tfjob.json"
    path.write_text(json.dumps(yaml.safe_load(TFJOB), indent=2))
    job = load_job_file(path)
    assert job.source == "TFJob"
    assert job.spec.roles["worker"].replicas == 3


def test_pytorchjob(tmp_path: Path) -> None:
    job = load(tmp_path, PYTORCHJOB)
    spec = job.spec
    assert job.source == "PyTorchJob"
    assert spec.framework is Framework.PYTORCH
    assert {name: role.replicas for name, role in spec.roles.items()} == {"master": 1, "worker": 2}
    assert spec.master_role() == "master"
    assert spec.roles["worker"].argv() == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]
    assert spec.restart.policy is RestartPolicy.ON_FAILURE  # PyTorchJob's default
    assert spec.pytorch is not None
    assert spec.pytorch.nproc_per_node == 2
    assert spec.pytorch.elastic is None


def test_elastic_pytorchjob(tmp_path: Path) -> None:
    job = load(tmp_path, ELASTIC_PYTORCHJOB)
    spec = job.spec
    assert list(spec.roles) == ["worker", "rendezvous"]  # its store, in the job's image
    assert spec.hosts_rendezvous() and spec.image_of("rendezvous") == spec.image_of("worker")
    assert spec.roles["worker"].env == {"LOGLEVEL": "DEBUG"}
    assert spec.roles["worker"].argv()[:2] == ["torchrun", "/workspace/examples/imagenet.py"]
    assert spec.pytorch is not None
    assert spec.pytorch.nproc_per_node == 4  # the deprecated elasticPolicy.nProcPerNode
    elastic = spec.pytorch.elastic
    assert elastic is not None
    assert (elastic.min_replicas, elastic.max_replicas) == (1, 3)
    assert (elastic.rdzv_backend, elastic.max_restarts) == ("c10d", 100)


def test_elastic_bounds_default_like_kubeflow(tmp_path: Path) -> None:
    def bounds(text: str) -> tuple[int, int]:
        pytorch = load(tmp_path, text).spec.pytorch
        assert pytorch is not None and pytorch.elastic is not None
        return pytorch.elastic.min_replicas, pytorch.elastic.max_replicas

    only_max = ELASTIC_PYTORCHJOB.replace("    minReplicas: 1\n", "")
    assert bounds(only_max) == (3, 3)
    assert bounds(only_max.replace("    maxReplicas: 3\n", "")) == (2, 2)  # the Worker replicas


@pytest.mark.parametrize(("value", "expected"), [('"auto"', "auto"), ("gpu", "gpu"), ("3", 3)])
def test_nproc_per_node_forms(tmp_path: Path, value: str, expected: object) -> None:
    job = load(tmp_path, PYTORCHJOB.replace('nprocPerNode: "2"', f"nprocPerNode: {value}"))
    assert job.spec.pytorch is not None and job.spec.pytorch.nproc_per_node == expected


def test_jaxjob(tmp_path: Path) -> None:
    job = load(tmp_path, JAXJOB)
    assert job.source == "JAXJob"
    assert job.spec.framework is Framework.JAX
    assert job.spec.roles["worker"].replicas == 2
    assert job.spec.roles["worker"].argv() == ["python3", "train.py"]
    assert job.spec.restart.policy is RestartPolicy.ON_FAILURE
    assert job.spec.pytorch is None


def test_xgboostjob_and_a_restart_policy_per_replica_type(tmp_path: Path) -> None:
    job = load(tmp_path, XGBOOSTJOB)
    spec = job.spec
    assert job.source == "XGBoostJob"
    assert spec.framework is Framework.XGBOOST
    assert list(spec.roles) == ["master", "worker"]
    assert spec.roles["master"].argv()[:3] == ["python", "/opt/mlkube/main.py", "--job_type=Train"]
    assert spec.roles["worker"].resources.cpu == 1500
    assert spec.roles["worker"].resources.memory == 2 * 10**9
    assert spec.restart.policy is RestartPolicy.EXIT_CODE  # the Worker's
    assert spec.roles["master"].restart_policy is RestartPolicy.NEVER  # its own
    assert spec.restart_policy_of("master") is RestartPolicy.NEVER
    assert spec.restart_policy_of("worker") is RestartPolicy.EXIT_CODE
    assert job.warnings == []


def test_default_restart_policy_per_kind(tmp_path: Path) -> None:
    tf = load(tmp_path, TFJOB.replace("      restartPolicy: OnFailure\n", "")).spec
    assert tf.restart.policy is RestartPolicy.NEVER


def test_replica_type_names_are_case_insensitive(tmp_path: Path) -> None:
    job = load(tmp_path, TFJOB.replace("    PS:", "    ps:").replace("    Worker:", "    worker:"))
    assert list(job.spec.roles) == ["ps", "worker"]


# Errors name the manifest's own field path and line.


def test_unknown_kind(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("kind: TFJob", "kind: PaddleJob"))
    assert "job.yaml:2: kind: unknown kind 'PaddleJob': supported kinds are TFJob, " in message
    assert message.endswith(", TrainJob")


def test_other_api_version(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("kubeflow.org/v1", "kubeflow.org/v1beta2"))
    assert "job.yaml:1: apiVersion: unsupported apiVersion 'kubeflow.org/v1beta2'" in message
    assert "job.yaml:1: apiVersion: is required" in error_of(
        tmp_path, TFJOB, ("apiVersion: kubeflow.org/v1\n", "")
    )


def test_kind_without_api_version_is_still_kubeflow(tmp_path: Path) -> None:
    message = error_of(tmp_path, "kind: Deployment\nmetadata: {name: x}\n")
    assert "job.yaml:1: kind: unknown kind 'Deployment'" in message


def test_negative_replicas(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("replicas: 3", "replicas: -1"))
    assert "job.yaml:24: spec.tfReplicaSpecs.Worker.replicas: must be at least 1, got -1" in message


def test_wrong_type_in_the_manifest(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("replicas: 3", "replicas: three"))
    assert "job.yaml:24: spec.tfReplicaSpecs.Worker.replicas: expected an integer" in message
    message = error_of(tmp_path, TFJOB, ("--batch_size=64]", "64]"))
    assert (
        "job.yaml:40: spec.tfReplicaSpecs.Worker.template.spec.containers[1].args[1]: "
        'expected a string, got 64 (quote it: "64")'
    ) in message


def test_unparseable_memory_limit(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("memory: 4Gi", "memory: 4 gigs"))
    assert (
        "job.yaml:52: spec.tfReplicaSpecs.Worker.template.spec.containers[1]"
        ".resources.limits.memory: cannot parse memory '4 gigs'"
    ) in message


def test_fractional_gpu(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("nvidia.com/gpu: 1", "nvidia.com/gpu: 0.5"))
    assert (
        "job.yaml:51: spec.tfReplicaSpecs.Worker.template.spec.containers[1]"
        ".resources.limits['nvidia.com/gpu']: Kubernetes counts nvidia.com/gpu in whole GPUs"
    ) in message


def test_colliding_replica_types(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("    PS:", "    worker:"))
    assert (
        "job.yaml:23: spec.tfReplicaSpecs.Worker: replica types 'worker' and 'Worker' collide: "
        "both become role 'worker'; keep one"
    ) in message


def test_duplicate_replica_type(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("    PS:", "    Worker:"))
    assert (
        "job.yaml:23: spec.tfReplicaSpecs.Worker: replica type 'Worker' is defined twice "
        "(first on line 14)"
    ) in message


def test_replica_type_of_another_kind(tmp_path: Path) -> None:
    message = error_of(tmp_path, JAXJOB, ("    Worker:", "    PS:"))
    assert (
        "job.yaml:8: spec.jaxReplicaSpecs.PS: unknown replica type 'PS': expected Worker" in message
    )


def test_missing_replica_specs(tmp_path: Path) -> None:
    message = error_of(tmp_path, JAXJOB, ("jaxReplicaSpecs:", "tfReplicaSpecs:"))
    assert (
        "job.yaml:6: spec.jaxReplicaSpecs: is required: the replica types to run (Worker)"
        in message
    )


def test_args_without_command_go_to_the_image_entrypoint(tmp_path: Path) -> None:
    text = XGBOOSTJOB.replace("              command: [python, /opt/mlkube/main.py]\n", "")
    master = load(tmp_path, text).spec.roles["master"]
    assert master.command is None
    assert master.image == "docker.io/merlintang/xgboost-dist-iris:1.1"
    assert master.argv() == master.args and master.args[0].startswith("--")


def test_no_command_and_no_image(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        JAXJOB,
        ('              command: ["python3", "train.py"]\n', ""),
        ("              image: docker.io/kubeflow/jaxjob-simple:latest\n", ""),
    )
    assert (
        "spec.jaxReplicaSpecs.Worker.template.spec.containers[0].command: is required: "
        "a container without an image runs its command"
    ) in message


def test_a_secret_key_ref_names_a_secret_of_the_team_and_nothing_else_is_read(
    tmp_path: Path,
) -> None:
    """secretKeyRef is trainfleet's {secret, key} (the server's secrets of the job's team);
    config maps and pod fields exist only inside Kubernetes: refused, the field named."""
    secret = "- name: EMPTY\n                  valueFrom: {secretKeyRef: {name: s3, key: token}}"
    spec = load(tmp_path, TFJOB.replace("- name: EMPTY", secret)).spec
    assert spec.roles["worker"].env["EMPTY"] == SecretRef(secret="s3", key="token")
    config = "- name: EMPTY\n                  valueFrom: {configMapKeyRef: {name: c, key: k}}"
    message = error_of(tmp_path, TFJOB, ("- name: EMPTY", config))
    assert (
        "job.yaml:49: spec.tfReplicaSpecs.Worker.template.spec.containers[1].env[1].valueFrom: "
        "only a secretKeyRef with a name and a key is read"
    ) in message


def test_bad_restart_policy_success_policy_and_deadline(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        TFJOB,
        ("restartPolicy: OnFailure", "restartPolicy: Sometimes"),
        ("successPolicy: AllWorkers", "successPolicy: Chief"),
    )
    assert (
        "job.yaml:16: spec.tfReplicaSpecs.PS.restartPolicy: expected 'Never', 'OnFailure'"
        in message
    )
    message = error_of(tmp_path, TFJOB, ("successPolicy: AllWorkers", "successPolicy: Chief"))
    assert "job.yaml:12: spec.successPolicy: unknown successPolicy 'Chief'" in message
    message = error_of(tmp_path, TFJOB, ("activeDeadlineSeconds: 3600", "activeDeadlineSeconds: 0"))
    assert (
        "job.yaml:11: spec.runPolicy.activeDeadlineSeconds: must be greater than 0, got 0"
        in message
    )


def test_bad_name_and_missing_metadata(tmp_path: Path) -> None:
    message = error_of(tmp_path, TFJOB, ("name: dist-mnist", "name: Dist_MNIST"))
    assert "job.yaml:4: metadata.name: invalid job name 'Dist_MNIST'" in message
    message = error_of(
        tmp_path, JAXJOB, ("metadata:\n  name: jaxjob-simple\n  namespace: kubeflow\n", "")
    )
    assert "job.yaml:1: metadata: is required" in message


def test_elastic_bounds_out_of_order(tmp_path: Path) -> None:
    message = error_of(tmp_path, ELASTIC_PYTORCHJOB, ("minReplicas: 1", "minReplicas: 5"))
    assert "job.yaml:6: spec.elasticPolicy: min_replicas must not exceed max_replicas" in message
    message = error_of(tmp_path, PYTORCHJOB, ('nprocPerNode: "2"', "nprocPerNode: many"))
    assert (
        "job.yaml:7: spec.nprocPerNode: expected an integer, or 'auto', 'gpu' or 'cpu', got 'many'"
        in message
    )


def test_only_untracked_roles(tmp_path: Path) -> None:
    ps_only = TFJOB[: TFJOB.index("    Worker:")]
    message = error_of(tmp_path, ps_only)
    assert "job.yaml:1: no role is tracked" in message


VOLUMES = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: volumes}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      template:
        spec:
          volumes:
            - name: data
              hostPath: {path: /srv/data}
            - name: scratch
              emptyDir: {}
          containers:
            - name: pytorch
              image: localhost/trainfleet/torch:2.13.0
              command: [python, train.py]
              volumeMounts:
                - {name: data, mountPath: /data, readOnly: true}
                - {name: data, mountPath: /models, subPath: models}
                - {name: scratch, mountPath: /scratch}
"""


def test_host_path_volumes_become_mounts(tmp_path: Path) -> None:
    job = load(tmp_path, VOLUMES)
    master = job.spec.roles["master"]
    assert [mount.model_dump() for mount in master.mounts] == [
        {"source": "/srv/data", "target": "/data", "read_only": True},
        {"source": "/srv/data/models", "target": "/models", "read_only": False},
    ]
    assert job.warnings == [
        "spec.pytorchReplicaSpecs.Master.template.spec.volumes[1]: emptyDir volume 'scratch' "
        "is not supported here (only hostPath): its mount at /scratch is left out"
    ]


def test_a_mount_of_an_unknown_volume(tmp_path: Path) -> None:
    message = error_of(tmp_path, VOLUMES, ("{name: scratch, mountPath", "{name: scratc, mountPath"))
    assert (
        "job.yaml:23: spec.pytorchReplicaSpecs.Master.template.spec.containers[0]"
        ".volumeMounts[2].name: names no volume of the pod ('scratc'; volumes: data, scratch)"
    ) in message


MPIJOB = """\
apiVersion: kubeflow.org/v2beta1
kind: MPIJob
metadata:
  name: pi
spec:
  slotsPerWorker: 2
  sshAuthMountPath: /home/mpiuser/.ssh
  runPolicy: {cleanPodPolicy: Running, backoffLimit: 2}
  mpiReplicaSpecs:
    Launcher:
      replicas: 1
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-launcher
            command: [mpirun]
            args: [-n, "4", /home/mpiuser/pi]
    Worker:
      replicas: 2
      template:
        spec:
          containers:
          - image: mpioperator/mpi-pi:openmpi
            name: mpi-worker
            command: [/usr/sbin/sshd]
            args: [-De, -f, /home/mpiuser/.sshd_config]
            resources: {limits: {cpu: 2, memory: 1Gi}}
"""


def test_mpijob_of_the_mpi_operator(tmp_path: Path) -> None:
    """The workers' sshd is not run (they hold their places, said in a warning); the
    launcher's mpirun is, with the workers' slots."""
    job = load(tmp_path, MPIJOB)
    spec = job.spec
    assert job.source == "MPIJob"
    assert spec.framework is Framework.MPI and spec.mpi and spec.mpi.slots_per_worker == 2
    assert spec.roles["launcher"].argv() == ["mpirun", "-n", "4", "/home/mpiuser/pi"]
    assert spec.roles["worker"].argv() == ["sleep", "infinity"]
    assert spec.roles["worker"].resources.cpu == 2000
    assert spec.is_tracked("launcher") and not spec.is_tracked("worker")
    assert spec.restart_scope() == "job" and spec.restart.max_restarts == 2
    assert job.warnings == [
        "spec.sshAuthMountPath: not used, trainfleet's mpirun starts the ranks without ssh",
        "spec.mpiReplicaSpecs.Worker.template.spec.containers[0].command: sshd is not "
        "started: the workers hold their places and the launcher's mpirun starts the ranks "
        "without ssh",
    ]


def test_mpijob_of_the_training_operator_and_its_main_container(tmp_path: Path) -> None:
    """kubeflow.org/v1 reads the same; mainContainer picks the container of each pod, and a
    worker without a command holds its place, as the training operator's does."""
    text = MPIJOB.replace("v2beta1", "v1").replace("  sshAuthMountPath: /home/mpiuser/.ssh\n", "")
    text = text.replace("            command: [/usr/sbin/sshd]\n", "")
    text = text.replace("            args: [-De, -f, /home/mpiuser/.sshd_config]\n", "")
    text = text.replace("  slotsPerWorker: 2\n", "  slotsPerWorker: 2\n  mainContainer: main\n")
    text = text.replace(
        "          containers:\n          - image: mpioperator/mpi-pi:openmpi\n"
        "            name: mpi-launcher\n",
        "          containers:\n          - {name: sidecar, image: busybox, command: ['true']}\n"
        "          - image: mpioperator/mpi-pi:openmpi\n            name: main\n",
    )
    job = load(tmp_path, text)
    assert job.spec.roles["launcher"].argv() == ["mpirun", "-n", "4", "/home/mpiuser/pi"]
    assert job.spec.roles["worker"].argv() == ["sleep", "infinity"]
    assert job.warnings == []


def test_what_mpi_is_not_supported_here_is_refused_by_field(tmp_path: Path) -> None:
    message = error_of(
        tmp_path,
        MPIJOB,
        ("  slotsPerWorker: 2\n", "  slotsPerWorker: 2\n  mpiImplementation: Intel\n"),
        ("  sshAuthMountPath", "  runLauncherAsWorker: true\n  sshAuthMountPath"),
    )
    assert "job.yaml:7: spec.mpiImplementation: 'Intel' is not supported here: only OpenMPI" in (
        message
    )
    assert "job.yaml:8: spec.runLauncherAsWorker: is not supported here" in message
    message = error_of(tmp_path, MPIJOB, ("cpu: 2, memory", "nvidia.com/gpu: 1, memory"))
    assert "resources.gpu of role(s) worker: an MPI job's ranks run in its launcher's" in message
    message = error_of(tmp_path, MPIJOB, ("kubeflow.org/v2beta1", "kubeflow.org/v2beta2"))
    assert "trainfleet reads kubeflow.org/v1 or kubeflow.org/v2beta1" in message
