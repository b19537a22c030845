"""When a kernel-log line happened, read from whatever its collector put before ``NVRM:``.

Each collector prefixes the kernel's text differently: dmesg an uptime (``[ 1451.785035]``),
``dmesg -T`` a ctime (``[Fri Aug 30 11:43:09 2024]``), ``dmesg --time-format iso`` and Talos an
ISO 8601 time, syslog and journald a ``Nov 29 11:28:11 host kernel:`` stamp without a year
(sometimes followed by the kernel's own uptime). This module turns any of them into an absolute,
timezone-aware time and/or an uptime, and never raises on what it reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, tzinfo

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH_ALTERNATION = "|".join(_MONTHS)

_UPTIME = re.compile(r"\[\s*(?P<seconds>\d+\.\d+)\]")
_ISO = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[T ](?P<time>\d{2}:\d{2}:\d{2})"
    r"(?:[.,](?P<fraction>\d+))?(?P<zone>Z|[+-]\d{2}:?\d{2})?"
)
_CTIME = re.compile(
    rf"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<month>{_MONTH_ALTERNATION}) +(?P<day>\d{{1,2}}) "
    r"(?P<time>\d{2}:\d{2}:\d{2}) (?P<year>\d{4})\]"
)
_SYSLOG = re.compile(
    rf"(?<!\w)(?P<month>{_MONTH_ALTERNATION}) +(?P<day>\d{{1,2}}) "
    r"(?P<time>\d{2}:\d{2}:\d{2})(?:\.(?P<fraction>\d+))?\s"
)


@dataclass(frozen=True, slots=True)
class Stamp:
    """The time of one line: absolute (timezone-aware) and/or seconds since boot."""

    timestamp: datetime | None = None
    uptime_s: float | None = None


def read_stamp(prefix: str, *, year: int | None, tz: tzinfo) -> Stamp:
    """Read the time from the text before ``NVRM:``.

    Times printed without a zone (``dmesg -T``, syslog) are taken to be in ``tz``. Syslog and
    journald stamps carry no year: they give a timestamp only when ``year`` is given.
    """
    return Stamp(timestamp=_absolute_time(prefix, year, tz), uptime_s=_uptime(prefix))


def _uptime(prefix: str) -> float | None:
    match = _UPTIME.search(prefix)
    return float(match["seconds"]) if match else None


def _absolute_time(prefix: str, year: int | None, tz: tzinfo) -> datetime | None:
    if match := _ISO.search(prefix):
        return _iso_time(match, tz)
    if match := _CTIME.search(prefix):
        return _calendar_time(int(match["year"]), match["month"], match["day"], match["time"], tz)
    if year is not None and (match := _SYSLOG.search(prefix)):
        stamp = _calendar_time(year, match["month"], match["day"], match["time"], tz)
        return stamp.replace(microsecond=_microseconds(match["fraction"])) if stamp else None
    return None


def _iso_time(match: re.Match[str], tz: tzinfo) -> datetime | None:
    zone = match["zone"] or ""
    text = f"{match['date']}T{match['time']}{'+00:00' if zone == 'Z' else zone}"
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    stamp = stamp.replace(microsecond=_microseconds(match["fraction"]))
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=tz)


def _calendar_time(year: int, month: str, day: str, time: str, tz: tzinfo) -> datetime | None:
    hour, minute, second = (int(part) for part in time.split(":"))
    try:
        return datetime(year, _MONTHS.index(month) + 1, int(day), hour, minute, second, tzinfo=tz)
    except ValueError:
        return None


def _microseconds(fraction: str | None) -> int:
    """Kernel stamps carry up to nanoseconds; datetime keeps microseconds."""
    return int(fraction[:6].ljust(6, "0")) if fraction else 0
