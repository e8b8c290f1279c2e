"""The job a user writes: pydantic models of a job file, validated, with a JSON Schema.

>>> job = JobSpec.model_validate({
...     "name": "linreg",
...     "framework": "tensorflow",
...     "roles": {
...         "ps": {"replicas": 1, "command": "trainfleet tf-server"},
...         "worker": {"replicas": 2, "command": "trainfleet tf-server"},
...         "client": {"command": "python client.py"},
...     },
... })
>>> job.tracked_roles()
['client']
"""

from __future__ import annotations

import re
import shlex
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from trainfleet.spec.checkpoints import CheckpointSpec, ProgressSpec
from trainfleet.spec.environments import PythonEnvironment
from trainfleet.spec.frameworks import TRAITS, Framework, FrameworkTraits
from trainfleet.spec.names import (
    JOB_NAME,
    SECRET_KEY_SCHEMA,
    SECRET_NAME,
    SecretKey,
    checked,
    path_of_names,
)
from trainfleet.spec.notebook import ALSO_ALLOWED as NOTEBOOK_NEIGHBOURS
from trainfleet.spec.notebook import LABEL as NOTEBOOK_LABEL
from trainfleet.spec.notebook import PROGRAM_WORDS as NOTEBOOK_PROGRAM
from trainfleet.spec.notebook import ROLE as NOTEBOOK_ROLE
from trainfleet.spec.notebook import NotebookSpec, notebook_role
from trainfleet.spec.notebook_runs import checked_notebook, checked_parameter, with_command
from trainfleet.spec.quantity import (
    CPU_LIMIT,
    CPU_SCHEMA_PATTERN,
    MEMORY_LIMIT,
    MEMORY_SCHEMA_PATTERN,
    format_cpu,
    parse_cpu,
    parse_memory,
)
from trainfleet.spec.quicklinks import MAX_LINKS, QuickLink, check_name, role_ports
from trainfleet.spec.rendezvous import ROLE as RENDEZVOUS_ROLE
from trainfleet.spec.rendezvous import STORE_ROLE, wants_store
from trainfleet.spec.tensorboard import DEFAULT_LOGDIR, SERVICE_ROLE, TensorBoardSpec, shorthand
from trainfleet.spec.tensorboard import ROLE as TENSORBOARD_ROLE

MAX_REPLICAS = 10_000
"""Most replicas of one role whatever the limits (``trainfleet.spec.limits``) say."""

ROLE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


def _scalar_to_str(value: Any) -> Any:
    """Environment values written as YAML numbers or booleans become strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


def _no_nul(value: str) -> str:
    if "\0" in value:
        raise ValueError("must not contain a NUL character (\\0): no program can receive it")
    return value


NO_NUL_PATTERN = "^[^\\x00]*$"

Text = Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra={"pattern": NO_NUL_PATTERN})]
"""A string handed to the operating system (argv, environment, paths): no NUL in it."""


def _env_name(value: str) -> str:
    if not value:
        raise ValueError("an environment variable needs a name: the empty key is not one")
    if "=" in value:
        raise ValueError(f"environment variable name {value!r} must not contain '='")
    return _no_nul(value)


ENV_NAME_PATTERN = "^[^=\\x00]+$"

EnvName = Annotated[
    str, AfterValidator(_env_name), Field(json_schema_extra={"pattern": ENV_NAME_PATTERN})
]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):  # reported as pydantic's own type error, unions included
        raise PydanticCustomError("float_type", "Input should be a valid number")
    return value


NOT_BOOL = BeforeValidator(_not_bool)
"""For numbers: true is not 1 (strings such as '1e3' stay accepted: YAML reads 1e3 as one)."""


def _integer(value: Any) -> Any:
    if isinstance(value, bool | str):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


INTEGER = BeforeValidator(_integer)
"""For counts: "2" and true are mistakes, not 2 and 1 (2.0 stays 2, as JSON Schema reads it)."""

EnvValue = Annotated[
    str,
    BeforeValidator(_scalar_to_str),
    AfterValidator(_no_nul),
    Field(json_schema_extra={"pattern": NO_NUL_PATTERN}),
]
Millicores = Annotated[
    int,
    BeforeValidator(parse_cpu),
    PlainSerializer(format_cpu, return_type=str),  # reads back the same
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": CPU_LIMIT // 10},
                {"type": "string", "pattern": CPU_SCHEMA_PATTERN},
            ],
            "description": "CPU cores: 2, 0.5 or 500m.",
        }
    ),
]
Bytes = Annotated[
    int,
    BeforeValidator(parse_memory),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "integer", "minimum": 0, "maximum": MEMORY_LIMIT},
                {"type": "string", "pattern": MEMORY_SCHEMA_PATTERN},
            ],
            "description": "Memory: bytes or a quantity such as 2Gi, 512Mi, 8G.",
        }
    ),
]


class RestartPolicy(StrEnum):
    """When a task that exited is started again.

    ``exit-code`` follows Kubeflow: codes 128-255 (killed by a signal) are retried,
    1-127 are permanent failures.
    """

    NEVER = "never"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"
    EXIT_CODE = "exit-code"


class _Model(BaseModel):
    # Validators are built at first use: a command that reads no job file pays nothing for them.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class SecretRef(_Model):
    """A value kept by the server as one of its team's secrets, given to the task at start:
    in the variable itself, or with ``file`` in a private file whose path the variable holds."""

    secret: Annotated[str, Field(pattern=SECRET_NAME.pattern)] = Field(
        description="The secret's name (`trainfleet secret list`)."
    )
    key: SecretKey = Field(description="Which of the secret's values (a file name).")
    file: Annotated[bool, Field(strict=True)] = Field(
        default=False,
        description="Write the value to a file only the task reads; the variable holds its path.",
    )


Environment = Annotated[
    dict[EnvName, EnvValue | SecretRef],
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": ENV_NAME_PATTERN},
            "additionalProperties": {
                "anyOf": [
                    {"type": "string", "pattern": NO_NUL_PATTERN},
                    {
                        "type": "object",
                        "properties": {
                            "secret": {"type": "string", "pattern": SECRET_NAME.pattern},
                            "key": {"type": "string", "pattern": SECRET_KEY_SCHEMA},
                            "file": {"type": "boolean"},
                        },
                        "required": ["secret", "key"],
                        "additionalProperties": False,
                    },
                ]
            },
        }
    ),
]
"""A task's variables: text, or a reference to a secret (``{secret: NAME, key: KEY}``)."""


