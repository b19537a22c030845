"""The evidence bundle and its summary: JSON both ways, strict parsing, the 4000-byte cap."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime

import pytest

from gpuguard.catalog import xid as xid_catalog
from gpuguard.errors import InputError
from gpuguard.kernlog import parse
from gpuguard.model import decisions, xid
from gpuguard.model import evidence as ev
from gpuguard.policy import verdict

NOW = datetime(2026, 9, 21, 14, 0, 7, tzinfo=UTC)
GPUS = tuple(f"0000:{bus:02x}:00.0" for bus in (0x18, 0x2A, 0x3A, 0x5D, 0x99, 0xAB, 0xBA, 0xDB))


def noisy_events(lines: int) -> tuple[xid.KernelEvent, ...]:
    """``lines`` kernel lines cycling through every GPU and many codes, plus Xid 154 advice."""
    text = []
    for n in range(lines):
        pci = GPUS[n % len(GPUS)].rsplit(".", 1)[0]
        code = (13, 31, 43, 48, 63, 79, 94, 95, 119, 143)[n % 10]
        text.append(f"[{n}.000000] NVRM: Xid (PCI:{pci}): {code}, pid={n}, name=python3, "
                    f"{'x' * 120}")
        if n % 997 == 0:
            text.append(f"[{n}.5] NVRM: Xid (PCI:{pci}): 154, GPU recovery action changed "
                        "from 0x0 (None) to 0x1 (GPU Reset Required)")
    return tuple(parse.parse_lines(text))


def full_bundle(events: tuple[xid.KernelEvent, ...]) -> ev.EvidenceBundle:
    gpus = tuple(ev.GpuFacts(pci=p, uuid=f"GPU-{i:08d}-aaaa-bbbb-cccc-dddddddddddd",
                             config_all_ff=i == 4, link_width=16, max_link_width=16,
                             link_speed_gts=32.0, max_link_speed_gts=32.0,
                             root_port=f"0000:{i:02x}:01.0") for i, p in enumerate(GPUS))
    ports = tuple(ev.AerCounters(port=f"0000:{i:02x}:01.0", correctable=0, nonfatal=0,
                                 fatal=int(i == 4), nonzero=("aer_dev_fatal:SDES=1",) * (i == 4))
                  for i in range(len(GPUS)))
    items = (ev.EvidenceItem("pci-config", decisions.CheckStatus.FAIL, "all ff", GPUS[4]),)
    bare = ev.EvidenceBundle(
        node="gpu-node-b", collected_at=NOW, boot_id="7f0c", items=items, xid_events=events,
        gpus=gpus, root_ports=ports,
        kernel_log=ev.KernelLogRead("/var/log/kern.log", "current boot", 10_000, 0),
        nvidia_smi=ev.NvidiaSmiRun(ran=False, reason="not run: driver may be hung"))
    return dataclasses.replace(bare, verdict=verdict.decide(bare, xid_catalog.load_catalog()))


def test_bundle_round_trips_through_json() -> None:
    bundle = full_bundle(noisy_events(50))
    again = ev.EvidenceBundle.from_json(bundle.to_json())
    assert again == bundle
    assert again.verdict is not None
    assert again.verdict.verdict is decisions.Verdict.POWER_CYCLE


def test_summary_of_8_gpus_and_10000_xid_lines_fits_a_termination_message() -> None:
    events = noisy_events(10_000)
    assert len(events) > 10_000
    text = full_bundle(events).summary().to_json()
    assert len(text.encode()) <= ev.SUMMARY_MAX_BYTES
    summary = ev.EvidenceSummary.from_json(text)
    assert summary.verdict is decisions.Verdict.POWER_CYCLE
    assert summary.rule is ev.VerdictRule.CONFIG_SPACE_ALL_FF
    assert summary.config_all_ff[GPUS[4]] is True
    assert summary.config_all_ff[GPUS[0]] is False
    assert summary.xid_counts["79"] == 1000
    assert sum(summary.xid_counts.values()) == len(events)
    assert summary.last_xid154_action is xid.RecoveryAction.GPU_RESET_REQUIRED
    assert summary.aer_fatal["0000:04:01.0"] == 1


def test_summary_drops_evidence_lines_first_and_says_so() -> None:
    summary = ev.EvidenceSummary(node="n", boot_id=None, collected_at=NOW,
                                 verdict=decisions.Verdict.HUMAN_DIAGNOSIS,
                                 rule=ev.VerdictRule.OTHER_CODES,
                                 evidence=tuple("e" * 100 for _ in range(60)))
    text = summary.to_json()
    parsed = ev.EvidenceSummary.from_json(text)
    assert len(text.encode()) <= ev.SUMMARY_MAX_BYTES
    assert parsed.truncated
    assert 0 < len(parsed.evidence) < 60


def test_a_huge_node_keeps_the_dead_gpu_and_the_failing_port() -> None:
    gpus = [f"0001:{bus:02x}:00.0" for bus in range(200)]
    summary = ev.EvidenceSummary(
        node="n", boot_id=None, collected_at=NOW, verdict=decisions.Verdict.POWER_CYCLE,
        rule=ev.VerdictRule.CONFIG_SPACE_ALL_FF,
        config_all_ff={pci: pci == gpus[77] for pci in gpus},
        aer_fatal={f"0001:{bus:02x}:01.0": int(bus == 77) for bus in range(200)},
        evidence=("pci-config = all 0xff [gpu=0001:4d:00.0]",))
    parsed = ev.EvidenceSummary.from_json(summary.to_json())
    assert parsed.truncated
    assert parsed.config_all_ff == {gpus[77]: True}
    assert parsed.aer_fatal == {"0001:4d:01.0": 1}


@pytest.mark.parametrize(("text", "names"), [
    pytest.param("not json", "(top level)", id="not-json"),
    pytest.param("[]", "(top level)", id="a-list"),
    pytest.param('{"node": "n"}', "boot_id", id="missing-fields"),
    pytest.param('{"node":"n","boot_id":null,"collected_at":"2026-09-21T14:00:00Z",'
                 '"verdict":"reboot-it","rule":null}', "verdict", id="unknown-verdict"),
    pytest.param('{"node":"n","boot_id":null,"collected_at":"yesterday",'
                 '"verdict":null,"rule":null}', "collected_at", id="bad-time"),
    pytest.param('{"node":"n","boot_id":null,"collected_at":"2026-09-21T14:00:00Z",'
                 '"verdict":null,"rule":null,"xid_counts":{"79":"many"}}', "xid_counts",
                 id="bad-count"),
    pytest.param('{"node":"n","boot_id":null,"collected_at":"2026-09-21T14:00:00Z",'
                 '"verdict":null,"rule":null,"surprise":1}', "surprise", id="unknown-key"),
])
def test_malformed_summary_is_an_input_error_naming_source_and_field(
        text: str, names: str) -> None:
    with pytest.raises(InputError) as caught:
        ev.EvidenceSummary.from_json(text, source="job evidence-gpu-node-b")
    assert str(caught.value).startswith("job evidence-gpu-node-b: ")
    assert names in str(caught.value)


def test_malformed_bundle_is_an_input_error() -> None:
    data = json.loads(full_bundle(noisy_events(5)).to_json())
    data["items"][0]["status"] = "MAYBE"
    with pytest.raises(InputError, match=r"items\.0\.status"):
        ev.EvidenceBundle.from_json(json.dumps(data))
