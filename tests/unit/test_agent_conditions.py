"""The agent's node conditions: what they say, when they are written, and that a write never
stops the agent. The fast path's first half: a GPU off the bus is on the Node right after the
follower counts the kernel line (docs/design.md#fast-path)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import lightkube
import pytest

from gpuguard.agent import conditions, daemon, journal, node_status
from gpuguard.agent.checks import nvidia, result
from gpuguard.agent.counts import Counts
from gpuguard.errors import CatalogError
from gpuguard.model import decisions
from gpuguard.model import metric_names as names
from gpuguard.model import node_conditions as nc
from gpuguard.sim import kernel_lines, kubeapi, store
from tests.builders import Classifier

PCI = "0000:99:00.0"
UUID = "GPU-3d1e2f7a-1b2c-4d5e-8f90-123456789abc"
NOW = datetime(2026, 12, 1, 23, 0, tzinfo=UTC)
ANSWERS = b"\xde\x10\x30\x23" + b"\x00" * 252
GONE = b"\xff" * 256


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Patches:
    """The API server as the reporter sees it: records bodies, or fails when told."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.failing = False

    def __call__(self, body: dict[str, Any]) -> None:
        if self.failing:
            raise node_status.ConditionWriteError("patch nodes/gpu-node-b/status: 503")
        self.bodies.append(body)

    def last(self) -> dict[str, dict[str, Any]]:
        return {c["type"]: c for c in self.bodies[-1]["status"]["conditions"]}


def seen(xids: list[list[Any]] | None = None, fallen: list[list[Any]] | None = None,
         config: dict[str, bool | None] | None = None, problem: str | None = None,
         baseline: dict[str, Any] | None = None,
         driver: tuple[decisions.CheckStatus, str] | None = None,
         recovery: tuple[decisions.CheckStatus, str] | None = None,
         fabric: tuple[decisions.CheckStatus, str] | None = None,
         sxids: list[list[Any]] | None = None) -> conditions.Seen:
    return conditions.Seen(
        counts=Counts.from_json({"xids": xids or [], "fallen_off": fallen or [],
                                 "sxids": sxids or []}),
        baseline=Counts.from_json(baseline or {}),
        gpu_index={UUID: "4", PCI: "4"},
        config_all_ff=config or {},
        kernel_log_problem=problem,
        driver=driver,
        recovery=recovery,
        fabric=fabric,
    )


def compute(s: conditions.Seen) -> dict[str, nc.GpuCondition]:
    return conditions.compute(s, Classifier(), NOW)


# ---- what the conditions say ------------------------------------------------------------------

FAIL, PASS, WARN = (decisions.CheckStatus.FAIL, decisions.CheckStatus.PASS,
                    decisions.CheckStatus.WARN)
SWITCH = "0000:a9:00.0"


@pytest.mark.parametrize(
    ("sxids", "fabric", "want"),
    [
        pytest.param([[SWITCH, "20034", "Fatal", 1]], None, ("True", nc.FATAL_SXID),
                     id="fatal-sxid-is-a-fabric-fault"),
        pytest.param([[SWITCH, "12028", "Non-fatal", 7]], (PASS, "8 GPU(s) registered"),
                     ("False", conditions.NO_FABRIC_FAULT), id="non-fatal-sxids-are-not"),
        pytest.param([], (FAIL, f"NVLink fabric registration failed or never started: {PCI}: "
                             "state not started, status n/a"),
                     ("True", nc.FABRIC_NOT_REGISTERED), id="fabric-manager-down"),
        pytest.param([], (WARN, "NVLink fabric registration in progress"),
                     ("False", conditions.NO_FABRIC_FAULT), id="registration-in-progress-waits"),
    ],
)
def test_the_fabric_condition(
    sxids: list[list[Any]], fabric: tuple[decisions.CheckStatus, str] | None,
    want: tuple[str, str],
) -> None:
    condition = compute(seen(sxids=sxids, fabric=fabric))[nc.GPU_FABRIC_FAULT]
    assert (condition.status, condition.reason) == want