CUSTOM_RESOURCE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
STANDARD_RESOURCES = ("cpu", "memory", "gpu")


def _custom_names(value: dict[str, int]) -> dict[str, int]:
    for name in value:
        if name in STANDARD_RESOURCES or not CUSTOM_RESOURCE.match(name):
            raise ValueError(
                f"invalid custom resource name {name!r}: use lower-case letters, digits, "
                "'-' and '_' (cpu, memory and gpu have their own fields)"
            )
    return value


CustomResources = Annotated[
    dict[str, Annotated[int, Field(ge=0)]],  # flags give "licence=1": text is read
    AfterValidator(_custom_names),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {
                "pattern": CUSTOM_RESOURCE.pattern,
                "not": {"enum": list(STANDARD_RESOURCES)},
            },
            "additionalProperties": {"type": "integer", "minimum": 0},
            "description": "Named resources, e.g. {licence: 1}.",
        }
    ),
]


class Resources(_Model):
    """What one task needs; a job starts only when every task's needs fit at once."""

    cpu: Millicores | None = None
    memory: Bytes | None = None
    gpu: Annotated[float, Field(ge=0, le=100_000, allow_inf_nan=False), NOT_BOOL] = Field(
        default=0,
        description="Whole GPUs (exclusive), or a fraction below 1 (0.5) of one shared GPU.",
    )
    gpu_memory: Bytes | None = Field(
        default=None,
        description="A share of one GPU sized by its memory (20Gi): at submission, the "
        "fraction of a GPU of this machine that holds it (enforced as fractions are).",
    )
    custom: CustomResources = Field(
        default_factory=dict,
        description="Named resources of the machine or cluster, e.g. {licence: 1}.",
    )

    @field_validator("gpu")
    @classmethod
    def _whole_or_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(
                "ask for whole GPUs, or for a fraction below 1 of one shared GPU (0.5)"
            )
        if 0 < value < 0.001:
            raise ValueError("a GPU fraction must be at least 0.001")
        return value


class MountSpec(_Model):
    """A folder of the machine that a role's containers see."""

    source: Text = Field(description="A path here; relative: to the job's directory.")
    target: Text = Field(description="Where the container sees it: an absolute path.")
    read_only: Annotated[bool, Field(strict=True)] = False

    @field_validator("source", "target")
    @classmethod
    def _plain(cls, value: str, info: ValidationInfo) -> str:
        if not value or any(c in value for c in ":,"):
            raise ValueError(f"{info.field_name} {value!r} must be a path without ':' or ','")
        if info.field_name == "target":
            path_of_names(value, "target")
        return value


def _normal_path(path: str) -> str:
    """An absolute path without empty parts (``//``) or a trailing ``/``."""
    return "/" + "/".join(part for part in path.split("/") if part)


def _mount_point(value: str) -> str:
    """Where a container sees the job's folder: an absolute path in its normal form, not
    ``/`` (nor with ``:`` or ``,``, which the runtimes' mount options cannot hold)."""
    if any(c in value for c in ":,"):
        raise ValueError(f"{value!r} must be a path without ':' or ','")
    path_of_names(value, "path")
    if value == "/":
        raise ValueError(
            "'/' would hide the whole image under the job's folder: name a folder of its "
            "own, such as /workspace"
        )
    normal = _normal_path(value)
    if value != normal:
        raise ValueError(f"{value!r} is not in its normal form: write {normal!r}")
    return value


