"""Parse resource quantities: CPUs (``2``, ``500m``) and memory (``2Gi``, ``8G``, ``512M``).

Memory follows Kubernetes units: ``K M G T P E`` are powers of 1000 and ``Ki Mi Gi Ti Pi Ei``
powers of 1024; a trailing ``B`` (``8GB``, ``2GiB``) and lower case (``8g``, Submarine style)
are accepted too. A bare number is bytes.
"""

from __future__ import annotations

import math
import re

_DECIMAL = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15, "e": 10**18}
_BINARY = {"ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50, "ei": 2**60}
CPU_LIMIT = 10**18 - 1
"""Most cores a quantity may name: far beyond any machine, and 18 digits at most."""
MEMORY_LIMIT = 2**100
"""Most bytes a quantity may name."""
CPU_SCHEMA_PATTERN = r"^\d{1,18}(\.\d{1,18})?m?$"
MEMORY_SCHEMA_PATTERN = r"^\s*\d{1,12}(\.\d{1,12})?\s*([kKmMgGtTpPeE]i?)?[bB]?\s*$"
"""What the JSON Schema promises: forms that always parse within the limits above."""
_MEMORY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpe]i?)?b?\s*$", re.IGNORECASE)
_CPU = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m?)\s*$")


def parse_memory(value: str | int | float) -> int:
    """Bytes in ``value``; raises ValueError naming the accepted forms.

    >>> parse_memory("2Gi"), parse_memory("8G"), parse_memory(1024)
    (2147483648, 8000000000, 1024)
    """
    if isinstance(value, bool):
        raise ValueError("memory must be a quantity like 2Gi or 8G, not a boolean")
    if isinstance(value, int | float):
        if value != int(_finite(value, "memory", MEMORY_LIMIT)):
            raise ValueError(
                f"memory {value!r} is not a whole number of bytes: write bytes, or a unit "
                "such as 512Mi"
            )
        return int(value)
    if not isinstance(value, str):
        raise ValueError("memory must be a quantity like 2Gi or 8G, or a number of bytes")
    match = _MEMORY.match(value)
    if not match:
        raise ValueError(
            f"cannot parse memory {value!r}: use a number of bytes or a unit such as "
            "512Mi, 2Gi (powers of 1024) or 500M, 8G (powers of 1000)"
        )
    number, unit = match.group(1), (match.group(2) or "").lower()
    factor = _BINARY[unit] if unit.endswith("i") else _DECIMAL[unit]
    return int(_finite(float(number) * factor, "memory", MEMORY_LIMIT))


def size_setting(value: str | None, variable: str, default: int, minimum: int = 1) -> int:
    """Bytes of a size setting: ``value``, else ``default`` (None or empty); ValueError
    naming ``variable`` (where it was given) when it is no size or is below ``minimum``.

    >>> size_setting("2Gi", "TRAINFLEET_X", 0), size_setting("", "TRAINFLEET_X", 7)
    (2147483648, 7)
    """
    value = (value or "").strip()
    if not value:
        return default
    try:
        size = parse_memory(value)
    except ValueError as error:
        raise ValueError(f"{variable}: {error}") from None
    if size < minimum:
        raise ValueError(f"{variable}: {value!r} is too small ({minimum} bytes at least)")
    return size


def parse_cpu(value: str | int | float) -> int:
    """Millicores in ``value`` (``2`` -> 2000, ``"500m"`` -> 500)."""
    if isinstance(value, bool):
        raise ValueError("cpu must be a number like 2 or 500m, not a boolean")
    if isinstance(value, int | float):
        return round(_finite(value, "cpu", CPU_LIMIT) * 1000)
    if not isinstance(value, str):
        raise ValueError("cpu must be a number like 2 or 500m")
    match = _CPU.match(value)
    if not match:
        raise ValueError(f"cannot parse cpu {value!r}: use a number of cores (2, 0.5) or 500m")
    number, milli = float(match.group(1)), bool(match.group(2))
    _finite(number / 1000 if milli else number, "cpu", CPU_LIMIT)
    return round(number) if milli else round(number * 1000)


def _finite(number: float, what: str, limit: int) -> float:
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number")
    if number > limit:
        raise ValueError(f"{what} is too large")
    if number < 0:
        raise ValueError(f"{what} must not be negative")
    return number


def format_cpu(millicores: int) -> str:
    """Cores as a decimal string that parses back the same (``2500`` -> ``"2.5"``).

    >>> format_cpu(2000), format_cpu(2500), format_cpu(1)
    ('2', '2.5', '0.001')
    """
    cores, milli = divmod(millicores, 1000)
    return f"{cores}.{milli:03d}".rstrip("0") if milli else str(cores)


def format_memory(size: int) -> str:
    """Shortest exact binary form of ``size`` bytes (``2147483648`` -> ``2Gi``)."""
    for unit in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[unit.lower()]
        if size and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)
