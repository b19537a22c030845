"""run_checks: every check runs, none can stop the others, nothing is written without --fix."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from gpuguard.agent.checks import registry, result, rke2_release, running
from gpuguard.agent.checks.settings import CheckSettings
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree

SETTINGS = CheckSettings(control_plane_version=None)
NAMES = [check.name for check in registry.CHECKS]


def _settings_with_control_plane() -> CheckSettings:
    return CheckSettings(control_plane_version=rke2_release.parse("v1.31.4+rke2r1"))


def test_healthy_worker_passes_every_check_in_report_order(tmp_path: Path) -> None:
    hosttree.healthy_worker(tmp_path)
    results = running.run_checks(tmp_path, _settings_with_control_plane(), hosttree.FakeRunner())
    assert [r.check for r in results] == NAMES
    assert {r.check: r.status for r in results} == dict.fromkeys(NAMES, CheckStatus.PASS)
    assert all(str(tmp_path) not in r.evidence for r in results)


def test_empty_root_is_unknown_or_fail_never_pass(tmp_path: Path) -> None:
    results = running.run_checks(tmp_path, SETTINGS, hosttree.FakeRunner())
    assert all(r.status in (CheckStatus.UNKNOWN, CheckStatus.FAIL) for r in results), results
    assert all(r.evidence for r in results)


def test_a_run_without_fix_writes_nothing_and_runs_no_command(tmp_path: Path) -> None:
    tree = hosttree.healthy_worker(tmp_path)
    tree.remove("etc/modules-load.d/ipvs.conf")
    hosttree.with_loaded_modules(tree, ["nf_conntrack"])
    before = tree.snapshot()
    runner = hosttree.FakeRunner()
    results = running.run_checks(tmp_path, SETTINGS, runner)
    assert tree.snapshot() == before
    assert runner.calls == []
    statuses = {r.check: r.status for r in results}
    assert statuses["ipvs-persist"] is CheckStatus.FAIL
    assert statuses["ipvs-loaded"] is CheckStatus.FAIL


def test_fix_adds_exactly_the_ipvs_file_then_is_idempotent(tmp_path: Path) -> None:
    tree = hosttree.healthy_worker(tmp_path)
    tree.remove("etc/modules-load.d/ipvs.conf")
    before = tree.snapshot()

    first = running.run_checks(tmp_path, SETTINGS, hosttree.FakeRunner(), fix=True)
    after = tree.snapshot()
    second = running.run_checks(tmp_path, SETTINGS, hosttree.FakeRunner(), fix=True)

    assert set(after) ^ set(before) == {"etc/modules-load.d/ipvs.conf"}
    assert {k: after[k] for k in before} == before
    assert {r.check: r.status for r in first}["ipvs-persist"] is CheckStatus.FIXED
    assert {r.check: r.status for r in second}["ipvs-persist"] is CheckStatus.PASS
    assert tree.snapshot() == after


def test_an_exception_in_one_check_is_unknown_and_the_others_still_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hosttree.healthy_worker(tmp_path)

    def explode(context: registry.CheckContext) -> result.CheckResult:
        raise ZeroDivisionError(f"boom in {context.root}/proc/swaps")

    broken = tuple(
        dataclasses.replace(c, run=explode) if c.name == "swap" else c for c in registry.CHECKS
    )
    monkeypatch.setattr(registry, "CHECKS", broken)
    results = running.run_checks(tmp_path, _settings_with_control_plane(), hosttree.FakeRunner())
    by_name = {r.check: r for r in results}
    assert by_name["swap"].status is CheckStatus.UNKNOWN
    assert by_name["swap"].evidence == "ZeroDivisionError: boom in /proc/swaps"
    assert by_name["dns-upstream"].status is CheckStatus.PASS


def test_a_check_that_hangs_is_unknown_after_the_timeout(tmp_path: Path) -> None:
    release = threading.Event()

    def hang(context: registry.CheckContext) -> result.CheckResult:
        release.wait(10)
        return result.passed("hung", "too late")

    context = registry.CheckContext(
        tmp_path, CheckSettings(check_timeout_s=0.2), hosttree.FakeRunner()
    )
    try:
        outcome = running.run_one(registry.Check("hung", hang, "nothing"), context)
    finally:
        release.set()
    assert outcome.status is CheckStatus.UNKNOWN
    assert "timed out after 0.2s" in outcome.evidence


def test_a_modprobe_timeout_is_unknown(tmp_path: Path) -> None:
    tree = hosttree.healthy_worker(tmp_path)
    hosttree.with_loaded_modules(tree, ["nf_conntrack"])
    results = running.run_checks(tmp_path, SETTINGS, hosttree.FakeRunner(returncode=None), fix=True)
    loaded = {r.check: r for r in results}["ipvs-loaded"]
    assert loaded.status is CheckStatus.UNKNOWN
    assert "timed out" in loaded.evidence
