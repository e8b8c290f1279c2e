"""Loading job files: valid YAML and JSON, and every way a file can be wrong."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from trainfleet.spec.documents import MAX_VALUES
from trainfleet.spec.errors import SpecError
from trainfleet.spec.frameworks import Framework
from trainfleet.spec.loading import LoadedJob, load_job_file, load_job_text
from trainfleet.spec.models import JobSpec, RestartPolicy

TAGS = ("int", "float", "bool", "timestamp")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

VALID = """\
name: linreg
framework: tensorflow
roles:
  ps:     {replicas: 1, command: trainfleet tf-server, resources: {cpu: 1, memory: 1Gi}}
  worker: {replicas: 2, command: trainfleet tf-server, resources: {cpu: 1, memory: 2Gi, gpu: 1}}
  client: {replicas: 1, command: python client.py}
restart: {policy: on-failure, max_restarts: 3}
"""


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def error_of(tmp_path: Path, text: str, name: str = "job.yaml") -> SpecError:
    path = write(tmp_path, text, name)
    with pytest.raises(SpecError) as caught:
        load_job_file(path)
    return caught.value


def test_loads_the_design_example(tmp_path: Path) -> None:
    job = load_job_file(write(tmp_path, VALID))
    assert isinstance(job, LoadedJob)
    assert job.source == "trainfleet"
    assert job.warnings == []
    assert job.spec.framework is Framework.TENSORFLOW
    assert job.spec.roles["worker"].replicas == 2
    assert job.spec.roles["worker"].resources.memory == 2 * 2**30
    assert job.spec.restart.policy is RestartPolicy.ON_FAILURE
    assert job.spec.tracked_roles() == ["client"]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*/job.yaml")), ids=lambda p: p.parent.name)
def test_loads_every_example(path: Path) -> None:
    job = load_job_file(path)
    assert job.spec.name == path.parent.name.replace("_", "-")


@pytest.mark.parametrize(
    ("extra", "scope"),
    [
        ("framework: pytorch", "job"),
        ("framework: jax", "job"),
        ("framework: tensorflow", "task"),
        ("framework: pytorch\npytorch: {elastic: {min_replicas: 1, max_replicas: 2}}", "task"),
        ("framework: tensorflow\nrestart: {scope: job}", "job"),
        ("framework: pytorch\nrestart: {scope: task}", "task"),
    ],
)
def test_restart_scope_defaults_to_job_for_groups_that_cannot_take_a_node_back(
    extra: str, scope: str
) -> None:
    text = f"name: scoped\n{extra}\nroles:\n  worker: {{replicas: 2, command: train}}\n"
    assert load_job_text(text).spec.restart_scope() == scope


def test_a_stored_spec_reads_back_the_same() -> None:
    """Jobs are stored as JSON and read back: quantities must not be converted twice."""
    spec = load_job_text(VALID).spec
    assert JobSpec.model_validate_json(spec.model_dump_json()) == spec


def test_json_is_read_too_even_indented_with_tabs(tmp_path: Path) -> None:
    document = {"name": "demo", "roles": {"worker": {"replicas": 3, "command": ["python", "t.py"]}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(document, indent="\t"))
    job = load_job_file(path)
    assert job.spec.roles["worker"].replicas == 3
    assert job.spec.roles["worker"].argv() == ["python", "t.py"]


def test_json_escapes_beyond_the_basic_plane(tmp_path: Path) -> None:
    document = {"name": "demo", "roles": {"worker": {"command": "echo \u00e9 \U0001f680"}}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(document))  # ensure_ascii: the rocket is two \u escapes
    assert "\\ud83d\\ude80" in path.read_text()
    assert load_job_file(path).spec.roles["worker"].command == "echo \u00e9 \U0001f680"
    path.write_text('{"name": "demo",\n "roles": {"w\\ud83d": {"command": "x"}}}')
    with pytest.raises(SpecError, match=r"job\.json:2: invalid YAML: a \\u escape is half"):
        load_job_file(path)


def test_load_job_text_names_the_input() -> None:
    with pytest.raises(SpecError, match=r"^<input>:1: name: is required"):
        load_job_text("roles: {worker: {command: x}}\n")


def test_yaml_anchors_and_merge_keys_work(tmp_path: Path) -> None:
    job = load_job_file(
        write(
            tmp_path,
            """\
            name: demo
            roles:
              worker: &base {replicas: 2, command: python train.py, env: {A: "1"}}
              evaluator: {<<: *base, replicas: 1}
            """,
        )
    )
    assert job.spec.roles["evaluator"].replicas == 1
    assert job.spec.roles["evaluator"].env == {"A": "1"}


# Every error names the file, the line and the field.


def test_unknown_field_lists_the_allowed_ones(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            replica: 2
            command: python train.py
        """,
    )
    message = str(error)
    assert "/job.yaml:4: roles.worker.replica: unknown field 'replica'" in message
    assert "did you mean 'replicas'?" in message
    assert "allowed: replicas, command, args, env, working_dir, image_workdir, resources" in message
    assert len(error.problems) == 1
    problem = error.problems[0]
    assert (problem.file, problem.line, problem.field) == (
        str(tmp_path / "job.yaml"),
        4,
        "roles.worker.replica",
    )


