"""`gpuguard explain` tells a human why a node is where it is — including the GPUs on it that
are busy with nothing and the commands to take the evidence (the phantom incident
(docs/design.md#incidents))."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.catalog import gpu_models
from gpuguard.cli import guard
from gpuguard.cli.main import app
from gpuguard.controller import tick, wiring
from gpuguard.model import fleet, settings
from gpuguard.policy import admission, isolate, phantom
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
