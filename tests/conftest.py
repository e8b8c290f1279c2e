"""Shared fixtures: a private data directory, job files, an engine, and a
clean PostgreSQL database (from TRAINFLEET_TEST_POSTGRES_URL; skipped without it, failed
under CI, so CI never skips it)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import fresh_postgres_database, kill_processes_under, missing

from trainfleet.control.assembly import engine_at
from trainfleet.control.engine import Engine


def pytest_configure() -> None:
    """Programs the tests start take Ctrl-C and find this virtual environment first on PATH,
    however the suite itself was started.

    From a shell in the background, pytest would inherit SIGINT as ignored and pass that on
    to every program (as POSIX asks); a handled signal is reset to its default in a child.
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    # As a user with the virtual environment activated: `python` in the jobs that tests
    # run (`trainfleet run` takes the user's shell) is the one with TensorFlow and PyTorch.
    bin_dir = os.path.dirname(sys.executable)
    os.environ["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", os.defpath)])
    # `trainfleet` runs in its own process: no warm starter outlives a test (tests/starter/
    # turn it on, each in a private folder)
    os.environ["TRAINFLEET_STARTER"] = "off"
    # A process the tests start that aborts or crashes shows every thread's stack (CI saw
    # `trainfleet run` abort with nothing on its stderr)
    os.environ["PYTHONFAULTHANDLER"] = "1"


SHARED_CLUSTERS = ("slurm", "kubernetes")
"""The clusters of this machine that tests share."""


def run_together(nodeid: str) -> str:
    """Which tests one pytest-xdist worker runs, in order (scripts/test.sh runs two): each
    shared cluster's (its folder's, and those whose parameter names it, as the backend
    contract's ``[slurm-podman]``), so that none waits in a queue behind another test's
    job; else each module's (its module-scoped fixtures build on earlier tests)."""
    path, _, name = nodeid.partition("::")
    folders = Path(path).parts[:2]
    parameter = name.partition("[")[2]
    for cluster in SHARED_CLUSTERS:
        if cluster in folders or parameter.startswith(cluster):
            return cluster
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return run_together(nodeid)

    return Together(config, log)


RERUN_SHOWN = 6000
"""Characters shown of each first failure of a test run again (its end)."""
_reruns: list[pytest.TestReport] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keep the failure of each test that is run again (``--reruns``, scripts/test.sh)."""
    if report.outcome == "rerun":
        _reruns.append(report)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Show how each test that was run again failed the first time: its traceback and
    what it printed. pytest-rerunfailures names them only, and a failure that passes on
    its second run is still to be looked into."""
    for report in _reruns:
        terminalreporter.write_sep("_", f"first failure of {report.nodeid} (run again)")
        sections = "".join(f"\n--- {name} ---\n{text}" for name, text in report.sections)
        terminalreporter.write_line((report.longreprtext + sections)[-RERUN_SHOWN:])


@pytest.fixture(autouse=True)
def signal_handlers() -> Iterator[None]:
    """Each test finds the stop signals handled as the suite set them: a test that runs a
    program's ``main`` in this process (the shim's catches SIGINT) would otherwise leave a
    later test's Ctrl-C caught and lost."""
    numbers = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    handlers = {number: signal.getsignal(number) for number in numbers}
    yield
    for number, handler in handlers.items():
        signal.signal(number, handler)


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data directory of this test only, used by the CLI and by `engine`."""
    path = tmp_path / "data"
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", str(path))
    return path


@pytest.fixture
def reap(tmp_path: Path) -> Iterator[Path]:
    """Supervised tasks outlive whoever started them: kill what a failed test leaves behind."""
    yield tmp_path
    kill_processes_under(tmp_path)


@pytest.fixture
def engine(data_dir: Path) -> Iterator[Engine]:
    engine = engine_at(data_dir)
    yield engine
    engine.store.close()


@pytest.fixture
def job_file(tmp_path: Path) -> Callable[[str], Path]:
    """Writes a job file (dedented YAML) into the test's folder and returns its path."""

    def write(text: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a new, empty PostgreSQL database of this test only."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def passable() -> Iterator[Path]:
    """A folder other accounts may pass through (pytest's own is owner-only), for tests of
    a root server that runs tasks as teams' accounts (skipped without root and setpriv)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        missing("the server switches tasks to other accounts only as root, with setpriv")
    folder = Path(tempfile.mkdtemp(prefix="trainfleet-accounts-", dir="/var/tmp"))
    folder.chmod(0o711)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
