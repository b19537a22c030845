"""GB200-class nodes end to end through the agent's tally and the guard's isolation policy:
NVLink5 lines NVIDIA's decode calls IGNORE or XID_154_EVAL never isolate; a reset-class line
(or the Xid 154 that asks for a reset) is a hardware fault. The lines are real (gpud PRs #1160,
#1174 and NVIDIA/open-gpu-kernel-modules issue #1150, via tests/data/reference)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuguard.agent import exporter
from gpuguard.agent.evidence import kernel
from gpuguard.catalog import xid as catalog_xid
from gpuguard.kernlog import parse
from gpuguard.model import decisions, evidence, fleet, settings
from gpuguard.model import metric_names as names
from gpuguard.policy import isolate, xid_signals

NOW = datetime(2026, 12, 1, 23, 0, 1, tzinfo=UTC)
NODE = "gb200-a"
CATALOG = catalog_xid.packaged_catalog()
BENIGN = [
    "NVRM: Xid (PCI:0018:01:00): 149, NETIR_BER_EVENT Nonfatal XC0 i0 Link 03 (0x00086226 "
    "0x00000001 0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0018:01:00): 145, pid=876767, name=ray::WorkerDict, RLW_RXPIPE Nonfatal XC0 "
    "i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)",
    "NVRM: Xid (PCI:0019:01:00): 145, RLW_SRC_TRACK Nonfatal XC1 i0 Link 12 (0x040988e2 "
    "0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0008:01:00): 145, pid=11436, name=cache_mgr_main, RLW_SRC_TRACK Nonfatal XC1 "
    "i0 Link 03 (0x040868e2 0x00000008 0x00000000 0x00000000 0x00000000 0x00000000)",
    "kernel: NVRM: Xid (PCI:0000:ed:00): 45, pid=1818992, name=python3, Ch 0000000c caused by "
    "previous Xid 145",
]
RESET = [
    "[171167.620236] NVRM: Xid (PCI:0009:01:00): 149, NETIR_LINK_EVT  Fatal   XC0 i0 Link 01 "
    "(0x021425c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)",
]
XID154_RESET = [
    "NVRM: Xid (PCI:0019:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to "
    "0x1 (GPU Reset Required)",
]


def agent_samples(lines: list[str], *, keep_rule: bool = True) -> list[fleet.MetricSample]:
    """What Prometheus would hold of the agent's counter after it read ``lines``."""
    tally = exporter.Tally()
    tally.count(lines, parse.XidLogParser())
    return [
        fleet.MetricSample(
            names.XID_TOTAL_RECENT,
            {"node": NODE, "gpu": gpu, "uuid": uuid, "pci": pci, "xid": code}
            | ({"rule": rule} if keep_rule else {}),
            count,
            NOW,
        )
        for gpu, uuid, pci, code, rule, count in tally.as_json()["xids"]
    ]


def snapshot(samples: list[fleet.MetricSample]) -> fleet.FleetSnapshot:
    node = fleet.Node(NODE, "boot-1", 4, 3, unschedulable=False, annotations={},
                      conditions={"Ready": "True"})
    return fleet.FleetSnapshot(taken_at=NOW, nodes=(node,), samples=tuple(samples))


def xid_findings(samples: list[fleet.MetricSample]) -> list[decisions.Finding]:
    """The isolation findings that name an Xid (the node has also lost a GPU: 3 of 4)."""
    decision = isolate.decide(snapshot(samples), CATALOG, settings.GuardSettings())
    assert decision.actions == ()  # one tick: the hold window has not passed for anything
    return [f for f in decision.findings if f.kind == "isolation" and f.detail.startswith("xid")]


def test_benign_nvlink5_lines_are_no_hardware_fault_on_a_gb200_node() -> None:
    samples = agent_samples(BENIGN)
    assert xid_signals.all_signals(snapshot(samples), CATALOG) == {}
    assert xid_findings(samples) == []


def test_judged_per_code_the_same_lines_would_have_isolated_the_node() -> None:
    """The false isolations the per-event rules avoid: 4 of the 5 lines, judged by code."""
    per_code = xid_signals.all_signals(snapshot(agent_samples(BENIGN, keep_rule=False)), CATALOG)
    assert sorted(s.xid for s in per_code[NODE]) == [145, 145, 145, 149]


@pytest.mark.parametrize(
    "lines",
    [pytest.param(RESET, id="netir-link-down-is-reset-class"),
     pytest.param(XID154_RESET, id="xid154-reset-required")],
)
def test_a_reset_class_line_is_a_hardware_fault_held_for_isolation(lines: list[str]) -> None:
    samples = agent_samples(lines)
    (signal,) = xid_signals.all_signals(snapshot(samples), CATALOG)[NODE]
    assert signal.evidence.labels["rule"].startswith(f"xid{signal.xid}:")
    (finding,) = xid_findings(samples)
    assert finding.reason is decisions.Reason.HARDWARE_XID_HOLDING


@pytest.mark.parametrize(
    ("lines", "status"),
    [pytest.param(BENIGN[:4], decisions.CheckStatus.PASS, id="benign-lines-pass"),
     pytest.param(BENIGN[:4] + RESET, decisions.CheckStatus.FAIL, id="a-reset-line-fails")],
)
def test_the_evidence_jobs_hardware_xid_item_judges_each_line(
    lines: list[str], status: decisions.CheckStatus
) -> None:
    events = tuple(parse.parse_lines(lines))
    counts: dict[str, int] = {}
    for event in events:
        counts[str(event.xid)] = counts.get(str(event.xid), 0) + 1
    log = evidence.KernelLogRead("kern.log", "this boot", event_counts=counts)
    read = kernel.KernelRead(events, log, evidence.EvidenceItem("kernel-log", status, ""))
    assert kernel.xid_item(read, CATALOG).status is status
