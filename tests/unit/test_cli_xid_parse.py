"""``gpuguard xid parse`` as a user runs it: JSON lines or a table, stdin, bad paths, pipes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli import main

MIXED_JOURNAL = Path(__file__).resolve().parents[1] / "data" / "kernlog" / "mixed_journal.log"
REQUIRED_KEYS = {
    "line_no",
    "kind",
    "xid",
    "pci",
    "pid",
    "process",
    "uuid",
    "recovery_action",
    "message",
}


def run(*args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(main.app, ["xid", "parse", *args], input=stdin)
    return result.exit_code, result.stdout, result.stderr


def json_events(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_json_lines_carry_every_field_a_consumer_reads() -> None:
    code, stdout, stderr = run("--json", "--year", "2025", str(MIXED_JOURNAL))
    assert code == 0
    events = json_events(stdout)
    assert all(event.keys() >= REQUIRED_KEYS for event in events)
    assert events[0] == {
        "line_no": 4,
        "kind": "xid",
        "xid": 79,
        "pci": "0000:3b:00.0",
        "address": "PCI:0000:3b:00",
        "uuid": "GPU-11111111-2222-3333-4444-555555555555",
        "pid": 2211,
        "process": "python3",
        "recovery_action": None,
        "reset_flags": [],
        "timestamp": "2025-03-03T10:00:02+00:00",
        "uptime_s": 812.000003,
        "message": "GPU has fallen off the bus.",
    }
    assert [(e["kind"], e["xid"], e["recovery_action"]) for e in events[1:]] == [
        ("xid", 154, "node-reboot-required"),
        ("fallen_off_bus", None, None),
        ("xid", 48, None),
    ]
    assert "1 malformed" in stderr


@pytest.mark.parametrize("args", [pytest.param([], id="no-file"), pytest.param(["-"], id="dash")])
def test_stdin_is_read_without_a_file_or_with_dash(args: list[str]) -> None:
    code, stdout, _ = run(*args, "--json", stdin=MIXED_JOURNAL.read_text())
    assert code == 0
    assert [e["line_no"] for e in json_events(stdout)] == [4, 6, 8, 11]


def test_table_lists_events_and_a_summary_of_skipped_lines() -> None:
    code, stdout, _ = run(str(MIXED_JOURNAL))
    assert code == 0
    assert "0000:3b:00.0" in stdout
    assert "node-reboot-required" in stdout
    assert "off bus" in stdout
    assert "4 events in 11 lines; 1 malformed Xid lines skipped (first at line 5)" in stdout


def test_table_columns_line_up_and_the_message_is_cut_to_the_width(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "120")
    code, stdout, _ = run(str(MIXED_JOURNAL))
    rows = stdout.splitlines()[:-1]  # the last line is the summary
    assert code == 0
    assert rows[0].split() == [
        "line", "when", "xid", "pci", "uuid", "pid", "process", "action", "message"
    ]
    message_at = rows[0].index("message")
    assert all(len(row) <= 120 for row in rows)
    assert rows[3][message_at:].startswith("The NVIDIA GPU")
    assert rows[3].endswith("…")
    assert [row[:4].strip() for row in rows[1:]] == ["4", "6", "8", "11"]


def test_table_escapes_control_characters_a_process_name_carries() -> None:
    line = "[ 9.000000] NVRM: Xid (PCI:0000:01:00): 13, pid=42, name=\x1b]8;;evil\x07x, bad\n"
    code, stdout, _ = run(stdin=line)
    assert code == 0
    assert "\x1b" not in stdout
    assert "\x07" not in stdout
    assert "\\x1b]8;;evil\\x07x" in stdout


def test_no_events_still_prints_the_summary() -> None:
    code, stdout, _ = run(stdin="just\nnoise\n")
    assert code == 0
    assert "0 events in 2 lines; 0 malformed" in stdout


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_a_missing_file_exits_2_naming_it(tmp_path: Path, as_json: bool) -> None:
    missing = tmp_path / "kern.log"
    code, stdout, stderr = run(*(["--json"] if as_json else []), str(missing))
    assert code == 2
    assert str(missing) in stderr.replace("\n", "")
    assert stdout == ""


def test_help_teaches_with_examples() -> None:
    code, stdout, _ = run("--help")
    assert code == 0
    assert "journalctl -k" in stdout
    assert "dmesg -T" in stdout


@pytest.mark.parametrize("module", ["gpuguard.cli.main", "gpuguard.cli.entry"])
def test_a_reader_that_goes_away_is_not_a_crash(tmp_path: Path, module: str) -> None:
    log = tmp_path / "many.log"
    line = "[ 1.000000] NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception: ESR 0x404000=0x0\n"
    log.write_text(line * 20000)
    command = [sys.executable, "-m", module, "xid", "parse", "--json", str(log)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        assert json.loads(proc.stdout.readline())["xid"] == 13
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        returncode = proc.wait(timeout=60)
    assert "Traceback" not in stderr
    assert returncode == 141


def test_a_line_cut_after_the_code_is_malformed_not_a_smaller_xid(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(
        "[ 1.000000] NVRM: Xid (PCI:0000:01:00): 7\n"
        "[ 2.000000] NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus.\n"
    )
    result = CliRunner().invoke(main.app, ["xid", "parse", str(log), "-o", "json"])
    assert result.exit_code == 0
    assert [json.loads(line)["xid"] for line in result.stdout.splitlines()] == [79]
    assert "1 malformed Xid lines skipped (first at line 1)" in result.stderr
