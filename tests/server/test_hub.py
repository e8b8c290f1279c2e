"""The shared log reader on a real file: its memory is bounded, laggards resume by offset."""

from __future__ import annotations

from pathlib import Path

from trainfleet.datadir.logs import CHUNK
from trainfleet.server.hub import WINDOW, LogHub


def test_a_follower_far_behind_reads_everything_while_the_window_stays_bounded(
    tmp_path: Path,
) -> None:
    """A log grows by 6 windows, in half-window steps and then in one leap: the reader never
    keeps more than WINDOW bytes, and a follower still at offset 0 gets every byte, in
    order, through offset reads."""
    log = tmp_path / "worker-0.log"
    log.write_bytes(b"")
    hub = LogHub(interval=0)
    shared = hub.join(log, lambda: None)  # None: the job is gone, so the log is complete
    written = b"".join(f"line {n:08d}\n".encode() for n in range(6 * WINDOW // 14))
    step = WINDOW // 2
    with log.open("ab") as out:
        for start in range(0, 3 * WINDOW, step):
            out.write(written[start : start + step])
            out.flush()
            shared.refresh()
            assert len(shared._window) <= WINDOW
        out.write(written[3 * WINDOW :])
    shared.refresh()
    assert shared.end == len(written) and shared.complete
    assert len(shared._window) <= WINDOW
    got = bytearray()
    while chunk := shared.read(len(got), CHUNK):
        got += chunk
    assert bytes(got) == written
    hub.leave(shared)
    assert len(hub) == 0 and shared._fd is None
