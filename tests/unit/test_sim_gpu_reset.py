"""The GPU-reset Job's command in the simulator (``demo.job_commands.gpu_reset``): a reset
clears a GPU's transient state but not a hardware fault, fails on a GPU off the bus, on a GPU
in use, on a node whose GPUs do not reset, and names an unknown card (docs/remediation.md)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from gpuguard.demo import job_commands
from gpuguard.sim import state, world
from tests import sim_worlds

FLEET = """\
name: t
start: "2026-10-12T01:00:00Z"
duration: 2h
fleet:
  nodes: [gpu-node-a, gpu-node-b]
  gpus_per_node: 4
  overrides:
    gpu-node-b: {gpu_reset: fails}
events:
  - {at: 1m, xid: {node: gpu-node-a, gpu: 1, xid: 119}}
"""


def build(events: str = "") -> world.World:
    text = FLEET + "".join(f"  - {line}\n" for line in events.strip().splitlines())
    return sim_worlds.stepped(text, timedelta(minutes=2))


def gpu(w: world.World, node: str = "gpu-node-a", index: int = 1) -> state.SimGpu:
    return w.node(node).gpu(index)


def test_a_reset_clears_the_transient_state_not_a_failed_row_remap() -> None:
    w = build()
    card = gpu(w)
    card.row_remap_pending, card.row_remap_failure, card.compute_mode = 1, 1, "PROHIBITED"
    code, said = job_commands.gpu_reset(w, w.node("gpu-node-a"), card.uuid)
    assert (code, said) == (0, f"GPU {card.pci} was successfully reset.")
    assert (card.row_remap_pending, card.compute_mode) == (0, "DEFAULT")
    assert card.row_remap_failure == 1  # hardware: a reset does not repair it
    assert [e.kind for e in w.timeline if e.node == "gpu-node-a"][-1] == "gpu_reset"


def test_a_gpu_off_the_bus_is_not_reset() -> None:
    w = build()
    card = gpu(w)
    card.on_bus = False
    code, said = job_commands.gpu_reset(w, w.node("gpu-node-a"), card.uuid)
    assert code == 255
    assert said == f"Unable to reset GPU {card.uuid}: the GPU is not reachable"
    assert card.on_bus is False


def test_a_gpu_in_use_or_on_a_node_that_does_not_reset_is_untouched() -> None:
    w = build("{at: 1m30s, workload: {node: gpu-node-a, gpus: [2], name: busy}}")
    card = gpu(w, index=2)
    assert [x.gpus for x in w.node("gpu-node-a").workloads] == [(2,)]
    card.row_remap_pending = 1
    code, said = job_commands.gpu_reset(w, w.node("gpu-node-a"), card.uuid)
    assert (code, said) == (255, f"Unable to reset GPU {card.uuid}: in use by another client")
    assert card.row_remap_pending == 1
    other = gpu(w, "gpu-node-b")
    other.row_remap_pending = 1
    code, _ = job_commands.gpu_reset(w, w.node("gpu-node-b"), other.uuid)
    assert (code, other.row_remap_pending) == (255, 1)


def test_an_unknown_card_is_named() -> None:
    w = build()
    assert job_commands.gpu_reset(w, w.node("gpu-node-a"), "GPU-nope") == (
        6, "No devices were found matching GPU-nope")


def test_the_jobs_runner_runs_exactly_the_reset_command(tmp_path: Path) -> None:
    w = build()
    run = job_commands.runner(w, tmp_path)
    card = gpu(w)
    assert run(w.node("gpu-node-a"), ["nvidia-smi", "-r", "-i", card.uuid])[0] == 0
    assert run(w.node("gpu-node-a"), ["nvidia-smi", "-r"])[0] == 2  # every GPU: not gpuguard's
