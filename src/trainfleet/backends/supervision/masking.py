"""Masks secret values in a byte stream fed in chunks: each occurrence becomes ``***``.

The one implementation, used both by trainfleet and by the task's shim, which loads this
file from its own directory only when it has
values to mask: so, like the shim, standard library only and no trainfleet import.

Values shorter than ``MIN_LENGTH`` bytes are not masked: a secret of one or two bytes
would turn every such byte of the output into ``***``. Where occurrences of values
overlap (``abcd`` and ``cdef`` in ``abcdef``, or one inside another), the whole run they
cover becomes one ``***``. Each chunk costs one ``bytes.find`` scan per value.

>>> masker = Masker([b"hunter22"])
>>> masker.feed(b"password: hun") + masker.feed(b"ter22 ok") + masker.flush()
b'password: *** ok'
"""

from __future__ import annotations

from collections.abc import Iterable

MIN_LENGTH = 4
"""Values shorter than this (in bytes) are not masked."""
MASK = b"***"


class Masker:
    """Replaces every occurrence of any value with ``***`` in a stream fed in chunks.

    ``feed`` returns what is safe to write now: it holds back at most (longest value - 1)
    bytes that could begin a value split across chunks. Once a run of masked bytes has
    been written as ``***``, the rest of that run is dropped as it arrives.
    """

    def __init__(self, values: Iterable[bytes]) -> None:
        kept = sorted({bytes(v) for v in values if len(v) >= MIN_LENGTH}, key=len, reverse=True)
        self.values: tuple[bytes, ...] = tuple(kept)
        """The values masked, longest first."""
        self._keep = len(kept[0]) - 1 if kept else 0
        self._held = b""
        self._covered = 0  # bytes at the start of _held inside a run already written as ***

    def __bool__(self) -> bool:
        """Whether there is anything to mask."""
        return bool(self.values)

    def feed(self, chunk: bytes) -> bytes:
        """The masked output that ``chunk`` makes safe to write now."""
        if not self.values:
            return chunk
        data = self._held + chunk
        return self._emit(data, max(0, len(data) - self._keep))

    def flush(self) -> bytes:
        """The masked rest, at the end of the stream."""
        data, self._held = self._held, b""
        return self._emit(data, len(data)) if data else b""

    def reset(self) -> int:
        """Forget what is held back (the rest of the stream will not be written); the
        number of bytes forgotten."""
        forgotten = len(self._held)
        self._held, self._covered = b"", 0
        return forgotten

    def _emit(self, data: bytes, cut: int) -> bytes:
        """The masked output of ``data[:cut]``; the rest is held back. Every occurrence
        of a value that starts before ``cut`` ends within ``data``."""
        out, position, covered = [], 0, 0
        for start, end in self._runs(data):
            going_on = start == 0 and self._covered > 0  # its *** was written already
            if start >= cut and not going_on:
                break
            out += [data[position:start], b"" if going_on else MASK]
            position = end
            covered = max(0, end - cut)
        out.append(data[position:cut])
        self._held, self._covered = data[cut:], covered
        return b"".join(out)

    def _runs(self, data: bytes) -> list[tuple[int, int]]:
        """The spans of ``data`` that occurrences of values cover, overlapping ones merged
        (the run already written as ``***`` among them). One ``bytes.find`` scan per value:
        many times faster than one regular expression of them all."""
        spans = [(0, self._covered)] if self._covered else []
        for value in self.values:
            at = data.find(value)
            while at >= 0:
                spans.append((at, at + len(value)))
                at = data.find(value, at + 1)
        runs: list[tuple[int, int]] = []
        for start, end in sorted(spans):
            if runs and start < runs[-1][1]:
                runs[-1] = (runs[-1][0], max(runs[-1][1], end))
            else:
                runs.append((start, end))
        return runs
