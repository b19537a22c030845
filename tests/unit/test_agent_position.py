"""The saved read position: every kind round-trips, writes are atomic, bad files are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard import errors
from gpuguard.agent import position


@pytest.mark.parametrize(
    "saved_position",
    [
        pytest.param(position.FilePosition(1234, 5678, "4e6f76"), id="file-inode-offset"),
        pytest.param(position.KmsgPosition("0b7c-boot", 991), id="kmsg-boot-and-seq"),
        pytest.param(position.JournalPosition("s=1;i=2;b=3"), id="journald-cursor"),
        pytest.param(None, id="nothing-read-yet"),
    ],
)
def test_position_and_counts_round_trip(
    tmp_path: Path, saved_position: position.Position | None
) -> None:
    saved = position.Saved(saved_position, {"lines": 7, "xids": [["", "GPU-a", "p", "79", 1]]})
    position.save(tmp_path, saved)
    assert position.load(tmp_path) == saved
    assert [p.name for p in tmp_path.iterdir()] == [position.STATE_FILE]  # no temp file left


def test_no_state_file_is_a_fresh_start(tmp_path: Path) -> None:
    assert position.load(tmp_path / "never-written") == position.Saved()


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("{truncated", id="torn-json"),
        pytest.param('{"version": 99}', id="unknown-version"),
        pytest.param('{"version": 1, "position": {"kind": "tape"}}', id="unknown-kind"),
        pytest.param('{"version": 1, "counts": [1]}', id="counts-not-an-object"),
    ],
)
def test_bad_state_file_is_an_input_error_naming_it(tmp_path: Path, text: str) -> None:
    (tmp_path / position.STATE_FILE).write_text(text)
    with pytest.raises(errors.InputError, match=position.STATE_FILE):
        position.load(tmp_path)
