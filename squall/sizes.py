"""Sizes and durations in settings and users files: ``"16MB"``, ``"1.5GiB"``, ``"30m"``, ``"2h"``."""

from __future__ import annotations

import re
from typing import Any

from squall.errors import OptionError

MIB, GIB = 1024**2, 1024**3
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2, "mib": MIB,
          "g": 1000**3, "gb": 1000**3, "gib": GIB, "t": 1000**4, "tb": 1000**4, "tib": 1024**4}  # fmt: skip
_DURATION = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_size(value: Any, what: str) -> int:
    """Bytes from a number or a text such as ``16MB``, ``1.5GiB``; OptionError naming ``what`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise OptionError(f"{what} must be a size such as 16MB or 2GiB, got {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def parse_duration(value: Any, what: str) -> float:
    """Seconds from a number or a text such as ``90s``, ``30m``, ``2h``; OptionError naming ``what`` otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)\s*", str(value).lower())
    if not match or float(match.group(1)) <= 0:
        raise OptionError(f"{what} must be a duration such as 90s, 30m or 2h, got {value!r}")
    return float(match.group(1)) * _DURATION[match.group(2)]
