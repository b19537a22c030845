"""``gpuguard demo`` runs the guard with the user's settings and exits 1 when the guard misses
a fault the scenario expects it to isolate (scripts can trust its exit status)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from gpuguard.cli.main import app


def test_demo_uses_the_environment_settings_and_fails_on_a_miss() -> None:
    # No fast path and a hold window longer than the scenario: the Xid 79 is never isolated.
    env = {"COLUMNS": "200", "GPUGUARD_ISOLATION__FAST_PATH_XIDS": "[]",
           "GPUGUARD_ISOLATION__FAST_PATH_FALLEN_OFF_BUS": "false",
           "GPUGUARD_ISOLATION__HOLD_WINDOW": "2h"}
    result = CliRunner(env=env).invoke(app, ["demo", "--scenario", "user-xid13-then-xid79"])
    assert result.exit_code == 1
    assert "2h hold window, fast path for Xid none" in result.stdout
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: the guard missed 1 fault(s)")


@pytest.mark.usefixtures("demo_played_once")
def test_demo_with_default_settings_exits_0() -> None:
    result = CliRunner(env={"COLUMNS": "200"}).invoke(
        app, ["demo", "--scenario", "user-xid13-then-xid79", "-o", "yaml"]
    )
    assert result.exit_code == 0, result.stderr
    assert "missed: []" in result.stdout


@pytest.mark.usefixtures("demo_played_once")
def test_the_summary_is_never_cut_on_an_80_column_terminal() -> None:
    result = CliRunner(env={"COLUMNS": "80"}).invoke(
        app, ["demo", "--scenario", "user-xid13-then-xid79"])
    assert result.exit_code == 0, result.stderr
    figures = result.stdout[result.stdout.rindex("figures (the cluster"):]
    assert "user-xid13-then-xid79" in figures
    for header in ("isolated", "GPUs isolated", "→ isolation", "returned", "missed", "health"):
        assert header in figures
    assert "…" not in figures
