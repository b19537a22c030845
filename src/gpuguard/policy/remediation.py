"""Which isolated node gpuguard repairs itself this tick, and how (docs/remediation.md).

A node is power-cycled through its BMC when all hold: gpuguard isolated it (its own mark); the
evidence verdict is ``power-cycle``; its pool (``remediation.pool_label``) is in
``power_cycle_pools``; no person's ``gpuguard.io/hold``; it has not rebooted since the
isolation (a reboot already did the repair); no repair was tried for this isolation (a
``gpuguard.io/remediation`` mark, done or failed, is never acted on again: no loop); a BMC
Secret is named for it (``bmc_secrets``); fewer than ``max_in_flight`` repairs are in flight
(else WAIT: the breaker's limit, docs/breaker.md); and its GPU pods are gone (else DRAIN: they
are evicted through the Eviction API, PodDisruptionBudgets honoured, and the node waits). A
pool in ``hand_off_pools`` gets HAND_OFF instead: the node condition the cluster's remediator
reads (one actor per node).

A ``gpu-reset`` verdict in a pool of ``gpu_reset_pools`` gets GPU_RESET (the pinned Job
``nvidia-smi -r -i <uuid>``, ``actuators.jobs.gpu_reset_job``) when the same hold, breaker and
once-per-isolation rules allow it and the isolated card (``gpuguard.io/gpu-uuid``) is known,
has no pending or failed row remap and no process holds it, and no GPU pod is left on the node
(``model.remediation.CardFacts``; an unknown fact never resets: fail closed). A ``started``
reset mark gets GPU_RESET_RESULT: the controller reads its Job.

Pure: the controller (``controller.remediation``) reads the facts and carries out the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys as keys
from gpuguard.model import decisions, fleet
from gpuguard.model import remediation as model
from gpuguard.model import settings as settings_model

Reason = decisions.Reason


class Step(StrEnum):
    NONE = "none"  # not gpuguard's to repair (see ``detail``)
    DRAIN = "drain"  # evict ``pods`` first; the repair waits for them to go
    WAIT = "wait"  # the breaker: ``max_in_flight`` repairs are in flight
    POWER_CYCLE = "power-cycle"
    HAND_OFF = "hand-off"
    CLEAR_HAND_OFF = "clear-hand-off"  # returned (or no longer gpuguard's): condition False
    GPU_RESET = "gpu-reset"  # create the reset Job of the isolated card
    GPU_RESET_RESULT = "gpu-reset-result"  # read that Job: done, failed, or still running


@dataclass(frozen=True, slots=True)
class Decision:
    node: str
    step: Step
    detail: str
    pods: tuple[fleet.Pod, ...] = ()

    @property
    def reason(self) -> Reason | None:
        """The Event reason of a step that writes or tells (None for NONE)."""
        return {
            Step.DRAIN: Reason.REMEDIATION_DRAINING,
            Step.WAIT: Reason.REMEDIATION_WAITING,
            Step.HAND_OFF: Reason.REMEDIATION_HANDED_OFF,
        }.get(self.step)


def pool_of(node: fleet.Node, settings: settings_model.RemediationSettings) -> str | None:
    return node.labels.get(settings.pool_label)


def workload_pods(pods: Sequence[fleet.Pod]) -> tuple[fleet.Pod, ...]:
    """The pods a drain evicts: those holding GPUs, running or bound there (gpuguard's own
    Jobs aside). Pods without GPUs (the node's DaemonSets) stay, as ``kubectl drain``
    leaves DaemonSet pods."""
    live = (fleet.PodPhase.RUNNING, fleet.PodPhase.PENDING)
    return tuple(
        p for p in pods
        if p.gpu_request > 0 and p.phase in live and keys.PREFIX + "job" not in p.labels
    )  # fmt: skip


def in_flight(nodes: Sequence[fleet.Node]) -> tuple[str, ...]:
    """Nodes whose repair was carried out and that have neither returned nor failed their
    return (a failed burn-in holds the node for a person: it no longer takes a turn); an
    unreadable mark counts (the breaker fails closed)."""
    out = []
    for node in nodes:
        if node.marks.failed_return:
            continue
        try:
            mark = node.marks.remediation
        except InputError:
            out.append(node.name)
            continue
        if mark is not None and mark.in_flight:
            out.append(node.name)
    return tuple(out)


def decide(
    snapshot: fleet.FleetSnapshot,
    settings: settings_model.RemediationSettings,
    cards: Mapping[str, model.CardFacts] | None = None,
) -> tuple[Decision, ...]:
    """A decision for every node gpuguard isolated with a verdict, oldest isolation first;
    each DRAIN or POWER_CYCLE takes a slot of ``max_in_flight`` from the nodes after it (a
    node is drained only when its power cycle may follow). ``cards``: node -> the facts of
    its isolated card, for the GPU reset (absent: unknown, no reset)."""
    isolated = sorted(
        (n for n in snapshot.nodes if n.isolated_by_gpuguard and n.marks.verdict is not None),
        key=lambda n: (n.marks.isolated_at or "", n.name),
    )
    busy = len(in_flight(snapshot.nodes))
    out = [
        Decision(n.name, Step.CLEAR_HAND_OFF, "no longer isolated by gpuguard for a power cycle")
        for n in snapshot.nodes
        if n.conditions.get(model.HAND_OFF_CONDITION) == "True" and not _handed_off(n)
    ]
    for node in isolated:
        pods = snapshot.pods_on(node.name)
        if node.marks.verdict == str(decisions.Verdict.GPU_RESET):
            one = _reset(node, pods, settings, busy, (cards or {}).get(node.name))
        else:
            one = _one(node, pods, settings, busy)
        busy += one.step in (Step.DRAIN, Step.POWER_CYCLE, Step.GPU_RESET)  # holds its turn
        out.append(one)
    return tuple(out)


def _handed_off(node: fleet.Node) -> bool:
    """Still gpuguard's isolation with a power-cycle verdict (the hand-off stands)."""
    return node.isolated_by_gpuguard and node.marks.verdict == str(decisions.Verdict.POWER_CYCLE)


def _one(
    node: fleet.Node,
    pods: Sequence[fleet.Pod],
    settings: settings_model.RemediationSettings,
    busy: int,
) -> Decision:
    def none(why: str) -> Decision:
        return Decision(node.name, Step.NONE, why)

    verdict, pool = node.marks.verdict, pool_of(node, settings)
    if verdict != str(decisions.Verdict.POWER_CYCLE):
        return none(f"verdict {verdict}: no automated repair for it")
    if pool not in settings.power_cycle_pools | settings.hand_off_pools:
        return none(f"pool {pool!r} ({settings.pool_label}) has no automated repair")
    stop, mark = _stopped(node)
    if why := stop or _done_or_rebooted(node, mark):
        return none(why)
    if pool in settings.hand_off_pools:
        return Decision(node.name, Step.HAND_OFF, f"pool {pool}: handed to the cluster's "
                        "remediator (node condition GpuguardRemediationRequired)")  # fmt: skip
    if node.name not in settings.bmc_secrets and pool not in settings.bmc_secrets:
        return none(f"no BMC Secret for node {node.name} or pool {pool} "
                    "(remediation.bmc_secrets): the person's request stands")  # fmt: skip
    if wait := _wait_turn(node, busy, settings):
        return wait
    if left := workload_pods(pods):
        return Decision(node.name, Step.DRAIN,
                        f"evicting {len(left)} GPU pod(s) first: {_named(left)}", left)
    return Decision(node.name, Step.POWER_CYCLE, f"power-cycle verdict, pool {pool}, drained")


def _reset(
    node: fleet.Node,
    pods: Sequence[fleet.Pod],
    settings: settings_model.RemediationSettings,
    busy: int,
    card: model.CardFacts | None,
) -> Decision:
    """The GPU-reset route of one node with a ``gpu-reset`` verdict (docs/remediation.md)."""

    def none(why: str) -> Decision:
        return Decision(node.name, Step.NONE, why)

    pool = pool_of(node, settings)
    if pool not in settings.gpu_reset_pools:
        return none(f"pool {pool!r} ({settings.pool_label}) has no automated GPU reset")
    stop, mark = _stopped(node)
    if stop:
        return none(stop)
    if mark is not None and mark.action is model.Action.GPU_RESET and (
        mark.result is model.Result.STARTED
    ):
        return Decision(node.name, Step.GPU_RESET_RESULT, mark.detail)
    if why := _done_or_rebooted(node, mark):
        return none(why)
    uuid = node.marks.gpu_uuid
    if not uuid or not model.CARD_UUID.match(uuid):
        return none(f"the isolated card is not known ({keys.GPU_UUID}): no automated reset")
    if card is None or card.uuid != uuid:
        return none(f"no facts on {uuid} (row remap, processes): no automated reset")
    if card.row_remap_pending is not False or card.row_remap_failed is not False:
        seen = f"pending {card.row_remap_pending}, failed {card.row_remap_failed}"
        return none(f"{uuid} row remap {seen}: never reset, the person's request stands")
    if card.processes != 0:
        return none(f"{uuid} held open by {card.processes} process(es) (None: unknown): "
                    "no reset while in use")  # fmt: skip
    if wait := _wait_turn(node, busy, settings):
        return wait
    if left := workload_pods(pods):
        return none(f"GPU pod(s) still on the node: {_named(left)}: no reset while they run")
    return Decision(node.name, Step.GPU_RESET, f"gpu-reset verdict, pool {pool}, {uuid} idle, "
                    "no row remap pending or failed")  # fmt: skip


def _stopped(node: fleet.Node) -> tuple[str | None, model.Mark | None]:
    """Why no automated repair starts on the node whatever its route (a person's hold, an
    unreadable repair mark), else None and the node's repair mark (None: no repair yet)."""
    if node.marks.hold is not None:
        return f"{keys.HOLD} set by a person: no automated repair", None
    try:
        return None, node.marks.remediation
    except InputError as e:
        return f"{e}: no further repair", None


def _done_or_rebooted(node: fleet.Node, mark: model.Mark | None) -> str | None:
    """Why no repair starts now: one was already tried for this isolation, or the node
    rebooted since it (the return checks decide); None when neither."""
    if mark is not None:
        return f"{mark.action} {mark.result} at {mark.at:%Y-%m-%dT%H:%M:%SZ}: {mark.detail}"
    recorded = node.marks.boot_id
    if recorded and node.boot_id and recorded != node.boot_id:
        return "rebooted since the isolation: the return checks decide"
    return None


def _wait_turn(
    node: fleet.Node, busy: int, settings: settings_model.RemediationSettings
) -> Decision | None:
    if busy < settings.max_in_flight:
        return None
    return Decision(node.name, Step.WAIT, f"{busy} repair(s) in flight, at most "
                    f"{settings.max_in_flight} (remediation.max_in_flight): waits its turn")


def _named(pods: Sequence[fleet.Pod]) -> str:
    return ", ".join(f"{p.namespace}/{p.name}" for p in pods)
