"""Reading job files: trainfleet's reader (libyaml's parser under PyYAML's safe constructor,
with the line of every key and the job file's checks) beside the same reader on PyYAML's
parser in Python (what it used before; still what tells a bad file's problem), and beside a
plain ``yaml.safe_load`` of the same text (no lines, no checks, no model).

Each job file of ``examples/`` (not workflows, not Kubeflow manifests) is read --rounds times
by ``spec.loading.load_job_text`` (the whole submission check: YAML, model, limits) with
each parser, then by ``yaml.safe_load``. Figures: microseconds per file (the median over
rounds of each file's mean), and the ratio of each peer to ours.

usage: python benchmarks/spec_read.py [--rounds 200] [--out FILE]
Prints a table and writes the figures as JSON (default benchmarks/results/spec_read.json).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from trainfleet.spec import documents
from trainfleet.spec.loading import load_job_text

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"


def job_files() -> list[Path]:
    """The examples' trainfleet job files (a workflow or a Kubeflow manifest is no job)."""
    found = []
    for path in sorted(EXAMPLES.glob("*/*.yaml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "roles" in data and "kind" not in data:
            found.append(path)
    return found


def per_file_us(read: Callable[[str, str], object], texts: dict[str, str], rounds: int) -> float:
    """The median over files of the mean microseconds ``read`` takes for one file."""
    means = []
    for name, text in texts.items():
        read(text, name)  # warm: imports, caches
        began = time.perf_counter()
        for _ in range(rounds):
            read(text, name)
        means.append((time.perf_counter() - began) / rounds * 1e6)
    return statistics.median(means)


def measure(rounds: int) -> dict[str, Any]:
    texts = {path.relative_to(EXAMPLES).as_posix(): path.read_text() for path in job_files()}
    fast = documents._FastLoader  # the reader's choice, put back after the peer's run
    ours = per_file_us(load_job_text, texts, rounds)
    documents._FastLoader = None
    try:
        pure = per_file_us(load_job_text, texts, rounds)
    finally:
        documents._FastLoader = fast
    plain = per_file_us(lambda text, _: yaml.safe_load(text), texts, rounds)
    return {
        "files": sorted(texts),
        "rounds": rounds,
        "libyaml": fast is not None,
        "ours_us": ours,
        "pyyaml_parser_us": pure,
        "plain_safe_load_us": plain,
        "pyyaml_parser_over_ours": pure / ours,
        "plain_safe_load_over_ours": plain / ours,
    }


def table(figures: dict[str, Any]) -> str:
    rows = [
        ("trainfleet's reader (libyaml parser)", figures["ours_us"], 1.0),
        ("the same on PyYAML's Python parser", figures["pyyaml_parser_us"], None),
        ("yaml.safe_load alone (no checks)", figures["plain_safe_load_us"], None),
    ]
    lines = [f"{len(figures['files'])} job files, {figures['rounds']} rounds each"]
    lines.append(f"{'reader':40} {'us/file':>9} {'x ours':>7}")
    for name, value, _ in rows:
        lines.append(f"{name:40} {value:9.1f} {value / figures['ours_us']:7.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "spec_read.json")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    figures = measure(args.rounds)
    print(table(figures))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
