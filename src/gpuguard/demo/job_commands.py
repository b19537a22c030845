"""Runs the command of a gpuguard Job inside the simulated node, as its container would:
``gpuguard evidence`` is the real collector, reading the node's host tree (the simulator
writes it) mounted at ``--root``; the result is what the container writes to its
termination message. Host programs (journalctl, nvidia-smi) do not exist in a host tree, so
the collector falls back to the files, as it does on a host without them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from gpuguard.agent.evidence import collect
from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import ports
from gpuguard.sim import state, world


class NoHostPrograms:
    """A CommandRunner for a host tree: every program is missing (exit 127)."""

    def run(self, argv: Sequence[str], *, timeout_s: float) -> ports.CommandResult:
        return ports.CommandResult(tuple(argv), 127, "", f"{argv[0]}: not found")


def runner(
    played: world.World, hosts_root: Path
) -> Callable[[state.SimNode, list[str]], tuple[int, str]]:
    catalog = xid_catalog.load_catalog()

    def run(node: state.SimNode, argv: list[str]) -> tuple[int, str]:
        if argv[:2] == ["gpuguard", "evidence"]:
            options = collect.CollectOptions(node=node.name)
            bundle = collect.collect(
                hosts_root / node.name, options, NoHostPrograms(), catalog, played.now
            )
            return 0, bundle.summary().to_json()
        return 2, f"the simulated node cannot run {' '.join(argv[:2])!r}"

    return run