def test_a_fatal_sxid_before_this_boot_is_no_fault() -> None:
    row = [SWITCH, "20034", "Fatal", 1]
    out = compute(seen(sxids=[row], baseline={"sxids": [row]}))
    assert out[nc.GPU_FABRIC_FAULT].status == "False"


def test_a_fatal_sxid_names_the_switch_and_code() -> None:
    condition = compute(seen(sxids=[[SWITCH, "20034", "Fatal", 2]]))[nc.GPU_FABRIC_FAULT]
    assert condition.message.startswith(f"nvswitch={SWITCH} sxid=20034; ")


def test_the_recovery_condition_names_each_gpu_the_driver_asks_for() -> None:
    evidence = f"the driver asks for recovery: {PCI}: GPU Reset"
    condition = compute(seen(recovery=(FAIL, evidence)))[nc.GPU_RECOVERY_REQUIRED]
    assert (condition.status, condition.reason) == ("True", nc.DRIVER_ASKS_RECOVERY)
    assert condition.gpus == (nc.GpuNamed("4", PCI, None, 154),)


@pytest.mark.parametrize(
    ("status", "want"),
    [(PASS, "False"), (WARN, "Unknown"), (decisions.CheckStatus.UNKNOWN, "Unknown")],
    ids=["none-pending", "driver-too-old", "nvidia-smi-failed"],
)
def test_a_recovery_action_not_asked_or_not_read_is_no_fault(
    status: decisions.CheckStatus, want: str
) -> None:
    condition = compute(seen(recovery=(status, "x")))[nc.GPU_RECOVERY_REQUIRED]
    assert condition.status == want
    assert nc.persistent_faults({condition.type: condition}) == []


def test_the_recovery_condition_names_the_card_the_kernel_log_mapped() -> None:
    known = dataclasses.replace(seen(recovery=(FAIL, f"the driver asks for recovery: {PCI}: "
                                                      "Node Reboot")), uuid_by_pci={PCI: UUID})
    condition = compute(known)[nc.GPU_RECOVERY_REQUIRED]
    assert condition.gpus == (nc.GpuNamed("4", PCI, UUID, 154),)


def test_the_recovery_condition_only_once_checked() -> None:
    assert nc.GPU_RECOVERY_REQUIRED not in compute(seen())


def test_xid79_with_config_space_all_ones_is_gone_from_bus_naming_the_gpu() -> None:
    out = compute(seen([["4", UUID, PCI, "79", 1]], config={PCI: True}))
    fallen = out[nc.GPU_FALLEN_OFF_BUS]
    assert (fallen.status, fallen.reason) == ("True", nc.GONE_FROM_BUS)
    assert fallen.gpus == (nc.GpuNamed("4", PCI, UUID, 79),)
    assert nc.unambiguous_fault(out) is fallen
    hardware = out[nc.GPU_HARDWARE_XID]
    assert (hardware.status, hardware.gpus) == ("True", (nc.GpuNamed("4", PCI, UUID, 79),))


def test_the_kernel_message_alone_names_the_card_and_a_card_that_answers_is_not_gone() -> None:
    answers = compute(seen(fallen=[[PCI, UUID, 1]], config={PCI: False}))
    fallen = answers[nc.GPU_FALLEN_OFF_BUS]
    assert (fallen.status, fallen.reason) == ("True", conditions.FELL_OFF_ANSWERS)
    assert fallen.gpus == (nc.GpuNamed("4", PCI, UUID, 79),)
    assert nc.unambiguous_fault(answers) is None
    unreadable = compute(seen(fallen=[[PCI, UUID, 1]], config={PCI: None}))
    assert unreadable[nc.GPU_FALLEN_OFF_BUS].reason == conditions.FELL_OFF_ANSWERS