MountPoint = Annotated[str, AfterValidator(_mount_point)]
"""Where the job's folder is mounted in a container (``workdir_mount``)."""
WORKDIR_MOUNT = (
    "Where its containers see the job's folder, e.g. /workspace (an absolute path); by "
    "default at the folder's own path. A container runs there unless working_dir (relative: "
    "inside it) or image_workdir says otherwise."
)


IMAGE_REFERENCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$")


def _image_reference(value: str) -> str:
    if not IMAGE_REFERENCE.match(value):
        raise ValueError(
            f"{value!r} is not an image reference: letters, digits and . _ / : @ + -, "
            "starting with a letter or digit (e.g. python:3.11, registry.example.org/team/train:2)"
        )
    return value


Image = Annotated[
    str,
    AfterValidator(_image_reference),
    Field(json_schema_extra={"pattern": IMAGE_REFERENCE.pattern}),
]


PullPolicy = Literal["if-missing", "always", "never"]


class RoleSpec(_Model):
    """One kind of task in a job, started ``replicas`` times."""

    replicas: Annotated[int, Field(ge=1, le=MAX_REPLICAS), INTEGER] = Field(
        default=1,
        description="Tasks of this role. A job has at most 1,000 tasks in all by default "
        "(a server may set another limit: --max-tasks).",
    )
    command: Text | Annotated[list[Text], Field(min_length=1)] | None = Field(
        description="A shell string, or an argv list run without a shell. Required, but "
        "for a role with an image: its ENTRYPOINT then runs (with args, as Kubernetes does).",
    )
    args: list[Text] = Field(
        default_factory=list,
        description="Words added to the command, or given to the image's ENTRYPOINT where "
        "the role has no command.",
    )
    env: Environment = Field(default_factory=dict)
    working_dir: Text | None = None
    image_workdir: Annotated[bool, Field(strict=True)] = Field(
        default=False,
        description="Run in the image's own WORKDIR where it declares one, as Kubernetes "
        "does, not in the job's folder (still mounted at its own path); a Kubeflow container "
        "without workingDir.",
    )
    resources: Resources = Field(default_factory=Resources)
    port: Annotated[int, Field(ge=1, le=65535), INTEGER] | None = Field(
        default=None,
        description="Fixed port of replica 0 (replica i gets port + i); free ones otherwise.",
    )
    tracked: Annotated[bool, Field(strict=True)] | None = Field(
        default=None,
        description="Whether the job waits for this role to finish. Default: every role "
        "but ps, tensorboard and roles running `trainfleet tf-server`.",
    )
    image: Image | None = Field(
        default=None, description="Container image its tasks run in (the job's by default)."
    )
    pull: PullPolicy = Field(
        default="if-missing", description="When the image is pulled before a task starts."
    )
    mounts: list[MountSpec] = Field(
        default_factory=list,
        description="More folders its containers see (the job's directory always is).",
    )
    workdir_mount: MountPoint | None = Field(
        default=None, description=WORKDIR_MOUNT + " The job's by default."
    )
    environment: PythonEnvironment | None = Field(
        default=None, description="The Python its tasks run under (the job's by default)."
    )
    restart_policy: RestartPolicy | None = Field(
        default=None,
        description="When its tasks restart (the job's restart.policy by default), as a "
        "Kubeflow replica type's restartPolicy; restart.max_restarts and backoff still apply.",
    )
    notebook: Annotated[Text, AfterValidator(checked_notebook)] | None = Field(
        default=None,
        description="Instead of a command: a notebook (.ipynb, in the job's directory) that "
        "every task runs headless under nbclient (its Python needs nbclient and ipykernel); "
        "the executed notebook is the job's output <name>.ipynb (rank 0's; another task's "
        "<name>-<role>-<index>.ipynb). A failing cell fails the task, naming the cell.",
    )
    parameters: dict[Annotated[str, AfterValidator(checked_parameter)], JsonValue] = Field(
        default_factory=dict,
        description="The notebook's parameters: assigned in a cell injected after the cell "
        "tagged 'parameters', else first (papermill's convention).",
    )

    @model_validator(mode="before")
    @classmethod
    def _entrypoint(cls, data: Any) -> Any:
        """A role with an image may leave out its command (the image's ENTRYPOINT runs);
        a notebook makes the command; any other role must give one, and is told so at the
        field."""
        if isinstance(data, dict) and ("notebook" in data or "parameters" in data):
            data = with_command(data)
        if isinstance(data, dict) and data.get("image") and "command" not in data:
            return {**data, "command": None}
        return data

    @model_validator(mode="after")
    def _container(self) -> RoleSpec:
        """What only a container can do needs an image; what a container cannot use, none."""
        if self.image is None:
            if self.command is None:
                raise ValueError("command is required (a role without an image runs it)")
            if self.mounts:
                raise ValueError(
                    "mounts: only a role with an image has mounts (its tasks see this "
                    "machine's folders anyway)"
                )
        elif self.environment is not None:
            raise ValueError(
                "environment: a role with an image runs that image's Python; install its "
                "packages in the image, or drop the image"
            )
        return self

    @field_validator("command")
    @classmethod
    def _not_blank(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, str) and not value.strip():
            raise ValueError("command must not be empty")
        if isinstance(value, list) and not value[0].strip():
            raise ValueError("the program (the first item of the command) must not be empty")
        return value

    def argv(self) -> list[str]:
        """The command as an argv list.

        A shell string of plain words and quotes runs the program directly, so the task's
        process is the program itself (its pid, its exit code, its signals); a string that
        needs the shell (pipes, ``;``, ``$VAR``, globs, redirections, built-ins) runs
        through ``/bin/sh -c``.

        >>> RoleSpec(command="python train.py --lr 0.1").argv()
        ['python', 'train.py', '--lr', '0.1']
        >>> RoleSpec(command="python train.py > out.txt").argv()
        ['/bin/sh', '-c', 'python train.py > out.txt']
        """
        if self.command is None:  # the image's ENTRYPOINT runs: these are its arguments
            return list(self.args)
        if isinstance(self.command, list):
            return [*self.command, *self.args]
        words = _plain_words(self.command)
        if words is None:  # the args follow the script as $0, $1, ...
            return ["/bin/sh", "-c", self.command, *(["sh", *self.args] if self.args else [])]
        return [*words, *self.args]

    def runs_tf_server(self) -> bool:
        """Whether the command is trainfleet's built-in TensorFlow gRPC server."""
        if self.command is None:
            return False
        words = self.command if isinstance(self.command, list) else _split(self.command)
        return (
            len(words) >= 2
            and words[0].rsplit("/", 1)[-1] == "trainfleet"
            and words[1] == "tf-server"
        )