def test_wrong_type(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            replicas: two
            command: python train.py
        """,
    )
    assert str(error).endswith("job.yaml:4: roles.worker.replicas: expected an integer, got 'two'")


def test_a_failed_union_gives_one_line_not_one_per_member(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            command: {python: train.py}
        """,
    )
    assert len(error.problems) == 1
    assert "job.yaml:4: roles.worker.command: expected a string or a list, got a mapping" in str(
        error
    )
    assert "list[str]" not in str(error)


def test_a_union_reports_the_member_that_matched_the_type(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            command:
              - python
              - 3
        """,
    )
    assert [str(p).split("job.yaml")[1] for p in error.problems] == [
        ':6: roles.worker.command[1]: expected a string, got 3 (quote it: "3")'
    ]


def test_negative_replicas(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker: {command: python train.py}
          ps:
            command: trainfleet tf-server
            replicas: -2
        """,
    )
    assert "job.yaml:6: roles.ps.replicas: must be at least 1, got -2" in str(error)


def test_unparseable_memory(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            command: python train.py
            resources:
              cpu: 2
              memory: 8 gigs
        """,
    )
    assert "job.yaml:7: roles.worker.resources.memory: cannot parse memory '8 gigs'" in str(error)


def test_missing_fields_point_at_their_parent(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        # a comment first
        roles:
          worker:
            replicas: 2
        """,
    )
    lines = str(error).splitlines()
    assert lines[0].endswith("job.yaml:2: name: is required")
    assert lines[1].endswith("job.yaml:3: roles.worker.command: is required")


def test_bad_role_name_and_colliding_masters(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          Worker: {command: python train.py}
        """,
    )
    assert "job.yaml:2: roles: invalid role name 'Worker'" in str(error)
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          chief: {command: python train.py}
          master: {command: python train.py}
        """,
    )
    assert "job.yaml:2: roles: roles 'chief' and 'master' collide" in str(error)


def test_non_string_keys(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          7: {command: python train.py}
        """,
    )
    assert "job.yaml:3: roles[7]: key 7 must be a string" in str(error)


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: Demo
        framework: tf
        roles:
          worker: {command: "", replicas: 0}
        """,
    )
    text = str(error)
    assert "job.yaml:1: name: invalid job name 'Demo'" in text
    assert "job.yaml:2: framework: expected 'tensorflow', 'pytorch'" in text
    assert "job.yaml:4: roles.worker.replicas: must be at least 1, got 0" in text
    assert "job.yaml:4: roles.worker.command: command must not be empty" in text


def test_duplicate_role(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker: {command: python a.py}
          ps: {command: trainfleet tf-server}
          worker: {command: python b.py}
        """,
    )
    assert str(error).endswith(
        "job.yaml:5: roles.worker: role 'worker' is defined twice (first on line 3); remove one"
    )


def test_duplicate_keys_anywhere(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            command: python a.py
            env: {A: "1", B: "2", A: "3"}
        name: other
        """,
    )
    lines = str(error).splitlines()
    assert lines[0].endswith(
        "job.yaml:5: roles.worker.env.A: key 'A' appears twice (first on line 5); remove one"
    )
    assert lines[1].endswith(
        "job.yaml:6: name: key 'name' appears twice (first on line 1); remove one"
    )


def test_duplicate_keys_in_json(tmp_path: Path) -> None:
    text = '{"name": "demo",\n "roles": {"worker": {"command": "x"}},\n "name": "again"}'
    error = error_of(tmp_path, text, "job.json")
    assert "job.json:3: name: key 'name' appears twice (first on line 1)" in str(error)


def test_yaml_syntax_error_gives_its_line(tmp_path: Path) -> None:
    error = error_of(
        tmp_path,
        """\
        name: demo
        roles:
          worker:
            command: python a.py
           replicas: 2
        """,
    )
    assert "job.yaml:5: invalid YAML:" in str(error)