def test_only_this_boots_faults_and_only_hardware_xids_count() -> None:
    before = {"xids": [["4", UUID, PCI, "79", 1]], "fallen_off": [[PCI, UUID, 1]]}
    out = compute(seen([["4", UUID, PCI, "79", 1], ["2", "GPU-2", "0000:2a:00.0", "13", 5]],
                       [[PCI, UUID, 1]], {PCI: True}, baseline=before))
    assert out[nc.GPU_FALLEN_OFF_BUS].status == "False"
    assert out[nc.GPU_HARDWARE_XID].status == "False"  # Xid 13 is an application's fault


def test_kernel_log_and_driver_conditions() -> None:
    out = compute(seen(problem="cannot open the kernel log: permission denied",
                       driver=(decisions.CheckStatus.FAIL, "module 550.90 != NVML 550.54")))
    assert (out[nc.GPU_KERNEL_LOG_UNREADABLE].status,
            out[nc.GPU_KERNEL_LOG_UNREADABLE].message) == (
        "True", "cannot open the kernel log: permission denied")
    assert (out[nc.GPU_DRIVER_MISMATCH].status, out[nc.GPU_DRIVER_MISMATCH].reason) == (
        "True", conditions.MISMATCH)
    assert nc.GPU_DRIVER_MISMATCH not in compute(seen())  # not checked yet: not reported


# ---- when they are written --------------------------------------------------------------------


def reporter(tmp_path: Path, patches: Patches, clock: Clock) -> node_status.ConditionReporter:
    return node_status.ConditionReporter(patches, tmp_path, wall=lambda: clock.t + 1.8e9,
                                         monotonic=clock)


def test_a_change_is_written_at_once_then_coalesced_to_one_write_a_second(
    tmp_path: Path,
) -> None:
    patches, clock = Patches(), Clock()
    writer = reporter(tmp_path, patches, clock)
    writer.offer(compute(seen()))
    writer.offer(compute(seen(problem="gone")))
    writer.offer(compute(seen(problem="gone again")))
    assert len(patches.bodies) == 1
    clock.t += 1.0
    writer.flush()
    assert len(patches.bodies) == 2
    assert patches.last()[nc.GPU_KERNEL_LOG_UNREADABLE]["message"] == "gone again"
    writer.flush()
    writer.offer(compute(seen(problem="gone again")))
    assert len(patches.bodies) == 2  # nothing changed: nothing written


def test_only_gpuguards_types_are_patched_with_a_heartbeat(tmp_path: Path) -> None:
    patches, clock = Patches(), Clock()
    writer = reporter(tmp_path, patches, clock)
    writer.offer(compute(seen(driver=(decisions.CheckStatus.PASS, "550.90 matches"),
                              recovery=(decisions.CheckStatus.PASS, "none pending"))))
    assert set(patches.last()) == set(nc.TYPES)
    written = patches.bodies[0]["status"]["conditions"]
    assert patches.bodies[0] == {"status": {"conditions": written}}
    clock.t += node_status.HEARTBEAT_S - 1
    writer.flush()
    assert len(patches.bodies) == 1
    clock.t += 1
    writer.flush()
    assert len(patches.bodies) == 2
    assert patches.bodies[1]["status"]["conditions"][0]["lastHeartbeatTime"] != patches.bodies[
        0]["status"]["conditions"][0]["lastHeartbeatTime"]


def test_the_transition_time_holds_while_the_status_holds_across_restarts(
    tmp_path: Path,
) -> None:
    patches, clock = Patches(), Clock()
    reporter(tmp_path, patches, clock).offer(compute(seen(problem="denied")))
    first = patches.last()[nc.GPU_KERNEL_LOG_UNREADABLE]["lastTransitionTime"]
    later = conditions.compute(seen(problem="denied, still"), Classifier(),
                               datetime(2026, 12, 2, tzinfo=UTC))
    restarted = reporter(tmp_path, patches, clock)
    clock.t += 5
    restarted.offer(later)
    assert patches.last()[nc.GPU_KERNEL_LOG_UNREADABLE]["lastTransitionTime"] == first
    assert patches.last()[nc.GPU_FALLEN_OFF_BUS]["lastTransitionTime"] == first
    readable = conditions.compute(seen(), Classifier(), datetime(2026, 12, 3, tzinfo=UTC))
    clock.t += 5
    restarted.offer(readable)
    assert patches.last()[nc.GPU_KERNEL_LOG_UNREADABLE]["lastTransitionTime"] == (
        "2026-12-03T00:00:00Z")


