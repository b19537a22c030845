"""Durations as people write them in scenario files, flags and settings: ``90s``, ``10m``,
``25h``, ``3d``, ``1h30m``, or plain seconds."""

from __future__ import annotations

import re
from datetime import timedelta

from gpuguard.errors import InputError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str | int | float, *, what: str = "duration") -> timedelta:
    """Parse ``90s``/``10m``/``25h``/``3d``/``1h30m`` or a number of seconds.

    ``what`` names the input in the error (e.g. ``"scenario.yaml: events[3].at"``).
    """
    if isinstance(text, bool):
        raise InputError(f"{what}: expected a duration like 90s, 10m, 3d; got {text!r}")
    if isinstance(text, int | float):
        if text < 0:
            raise InputError(f"{what}: a duration cannot be negative: {text!r}")
        return _seconds(float(text), what, text)
    raw = str(text).strip()
    if re.fullmatch(r"\d+(?:\.\d+)?", raw):
        return _seconds(float(raw), what, text)
    parts = _PART.findall(raw)
    if not parts or "".join(n + u for n, u in parts) != raw:
        raise InputError(f"{what}: expected a duration like 90s, 10m, 25h, 3d; got {text!r}")
    return _seconds(sum(float(n) * _UNIT_SECONDS[u] for n, u in parts), what, text)


def _seconds(seconds: float, what: str, text: object) -> timedelta:
    try:
        return timedelta(seconds=seconds)
    except (OverflowError, ValueError) as e:  # NaN, infinity, beyond 999999999 days
        raise InputError(f"{what}: {text!r} is not a duration (too long or not a number)") from e


def format_duration(delta: timedelta) -> str:
    """Short human form: ``12m26s``, ``3d2h``, ``45s``."""
    total = int(delta.total_seconds())
    if total < 0:
        return "-" + format_duration(-delta)
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    shown = [f"{v}{u}" for v, u in units if v]
    return "".join(shown[:2]) or "0s"
