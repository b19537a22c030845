"""``cli.entry``, the executable's fast path: the command lines it answers itself print what
typer prints, everything else goes to typer, and start-up imports no heavy module."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli import entry, main

MIXED_JOURNAL = Path(__file__).resolve().parents[1] / "data" / "kernlog" / "mixed_journal.log"
# What start-up must not import: each costs more than the whole of `xid parse` on an empty log.
HEAVY = {
    "typer", "rich", "pydantic", "yaml", "httpx", "lightkube", "prometheus_client",
    "dataclasses", "inspect", "typing", "pathlib", "json", "gpuguard.model",
    "gpuguard.cli.main", "gpuguard.cli.output", "gpuguard.cli.failures",
    "re",  # with enum and functools, a third of an empty log's parse (kernlog.scan)
    "importlib.metadata",
}  # fmt: skip
EXECUTABLE = Path(__file__).resolve().parents[2] / "src" / "bin" / "gpuguard"


def typer_answer(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main.app, args)
    return result.exit_code, result.stdout, result.stderr


def fast_answer(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = entry.run_fast(args)
    assert code is not None, f"{args} went to typer"
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def logs(tmp_path: Path) -> dict[str, str]:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    return {"MIXED": str(MIXED_JOURNAL), "EMPTY": str(empty), "MISSING": str(tmp_path / "no.log")}


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--version"], id="version"),
        pytest.param(["xid", "parse", "MIXED"], id="table-with-events"),
        pytest.param(["xid", "parse", "EMPTY"], id="table-empty"),
        pytest.param(["xid", "parse", "--json", "--year", "2025", "MIXED"], id="json-year"),
        pytest.param(["xid", "parse", "MIXED", "--year=2024", "-o", "json"], id="json-short"),
        pytest.param(["xid", "parse", "--output=yaml", "MIXED"], id="yaml"),
        pytest.param(["xid", "parse", "-o", "table", "--json", "EMPTY"], id="json-wins"),
        pytest.param(["xid", "parse", "MISSING"], id="missing-file-exits-2"),
        pytest.param(["xid", "parse", "--json", "MISSING"], id="missing-file-json"),
    ],
)
def test_the_fast_path_prints_what_typer_prints(
    args: list[str], logs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [logs.get(arg, arg) for arg in args]
    expected = typer_answer(argv)
    capsys.readouterr()
    assert fast_answer(argv, capsys) == expected


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--help"], id="help"),
        pytest.param([], id="no-arguments"),
        pytest.param(["--version", "--debug"], id="version-with-another-flag"),
        pytest.param(["--debug", "xid", "parse", "x.log"], id="root-flag"),
        pytest.param(["xid", "parse", "--help"], id="command-help"),
        pytest.param(["xid", "explain", "79"], id="another-command"),
        pytest.param(["xid", "parse", "-o", "JSON", "x.log"], id="format-typer-rejects"),
        pytest.param(["xid", "parse", "-ojson", "x.log"], id="attached-short-value"),
        pytest.param(["xid", "parse", "--year", "20x5", "x.log"], id="year-not-a-number"),
        pytest.param(["xid", "parse", "--year", "-1", "x.log"], id="year-negative"),
        pytest.param(["xid", "parse", "--year"], id="year-without-value"),
        pytest.param(["xid", "parse", "--year", "1", "--year", "2"], id="year-twice"),
        pytest.param(["xid", "parse", "-o", "json", "--output", "yaml"], id="format-twice"),
        pytest.param(["xid", "parse", "a.log", "b.log"], id="two-files"),
        pytest.param(["xid", "parse", "--", "a.log"], id="double-dash"),
        pytest.param(["xid", "parse", "--json=yes"], id="flag-with-value"),
        pytest.param(["xid", "parse", "--jsn"], id="unknown-flag"),
        pytest.param(["xid", "parse", ""], id="empty-argument"),
    ],
)
def test_everything_else_goes_to_typer(args: list[str]) -> None:
    assert entry.run_fast(args) is None


def test_a_shell_completion_request_goes_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(entry.COMPLETE_VAR, "bash_complete")
    assert entry.run_fast(["--version"]) is None


@pytest.mark.parametrize(
    "args", [["--version"], ["xid", "parse", "EMPTY"], ["xid", "parse", "--json", "EMPTY"]]
)
def test_start_up_imports_no_heavy_module(args: list[str], logs: dict[str, str]) -> None:
    argv = [logs.get(arg, arg) for arg in args]
    script = (
        "import sys\n"
        "before = set(sys.modules)\n"
        "from gpuguard.cli import entry\n"
        "try:\n"
        f"    entry.main({argv!r})\n"
        "finally:\n"
        "    sys.stderr.write('\\n' + repr(sorted(set(sys.modules) - before)))\n"
    )
    command = [sys.executable, "-c", script]
    run = subprocess.run(command, check=False, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    imported = set(ast.literal_eval(run.stderr.splitlines()[-1]))
    assert imported & HEAVY == set()
    assert "gpuguard.cli.entry" in imported


def test_the_executable_runs_the_entry_and_imports_no_heavy_module(
    logs: dict[str, str],
) -> None:
    """The installed script (pyproject's script-files), not pip's wrapper, which imports re."""
    for args in (["--version"], ["xid", "parse", logs["EMPTY"]]):
        command = [sys.executable, "-X", "importtime", str(EXECUTABLE), *args]
        run = subprocess.run(command, check=False, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        imported = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines()}
        assert "gpuguard.cli.entry" in imported
        assert imported & HEAVY == set()
    assert run.stdout.startswith("0 events in 0 lines")


def test_the_version_is_the_installed_package_s() -> None:
    from importlib import metadata

    assert entry.version_line() == f"gpuguard {metadata.version('gpuguard')}"


def test_json_lines_come_out_as_the_events_of_the_log(
    logs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = fast_answer(["xid", "parse", "--json", logs["MIXED"]], capsys)
    assert code == 0
    assert [json.loads(line)["line_no"] for line in out.splitlines()] == [4, 6, 8, 11]
    assert err == "4 events in 11 lines; 1 malformed Xid lines skipped (first at line 5)\n"
