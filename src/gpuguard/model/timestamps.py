"""gpuguard's one written form of a time: UTC to the second, ``2026-09-10T13:03:59Z``, as in
its node annotations and ledger lines."""

from __future__ import annotations

from datetime import UTC, datetime

FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def format_utc(at: datetime) -> str:
    return at.astimezone(UTC).strftime(FORMAT)


def parse_utc(text: str) -> datetime | None:
    """The time written by ``format_utc`` (or any ISO 8601 time with a zone); None when the
    text is not one — the caller names the annotation or line it came from."""
    try:
        at = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else None
