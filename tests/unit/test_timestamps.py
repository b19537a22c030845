"""One timestamp form for what gpuguard writes into Kubernetes objects, and one parser."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuguard.model import timestamps

KST = timezone(timedelta(hours=9))


def test_written_in_utc_with_whole_seconds_and_a_z() -> None:
    at = datetime(2026, 9, 21, 14, 0, 5, 123456, tzinfo=KST)
    assert timestamps.format_utc(at) == "2026-09-21T05:00:05Z"


@pytest.mark.parametrize(
    "text", ["2026-09-21T05:00:05Z", "2026-09-21T14:00:05+09:00", " 2026-09-21T05:00:05+00:00 "]
)
def test_read_back_from_any_zone(text: str) -> None:
    assert timestamps.parse_utc(text) == datetime(2026, 9, 21, 5, 0, 5, tzinfo=UTC)


@pytest.mark.parametrize("text", ["2026-09-21T05:00:05", "yesterday", "", None])
def test_a_missing_bad_or_zone_less_time_is_none(text: str | None) -> None:
    assert timestamps.parse_utc(text) is None
