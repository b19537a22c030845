"""Faults a kernel line alone does not show, seen through the agent's persistent reads:

- a GB200 node whose Xid 154 "GPU Reset Required" line was missed (the agent was down): the
  NVLink5 line before it says XID_154_EVAL (wait for 154), so the Xid counter isolates
  nothing, and the driver's recovery action, read every cycle, fails the node's conformance;
- an NVSwitch node whose Fabric Manager failed: fatal SXid lines are counted by switch and
  code, and the fabric state fails conformance.

Conformance failing makes the node not fit (``gpuguard health``) and keeps it from returning
to the pool; the node conditions the same reads make are isolation signals
(tests/unit/test_policy_persistent_states.py, tests/scenarios/test_demo_persistent_states.py)."""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from pathlib import Path

from gpuguard.agent import daemon, journal
from gpuguard.agent.checks import gpu_state, registry, running, settings
from gpuguard.catalog import xid as catalog_xid
from gpuguard.model import decisions, fleet
from gpuguard.model import metric_names as names
from gpuguard.policy import gate, xid_signals
from tests.unit.hosttree import FakeRunner

NODE = "gb200-a"
NOW = datetime(2026, 12, 1, 23, 0, 1, tzinfo=UTC)
EVAL_LINE = (
    "[171167.500000] NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 "
    "(0x040988e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)"
)
SXID_FATAL = (
    "[131453.740743] nvidia-nvswitch0: SXid (PCI:0000:a9:00.0): 20034, Fatal, Link 30 LTSSM "
    "Fault Up"
)


def agent_with(tmp_path: Path, lines: list[str], smi_answer: str) -> daemon.Agent:
    log = tmp_path / "kern.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    checks = functools.partial(
        running.run_checks, tmp_path / "host", settings.CheckSettings(),
        FakeRunner(stdout=smi_answer), False, registry.GPU_STATE_CHECKS,
    )
    config = daemon.AgentConfig(NODE, tmp_path / "host", tmp_path / "state")
    return daemon.Agent(config, lambda start: journal.FileFollower(log, start), checks)


def run_once(agent: daemon.Agent) -> dict[str, decisions.CheckStatus]:
    agent.follow_once()
    cycle = agent.check_once()
    agent.follower.close()
    return {r.check: r.status for r in cycle.results if r.check in (gpu_state.RECOVERY,
                                                                      gpu_state.FABRIC)}


def xid_samples(agent: daemon.Agent) -> list[fleet.MetricSample]:
    return [
        fleet.MetricSample(names.XID_TOTAL_RECENT,
                           {"node": NODE, "gpu": g, "uuid": u, "pci": p, "xid": x, "rule": r},
                           n, NOW)
        for g, u, p, x, r, n in agent.tally.as_json()["xids"]
    ]


def hardware_signals(agent: daemon.Agent) -> dict[str, list[xid_signals.HardwareXid]]:
    return xid_signals.hardware_xids(xid_samples(agent), catalog_xid.packaged_catalog())


def test_a_missed_xid_154_is_seen_again_through_the_recovery_action(tmp_path: Path) -> None:
    agent = agent_with(tmp_path, [EVAL_LINE], "00000009:01:00.0, None\n"
                                              "00000019:01:00.0, GPU Reset\n")
    statuses = run_once(agent)
    assert hardware_signals(agent) == {}  # XID_154_EVAL: the Xid counter isolates nothing
    assert statuses[gpu_state.RECOVERY] is decisions.CheckStatus.FAIL
    labels = {"node": NODE, "check": gpu_state.RECOVERY, "status": "FAIL"}
    assert agent.registry.get_sample_value(names.CHECK_STATUS, labels) == 1
    step = gate.conformance(statuses)
    assert (step.status, step.evidence) == (decisions.CheckStatus.FAIL, "FAIL: gpu-recovery")


def test_a_fabric_manager_failure_is_counted_and_fails_conformance(tmp_path: Path) -> None:
    agent = agent_with(tmp_path, [SXID_FATAL, SXID_FATAL],
                       "00000008:01:00.0, Not Started, N/A\n")
    statuses = run_once(agent)
    sxid = {"node": NODE, "pci": "0000:a9:00.0", "sxid": "20034", "severity": "Fatal"}
    assert agent.registry.get_sample_value(names.SXID_TOTAL, sxid) == 2
    assert hardware_signals(agent) == {}
    assert statuses[gpu_state.FABRIC] is decisions.CheckStatus.FAIL
    assert gate.conformance(statuses).status is decisions.CheckStatus.FAIL
