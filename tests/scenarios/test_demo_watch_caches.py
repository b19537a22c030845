"""The demo's guard reads the simulator as ``gpuguard run`` reads a cluster
(docs/design.md#fast-path): from watch caches, woken by the product's fast path when an
agent's condition says a GPU left the bus, and its watch threads end with each scenario."""

from __future__ import annotations

import threading

import pytest

from gpuguard.demo import harness
from gpuguard.model import settings
from gpuguard.sim import scenario

ONE_FALL = scenario.loads("""
name: one-fall
description: one GPU falls off the bus (docs/design.md#fast-path)
start: "2026-09-01T00:00:00Z"
duration: 5m
fleet:
  nodes: [gpu-node-1, gpu-node-2]
  gpus_per_node: 8
  model: NVIDIA GeForce RTX 5090
  driver: "580.126.09"
events:
  - {at: 1m15s, xid: {node: gpu-node-2, gpu: 2, xid: 79}}  # between two 30 s ticks
""")
LISTS = settings.GuardSettings.model_validate({"controller": {"watch": False}})


def watch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("watch-")}


@pytest.fixture(scope="module")
def played() -> tuple[harness.ScenarioRun, set[threading.Thread]]:
    before = watch_threads()
    run = harness.play(ONE_FALL, settings.GuardSettings())
    return run, watch_threads() - before


def seconds_to_isolate(run: harness.ScenarioRun) -> float:
    return (run.isolated_at["gpu-node-2"] - run.played.origin).total_seconds() - 75


def test_the_fast_path_wakes_the_guard_through_its_node_cache(
    played: tuple[harness.ScenarioRun, set[threading.Thread]],
) -> None:
    run, _ = played
    assert run.woken_ticks == 1
    assert 0 < seconds_to_isolate(run) <= 2  # the world's step plus the agent's 1 s poll


def test_every_tick_reads_the_caches_and_lists_nothing(
    played: tuple[harness.ScenarioRun, set[threading.Thread]],
) -> None:
    run, _ = played
    assert run.ticks > 1
    assert run.fallback_lists == 0


def test_the_watch_threads_end_with_the_scenario(
    played: tuple[harness.ScenarioRun, set[threading.Thread]],
) -> None:
    _, left = played
    assert left == set()


def test_without_watch_caches_nothing_wakes_the_guard_and_the_next_tick_isolates() -> None:
    """``controller.watch: false``: every tick lists and no cache sees the condition, so
    the isolation waits for the next periodic tick (docs/design.md#fast-path)."""
    run = harness.play(ONE_FALL, LISTS)
    assert run.woken_ticks == 0
    assert 2 < seconds_to_isolate(run) <= 30
