"""The masker: every occurrence of a value becomes ``***``, however the stream is cut
into chunks, and nothing else of the output changes."""

from __future__ import annotations

import doctest
import importlib

from hypothesis import given
from hypothesis import strategies as st

from trainfleet.backends.supervision.masking import MIN_LENGTH, Masker

SECRET = b"tok-3f9\x00\xffZ"


def _reference(values: list[bytes], data: bytes) -> bytes:
    """What masking the whole output at once must give, the slow way: every occurrence of
    a long enough value, at every position; overlapping ones make one ``***``."""
    spans = sorted(
        (start, start + len(value))
        for value in values
        if len(value) >= MIN_LENGTH
        for start in range(len(data))
        if data.startswith(value, start)
    )
    out, end = [], 0
    for start, stop in spans:
        if start < end:  # overlaps the run being masked
            end = max(end, stop)
        else:
            out += [data[end:start], b"***"]
            end = stop
    return b"".join(out) + data[end:]


def _masked(values: list[bytes], chunks: list[bytes]) -> bytes:
    masker = Masker(values)
    longest = max((len(v) for v in masker.values), default=1)
    out = []
    for chunk in chunks:
        out.append(masker.feed(chunk))
        assert len(masker._held) <= longest - 1
    return b"".join(out) + masker.flush()


def test_a_value_split_at_every_boundary_is_masked() -> None:
    data = b"before " + SECRET + b" middle " + SECRET + SECRET + b" after\n"
    expected = b"before *** middle ****** after\n"
    for first in range(len(data) + 1):
        for second in range(first, len(data) + 1):
            chunks = [data[:first], data[first:second], data[second:]]
            assert _masked([SECRET], chunks) == expected, (first, second)


def test_a_value_fed_one_byte_at_a_time() -> None:
    data = b"x" * 5 + SECRET + b"y" * 3
    assert _masked([SECRET], [bytes([b]) for b in data]) == b"xxxxx***yyy"


def test_the_longest_of_overlapping_values_is_masked() -> None:
    masker = Masker([b"pass", b"password123"])
    assert masker.feed(b"password123 pass password") + masker.flush() == b"*** *** ***word"
    masker = Masker([b"abcdef", b"defghi"])
    assert masker.feed(b"abcdefghi") + masker.flush() == b"***"


def test_short_values_are_not_masked() -> None:
    masker = Masker([b"abc", b""])
    assert not masker
    assert masker.feed(b"abc abc") == b"abc abc" and masker.flush() == b""


def test_without_values_output_passes_unchanged() -> None:
    masker = Masker([])
    assert masker.feed(b"anything") == b"anything"


def test_reset_forgets_what_is_held_back() -> None:
    masker = Masker([SECRET])
    out = masker.feed(SECRET[:5])
    assert masker.reset() == 5
    assert out + masker.feed(b"rest") + masker.flush() == b"rest"


def test_a_long_run_of_a_repeated_value_stays_linear() -> None:
    masker = Masker([b"abab"])
    out = b"".join(masker.feed(b"ab" * 50_000) for _ in range(10)) + masker.flush()
    assert out == b"***"


@given(
    values=st.lists(st.binary(min_size=1, max_size=8), min_size=1, max_size=3),
    pieces=st.lists(st.one_of(st.binary(max_size=6), st.integers(0, 2)), max_size=30),
    cuts=st.lists(st.integers(0, 200), max_size=10),
)
def test_any_stream_cut_anywhere_matches_masking_it_whole(
    values: list[bytes], pieces: list[bytes | int], cuts: list[int]
) -> None:
    """Output built of random bytes and of the values themselves, cut at random places."""
    data = b"".join(values[p % len(values)] if isinstance(p, int) else p for p in pieces)
    bounds = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *bounds], [*bounds, len(data)], strict=True)]
    got = _masked(values, chunks)
    assert got == _reference(values, data)
    for value in values:
        if len(value) >= MIN_LENGTH:
            assert all(value not in part for part in got.split(b"***"))


def test_the_docstring_example() -> None:
    result = doctest.testmod(importlib.import_module("trainfleet.backends.supervision.masking"))
    assert result.attempted > 0 and result.failed == 0
