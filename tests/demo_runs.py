"""Each demo run once per test session: ``play`` keeps the run of a (scenario, settings) pair,
so modules that assert different things about the same run (and ``gpuguard demo`` through the
``demo_played_once`` fixture) share one play instead of replaying it — the demo is
deterministic (simulated clock, fixed scenario start), so a second play adds time, not checks.

A run is shared: read it, never change it.
"""

from __future__ import annotations

from typing import Any

from gpuguard.demo import harness, score
from gpuguard.model import settings as settings_model
from gpuguard.sim import scenario

_play = harness.play  # the real one, even while a test has patched harness.play with ours
_runs: dict[tuple[str, str], harness.ScenarioRun] = {}


def play(
    spec: scenario.Scenario | str, settings: settings_model.GuardSettings | None = None
) -> harness.ScenarioRun:
    """``harness.play`` of a scenario (or a shipped scenario's name), once per session."""
    loaded = scenario.load_shipped(spec) if isinstance(spec, str) else spec
    guard = settings or settings_model.GuardSettings()
    key = (repr(loaded), guard.model_dump_json())
    if key not in _runs:
        _runs[key] = _play(loaded, guard)
    return _runs[key]


def events(run: harness.ScenarioRun, kind: str, node: str | None = None) -> list[dict[str, Any]]:
    """The run's timeline entries of one kind (of one node)."""
    return [e for e in score.timeline(run) if e["kind"] == kind and node in (None, e["node"])]


def fault_to_return_s(run: harness.ScenarioRun, node: str) -> float:
    """From the node's first fault to its first return to service."""
    first = run.played.first_fault_at(node)
    assert first is not None
    (back, *_) = run.returned_at[node]
    return ((back - run.played.origin) - first).total_seconds()


def node_marks(run: harness.ScenarioRun, node: str) -> dict[str, str]:
    """The node's annotations at the end of the run."""
    marks: dict[str, str] = run.played.store.get("Node", "", node)["metadata"]["annotations"]
    return marks