def test_unclosed_flow_mapping(tmp_path: Path) -> None:
    error = error_of(tmp_path, "name: demo\nroles:\n  worker: {command: a\n")
    assert "job.yaml:4: invalid YAML: expected ',' or '}'" in str(error)
    assert "(while parsing a flow mapping on line 3)" in str(error)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "---\n"])
def test_empty_file(tmp_path: Path, text: str) -> None:
    error = error_of(tmp_path, text)
    assert str(error).endswith("job.yaml: the file is empty: expected a job with name and roles")


@pytest.mark.parametrize(
    ("text", "got"),
    [("- a\n- b\n", "got a list"), ("just words\n", "got str 'just words'"), ("~\n", "got null")],
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    error = error_of(tmp_path, text)
    assert "job.yaml:1: expected a mapping (name: ..., roles: ...) at the top level" in str(error)
    assert got in str(error)


def test_several_documents_are_refused(tmp_path: Path) -> None:
    error = error_of(tmp_path, VALID + "---\n" + VALID)
    assert (
        "job.yaml:9: the file holds 2 jobs (job on line 1, job on line 9): one job a file, "
        "with the training runtimes it names"
    ) in str(error)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name: !!int abc\n", "job.yaml:1: invalid YAML: cannot read 'abc' as int"),
        (
            "name: demo\nroles: !!bool maybe\n",
            "job.yaml:2: invalid YAML: cannot read 'maybe' as bool",
        ),
        ("name: !!timestamp 2020-13-45\n", "job.yaml:1: invalid YAML: cannot read"),
        *[(f"name: !!{tag} ''\n", "job.yaml:1: invalid YAML: cannot read ''") for tag in TAGS],
        ("name: 0x" + "f" * 5000 + "\n", "job.yaml:1: invalid YAML: integer too large"),
        ("name: 1" + "0" * 5000 + "\n", "job.yaml:1: invalid YAML: cannot read '1000"),
        (
            "env: {A: 1:2:3:4:5:6:7:8:9:10:11:12:13}\n",
            "job.yaml:1: invalid YAML: integer too large",
        ),
        ("name: !python/object:os.system x\n", "job.yaml:1: invalid YAML: could not determine"),
        ("name: demo\x07\n", "job.yaml:1: invalid YAML: character #x0007 is not allowed"),
        ("? [a, b]\n: 1\n", "job.yaml:1: invalid YAML:"),
    ],
)
def test_values_yaml_cannot_build(tmp_path: Path, text: str, expected: str) -> None:
    assert expected in str(error_of(tmp_path, text))


def test_recursive_alias(tmp_path: Path) -> None:
    error = error_of(tmp_path, "name: demo\nroles: &r\n  worker: *r\n")
    assert "job.yaml:2: recursive alias" in str(error)


def test_alias_bomb_is_refused_without_expanding(tmp_path: Path) -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    error = error_of(tmp_path, "\n".join(levels) + "\n")
    assert f"job.yaml: the document holds more than {MAX_VALUES} values" in str(error)


def test_deep_nesting(tmp_path: Path) -> None:
    error = error_of(tmp_path, "name: " + "[" * 5000 + "\n")
    assert "job.yaml" in str(error)
    assert "nested too deeply" in str(error) or "invalid YAML" in str(error)


# Files that cannot be read at all.


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"nope\.yaml: no such file$"):
        load_job_file(tmp_path / "nope.yaml")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is a directory"):
        load_job_file(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, VALID)
    path.chmod(0)
    try:
        with pytest.raises(SpecError, match=r"job\.yaml: permission denied"):
            load_job_file(path)
    finally:
        path.chmod(0o644)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: demo\nroles: \xff\xfe\n")
    with pytest.raises(SpecError, match=r"job\.yaml:2: is not UTF-8 text"):
        load_job_file(path)


def test_utf8_bom_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"\xef\xbb\xbf" + VALID.encode())
    assert load_job_file(path).spec.name == "linreg"


def test_other_os_errors(tmp_path: Path) -> None:
    plain = write(tmp_path, VALID)
    with pytest.raises(SpecError, match=r"job\.yaml/job\.yaml: cannot read: Not a directory"):
        load_job_file(plain / "job.yaml")


