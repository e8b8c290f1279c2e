"""A task's resource history, beside its log: ``jobs/<id>/logs/<role>-<index>.usage``.

The task's supervisor (``backends/supervision/sampling.py``, through the shim) appends one
fixed-size record per sample; readers (``trainfleet top``, the API, ``/metrics``) read it
back. The file stays small: the writer folds samples older than an hour (``FULL_SECONDS``)
into one record per minute (their averages) and drops minutes older than a day
(``MINUTE_SECONDS``), every ``COMPACT_SECONDS`` and when a new attempt opens it.

The format: ``MAGIC``, then records of ``RECORD`` (little-endian: time, CPU in percent of
a core, RSS bytes, GPU utilisation percent (NaN: no GPU seen), the task's own GPU memory
bytes, kind (``SAMPLE`` or ``MINUTE``), GPUs seen, samples it stands for, and the CRC-32 of
the rest). A reader stops at the first record that is short or whose CRC is wrong: a
truncated or damaged file is read up to the damage, never more, never an error.

Standard library only, and no trainfleet import: the shim (which may not import
trainfleet) loads this file by its path. Nor ``dataclasses`` or ``pathlib``: every task's
supervisor is 14.3 MB without them, 16.3 MB with them (VmRSS, measured).
"""

from __future__ import annotations

import math
import os
import struct
import zlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

MAGIC = b"TFUSAGE1"
RECORD = struct.Struct("<dfQfQBBH")
"""time, cpu, rss, gpu_util, gpu_memory, kind, gpus, samples (then a CRC-32, ``CRC``)."""
CRC = struct.Struct("<I")
SIZE = RECORD.size + CRC.size
SAMPLE, MINUTE = 0, 1
FULL_SECONDS = 3600.0
"""Samples younger than this are kept as they are; older ones become minute averages."""
MINUTE_SECONDS = 86400.0
"""Minute averages older than this are dropped."""
COMPACT_SECONDS = 600.0
"""How often the writer folds and drops: the file holds at most this much more than the
hour of samples and the day of minutes."""
SUFFIX = ".usage"


class Sample(NamedTuple):
    """One sample of a task's process tree, or (``samples`` > 1, ``minute``) a minute's
    average of them."""

    time: float
    """Seconds since the epoch (the minute's start, for an average)."""
    cpu: float
    """Percent of one core (200: two cores busy)."""
    rss: int
    """Resident memory of the whole tree, in bytes."""
    gpu_util: float | None = None
    """Mean utilisation of the task's GPUs, in percent; None where NVML saw none."""
    gpu_memory: int | None = None
    """GPU memory the tree's processes hold (NVML's per-process accounting), in bytes."""
    gpus: int = 0
    """How many GPUs NVML saw for the task."""
    samples: int = 1
    minute: bool = False


def usage_path(log: Path) -> Path:
    """Where the history of the task that logs to ``log`` is: beside it."""
    return log.with_name(log.name.removesuffix(".log") + SUFFIX)


def encode(sample: Sample) -> bytes:
    """One record, with its CRC."""
    gpu_util = math.nan if sample.gpu_util is None else sample.gpu_util
    body = RECORD.pack(
        sample.time,
        sample.cpu,
        max(0, sample.rss),
        gpu_util,
        max(0, sample.gpu_memory or 0),
        MINUTE if sample.minute else SAMPLE,
        min(255, sample.gpus),
        min(0xFFFF, sample.samples),
    )
    return body + CRC.pack(zlib.crc32(body))


def decode(record: bytes) -> Sample | None:
    """The sample of one record; None where it is short or damaged."""
    if len(record) != SIZE or CRC.unpack_from(record, RECORD.size)[0] != zlib.crc32(
        record[: RECORD.size]
    ):
        return None
    when, cpu, rss, gpu_util, gpu_memory, kind, gpus, samples = RECORD.unpack_from(record)
    seen = gpus > 0
    return Sample(
        when,
        cpu,
        rss,
        gpu_util if seen and not math.isnan(gpu_util) else None,
        gpu_memory if seen else None,
        gpus,
        samples,
        kind == MINUTE,
    )


