"""The world's persistent GPU states and NVSwitch lines (sim.reactions ``sxid``, ``fabric``,
``gpu_recovery``) and what its ``nvidia-smi --query-gpu`` answers (sim.smi_query), read by the
agent's real persistent-state checks."""

from __future__ import annotations

from datetime import timedelta

from gpuguard.agent.checks import gpu_state
from gpuguard.demo import agents
from gpuguard.kernlog import messages
from gpuguard.model import decisions
from gpuguard.sim import clock, scenario, smi_query, store, world

FLEET = """
name: persistent
start: "2026-10-01T00:00:00Z"
fleet: {nodes: [hgx-a, hgx-b], gpus_per_node: 2, model: NVIDIA B200, gpu_state: true}
events:
"""


def build(*events: str) -> world.World:
    spec = scenario.loads(FLEET + "".join(f"  - {e}\n" for e in events))
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start))
    w.run(step=timedelta(minutes=1), until=timedelta(minutes=10))
    return w


def smi(w: world.World, node: str, check: str) -> decisions.CheckStatus:
    runner = agents.SimNvidiaSmi(w.node(node))
    run = gpu_state.check_recovery if check == gpu_state.RECOVERY else gpu_state.check_fabric
    return run(runner, 5.0).status


def test_an_sxid_is_a_kernel_line_the_agent_reads_and_leaves_the_gpus_offered() -> None:
    w = build("{at: 1m, sxid: {node: hgx-a, switch: 1, sxid: 20034, severity: Fatal, "
              "message: Link 30 LTSSM Fault Up}}")
    (line,) = [x for x in w.node("hgx-a").kernel_log if messages.SXID_MARKER in x]
    read = messages.read_sxid(line)
    assert read is not None
    assert (read.code, read.severity, read.pci) == (
        20034, "Fatal", "0000:06:00.0")
    assert all(g.offered and g.on_bus for g in w.node("hgx-a").gpus)


def test_a_fabric_that_never_registered_fails_the_agents_check_until_a_boot() -> None:
    w = build("{at: 1m, fabric: {node: hgx-a, state: Not Started}}",
              "{at: 1m, fabric: {node: hgx-b, state: Completed, status: Success}}")
    assert (smi(w, "hgx-a", gpu_state.FABRIC), smi(w, "hgx-b", gpu_state.FABRIC)) == (
        decisions.CheckStatus.FAIL, decisions.CheckStatus.PASS)
    rebooted = build("{at: 1m, fabric: {node: hgx-a, state: Not Started}}",
                     "{at: 2m, reboot: {node: hgx-a}}")
    assert smi(rebooted, "hgx-a", gpu_state.FABRIC) is decisions.CheckStatus.PASS


def test_a_recovery_action_persists_without_its_line_until_a_gpu_reset() -> None:
    event = "{at: 1m, gpu_recovery: {node: hgx-a, gpu: 1, action: GPU Reset, logged: false}}"
    w = build(event)
    assert not [x for x in w.node("hgx-a").kernel_log if "Xid" in x]
    assert not w.node("hgx-a").gpu(1).offered  # the device plugin saw the event
    assert smi(w, "hgx-a", gpu_state.RECOVERY) is decisions.CheckStatus.FAIL
    reset = build(event, "{at: 2m, gpu_reset: {node: hgx-a, gpu: 1}}")
    assert smi(reset, "hgx-a", gpu_state.RECOVERY) is decisions.CheckStatus.PASS


def test_a_logged_recovery_action_writes_the_drivers_xid_154_line() -> None:
    w = build("{at: 1m, gpu_recovery: {node: hgx-a, gpu: 0, action: Node Reboot}}")
    (line,) = [x for x in w.node("hgx-a").kernel_log if "Xid" in x]
    assert line.endswith("154, pid='<unknown>', name=<unknown>, GPU recovery action changed "
                         "from 0x0 (None) to 0x2 (Node Reboot Required)")


def test_nvidia_smi_answers_only_the_gpus_on_the_bus_in_its_own_spelling() -> None:
    w = build("{at: 1m, xid: {node: hgx-a, gpu: 1, xid: 79}}")
    argv = gpu_state.query_argv(("gpu_recovery_action", "fabric.state", "no.such.field"))
    fields = smi_query.fields_of(argv)
    assert fields is not None
    assert smi_query.answer(w.node("hgx-a"), fields[1:]) == "None, N/A, [N/A]\n"
    assert smi_query.answer(w.node("hgx-b"), ["pci.bus_id"]) == (
        "00000000:18:00.0\n00000000:2A:00.0\n")
