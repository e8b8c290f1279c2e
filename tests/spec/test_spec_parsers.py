"""The job file reader's two parsers: libyaml's, which reads what it can (fast), and
PyYAML's own, which reads again what libyaml cannot, so that a bad file's problem is told in
PyYAML's words. Both give the same data and lines for the same file."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from trainfleet.spec import documents
from trainfleet.spec.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRICKY = [
    "base: &base {command: python t.py, resources: {cpu: 2}}\n"
    "roles:\n  a: {<<: *base, replicas: 2}\n  b:\n    <<: *base\n    env: {X: '1'}\n",
    "---\nname: one\n---\n---\nname: two\nlist: [1, 2.5, true, null, 0x1f, 1_000]\n",
    '{\n\t"name": "tabs",\n\t"roles": {"w": {"command": "true"}}\n}\n',
    'emoji: "\\ud83d\\ude80 launch"\nwhen: 2026-11-29\nbig: 9223372036854775807\n',
    "text: |\n  line one\n  line two\nfolded: >\n  a\n  b\nquoted: 'it''s'\n",
]


def _read_with(loader: type[documents._Checks] | None, text: str) -> object:
    fast, documents._FastLoader = documents._FastLoader, loader
    try:
        return [(data, source.lines) for data, source in documents.parse_documents(text, "j")]
    finally:
        documents._FastLoader = fast


@pytest.mark.skipif(documents._FastLoader is None, reason="PyYAML was built without libyaml")
@pytest.mark.parametrize(
    "text",
    TRICKY + [p.read_text() for p in sorted(EXAMPLES.glob("*/*.yaml"))],
)
def test_both_parsers_read_the_same_data_and_lines(text: str) -> None:
    assert _read_with(documents._FastLoader, text) == _read_with(None, text)


@pytest.mark.parametrize(
    ("text", "said", "line"),
    [
        ("name: a: b\n", "mapping values are not allowed here", 1),  # libyaml: "in this context"
        ("name: x\nroles: [1, 2\n", "expected ',' or ']', but got '<stream end>'", 3),
        ("a: &x 1\nb: *y\n", "found undefined alias 'y'", 2),
        ("name: x\ncommand: \x01\n", "character #x0001 is not allowed", 2),
        ("name: x\nname: y\n", "appears twice (first on line 1)", 2),
    ],
)
def test_a_bad_file_is_told_in_pyyaml_s_words(text: str, said: str, line: int) -> None:
    with pytest.raises(SpecError) as caught:
        documents.parse_documents(text, "job.yaml")
    problem = caught.value.problems[0]
    assert said in problem.message and problem.line == line, problem


@pytest.mark.skipif(documents._FastLoader is None, reason="PyYAML was built without libyaml")
def test_a_good_file_is_read_by_libyaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast parser reads a good file (the Python one is not asked)."""

    def refuse(*_: object) -> None:
        raise AssertionError("PyYAML's Python parser was asked")

    monkeypatch.setattr(documents._Loader, "__init__", refuse)
    data, _ = documents.parse_document((EXAMPLES / "torch_ddp" / "job.yaml").read_text())
    assert "roles" in data
    assert yaml.__with_libyaml__
