"""One server, ten thousand running jobs (issue 30): the scale benchmark's entry point.

Each part is a module of its own, with ``add_arguments(parser)`` and ``run(args)``, which
returns its figures as {name: {value, peer, ratio, target, ok}} (the peer: the same
measured small, in the same run; see each module's docstring for its figures and targets):

--part sim     benchmarks/scale_sim.py (parts A to D): N jobs on the simulated backend
               (a burst to running, steady failures, a backend stall, a kill -9), beside 100.
--part stored  benchmarks/scale_stored.py (part E): 1,000,000 stored jobs on PostgreSQL,
               the job list (filtered, paged) and a job's description, p50 and p99 beside
               100 stored, and the server's start over them. Target: p99 <= 150 ms.
--part local   benchmarks/scale_local.py (part F): 300 running local jobs (`sleep 90`),
               the server's threads and RSS, each task's supervisor's VmRSS and Pss, beside
               100. Targets: threads <= 64, supervisor < 15 MB.
--part all     every part, in that order (the default); parts may be listed: stored,local.

--quick runs each part small (a smoke test). A part that is missing, or fails, is said so;
the others run all the same (the exit code is 1 where one failed).

usage: python benchmarks/scale.py [--part sim|stored|local|all] [--quick] [--out PATH]
           [--postgres-url URL] [each part's options: --help lists them]
Prints one table (figure, value, peer, ratio, target, ok) and writes the figures as JSON,
{"figures": {part: {figure: ...}}, "missing": {...}, "failed": {...}} (default
benchmarks/results/scale.json).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any

HERE = Path(__file__).resolve().parent
PARTS = {"sim": "scale_sim", "stored": "scale_stored", "local": "scale_local"}
COLUMNS = ("value", "peer", "ratio", "target", "ok")


def load_parts() -> tuple[dict[str, ModuleType], dict[str, str]]:
    """Each part's module, and why each one that cannot be imported cannot."""
    found, missing = {}, {}
    for part, name in PARTS.items():
        try:
            found[part] = importlib.import_module(name)
        except ImportError as error:
            missing[part] = f"benchmarks/{name}.py cannot be imported: {error}"
    return found, missing


def parser_of(modules: dict[str, ModuleType]) -> argparse.ArgumentParser:
    """The options shared by every part, then each part's own."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--part", default="all", help="sim, stored, local or all [all]")
    parser.add_argument("--quick", action="store_true", help="each part small: a smoke test")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "scale.json")
    parser.add_argument(
        "--postgres-url", help="a PostgreSQL admin URL: each scenario gets a new database"
    )
    for module in modules.values():
        module.add_arguments(parser)
    return parser


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def table(figures: dict[str, dict[str, Any]]) -> str:
    """Every part's figures, one row each."""
    rows = [("figure", *COLUMNS)]
    for part_figures in figures.values():
        for name, entry in part_figures.items():
            rows.append((name, *(cell(entry.get(column)) for column in COLUMNS)))
    widths = [max(len(row[n]) for row in rows) for n in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows
    )


def main() -> int:
    modules, missing = load_parts()
    args = parser_of(modules).parse_args()
    asked = list(PARTS) if args.part == "all" else args.part.split(",")
    unknown = set(asked) - set(PARTS)
    if unknown:
        raise SystemExit(f"unknown part(s): {', '.join(sorted(unknown))} (of {', '.join(PARTS)})")
    figures: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for part in asked:
        if part not in modules:
            print(f"part {part}: {missing[part]}", flush=True)
            continue
        try:
            figures[part] = modules[part].run(args)
        except Exception:
            failed[part] = traceback.format_exc()
            print(f"part {part} failed:\n{failed[part]}", file=sys.stderr, flush=True)
    print(table(figures))
    skipped = {part: why for part, why in missing.items() if part in asked}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    document = {"figures": figures, "missing": skipped, "failed": failed}
    args.out.write_text(json.dumps(document, indent=2, default=str))
    print(f"written to {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
