"""A task's resource history (``datadir.usage``): bounded as it grows (the last hour as
sampled, minute averages of the day before, nothing older), and read up to any damage.
Synthetic timestamps: no waiting."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainfleet.datadir import usage
from trainfleet.datadir.usage import MINUTE_SECONDS, SIZE, Sample, UsageWriter

START = 1_699_999_980.0  # on a minute


def test_compact_keeps_the_last_hour_and_averages_each_minute_before() -> None:
    now = START + 2 * 3600
    samples = [
        Sample(now - age, cpu=float(age % 60), rss=1000 + int(age)) for age in range(0, 7201, 5)
    ]
    kept = usage.compact(samples, now)

    recent = [s for s in kept if not s.minute]
    minutes = [s for s in kept if s.minute]
    assert min(s.time for s in recent) >= now - 3600 - 60
    assert [s.time for s in recent] == sorted(s.time for s in samples if s.time >= recent[0].time)
    assert all(s.time % 60 == 0 and s.samples == 12 for s in minutes)
    assert max(s.time for s in minutes) < recent[0].time
    first = minutes[0]  # the samples at START .. START+55
    parts = [s for s in samples if first.time <= s.time < first.time + 60]
    assert first.cpu == pytest.approx(sum(s.cpu for s in parts) / 12)
    assert first.rss == round(sum(s.rss for s in parts) / 12)
    assert kept == sorted(kept, key=lambda s: s.time)


def test_compact_weighs_minutes_already_folded_and_drops_those_past_a_day() -> None:
    now = START + 3 * 86400
    old = Sample(now - MINUTE_SECONDS - 120, cpu=50.0, rss=1, samples=12, minute=True)
    folded = Sample(START + 86400 * 2, cpu=10.0, rss=100, samples=3, minute=True)
    late = Sample(START + 86400 * 2 + 30, cpu=50.0, rss=500, gpu_util=80.0, gpu_memory=10, gpus=1)
    kept = usage.compact([old, folded, late], now)
    assert len(kept) == 1
    (minute,) = kept
    assert minute.samples == 4 and minute.minute
    assert minute.cpu == pytest.approx((3 * 10 + 50) / 4)
    assert minute.rss == 200
    assert (minute.gpu_util, minute.gpu_memory, minute.gpus) == (80.0, 10, 1)


def test_a_writer_over_a_day_and_more_keeps_its_file_bounded(tmp_path: Path) -> None:
    path = tmp_path / "worker-0.usage"
    writer = UsageWriter(path)
    every, hours = 5.0, 26
    sizes = []
    for n in range(int(hours * 3600 / every)):
        assert writer.append(Sample(START + n * every, cpu=100.0, rss=n))
        sizes.append(path.stat().st_size)
    writer.close()
    now = START + (hours * 3600 / every - 1) * every
    samples = usage.read(path)
    recent = [s for s in samples if not s.minute]
    minutes = [s for s in samples if s.minute]
    # the last hour as sampled (and at most one compaction's worth more)
    assert recent[-1].time == now
    assert now - recent[0].time <= 3600 + usage.COMPACT_SECONDS + 60
    assert len(recent) >= 3600 / every
    # a minute each before, for a day at most
    assert len(minutes) <= MINUTE_SECONDS / 60 + 1
    assert minutes[0].time >= now - MINUTE_SECONDS - usage.COMPACT_SECONDS
    assert all(m.samples == 12 and m.cpu == 100.0 for m in minutes[1:-1])
    most = len(usage.MAGIC) + SIZE * (
        (3600 + usage.COMPACT_SECONDS + 60) / every + MINUTE_SECONDS / 60 + 2
    )
    assert max(sizes) <= most
    assert usage.latest(path) == recent[-1]


def _written(path: Path, count: int) -> list[Sample]:
    writer = UsageWriter(path)
    samples = [Sample(START + n, cpu=float(n), rss=n * 4096) for n in range(count)]
    for sample in samples:
        writer.append(sample)
    writer.close()
    return samples


def test_a_truncated_or_damaged_file_is_read_up_to_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "t.usage"
    samples = _written(path, 10)
    assert usage.read(path) == samples

    os.truncate(path, path.stat().st_size - 7)  # the last record cut short
    assert usage.read(path) == samples[:9]
    assert usage.latest(path) == samples[8]

    data = bytearray(path.read_bytes())
    data[len(usage.MAGIC) + 5 * SIZE + 3] ^= 0xFF  # a bit flipped in the sixth record
    path.write_bytes(bytes(data))
    assert usage.read(path) == samples[:5]

    path.write_bytes(b"garbage" * 40)
    assert usage.read(path) == [] and usage.latest(path) is None
    path.write_bytes(b"")
    assert usage.read(path) == [] and usage.latest(path) is None
    assert usage.read(tmp_path / "missing.usage") == []


def test_a_new_writer_repairs_a_damaged_file_and_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "t.usage"
    samples = _written(path, 6)
    os.truncate(path, path.stat().st_size - 1)
    writer = UsageWriter(path)  # the next attempt's
    more = Sample(START + 100, cpu=1.0, rss=1)
    assert writer.append(more)
    writer.close()
    assert usage.read(path) == [*samples[:5], more]


def test_the_history_is_beside_the_log() -> None:
    log = Path("/data/jobs/j-1/logs/worker-3.log")
    assert usage.usage_path(log) == Path("/data/jobs/j-1/logs/worker-3.usage")
