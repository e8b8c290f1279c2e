"""The warm starter (``trainfleet.starter``): a command run through it behaves as one run in
its own process (output, exit status, Ctrl-C, kill -9, the client's folder, environment,
limits, nice value and umask), and the starter never serves another user or stale code.

Every test runs the real console script and a real starter in a private runtime folder."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import kill_processes_under

from trainfleet.starter import client, place, protocol

SCRIPT = Path(sys.executable).parent / "trainfleet"
Run = Callable[..., subprocess.CompletedProcess[str]]


def _wait(condition: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {seconds} s")
        time.sleep(0.05)


class Home:
    """A private runtime folder, data directory and environment for the console script."""

    def __init__(self, root: Path, runtime: Path) -> None:
        self.root = root
        self.runtime = runtime
        self.folder = self.runtime / "trainfleet"
        self.env = {
            **os.environ,
            "XDG_RUNTIME_DIR": str(self.runtime),
            "TRAINFLEET_DATA_DIR": str(root / "data"),
            "TRAINFLEET_STARTER": "on",
            "TRAINFLEET_STARTER_IDLE": "120",
        }

    def sockets(self) -> list[Path]:
        return sorted(self.folder.glob("*.sock")) if self.folder.is_dir() else []

    def popen(self, *args: str, traced: bool = False, **kwargs: object) -> subprocess.Popen[str]:
        """``trainfleet ARGS``; ``traced``: with ``-X importtime`` (its imports on stderr)."""
        argv = [sys.executable, *(["-X", "importtime"] if traced else []), str(SCRIPT), *args]
        kwargs.setdefault("env", self.env)
        kwargs.setdefault("cwd", self.root)
        return subprocess.Popen(argv, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]

    def run(self, *args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
        process = self.popen(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
        stdout, stderr = process.communicate(timeout=120)
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

    def listening(self) -> bool:
        """A starter accepts on one of the folder's sockets."""
        for path in self.sockets():
            with socket.socket(socket.AF_UNIX) as probe:
                try:
                    probe.connect(str(path))
                    return True
                except OSError:
                    continue
        return False

    def warm(self) -> None:
        """A cold command leaves a starter behind; wait until it listens."""
        self.run("list")
        _wait(self.listening, "listening")


def ran_warm(result: subprocess.CompletedProcess[str]) -> bool:
    """The traced client never imported click: a starter's child ran the command."""
    return re.search(r"\|\s+click$", result.stderr, re.MULTILINE) is None


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    # A short runtime folder, as /run/user/UID is: a UNIX socket's path has at most 107
    # bytes, and pytest's own folders (a pytest-xdist worker's deeper still) pass that.
    runtime = Path(tempfile.mkdtemp(prefix="tf-run-"))
    yield Home(tmp_path, runtime)
    kill_processes_under(tmp_path)
    kill_processes_under(runtime)  # the starter names its folder in its argv
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture
def job(tmp_path: Path) -> Callable[[str], Path]:
    def write(command: str, name: str = "job.yaml") -> Path:
        path = tmp_path / name
        path.write_text(f"name: j\nroles:\n  worker:\n    command: {command!r}\n")
        return path

    return write


def test_a_warm_run_prints_and_ends_as_a_cold_one(home: Home, job: Callable[..., Path]) -> None:
    job("echo out-$WHO-é✓; echo err-$WHO >&2; exit 3")
    cold = home.run("run", "job.yaml", traced=True, env={**home.env, "WHO": "cold"})
    _wait(home.listening, "listening")
    warm = home.run("run", "job.yaml", traced=True, env={**home.env, "WHO": "warm"})
    assert not ran_warm(cold) and ran_warm(warm), warm.stderr[-2000:]
    assert cold.returncode == warm.returncode == 1
    for result, who in ((cold, "cold"), (warm, "warm")):
        assert f"worker/0 | out-{who}-é✓" in result.stdout
        assert f"worker/0 | err-{who}" in result.stdout + result.stderr
        assert "failed: worker/0 exited with exit code 3" in result.stdout