_SHELL_SYNTAX = re.compile(r"[;&|<>()$`*?\[\]{}~#\\\n]")
_SHELL_WORDS = frozenset(
    {
        "!", ".", ":", "alias", "bg", "break", "case", "cd", "command", "continue", "do",
        "done", "elif", "else", "esac", "eval", "exec", "exit", "export", "fg", "fi", "for",
        "function", "getopts", "hash", "if", "jobs", "read", "readonly", "return", "select",
        "set", "shift", "then", "time", "times", "trap", "type", "ulimit", "umask", "unalias",
        "unset", "until", "wait", "while",
    }
)  # fmt: skip


def _plain_words(command: str) -> list[str] | None:
    """The words of a command that needs no shell, or None when it does."""
    if _SHELL_SYNTAX.search(command):
        return None
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or words[0] in _SHELL_WORDS or "=" in words[0]:
        return None
    return words


def _split(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return command.split()


class Backoff(_Model):
    """Exponential delay before restart n: ``min(max, initial * factor**n)`` seconds."""

    initial: Annotated[float, Field(ge=0), NOT_BOOL] = 1.0
    factor: Annotated[float, Field(ge=1), NOT_BOOL] = 2.0
    max: Annotated[float, Field(ge=0), NOT_BOOL] = 60.0

    def delay(self, restarts_so_far: int) -> float:
        return float(min(self.max, self.initial * self.factor**restarts_so_far))


class RestartSpec(_Model):
    """How failed tasks are restarted; ``max_restarts`` counts per task."""

    policy: RestartPolicy = RestartPolicy.NEVER
    max_restarts: Annotated[int, Field(ge=0), INTEGER] = Field(
        default=3, description="Restarts of a task after its program failed."
    )
    max_infrastructure: Annotated[int, Field(ge=0), INTEGER] = Field(
        default=10,
        description="Restarts of a task after an infrastructure failure (a lost node, a "
        "preemption, a stall, a requeue its program asked for), whatever the policy; "
        "counted apart from max_restarts.",
    )
    requeue_exit_code: Annotated[int, Field(ge=1, le=255), INTEGER] | None = Field(
        default=None,
        description="An exit code by which the program asks to be started again (it has "
        "saved its checkpoint): restarted as an infrastructure failure, not a failure.",
    )
    backoff: Backoff = Field(default_factory=Backoff)
    scope: Literal["task", "job"] | None = Field(
        default=None,
        description="'task': restart only the task that failed (it rejoins, as TensorFlow "
        "PS workers do); 'job': stop every task and start them all again (collective groups "
        "that cannot take a node back). Default: 'job' for PyTorch without elastic and for "
        "JAX, 'task' otherwise.",
    )


class ElasticPolicy(_Model):
    """torchrun elastic rendezvous (Kubeflow ``elasticPolicy``)."""

    min_replicas: Annotated[int, Field(ge=1), INTEGER]
    max_replicas: Annotated[int, Field(ge=1), INTEGER]
    rdzv_backend: Text = "c10d"
    max_restarts: Annotated[int, Field(ge=0), INTEGER] = 0

    @model_validator(mode="after")
    def _ordered(self) -> ElasticPolicy:
        if self.min_replicas > self.max_replicas:
            raise ValueError("min_replicas must not exceed max_replicas")
        return self


class PyTorchOptions(_Model):
    """Options of PyTorch jobs launched with torchrun."""

    nproc_per_node: Annotated[int, Field(ge=1), INTEGER] | Literal["auto", "gpu", "cpu"] = 1
    elastic: ElasticPolicy | None = None


class MpiOptions(_Model):
    """Options of MPI jobs (Kubeflow MPIJob's)."""

    slots_per_worker: Annotated[int, Field(ge=1, le=1024), INTEGER] = Field(
        default=1, description="Ranks each worker takes: its slots in mpirun's host list."
    )


MPI_HOLD = ["sleep", "infinity"]
"""What an MPI worker without a command runs: it holds its place while mpirun starts ranks."""


SuccessPolicy = Literal["default", "all-workers"] | Annotated[list[str], Field(min_length=1)]


class JobSpec(_Model):
    """A whole distributed training job, as written in ``job.yaml``."""

    name: str = Field(description="Lower-case letters, digits and '-', at most 63.")
    framework: Framework = Framework.GENERIC
    image: Image | None = Field(
        default=None, description="Container image of every role that names none."
    )
    workdir_mount: MountPoint | None = Field(
        default=None, description=WORKDIR_MOUNT + " For every role that names none."
    )
    roles: Annotated[dict[str, RoleSpec], Field(min_length=1)] = Field(
        description="The job's kinds of task, by name: at most 64 by default (a server may "
        "set another limit: --max-roles)."
    )
    restart: RestartSpec = Field(default_factory=RestartSpec)
    success: SuccessPolicy = Field(
        default="default",
        description="'default': the chief/master if there is one, else worker 0, else every "
        "tracked task; 'all-workers'; or a list of roles that must all succeed.",
    )
    deadline: Annotated[float, Field(gt=0), NOT_BOOL] | None = Field(
        default=None, description="Seconds the job may run before it is stopped and failed."
    )
    grace_period: Annotated[float, Field(ge=0), NOT_BOOL] = Field(
        default=10.0, description="Seconds between SIGTERM and SIGKILL when tasks are stopped."
    )
    env: Environment = Field(default_factory=dict, description="Environment of every task.")
    environment: PythonEnvironment | None = Field(
        default=None, description="The Python every role's tasks run under, unless it sets its own."
    )
    input_path: Text | None = None
    checkpoint_path: Text | None = Field(
        default=None, description="The job's checkpoint folder: the same as checkpoint.path."
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec,
        description="Where checkpoints go and how many committed steps stay: {path, keep}; "
        "every task finds them in $TRAINFLEET_CHECKPOINT_PATH and the newest in "
        "$TRAINFLEET_RESUME_FROM.",
    )
    progress: ProgressSpec | None = Field(
        default=None,
        description="{timeout}: a running task silent that long (log and heartbeat) is "
        "restarted as stalled.",
    )
    labels: dict[str, EnvValue] = Field(default_factory=dict)
    queue: str = Field(
        default="default", description="The queue the job waits in for its resources."
    )
    priority: Annotated[int, INTEGER] = Field(
        default=0,
        ge=-1_000_000,
        le=1_000_000,
        description="Higher goes first, and may preempt lower-priority jobs of its queue.",
    )
    pytorch: PyTorchOptions | None = None
    mpi: MpiOptions | None = None
    tensorboard: Annotated[TensorBoardSpec | None, BeforeValidator(shorthand)] = Field(
        default=None,
        description="Run TensorBoard beside the job (`true`, or {logdir, keep_after}): an "
        "untracked service role `tensorboard` on a port of the job, served by a server at "
        "/jobs/<id>/tensorboard/.",
    )
    notebook: Annotated[NotebookSpec | None, BeforeValidator(shorthand)] = Field(
        default=None,
        description="A JupyterLab job (`true`, or {idle_timeout}): role `notebook` runs "
        "JupyterLab under the job's Python, served to its owner at /notebooks/<id>/.",
    )

    quicklinks: Annotated[dict[str, QuickLink], Field(max_length=MAX_LINKS)] = Field(
        default_factory=dict,
        description="Pages the job's tasks serve, by name: {ui: 'http://master-0:8888'} or "
        "{ui: {role, index, port}}; a server proxies each at /jobs/<id>/links/<name>/. The "
        "port becomes the role's fixed port (replica i: port + i).",
    )

    @model_validator(mode="before")
    @classmethod
    def _one_checkpoint_path(cls, data: Any) -> Any:
        """``checkpoint_path`` and ``checkpoint.path`` name one folder: either gives both."""
        if not isinstance(data, dict) or not isinstance(data.get("checkpoint", {}), dict):
            return data
        given = data.get("checkpoint") or {}
        path, inside = data.get("checkpoint_path"), given.get("path")
        if path is not None and inside is not None and path != inside:
            raise ValueError(
                f"checkpoint_path ({path!r}) and checkpoint.path ({inside!r}) differ: keep one"
            )
        chosen = path if path is not None else inside
        if chosen is None:
            return data
        return {**data, "checkpoint_path": chosen, "checkpoint": {**given, "path": chosen}}

    @model_validator(mode="before")
    @classmethod
    def _quicklink_ports(cls, data: Any) -> Any:
        """A quick link's port is its role's fixed port, where the role names none."""
        if not isinstance(data, dict) or not isinstance(data.get("quicklinks"), dict):
            return data
        if not isinstance(data.get("roles"), dict):
            return data
        return {**data, "roles": role_ports(data["quicklinks"], data["roles"])}

    @field_validator("quicklinks")
    @classmethod
    def _link_names(cls, links: dict[str, QuickLink]) -> dict[str, QuickLink]:
        for name in links:
            check_name(name)
        return links

    @model_validator(mode="before")
    @classmethod
    def _notebook_role(cls, data: Any) -> Any:
        """``notebook:`` gives role ``notebook`` its command (``roles: {notebook: {}}``
        may set its resources, image or environment; none: ``roles`` may be left out),
        and the job its label (``spec.notebook.LABEL``)."""
        if not isinstance(data, dict) or data.get("notebook") in (None, False):
            return data
        roles, labels = data.get("roles", {}), data.get("labels", {})
        if isinstance(labels, dict):
            data = {**data, "labels": {**labels, NOTEBOOK_LABEL: "true"}}
        if isinstance(roles, dict) and isinstance(roles.get(NOTEBOOK_ROLE, {}), dict | None):
            role = notebook_role(roles.get(NOTEBOOK_ROLE))
            return {**data, "roles": {**roles, NOTEBOOK_ROLE: role}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _tensorboard_role(cls, data: Any) -> Any:
        """``tensorboard:`` adds its service role (a stored job already has it)."""
        if not isinstance(data, dict) or data.get("tensorboard") in (None, False):
            return data
        roles = data.get("roles")
        if roles is None and data.get("notebook") not in (None, False):
            roles = {}  # the notebook's role is added next (``_notebook_role``)
        if isinstance(roles, dict) and TENSORBOARD_ROLE not in roles:
            return {**data, "roles": {**roles, TENSORBOARD_ROLE: dict(SERVICE_ROLE)}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _rendezvous_role(cls, data: Any) -> Any:
        """An elastic c10d job gets its rendezvous store's role (a stored job has it)."""
        if not isinstance(data, dict) or not wants_store(data):
            return data
        roles = data.get("roles")
        if isinstance(roles, dict) and RENDEZVOUS_ROLE not in roles:
            return {**data, "roles": {**roles, RENDEZVOUS_ROLE: dict(STORE_ROLE)}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _mpi_workers_hold(cls, data: Any) -> Any:
        """An MPI job's worker without a command holds its place (``sleep infinity``, as
        Kubeflow's operator gives it): mpirun in the launcher starts the ranks."""
        if not isinstance(data, dict) or data.get("framework") != Framework.MPI.value:
            return data
        roles = data.get("roles")
        worker = roles.get("worker") if isinstance(roles, dict) else None
        if isinstance(roles, dict) and isinstance(worker, dict) and worker.get("command") is None:
            return {**data, "roles": {**roles, "worker": {**worker, "command": list(MPI_HOLD)}}}
        return data

    @model_validator(mode="before")
    @classmethod
    def _job_image(cls, data: Any) -> Any:
        """The job's image is every role's that names none (each role is then checked
        with the image it runs in)."""
        image = data.get("image") if isinstance(data, dict) else None
        if not isinstance(image, str) or not IMAGE_REFERENCE.match(image):
            return data  # none, or refused at the job's own field
        roles = data.get("roles")
        if isinstance(roles, dict):
            roles = {
                name: {"image": image, **role} if isinstance(role, dict) else role
                for name, role in roles.items()
            }
            return {**data, "roles": roles}
        return data

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        rule = (
            "lower-case letters, digits and '-', starting and ending with a letter or digit, "
            "at most 63 characters"
        )
        return checked(JOB_NAME, value, rule, "job name")

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str) -> str:
        return checked(JOB_NAME, value, "lower-case letters, digits and '-'", "queue name")

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, RoleSpec], info: ValidationInfo) -> dict[str, RoleSpec]:
        for name in roles:
            if not ROLE_NAME.match(name):
                raise ValueError(
                    f"invalid role name {name!r}: use lower-case letters, digits and '_', "
                    "starting with a letter"
                )
        framework = info.data.get("framework", Framework.GENERIC)
        masters = [name for name in TRAITS[framework].master_roles if name in roles]
        if len(masters) > 1:
            raise ValueError(
                f"roles {' and '.join(map(repr, masters))} collide: both name the job's "
                "master; keep one"
            )
        for name in masters:
            if roles[name].replicas != 1:
                raise ValueError(f"role {name!r} must have exactly 1 replica")
        return roles

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if not self.tracked_roles():
            raise ValueError(
                "no role is tracked, so the job could never finish: set tracked: true on the "
                "role whose end is the end of training"
            )
        if self.environment is not None:
            boxed = [
                name
                for name in self.roles
                if self.image_of(name) and not self.roles[name].environment
            ]
            if boxed:
                raise ValueError(
                    f"environment: role(s) {', '.join(boxed)} run in an image, which has its "
                    "own Python; install the packages in the image, or give those roles none"
                )
        for name, role in self.roles.items():
            if role.image_workdir and not self.image_of(name):
                raise ValueError(f"roles.{name}.image_workdir: the role runs in no image")
            if role.image_workdir and role.working_dir is not None:
                raise ValueError(
                    f"roles.{name}.image_workdir: the role names its working_dir: one or the other"
                )
            self._check_workdir_mount(name, role)
        if self.workdir_mount is not None and not any(map(self.image_of, self.roles)):
            raise ValueError(
                "workdir_mount: no role runs in an image (a process sees the job's folder "
                "at its own path)"
            )
        if self.mpi is not None and self.framework is not Framework.MPI:
            raise ValueError("mpi: only a job of framework mpi has MPI options")
        if self.framework is Framework.MPI:
            with_gpus = [name for name, role in self.roles.items() if role.resources.gpu]
            if with_gpus:
                raise ValueError(
                    f"resources.gpu of role(s) {', '.join(with_gpus)}: an MPI job's ranks run "
                    "in its launcher's process tree here, so GPUs for them are not supported "
                    "yet; run the ranks as a pytorch or generic job to use GPUs"
                )
        if self.tensorboard is not None:
            if self.roles.get(TENSORBOARD_ROLE) != RoleSpec.model_validate(SERVICE_ROLE):
                raise ValueError(
                    f"tensorboard: the job has a role {TENSORBOARD_ROLE!r} of its own; rename "
                    "that role, or drop `tensorboard:` and run TensorBoard in it yourself"
                )
            if isinstance(self.success, list) and TENSORBOARD_ROLE in self.success:
                raise ValueError("success: the TensorBoard service never decides the job")
        if self.hosts_rendezvous():
            if self.roles[RENDEZVOUS_ROLE] != RoleSpec.model_validate(STORE_ROLE):
                raise ValueError(
                    f"pytorch.elastic: the job has a role {RENDEZVOUS_ROLE!r} of its own, but "
                    "that name is its rendezvous store's; rename that role"
                )
            if isinstance(self.success, list) and RENDEZVOUS_ROLE in self.success:
                raise ValueError("success: the rendezvous store never decides the job")
        if self.notebook is not None:
            self._check_notebook()
        for name, link in self.quicklinks.items():
            self._check_quicklink(name, link)
        if isinstance(self.success, list):
            unknown = [name for name in self.success if name not in self.roles]
            if unknown:
                raise ValueError(f"success names unknown role(s): {', '.join(unknown)}")
        return self

    def _check_workdir_mount(self, name: str, role: RoleSpec) -> None:
        if role.workdir_mount is not None and not self.image_of(name):
            raise ValueError(
                f"roles.{name}.workdir_mount: the role runs in no image (a process sees the "
                "job's folder at its own path)"
            )
        mount_point = self.workdir_mount_of(name)
        for n, mount in enumerate(role.mounts):
            if _normal_path(mount.target) == mount_point:
                raise ValueError(
                    f"roles.{name}.mounts[{n}].target: {mount_point} is where the job's folder "
                    "is mounted (workdir_mount): name another path"
                )

    def _check_quicklink(self, name: str, link: QuickLink) -> None:
        role = self.roles.get(link.role)
        if role is None:
            raise ValueError(f"quicklinks.{name}.role: the job has no role {link.role!r}")
        if link.index >= role.replicas:
            raise ValueError(
                f"quicklinks.{name}.index: role {link.role!r} has {role.replicas} replica(s), "
                f"so no index {link.index}"
            )
        if role.port is None or role.port + link.index != link.port:
            listens = f"port {role.port + link.index}" if role.port else "a port of its own"
            raise ValueError(
                f"quicklinks.{name}.port: replica {link.index} of role {link.role!r} listens "
                f"on {listens} (its port:), not {link.port}: a link reaches its task's own port"
            )

    def _check_notebook(self) -> None:
        role = self.roles[NOTEBOOK_ROLE]
        if tuple(role.argv()) != NOTEBOOK_PROGRAM or role.args:
            raise ValueError(
                f"roles.{NOTEBOOK_ROLE}.command: a notebook job's role runs JupyterLab "
                f"({' '.join(NOTEBOOK_PROGRAM)}); leave its command out"
            )
        if role.replicas != 1:
            raise ValueError(f"roles.{NOTEBOOK_ROLE}.replicas: a notebook has one replica")
        others = sorted(set(self.roles) - {NOTEBOOK_ROLE} - NOTEBOOK_NEIGHBOURS)
        if others:
            raise ValueError(
                f"notebook: a notebook job runs JupyterLab alone; role(s) {', '.join(others)} "
                "belong in a job of their own"
            )
        if self.framework is not Framework.GENERIC:
            raise ValueError("notebook: a notebook job is of framework generic")

    def restart_policy_of(self, role: str) -> RestartPolicy:
        """When the role's tasks restart: its own policy, else the job's."""
        return self.roles[role].restart_policy or self.restart.policy

    def env_of(self, role: str) -> dict[str, str | SecretRef]:
        """The role's variables: the job's, then its own over them."""
        return {**self.env, **self.roles[role].env}

    def secret_refs(self) -> list[tuple[str, SecretRef]]:
        """Every secret the job names, with the field that names it (``roles.w.env.KEY``)."""
        fields = [(f"env.{name}", value) for name, value in self.env.items()]
        fields += [
            (f"roles.{role}.env.{name}", value)
            for role, spec in self.roles.items()
            for name, value in spec.env.items()
        ]
        return [(field, value) for field, value in fields if isinstance(value, SecretRef)]

    def image_of(self, role: str) -> str | None:
        """The image the role's tasks run in (its own, else the job's); None: no container."""
        if role in self.service_roles():  # trainfleet's own program, on this machine
            return None
        peer = self._store_peer(role)
        return self.roles[role].image or self.image or (peer.image if peer else None)

    def workdir_mount_of(self, role: str) -> str | None:
        """Where the role's containers see the job's folder (its own, else the job's);
        None: at the folder's own path (as every process sees it)."""
        if self.image_of(role) is None:
            return None
        return self.roles[role].workdir_mount or self.workdir_mount

    def environment_of(self, role: str) -> PythonEnvironment | None:
        """The Python environment the role's tasks run under (its own, else the job's)."""
        if role in self.service_roles():
            return None
        peer = self._store_peer(role)
        own = self.roles[role].environment or self.environment
        return own or (peer.environment if peer else None)

    def _store_peer(self, role: str) -> RoleSpec | None:
        """For the rendezvous store, the role whose image and environment (the ones with
        torch) it runs in where the job names none: the group's first (master, else worker)."""
        if role != RENDEZVOUS_ROLE or not self.hosts_rendezvous():
            return None
        return self.roles.get(self.master_role() or "worker")

    def hosts_rendezvous(self) -> bool:
        """Whether trainfleet hosts the job's rendezvous store (role ``rendezvous``)."""
        elastic = self.pytorch.elastic if self.pytorch is not None else None
        return (
            self.framework is Framework.PYTORCH
            and elastic is not None
            and elastic.rdzv_backend == "c10d"
            and RENDEZVOUS_ROLE in self.roles
        )

    def service_roles(self) -> frozenset[str]:
        """Roles that serve people, not training (its TensorBoard): their tasks' ends never
        decide the job's, and they stop ``keep_after`` seconds after it ends."""
        return frozenset({TENSORBOARD_ROLE}) if self.tensorboard is not None else frozenset()

    def tensorboard_logdir(self) -> str | None:
        """The folder its TensorBoard reads, as written (relative: to the job's directory);
        None without ``tensorboard:``."""
        if self.tensorboard is None:
            return None
        return self.tensorboard.logdir or self.checkpoint_path or DEFAULT_LOGDIR

    @property
    def traits(self) -> FrameworkTraits:
        """What its framework means for the job (see ``spec.frameworks``)."""
        return TRAITS[self.framework]

    def is_tracked(self, name: str) -> bool:
        """Whether the job waits for role ``name``'s tasks to finish."""
        role = self.roles[name]
        if role.tracked is not None:
            return role.tracked
        return name not in self.traits.untracked_roles and not role.runs_tf_server()

    def tracked_roles(self) -> list[str]:
        return [name for name in self.roles if self.is_tracked(name)]

    def restart_scope(self) -> Literal["task", "job"]:
        """Whether one failed task restarts alone or with the whole job (see ``RestartSpec``)."""
        if self.restart.scope is not None:
            return self.restart.scope
        if self.traits.elastic_restarts_alone and self.pytorch and self.pytorch.elastic:
            return "task"
        return self.traits.restart_scope

    def master_role(self) -> str | None:
        """The chief or master role, if the job has one."""
        return next((name for name in self.traits.master_roles if name in self.roles), None)
