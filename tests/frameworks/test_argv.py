"""Submarine's %input_path% and %checkpoint_path% placeholders in a role's command."""

from __future__ import annotations

import pytest

from trainfleet.frameworks import task_argv

from .jobs import contexts, job


def argv(command: str | list[str], **paths: str) -> list[str]:
    spec = job("generic", {"worker": {"command": command}}, **paths)
    return task_argv(contexts(spec)[("worker", 0)])


def test_plain_command_runs_without_a_shell() -> None:
    assert argv("python train.py --epochs 2") == ["python", "train.py", "--epochs", "2"]
    assert argv("python -c 'import sys'  --x \"a b\"") == [
        "python",
        "-c",
        "import sys",
        "--x",
        "a b",
    ]


@pytest.mark.parametrize(
    "command",
    [
        "python train.py | tee out",
        "cd data && python train.py",
        "python train.py > log",
        "echo $HOME",
        "python *.py",
        "LR=0.1 python train.py",
        "exit 3",
        "for i in 1 2; do echo $i; done",
        "python train.py; echo done",
        "python 'unclosed",
    ],
)
def test_commands_that_need_the_shell_run_through_sh(command: str) -> None:
    assert argv(command) == ["/bin/sh", "-c", command]


def test_argv_list_is_kept() -> None:
    assert argv(["python", "train.py"]) == ["python", "train.py"]


def test_placeholders_are_replaced_in_shell_strings() -> None:
    assert argv(
        "python train.py --data %input_path% --ckpt=%checkpoint_path%/run",
        input_path="hdfs://in",
        checkpoint_path="/ckpt",
    ) == ["python", "train.py", "--data", "hdfs://in", "--ckpt=/ckpt/run"]


def test_placeholders_are_replaced_in_argv_lists() -> None:
    assert argv(
        ["python", "t.py", "--data=%input_path%", "%checkpoint_path%", "%input_path%"],
        input_path="/in",
        checkpoint_path="/ck",
    ) == ["python", "t.py", "--data=/in", "/ck", "/in"]


def test_a_path_holding_a_placeholder_is_not_replaced_again() -> None:
    assert argv(
        ["%input_path%", "%checkpoint_path%"],
        input_path="/a/%checkpoint_path%",
        checkpoint_path="/ck",
    ) == ["/a/%checkpoint_path%", "/ck"]


def test_paths_without_placeholders_change_nothing() -> None:
    assert argv(["python", "t.py"], input_path="/in") == ["python", "t.py"]


@pytest.mark.parametrize("placeholder", ["input_path", "checkpoint_path"])
def test_placeholder_without_path_names_placeholder_and_role(placeholder: str) -> None:
    spec = job("generic", {"trainer": {"command": f"python t.py --p %{placeholder}%"}})
    with pytest.raises(ValueError) as error:
        task_argv(contexts(spec)[("trainer", 0)])
    assert f"%{placeholder}%" in str(error.value)
    assert "'trainer'" in str(error.value)
