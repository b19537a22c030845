"""The one form of a time gpuguard writes into Kubernetes objects (annotations such as
``gpuguard.io/isolated-at``, ledger lines) and the one parser that reads it back.

The form is Kubernetes' own ``metav1.Time``: RFC 3339 in UTC with whole seconds and a ``Z``
(``2026-09-21T05:00:00Z``; see the Kubernetes API conventions). The parser also takes any
RFC 3339 / ISO 8601 time with a zone a human may have typed (``+09:00``), and refuses a time
without one: a zone-less time in an annotation is ambiguous.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuguard.errors import InputError

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_utc(at: datetime) -> str:
    """``at`` in UTC as ``YYYY-MM-DDTHH:MM:SSZ`` (fractions of a second dropped)."""
    return at.astimezone(UTC).strftime(FORMAT)


def parse_utc(text: str, *, what: str) -> datetime:
    """A time with a zone, as an aware datetime; InputError naming ``what`` otherwise."""
    try:
        stamp = datetime.fromisoformat(text.strip())
    except ValueError as e:
        raise InputError(f"{what}={text!r}: not a time like 2026-09-21T05:00:00Z") from e
    if stamp.tzinfo is None:
        raise InputError(f"{what}={text!r}: the time has no zone (write it as ...Z)")
    return stamp


def try_parse_utc(text: str | None) -> datetime | None:
    """``parse_utc`` for facts that may be missing or malformed: None then."""
    if text is None:
        return None
    try:
        return parse_utc(text, what="time")
    except InputError:
        return None
