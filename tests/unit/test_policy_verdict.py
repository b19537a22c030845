"""The verdict policy: the seed's table (004 "복구"), in its order of precedence, on bundles."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuguard.catalog import xid as xid_catalog
from gpuguard.model import decisions, xid
from gpuguard.model import evidence as ev
from gpuguard.policy import verdict

CATALOG = xid_catalog.load_catalog()
NOW = datetime(2026, 9, 21, 14, 0, tzinfo=UTC)
GPU = "0000:99:00.0"
OTHER_GPU = "0000:18:00.0"
V = decisions.Verdict
R = ev.VerdictRule
A = xid.RecoveryAction


def event(code: int | None, pci: str | None = GPU, action: A | None = None) -> xid.KernelEvent:
    if code is None:
        return xid.KernelEvent(1, xid.KernelEventKind.FALLEN_OFF_BUS, None, pci,
                               f"The NVIDIA GPU {pci} has fallen off the bus")
    message = f"GPU recovery action changed to {action}" if action else f"Xid {code} text"
    return xid.KernelEvent(1, xid.KernelEventKind.XID, code, pci, message,
                           recovery_action=action)


def gpu(pci: str = GPU, ff: bool | None = False, present: bool = True) -> ev.GpuFacts:
    return ev.GpuFacts(pci=pci, config_all_ff=ff, present=present)


LOG = ev.KernelLogRead(source="/var/log/kern.log", since="current boot")


def bundle(events: list[xid.KernelEvent], gpus: list[ev.GpuFacts],
           log: ev.KernelLogRead | None = LOG) -> ev.EvidenceBundle:
    return ev.EvidenceBundle(node="gpu-node-b", collected_at=NOW, boot_id="b",
                             xid_events=tuple(events), gpus=tuple(gpus), kernel_log=log)


RESET_ASKED = event(154, action=A.GPU_RESET_REQUIRED)
REBOOT_ASKED = event(154, action=A.NODE_REBOOT_REQUIRED)

TABLE = [
    pytest.param([event(79)], [gpu(ff=True)], V.POWER_CYCLE, R.CONFIG_SPACE_ALL_FF,
                 id="xid79-config-ff"),
    pytest.param([RESET_ASKED], [gpu(ff=True)], V.POWER_CYCLE, R.CONFIG_SPACE_ALL_FF,
                 id="xid154-says-reset-but-config-ff"),
    pytest.param([event(48)], [gpu(ff=False)], V.GPU_RESET, R.RESET_CODE_HEALTHY_CONFIG,
                 id="xid48-healthy-config"),
    pytest.param([event(143)], [gpu()], V.RMA, R.RMA_CODE, id="xid143"),
    pytest.param([event(13)], [gpu()], V.HUMAN_DIAGNOSIS, R.OTHER_CODES, id="xid13-only"),
    pytest.param([event(None)], [gpu()], V.POWER_CYCLE, R.FELL_OFF_BUS,
                 id="fallen-off-bus-message-without-xid"),
    pytest.param([event(79)], [gpu(ff=None)], V.POWER_CYCLE, R.FELL_OFF_BUS,
                 id="xid79-config-unreadable"),
    pytest.param([event(95)], [gpu(ff=True)], V.POWER_CYCLE, R.CONFIG_SPACE_ALL_FF,
                 id="xid95-config-ff"),
    pytest.param([], [gpu()], V.HUMAN_DIAGNOSIS, R.NO_FAULT_EVIDENCE, id="no-events"),
    pytest.param([], [gpu(ff=True)], V.POWER_CYCLE, R.CONFIG_SPACE_ALL_FF,
                 id="no-events-but-config-ff"),
    pytest.param([event(48)], [gpu(ff=None)], V.HUMAN_DIAGNOSIS,
                 R.RESET_CODE_CONFIG_UNCONFIRMED, id="xid48-config-unreadable-no-reset"),
    pytest.param([event(119)], [gpu(present=False, ff=None)], V.HUMAN_DIAGNOSIS,
                 R.RESET_CODE_CONFIG_UNCONFIRMED, id="xid119-gpu-gone-from-sysfs"),
    pytest.param([event(48), REBOOT_ASKED], [gpu()], V.POWER_CYCLE,
                 R.DRIVER_REQUIRES_NODE_REBOOT, id="xid48-driver-says-node-reboot"),
    pytest.param([event(48), RESET_ASKED], [gpu()], V.GPU_RESET, R.RESET_CODE_HEALTHY_CONFIG,
                 id="xid48-driver-agrees-reset"),
    pytest.param([event(94, pci=OTHER_GPU)], [gpu(ff=True), gpu(OTHER_GPU)], V.POWER_CYCLE,
                 R.CONFIG_SPACE_ALL_FF, id="xid94-on-one-gpu-another-config-ff"),
    pytest.param([event(95, pci=None)], [gpu(), gpu(OTHER_GPU)], V.GPU_RESET,
                 R.RESET_CODE_HEALTHY_CONFIG, id="xid95-redacted-address-all-healthy"),
    pytest.param([event(95, pci=None)], [gpu(), gpu(OTHER_GPU, ff=None)], V.HUMAN_DIAGNOSIS,
                 R.RESET_CODE_CONFIG_UNCONFIRMED, id="xid95-redacted-address-one-unreadable"),
    pytest.param([event(143), event(13)], [gpu()], V.RMA, R.RMA_CODE, id="xid143-with-user-xid"),
    pytest.param([REBOOT_ASKED], [gpu()], V.HUMAN_DIAGNOSIS, R.OTHER_CODES,
                 id="xid154-alone-is-human-diagnosis"),
]


@pytest.mark.parametrize(("events", "gpus", "expected", "rule"), TABLE)
def test_verdict_follows_the_seed_table_in_order(
    events: list[xid.KernelEvent], gpus: list[ev.GpuFacts], expected: V, rule: R
) -> None:
    decision = verdict.decide(bundle(events, gpus), CATALOG)
    assert (decision.verdict, decision.rule) == (expected, rule)
    if rule is not R.NO_FAULT_EVIDENCE:
        assert decision.evidence, "a verdict names the evidence it rests on"


@pytest.mark.parametrize(("log", "gpus", "rule", "says"), [
    pytest.param(LOG, [gpu()], R.NO_FAULT_EVIDENCE, "no config space ff", id="clean-log"),
    pytest.param(None, [gpu()], R.KERNEL_LOG_UNREAD, "could not be read", id="log-unreadable"),
    pytest.param(LOG, [gpu(ff=None)], R.NO_FAULT_EVIDENCE, f"config space unknown on {GPU}",
                 id="clean-log-config-unreadable"),
])
def test_without_events_a_human_decides_and_is_told_what_was_not_known(
        log: ev.KernelLogRead | None, gpus: list[ev.GpuFacts], rule: R, says: str) -> None:
    decision = verdict.decide(bundle([], gpus, log), CATALOG)
    assert (decision.verdict, decision.rule) == (V.HUMAN_DIAGNOSIS, rule)
    assert says in decision.notes[0]


def test_the_0921_case_shows_the_drivers_reset_advice_but_power_cycles() -> None:
    decision = verdict.decide(bundle([event(79), RESET_ASKED], [gpu(ff=True)]), CATALOG)
    assert decision.verdict is V.POWER_CYCLE
    assert decision.driver_advice is not None
    assert "gpu-reset-required" in decision.driver_advice
    assert GPU in decision.driver_advice
    assert any("outranks" in note for note in decision.notes)
    assert [(e.source, e.value, dict(e.labels)) for e in decision.evidence] == [
        ("pci-config", "all 0xff", {"gpu": GPU})]


def test_driver_advice_is_the_latest_per_gpu() -> None:
    recovered = event(154, action=A.NONE)
    decision = verdict.decide(bundle([event(48), REBOOT_ASKED, recovered], [gpu()]), CATALOG)
    assert (decision.verdict, decision.rule) == (V.GPU_RESET, R.RESET_CODE_HEALTHY_CONFIG)
    assert decision.driver_advice is not None
    assert "node-reboot-required" not in decision.driver_advice


def test_reset_evidence_names_the_code_and_the_healthy_config_space() -> None:
    decision = verdict.decide(bundle([event(48), event(48)], [gpu()]), CATALOG)
    values = [e.value for e in decision.evidence]
    assert len(values) == 2, "repeated events of one code on one GPU are one fact"
    assert values[0].startswith("Xid 48 (")
    assert values[1] == "healthy (not all 0xff)"


def test_aer_errors_and_missing_gpus_are_noted_without_changing_the_verdict() -> None:
    port = ev.AerCounters(port="0000:98:01.0", fatal=1, nonfatal=0)
    facts = ev.EvidenceBundle(node="n", collected_at=NOW, boot_id=None,
                              xid_events=(event(13),),
                              gpus=(gpu(), gpu(OTHER_GPU, present=False, ff=None)),
                              root_ports=(port,))
    decision = verdict.decide(facts, CATALOG)
    assert decision.verdict is V.HUMAN_DIAGNOSIS
    assert any("0000:98:01.0" in note and "fatal 1" in note for note in decision.notes)
    assert any(OTHER_GPU in note and "missing from sysfs" in note for note in decision.notes)


RECLASSIFIED = CATALOG.with_classes(dict.fromkeys((48, 79, 94, 95, 143), xid.XidClass.USER)
                                    | {13: xid.XidClass.HARDWARE})


@pytest.mark.parametrize(("events", "gpus", "expected", "rule"), TABLE)
def test_a_clusters_xid_classes_change_no_verdict(
    events: list[xid.KernelEvent], gpus: list[ev.GpuFacts], expected: V, rule: R
) -> None:
    """The evidence Job is not given the cluster's override file (docs/security.md): the
    verdict, its rule and its evidence follow the code, never the class."""
    facts = bundle(events, gpus)
    assert verdict.decide(facts, RECLASSIFIED) == verdict.decide(facts, CATALOG)