def test_a_failed_write_is_counted_and_retried_with_backoff_never_raised(
    tmp_path: Path,
) -> None:
    patches, clock = Patches(), Clock()
    writer = reporter(tmp_path, patches, clock)
    patches.failing = True
    writer.offer(compute(seen()))
    clock.t += 1
    writer.flush()
    assert writer.writes == {"ok": 0, "error": 2}
    clock.t += 1  # the backoff doubled to 2 s: not yet
    writer.flush()
    assert writer.writes["error"] == 2
    patches.failing = False
    clock.t += 1
    writer.flush()
    assert writer.writes == {"ok": 1, "error": 2}


# ---- the agent: right after the follower counts the line --------------------------------------


def host(tmp_path: Path, config: bytes) -> Path:
    root = tmp_path / "host"
    device = root / nvidia.PCI_DEVICES / PCI
    device.mkdir(parents=True)
    (device / "config").write_bytes(config)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    return root


OPEN: list[daemon.Agent] = []


@pytest.fixture(autouse=True)
def close_followers() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().follower.close()


def agent_on(tmp_path: Path, patches: Patches, clock: Clock,
             checks: daemon.CheckRun = list) -> tuple[daemon.Agent, Path]:
    log = tmp_path / "kern.log"
    log.write_text(kernel_lines.gpu_at(PCI, UUID) + "\n")
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state")
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), checks,
                         wall=lambda: clock.t, monotonic=clock,
                         reporter=reporter(tmp_path / "state", patches, clock))
    OPEN.append(agent)
    agent.follow_once()
    return agent, log


def test_the_follower_writes_gone_from_bus_right_after_counting_the_line(
    tmp_path: Path,
) -> None:
    host(tmp_path, GONE)
    patches, clock = Patches(), Clock()
    agent, log = agent_on(tmp_path, patches, clock)
    assert patches.last()[nc.GPU_FALLEN_OFF_BUS]["status"] == "False"
    with log.open("a") as f:
        f.write(kernel_lines.xid(PCI, 79) + "\n")
    clock.t += 1
    agent.follow_once()
    fallen = patches.last()[nc.GPU_FALLEN_OFF_BUS]
    assert (fallen["status"], fallen["reason"]) == ("True", nc.GONE_FROM_BUS)
    assert f"pci={PCI} uuid={UUID} xid=79" in fallen["message"]
    exposition = agent.exposition().decode()
    assert f'{names.AGENT_CONDITION_WRITES_TOTAL}{{node="gpu-node-b",result="ok"}} 2.0' in (
        exposition)


def test_a_card_that_still_answers_is_read_again_at_each_poll(tmp_path: Path) -> None:
    root = host(tmp_path, ANSWERS)
    patches, clock = Patches(), Clock()
    agent, log = agent_on(tmp_path, patches, clock)
    with log.open("a") as f:
        f.writelines(line + "\n" for line in kernel_lines.fallen_off_bus(PCI, 0x2330))
    clock.t += 1
    agent.follow_once()
    assert patches.last()[nc.GPU_FALLEN_OFF_BUS]["reason"] == conditions.FELL_OFF_ANSWERS
    (root / nvidia.PCI_DEVICES / PCI / "config").write_bytes(GONE)
    clock.t += 1
    assert agent.follow_once() == 0
    assert patches.last()[nc.GPU_FALLEN_OFF_BUS]["reason"] == nc.GONE_FROM_BUS