@pytest.mark.parametrize("value", ["1e400", '"1e400"', ".inf", f'"{"9" * 400}"', "2.0"])
def test_non_finite_gpus(tmp_path: Path, value: str) -> None:
    text = f"name: demo\nroles:\n  worker: {{command: x, resources: {{gpu: {value}}}}}\n"
    if value == "2.0":
        assert load_job_file(write(tmp_path, text)).spec.roles["worker"].resources.gpu == 2
        return
    assert "job.yaml:3: roles.worker.resources.gpu: must be a finite number" in str(
        error_of(tmp_path, text)
    )


@pytest.mark.parametrize(
    ("field", "value"), [("memory", ".inf"), ("cpu", ".inf"), ("memory", f'"{"9" * 400}"')]
)
def test_infinite_quantities(tmp_path: Path, field: str, value: str) -> None:
    text = f"name: demo\nroles:\n  worker: {{command: x, resources: {{{field}: {value}}}}}\n"
    assert f"job.yaml:3: roles.worker.resources.{field}:" in str(error_of(tmp_path, text))


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        (
            "{command: x, image_workdir: true}",
            "roles.worker.image_workdir: the role runs in no image",
        ),
        (
            "{command: x, image: i:1, image_workdir: true, working_dir: /w}",
            "roles.worker.image_workdir: the role names its working_dir: one or the other",
        ),
        ("{command: x, image: i:1, image_workdir: 'yes'}", "roles.worker.image_workdir"),
    ],
)
def test_image_workdir_needs_an_image_and_no_working_dir(
    tmp_path: Path, role: str, expected: str
) -> None:
    error = error_of(tmp_path, f"name: j\nroles:\n  worker: {role}\n")
    assert expected in str(error), str(error)


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (
            "roles:\n  worker: {command: x, workdir_mount: /workspace}",
            "job.yaml:1: roles.worker"
            ".workdir_mount: the role runs in no image (a process sees the job's folder at its own "
            "path)",
        ),
        (
            "workdir_mount: /workspace\nroles:\n  worker: {command: x}",
            "job.yaml:1: workdir_mount: no role runs in an image",
        ),
        (
            "image: i:1\nroles:\n  worker: {command: x, workdir_mount: workspace}",
            "job.yaml:4: roles.worker.workdir_mount: path 'workspace' must be an absolute path",
        ),
        (
            "image: i:1\nworkdir_mount: /\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: '/' would hide the whole image under the job's folder",
        ),
        (
            "image: i:1\nworkdir_mount: /a/../b\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: path '/a/../b' must not have a '..' part",
        ),
        (
            "image: i:1\nworkdir_mount: /a/./b\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: path '/a/./b' must not have a '.' part",
        ),
        (
            "image: i:1\nworkdir_mount: /workspace/\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: '/workspace/' is not in its normal form: write "
            "'/workspace'",
        ),
        (
            "image: i:1\nworkdir_mount: //srv//job\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: '//srv//job' is not in its normal form: write '/srv/job'",
        ),
        (
            "image: i:1\nworkdir_mount: '/a:b'\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount: '/a:b' must be a path without ':' or ','",
        ),
        (
            "image: i:1\nworkdir_mount: 7\nroles:\n  worker: {command: x}",
            "job.yaml:3: workdir_mount:",
        ),
        (
            "image: i:1\nworkdir_mount: /w\nroles:\n  worker: {command: x, mounts: "
            "[{source: d, target: /w/}]}",
            "roles.worker.mounts[0].target: /w is where the job's folder is mounted "
            "(workdir_mount)",
        ),
    ],
)
def test_workdir_mount_is_an_absolute_normal_path_of_a_role_with_an_image(
    tmp_path: Path, job: str, expected: str
) -> None:
    error = error_of(tmp_path, f"name: j\n{job}\n")
    assert expected in str(error), str(error)


def test_workdir_mount_of_the_job_is_every_image_role_s_unless_it_names_its_own(
    tmp_path: Path,
) -> None:
    spec = load_job_file(
        write(
            tmp_path,
            """\
            name: j
            image: i:1
            workdir_mount: /workspace
            tensorboard: true
            roles:
              worker: {command: x}
              ps: {command: x, workdir_mount: /srv/job}
              plain: {command: x, image: other:2}
            """,
        )
    ).spec
    assert spec.workdir_mount_of("worker") == "/workspace"
    assert spec.workdir_mount_of("plain") == "/workspace"
    assert spec.workdir_mount_of("ps") == "/srv/job"
    assert spec.workdir_mount_of("tensorboard") is None, "a service runs here, in no image"
    bare = load_job_file(write(tmp_path, "name: j\nimage: i:1\nroles: {w: {command: x}}\n"))
    assert bare.spec.workdir_mount_of("w") is None, "by default: at its own path"
