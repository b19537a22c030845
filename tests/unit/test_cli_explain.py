"""`gpuguard explain` tells a human why a node is where it is — including the GPUs on it that
are busy with nothing and the commands to take the evidence (the phantom incident
(docs/design.md#incidents))."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.catalog import gpu_models
from gpuguard.cli import guard
from gpuguard.cli.main import app
from gpuguard.controller import gpu_isolation as gpu_step
from gpuguard.controller import remediation as remediation_step
from gpuguard.controller import tick, wiring
from gpuguard.model import annotation_keys, fleet, gpu_isolation, settings
from gpuguard.policy import admission, isolate, phantom
from gpuguard.policy import remediation as remediation_policy
from tests.builders import window

NOW = datetime(2026, 9, 21, 6, 0, tzinfo=UTC)


def fake_tick(config: Path | None, conn: wiring.Connection, *, dry_run: bool) -> tick.TickResult:
    assert dry_run  # explain never writes
    node = fleet.Node("gpu-node-1", "boot-1", 8, 8, conditions={"Ready": "True"})
    found = phantom.decide(
        (window(gpu="5"),), settings.PhantomSettings(), gpu_models.load_table(), NOW
    )
    return tick.TickResult(
        at=NOW,
        decision=isolate.IsolationDecision(
            (), (), admission.admit([], [], None, 1, settings.IsolationSettings(), NOW).state
        ),
        snapshot=fleet.FleetSnapshot(NOW, nodes=(node,)),
        phantom=found,
    )


def test_explain_shows_phantom_gpus_with_evidence_commands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(guard, "run_tick", fake_tick)
    result = CliRunner().invoke(app, ["explain", "gpu-node-1", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["state"] == "serving"
    (gpu,) = data["phantom_gpus"]
    assert gpu["gpu"] == "5"
    assert gpu["wasted_w"] > 50
    assert any("nvidia-smi -q -d ACCOUNTING" in c for c in gpu["commands"])
    text = CliRunner().invoke(app, ["explain", "gpu-node-1"]).stdout
    assert "phantom: GPU 5 busy with nothing" in " ".join(text.split())


def test_explain_shows_the_isolated_gpus_and_what_keeps_them_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = gpu_isolation.IsolatedGpu(
        "GPU-0a8e0faa", "0000:2a:00.0", "1", NOW, "xid-48", capacity=8
    ).applied("boot-1", NOW, "", confirmed=True)
    marks = {annotation_keys.GPU_ISOLATED: gpu_isolation.to_annotation((entry,)) or ""}
    node = fleet.Node("gpu-node-1", "boot-1", 7, 7, conditions={"Ready": "True"},
                      annotations=marks)

    def with_gpu(config: Path | None, conn: wiring.Connection, *, dry_run: bool) -> tick.TickResult:
        result = fake_tick(config, conn, dry_run=dry_run)
        result.snapshot = fleet.FleetSnapshot(NOW, nodes=(node,))
        result.gpus = [gpu_step.Outcome("gpu-node-1", gpu_step.Step.APPLY, "lost its label")]
        return result

    monkeypatch.setattr(guard, "run_tick", with_gpu)
    data = json.loads(CliRunner().invoke(app, ["explain", "gpu-node-1", "-o", "json"]).stdout)
    (gpu,) = data["gpu_isolation"]["gpus"]
    assert (gpu["gpu"], gpu["mechanism"]) == ("1", "compute-prohibited+device-plugin")
    assert data["gpu_isolation"]["step"] == "apply"
    text = " ".join(CliRunner().invoke(app, ["explain", "gpu-node-1"]).stdout.split())
    assert "GPU 1 (GPU-0a8e0faa) isolated for xid-48: compute-prohibited+device-plugin" in text


def test_status_and_explain_agree_that_forged_marks_are_not_gpuguards(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marks = {annotation_keys.ISOLATED_AT: "2026-09-21T05:00:00Z", annotation_keys.REASON: "xid-79"}
    ours = fleet.Node("gpu-node-1", "b", 8, 7, unschedulable=True, annotations=marks,
                      isolation_writers=frozenset({annotation_keys.FIELD_MANAGER}))
    forged = dataclasses.replace(ours, name="gpu-node-2",
                                 isolation_writers=frozenset({"kubectl-annotate"}))
    result = tick.TickResult(at=NOW, snapshot=fleet.FleetSnapshot(NOW, nodes=(ours, forged)))
    data = guard._status(result, {"holder": None})
    assert data["nodes"] == {"isolated": ["gpu-node-1"], "cordoned-by-human": ["gpu-node-2"]}

    monkeypatch.setattr(guard, "run_tick", lambda *a, **k: result)
    shown = json.loads(CliRunner().invoke(app, ["explain", "gpu-node-2", "-o", "json"]).stdout)
    assert shown["state"] == "cordoned-by-human"


def test_explain_says_what_the_repair_would_do_and_that_it_waits_its_turn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """docs/remediation.md: a node waiting for the breaker's turn says so, in a dry run."""
    node = fleet.Node("gpu-node-1", "boot-1", 8, 7, conditions={"Ready": "True"})
    waiting = remediation_policy.Decision(
        "gpu-node-1", remediation_policy.Step.WAIT,
        "1 repair(s) in flight, at most 1 (remediation.max_in_flight): waits its turn")

    def with_repair(config: Path | None, conn: wiring.Connection, *,
                    dry_run: bool) -> tick.TickResult:  # fmt: skip
        result = fake_tick(config, conn, dry_run=dry_run)
        result.snapshot = fleet.FleetSnapshot(NOW, nodes=(node,))
        result.remediations = [remediation_step.Outcome(waiting, "-")]
        return result

    monkeypatch.setattr(guard, "run_tick", with_repair)
    data = json.loads(CliRunner().invoke(app, ["explain", "gpu-node-1", "-o", "json"]).stdout)
    assert data["remediation"] == {"step": "wait", "detail": waiting.detail, "done": "-"}
    text = " ".join(CliRunner().invoke(app, ["explain", "gpu-node-1"]).stdout.split())
    assert ("- remediation: wait: 1 repair(s) in flight, at most 1 "
            "(remediation.max_in_flight): waits its turn") in text