def read(path: Path | str) -> list[Sample]:
    """Every sample of the file, oldest first, up to the first damage; [] where there is
    no file (or no header)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    return list(_records(data))


def latest(path: Path | str) -> Sample | None:
    """The newest sample (not a minute's average) of the file, reading its end only; None
    where there is none or it is damaged."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            count = (size - len(MAGIC)) // SIZE
            if count <= 0 or handle.read(len(MAGIC)) != MAGIC:
                return None
            handle.seek(len(MAGIC) + (count - 1) * SIZE)
            sample = decode(handle.read(SIZE))
    except OSError:
        return None
    return sample if sample is not None and not sample.minute else None


def _records(data: bytes) -> Iterable[Sample]:
    if not data.startswith(MAGIC):
        return
    for start in range(len(MAGIC), len(data) - SIZE + 1, SIZE):
        sample = decode(data[start : start + SIZE])
        if sample is None:
            return
        yield sample


def compact(samples: list[Sample], now: float) -> list[Sample]:
    """The history as it is kept at ``now``: samples of the last ``FULL_SECONDS`` as they
    are, older ones folded into one average per minute (with the minutes already there),
    minutes older than ``MINUTE_SECONDS`` dropped; oldest first."""
    cutoff = math.floor((now - FULL_SECONDS) / 60) * 60  # only whole minutes are folded
    minutes: dict[float, list[Sample]] = {}
    recent = []
    for sample in samples:
        if sample.minute or sample.time < cutoff:
            minutes.setdefault(math.floor(sample.time / 60) * 60, []).append(sample)
        else:
            recent.append(sample)
    folded = [
        _average(start, parts)
        for start, parts in sorted(minutes.items())
        if start >= now - MINUTE_SECONDS
    ]
    return folded + sorted(recent, key=lambda sample: sample.time)


def _average(start: float, parts: list[Sample]) -> Sample:
    """One minute's record of ``parts`` (samples, or averages weighted by their count)."""
    total = sum(part.samples for part in parts)

    def mean(values: Iterable[tuple[float, int]]) -> float:
        pairs = list(values)
        weight = sum(count for _, count in pairs)
        return sum(value * count for value, count in pairs) / weight if weight else 0.0

    gpu_parts = [part for part in parts if part.gpus]
    gpu_util = [(p.gpu_util, p.samples) for p in gpu_parts if p.gpu_util is not None]
    return Sample(
        start,
        mean((part.cpu, part.samples) for part in parts),
        round(mean((part.rss, part.samples) for part in parts)),
        mean(gpu_util) if gpu_util else None,
        round(mean((p.gpu_memory or 0, p.samples) for p in gpu_parts)) if gpu_parts else None,
        max((part.gpus for part in parts), default=0),
        total,
        minute=True,
    )


class UsageWriter:
    """Appends samples to one task's history, compacting it now and then. Never raises
    for the disk: a sample that finds no room (or any other write error) is dropped and
    counted (``dropped``), and a record cut short by it is taken back."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        self.dropped = 0
        self.descriptor: int | None = None
        self.size = 0
        self.compacted_at = -math.inf

    def append(self, sample: Sample) -> bool:
        """Write ``sample`` (compacting first when it is time); whether it was written."""
        now = sample.time
        if self.descriptor is None or now - self.compacted_at >= COMPACT_SECONDS:
            self._compact(now)
        if self.descriptor is None:
            self.dropped += 1
            return False
        record = encode(sample)
        try:
            written = os.write(self.descriptor, record)
        except OSError:
            written = -1
        if written == len(record):
            self.size += written
            return True
        self.dropped += 1
        try:  # a partial record would hide every later one from readers
            os.ftruncate(self.descriptor, self.size)
        except OSError:
            self.close()  # opened and compacted again before the next sample
        return False

    def _compact(self, now: float) -> None:
        """Rewrite the file as ``compact`` keeps it (repairing any damage: what follows
        it is lost either way), and reopen it for appending."""
        self.close()
        self.compacted_at = now
        kept = compact(read(self.path), now)
        data = MAGIC + b"".join(encode(sample) for sample in kept)
        temporary = f"{self.path}.tmp"
        try:
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view) :]
            finally:
                os.close(descriptor)
            os.replace(temporary, self.path)
            self.descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            self.size = len(data)
        except OSError:
            try:  # noqa: SIM105 (contextlib is not worth importing into every shim)
                os.unlink(temporary)
            except OSError:
                pass
            self.compacted_at = -math.inf  # try again at the next sample

    def close(self) -> None:
        if self.descriptor is not None:
            try:  # noqa: SIM105
                os.close(self.descriptor)
            except OSError:
                pass
            self.descriptor = None
