"""gpuguard's one written form of a time, and the one parser that reads it back.

The form is Kubernetes' own ``metav1.Time``: RFC 3339 in UTC to the second with a ``Z``
(``2026-09-10T13:03:59Z``; see the Kubernetes API conventions), as in gpuguard's node
annotations and ledger lines. The parser also takes any ISO 8601 time with a zone a human may
have typed (``+09:00``) and refuses a time without one: a zone-less time is ambiguous.
"""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_utc(at: datetime) -> str:
    """``at`` in UTC as ``YYYY-MM-DDTHH:MM:SSZ`` (fractions of a second dropped)."""
    return at.astimezone(UTC).strftime(FORMAT)


def parse_utc(text: str | None) -> datetime | None:
    """The time written by ``format_utc`` (or any ISO 8601 time with a zone); None when the
    text is missing or not one — the caller names the annotation or line it came from."""
    if text is None:
        return None
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
