"""Hostile text is shown, never obeyed: an annotation, a kernel-log line or a ledger field that
holds terminal escapes (``ESC [``, ``ESC ]`` hyperlinks, C1 controls) or a spreadsheet formula
comes out escaped, and a huge value comes out cut with its length."""

from __future__ import annotations

import contextlib
import csv
import io
import re
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuguard.actuators import ledger as ledger_store
from gpuguard.cli import guard, ledger, output, safe_text
from gpuguard.cli.main import app
from gpuguard.controller import tick, wiring
from gpuguard.model import annotation_keys, faults, fleet

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)
OSC_LINK = "\x1b]8;;http://evil.example\x07click\x1b]8;;\x07"
RED = "\x1b[31mred\x1b[0m"
C1 = "\x9b2J"
CONTROLS = ("\x1b", "\x07", "\x9b")


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        pytest.param("gpu-node-1", "gpu-node-1", id="plain-text-unchanged"),
        pytest.param(RED, "\\x1b[31mred\\x1b[0m", id="csi-colour-escaped"),
        pytest.param("\x1b]0;owned\x07", "\\x1b]0;owned\\x07", id="osc-title-escaped"),
        pytest.param(C1, "\\x9b2J", id="c1-csi-escaped"),
        pytest.param("a\x7fb\x00", "a\\x7fb\\x00", id="del-and-nul-escaped"),
        pytest.param("abc\u202edef", "abc\\u202edef", id="bidi-override-escaped"),
        pytest.param("two\nlines\tand tab", "two\nlines\tand tab", id="newline-tab-kept"),
    ],
)
def test_visible_escapes_control_characters(raw: str, shown: str) -> None:
    assert safe_text.visible(raw) == shown


@pytest.mark.parametrize(
    ("raw", "cell"),
    [
        pytest.param('=HYPERLINK("http://evil","x")', '\'=HYPERLINK("http://evil","x")',
                     id="formula"),
        pytest.param("@SUM(A1:A9)", "'@SUM(A1:A9)", id="at-sum"),
        pytest.param("+1+1", "'+1+1", id="plus"),
        pytest.param("-2+3", "'-2+3", id="minus"),
        pytest.param("\tx", "'\tx", id="tab"),
        pytest.param("gpu-node-1", "gpu-node-1", id="name-unchanged"),
        pytest.param(None, "", id="none-empty"),
        pytest.param(79, "79", id="number"),
    ],
)
def test_csv_cell_neutralises_formulas(raw: object, cell: str) -> None:
    assert safe_text.csv_cell(raw) == cell


def test_long_values_are_cut_with_their_length() -> None:
    shown = safe_text.shown("x" * 100_000)
    assert len(shown) < safe_text.LINE_LIMIT + 30
    assert shown.endswith("… (100000 chars)")


def _hostile_tick(config: Path | None, conn: wiring.Connection, *, dry_run: bool
                  ) -> tick.TickResult:
    marks = {annotation_keys.REASON: OSC_LINK + RED + C1, annotation_keys.HOLD: "y" * 100_000}
    node = fleet.Node("gpu-node-1", "boot-1", 8, 8, conditions={"Ready": "True"},
                      annotations=marks)
    return tick.TickResult(at=NOW, snapshot=fleet.FleetSnapshot(NOW, nodes=(node,)))


def _assert_safe(text: str, limit: int = 2 * safe_text.LINE_LIMIT) -> None:
    for control in CONTROLS:
        assert control not in text
    assert max(len(line) for line in text.splitlines()) < limit


def test_explain_escapes_a_forged_annotation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guard, "run_tick", _hostile_tick)
    result = CliRunner().invoke(app, ["explain", "gpu-node-1"])
    _assert_safe(result.stdout)
    assert "\\x1b]8;;http://evil.example\\x07click" in result.stdout
    assert re.search(r"… \(100\d{3} chars\)", result.stdout)  # the hold's line, cut


def test_xid_parse_escapes_a_hostile_log_line(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(f"[ 2.0] NVRM: Xid (PCI:0000:ab:00): 79, pid=1, name={RED}, {OSC_LINK}\n")
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["xid", "parse", str(log)])
    assert result.exit_code == 0, result.stderr
    _assert_safe(result.stdout)
    assert "\\x1b[31mred" in result.stdout


AUDIT = ledger_store.AuditRecord(
    at=NOW, node="gpu-node-1", op=ledger_store.AuditOp.REMOVE, target="t",
    by=f"@SUM(A1:A9){RED}", why='=HYPERLINK("http://evil.example","open")',
)
ENTRY = faults.LedgerEntry(NOW, "gpu-node-1", 79, "0000:ab:00.0", None,
                           faults.Recorder.GPUGUARD)


@pytest.fixture
def hostile_ledger(monkeypatch: pytest.MonkeyPatch) -> None:
    @contextlib.contextmanager
    def opened(*args: Any) -> Iterator[None]:
        yield None

    read = ledger_store.LedgerRead(entries=[ENTRY], audits=[AUDIT])
    monkeypatch.setattr(ledger, "_opened", opened)
    monkeypatch.setattr(ledger, "_read", lambda store: read)


@pytest.mark.usefixtures("hostile_ledger")
def test_ledger_audit_list_escapes_who_and_why() -> None:
    result = CliRunner(env={"COLUMNS": "250"}).invoke(app, ["ledger", "list", "--audit"])
    assert result.exit_code == 0, result.stderr
    _assert_safe(result.stdout)
    assert "\\x1b[31mred" in result.stdout


@pytest.mark.usefixtures("hostile_ledger")
def test_ledger_csv_export_runs_no_formula() -> None:
    result = CliRunner().invoke(app, ["ledger", "export", "-o", "csv"])
    assert result.exit_code == 0, result.stderr
    _assert_safe(result.stdout)
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    audit = next(r for r in rows if r["record"] == "audit")
    assert audit["why"] == '\'=HYPERLINK("http://evil.example","open")'
    assert audit["by"] == "'@SUM(A1:A9)\\x1b[31mred\\x1b[0m"
    assert all(not v.startswith(safe_text.FORMULA_STARTS) for r in rows for v in r.values())


def test_an_error_naming_a_hostile_input_is_escaped_and_cut(tmp_path: Path) -> None:
    missing = tmp_path / f"{RED}{'z' * 5000}"
    result = CliRunner().invoke(app, ["xid", "parse", str(missing)])
    assert result.exit_code == 2
    _assert_safe(result.stderr, output.ERROR_LIMIT + 50)
    assert "\\x1b[31mred" in result.stderr