def test_the_command_runs_in_the_clients_folder_with_its_limits(
    home: Home, job: Callable[..., Path]
) -> None:
    home.warm()
    elsewhere = home.root / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "mine.yaml").write_text(
        "name: here\nroles:\n  worker:\n    command: "
        "echo files=$(ulimit -n) nice=$(nice) umask=$(umask)\n"
    )

    def as_a_constrained_user() -> None:
        resource = __import__("resource")
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(7)[1]))
        os.nice(3)
        os.umask(0o027)

    result = home.run(
        "run", "mine.yaml", traced=True, cwd=elsewhere, preexec_fn=as_a_constrained_user
    )
    assert ran_warm(result) and result.returncode == 0, result.stderr[-2000:]
    assert "files=256 nice=3 umask=0027" in result.stdout  # and mine.yaml was found in its cwd


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_a_signal_to_the_client_does_what_it_does_to_a_cold_run(
    home: Home, job: Callable[..., Path], signame: str
) -> None:
    job("echo $$ > pid-$MODE; exec sleep 600")
    codes, outputs = {}, {}
    for mode in ("cold", "warm"):
        if mode == "warm":
            _wait(home.listening, "listening")
        env = {**home.env, "MODE": mode}
        process = home.popen(
            "run", "job.yaml", env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        pid_file = home.root / f"pid-{mode}"
        _wait(pid_file.exists, "started")
        time.sleep(0.3)
        process.send_signal(getattr(signal, signame))
        output, _ = process.communicate(timeout=60)
        codes[mode] = process.returncode
        task = Path(f"/proc/{int(pid_file.read_text())}")
        _wait(lambda: not task.exists(), f"the {mode} task ended", 30)  # noqa: B023
        outputs[mode] = output
    assert codes["warm"] == codes["cold"], (codes, outputs)
    if signame == "SIGINT":
        assert all("cancelled" in output for output in outputs.values()), outputs


def test_kill_9_of_the_client_ends_its_command_and_the_task(
    home: Home, job: Callable[..., Path]
) -> None:
    home.warm()
    job("echo $$ > pid; exec sleep 600")
    process = home.popen("run", "job.yaml", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait((home.root / "pid").exists, "started")
    process.kill()
    process.wait()
    task = int((home.root / "pid").read_text())
    _wait(lambda: not Path(f"/proc/{task}").exists(), "the task ended with its runner", 30)
    assert home.sockets(), "the starter itself lives on"


def test_stale_code_another_starter_and_a_killed_one_is_replaced(
    home: Home, job: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.warm()
    (first,) = home.sockets()
    starters = _starters(home)
    os.kill(starters[0], signal.SIGKILL)
    job("true")
    result = home.run("run", "job.yaml", traced=True)
    assert result.returncode == 0 and not ran_warm(result)  # refused socket: ran here
    _wait(home.listening, "a new starter")
    again = home.run("run", "job.yaml", traced=True)
    assert again.returncode == 0 and ran_warm(again)
    assert home.sockets() == [first]


def test_a_hung_starter_costs_a_wait_and_the_command_runs_once(
    home: Home, job: Callable[..., Path]
) -> None:
    home.warm()
    (starter,) = _starters(home)
    job("echo ran >> runs")
    os.kill(starter, signal.SIGSTOP)
    try:
        result = home.run("run", "job.yaml", traced=True)
    finally:
        os.kill(starter, signal.SIGCONT)  # it now takes the request its client gave up on
    assert result.returncode == 0 and not ran_warm(result)
    time.sleep(2)
    assert (home.root / "runs").read_text() == "ran\n"
    again = home.run("run", "job.yaml", traced=True)
    assert again.returncode == 0 and ran_warm(again)
    assert (home.root / "runs").read_text() == "ran\nran\n"


def test_the_key_moves_with_the_code_the_environment_and_the_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    source = tree / "sub" / "module.py"
    source.write_text("x = 1\n")
    monkeypatch.setattr(place, "SOURCE", str(tree))
    before = place.key()
    assert place.key() == before
    source.write_text("x = 22\n")
    assert place.key() != before
    edited = place.key()
    monkeypatch.setenv("PYTHONHASHSEED", "7")
    assert place.key() != edited
    monkeypatch.delenv("PYTHONHASHSEED")
    monkeypatch.setenv("TRAINFLEET_DATA_DIR", "/elsewhere")  # read per command: same starter
    assert place.key() == edited


def test_a_folder_that_is_not_private_is_never_used(
    home: Home, job: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home.folder.mkdir(mode=0o755)
    home.folder.chmod(0o755)
    job("true")
    for _ in range(2):
        result = home.run("run", "job.yaml", traced=True)
        assert result.returncode == 0 and not ran_warm(result)
    time.sleep(1)
    assert home.sockets() == []
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(home.runtime))
    with pytest.raises(PermissionError, match="not a private folder"):
        place.private_folder()
    home.folder.rmdir()
    home.folder.symlink_to(home.root)  # someone's link to a folder of theirs
    with pytest.raises(PermissionError, match="not a private folder"):
        place.private_folder()


def test_a_runtime_folder_too_deep_for_a_socket_gives_way_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket's path has at most 107 bytes: a starter could never listen deeper, and each
    command would start one in vain."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    assert place.private_folder() == f"/tmp/trainfleet-{os.getuid()}"
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert place.private_folder() == str(tmp_path / "trainfleet")


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to be another user (CI is root)")
def test_another_user_is_refused_even_through_an_open_socket(
    home: Home, job: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home.warm()
    (path,) = home.sockets()
    public = Path(tempfile.mkdtemp(prefix="starter-"))  # an operator's mistake: a socket
    public.chmod(0o755)  # every user can reach (a link in a public folder)
    os.link(path, public / "open.sock")
    (public / "open.sock").chmod(0o777)
    marker = home.root / "ran"
    job(f"touch {marker}")
    monkeypatch.setattr(sys, "argv", ["trainfleet", "run", str(home.root / "job.yaml")])
    monkeypatch.chdir(home.root)
    intruder = (  # refused: the starter closes the socket, before or after it was sent all
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(sys.argv[1])\n"
        "try:\n"
        "    s.sendall(sys.stdin.buffer.read())\n"
        "    print(repr(s.recv(100)))\n"
        "except (BrokenPipeError, ConnectionResetError):\n"
        "    print(repr(b''))\n"
    )
    try:
        result = subprocess.run(
            ["/usr/bin/python3", "-c", intruder, str(public / "open.sock")],
            input=protocol.request(),
            cwd="/",
            user=65534,
            capture_output=True,
            timeout=30,
        )
    finally:
        shutil.rmtree(public)
    assert result.stdout.strip() == b"b''", result.stdout + result.stderr
    time.sleep(1)
    assert not marker.exists()
    (log,) = home.folder.glob("*.log")
    assert "refused a request: a client of uid 65534" in log.read_text()


def test_a_bad_request_is_refused_and_the_starter_serves_on(
    home: Home, job: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    home.warm()
    (path,) = home.sockets()
    for garbage in (b"\0\0\0\x05hello", (64 << 20).to_bytes(4, "big"), b"\0\0\0\x08" + b"\0" * 8):
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(path))
            socket.send_fds(conn, [garbage], [0, 1, 2])  # descriptors it never asked for
            conn.settimeout(10)
            assert _closed(conn)
    marker = home.root / "ran"
    job(f"touch {marker}")
    monkeypatch.setattr(sys, "argv", ["trainfleet", "run", "job.yaml"])  # would touch it
    monkeypatch.chdir(home.root)
    for go in (protocol.GO, b"x"):  # GO without the descriptors; something else with them
        with socket.socket(socket.AF_UNIX) as conn:
            conn.connect(str(path))
            conn.sendall(protocol.request())
            conn.settimeout(10)
            assert conn.recv(100).startswith(b"ok ")
            if go == protocol.GO:
                conn.sendall(go)
            else:
                socket.send_fds(conn, [go], [0, 1, 2])
            assert _closed(conn)
    assert not marker.exists()
    job("true")
    result = home.run("run", "job.yaml", traced=True)
    assert result.returncode == 0 and ran_warm(result)


def test_the_starter_ends_when_idle_or_when_its_socket_goes(home: Home) -> None:
    home.env["TRAINFLEET_STARTER_IDLE"] = "1"
    home.warm()
    _wait(lambda: not _starters(home), "ended when idle", 15)
    assert home.sockets() == [] and list(home.folder.glob("*.log")) == []
    home.env["TRAINFLEET_STARTER_IDLE"] = "120"
    home.warm()
    for path in home.sockets():
        path.unlink()
    _wait(lambda: not _starters(home), "ended without its socket", 15)


def test_a_bad_switch_is_named_and_exit_2(home: Home) -> None:
    result = home.run("list", env={**home.env, "TRAINFLEET_STARTER": "maybe"})
    assert result.returncode == 2
    assert "TRAINFLEET_STARTER must be on or off, not 'maybe'" in result.stderr


def test_which_commands_go_warm() -> None:
    assert client.command_of(["--data-dir", "run", "list"]) == "list"
    assert client.command_of(["--server=http://x", "run", "job.yaml"]) == "run"
    assert client.command_of(["--help"]) is None
    off = {"TRAINFLEET_STARTER": "off"}
    assert not client.wanted(["run", "j.yaml"], off)
    assert client.wanted(["run", "j.yaml"], {})
    assert not client.wanted(["server"], {})


def test_the_global_options_with_a_value_are_the_clis() -> None:
    from trainfleet.cli.main import cli

    valued = {
        option
        for param in cli.params
        if not getattr(param, "is_flag", False) and param.name not in ("version", "help")
        for option in param.opts
    }
    assert valued == client.GLOBAL_OPTIONS


def test_the_client_imports_the_standard_library_only() -> None:
    code = (
        "import sys; before = set(sys.modules)\n"
        "import trainfleet.starter.client, trainfleet.starter.place, trainfleet.starter.protocol\n"
        "print(' '.join(sorted(set(sys.modules) - before)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    ours = {
        "trainfleet",
        "trainfleet.starter",
        *(f"trainfleet.starter.{m}" for m in ("client", "place", "protocol")),
    }
    foreign = [
        name
        for name in loaded
        if name not in ours
        and name.split(".")[0].lstrip("_") not in sys.stdlib_module_names
        and name.split(".")[0] not in sys.stdlib_module_names
    ]
    assert foreign == []


def _closed(conn: socket.socket) -> bool:
    """The other end closed ``conn``: an end of file, or a reset (it left data unread)."""
    try:
        return conn.recv(100) == b""
    except ConnectionResetError:
        return True


def _starters(home: Home) -> list[int]:
    """Pids of the starters serving from ``home``'s folder."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"trainfleet.starter.server" in argv and os.fsencode(home.folder) in argv:
            found.append(int(proc.name))
    return found