def test_the_check_cycle_reports_the_driver_mismatch(tmp_path: Path) -> None:
    host(tmp_path, ANSWERS)
    patches, clock = Patches(), Clock()
    failing = result.CheckResult(nvidia.NAME, decisions.CheckStatus.FAIL, "550.90 != 550.54")
    agent, _ = agent_on(tmp_path, patches, clock, lambda: [failing])
    clock.t += 1
    agent.check_once()
    assert patches.last()[nc.GPU_DRIVER_MISMATCH]["status"] == "True"


def test_without_a_reporter_the_agent_writes_nothing(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text(kernel_lines.xid(PCI, 79) + "\n")
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state")
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), list)
    OPEN.append(agent)
    agent.follow_once()
    assert names.AGENT_CONDITION_WRITES_TOTAL not in agent.exposition().decode()


@pytest.mark.parametrize(
    ("code", "overrides", "hardware"),
    [
        pytest.param(13, "classes:\n  13: hardware\n", "True", id="user-xid-made-hardware"),
        pytest.param(48, "classes:\n  48: user\n", "False", id="hardware-xid-made-user"),
        pytest.param(48, "# none\n", "True", id="empty-file-keeps-the-catalog"),
    ],
)
def test_the_agent_classifies_with_the_clusters_override_file(
    tmp_path: Path, code: int, overrides: str, hardware: str
) -> None:
    log = tmp_path / "kern.log"
    log.write_text(kernel_lines.xid(PCI, code) + "\n")
    (tmp_path / "overrides.yaml").write_text(overrides)
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state",
                                xid_overrides=tmp_path / "overrides.yaml")
    agent = daemon.Agent(config, lambda start: journal.FileFollower(log, start), list)
    OPEN.append(agent)
    agent.follow_once()
    condition = agent.report_conditions()[nc.GPU_HARDWARE_XID]
    assert (condition.status, f"xid={code}" in condition.message) == (hardware, hardware == "True")


def test_a_bad_override_file_stops_the_agent_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "overrides.yaml"
    bad.write_text("classes:\n  48: broken\n")
    config = daemon.AgentConfig("gpu-node-b", tmp_path / "host", tmp_path / "state",
                                xid_overrides=bad)
    with pytest.raises(CatalogError, match=f"{bad}: classes entry 48: unknown class"):
        daemon.Agent(config, lambda start: journal.Unreadable("never opened"), list)
    assert not (tmp_path / "state").exists()  # stopped before it touched its state


# ---- over HTTP, to the simulator's API --------------------------------------------------------


def test_the_patch_goes_to_the_nodes_status_subresource() -> None:
    node_name = "gpu-node-b"
    objects = store.ObjectStore(now=lambda: NOW)
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    objects.create("Node", "", {"apiVersion": "v1", "kind": "Node",
                                "metadata": {"name": node_name, "labels": {"a": "b"}},
                                "spec": {}, "status": {"conditions": [ready]}})
    with kubeapi.serve(objects) as server, lightkube.Client(
        config=kubeapi.lightkube_config(server.url), field_manager=node_status.FIELD_MANAGER
    ) as client:
        patch = node_status.lightkube_patch(client, node_name)
        patch(node_status.body(compute(seen([["4", UUID, PCI, "79", 1]], config={PCI: True})),
                               1.8e9))
        with pytest.raises(node_status.ConditionWriteError, match="nodes/gpu-node-x/status"):
            node_status.lightkube_patch(client, "gpu-node-x")({"status": {"conditions": []}})
    stored = objects.get("Node", "", node_name)
    written = {c["type"]: c for c in stored["status"]["conditions"]}
    assert written[nc.GPU_FALLEN_OFF_BUS]["reason"] == nc.GONE_FROM_BUS
    assert written["Ready"] == ready  # merged by type: the kubelet's conditions stay
    assert stored["metadata"]["labels"] == {"a": "b"}
