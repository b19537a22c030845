"""The agent's metrics: Xid counts from the kernel log, the conformance checks' status and
the processes holding each GPU (``agent.gpu_processes``).

Each Xid line is judged on its own (``catalog.events``): the ``rule`` label names the event or
promotion rule it matched (``""`` when its code's class applies), so the controller classes an
NVLink5 line that NVIDIA's decode calls IGNORE apart from one that needs a GPU reset.

``Tally`` holds what the agent has counted since it was first installed on the node; it is
saved with the kernel-log position (``agent.position``) and restored at start, so
``gpuguard_xid_total`` never goes down across agent restarts. ``AgentCollector`` renders the
tally and the last check results on each scrape, into its own ``CollectorRegistry`` (no global
registry). Names come from ``model.metric_names``.

The ``gpu`` label is the GPU's device minor (``/dev/nvidiaN``) read from
``/proc/driver/nvidia/gpus/<pci>/information`` — a file the driver fills at load, so reading
it never calls NVML — or ``""`` when that file is not there; ``uuid`` and ``pci`` identify the
card in any case.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpuguard.agent import gpu_processes, podresources, topology
from gpuguard.agent.checks import hostfs, nvidia, result
from gpuguard.agent.counts import CardKey, Counts, SxidKey, XidKey
from gpuguard.catalog import events as event_rules
from gpuguard.kernlog import messages, parse
from gpuguard.model import decisions, xid
from gpuguard.model import metric_names as names


class RuleClasses(Protocol):
    """What the collector asks of the cluster's Xid classes (``catalog.xid.XidCatalog``)."""

    def is_hardware_event(self, code: int, rule: str) -> bool: ...


class Writes(Protocol):
    """What the collector reads of the node-conditions reporter: writes by result."""

    @property
    def writes(self) -> Mapping[str, int]: ...


GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's resource name
HISTORY_SIZE = 512  # recent Xid occurrences kept for the promotion rules


def _base(name: str) -> str:
    """prometheus-client adds ``_total`` to counter families itself."""
    return name.removesuffix("_total")


class Tally:
    """Counts from the kernel log, safe to read from the scrape thread while it grows."""

    def __init__(
        self,
        gpu_index: Mapping[str, str] | None = None,
        rules: event_rules.EventRules | None = None,
        driver_major: int | None = None,
    ) -> None:
        self.gpu_index = dict(gpu_index or {})
        self.rules = rules if rules is not None else event_rules.packaged_rules()
        self.driver_major = driver_major  # picks the NVLink5 layout; None: either
        self.history: deque[event_rules.Occurrence] = deque(maxlen=HISTORY_SIZE)
        self.lock = threading.Lock()
        self.xids: dict[XidKey, int] = {}
        self.fallen_off: dict[CardKey, int] = {}
        self.recovery: dict[CardKey, str] = {}
        self.sxids: dict[SxidKey, int] = {}
        self.uuid_by_pci: dict[str, str] = {}
        self.lines = 0
        self.malformed = 0

    def count(self, lines: Iterable[str], parser: parse.XidLogParser, unreadable: int = 0) -> None:
        """Feed whole lines to the stream's parser and count what they say."""
        with self.lock:
            malformed_before = parser.stats.malformed
            for line in lines:
                self.lines += 1
                event = parser.feed(line, self.lines)
                if event is not None:
                    self._record(event)
                elif parse.NVRM_MARKER in line:
                    self._learn_card(line)
                elif messages.SXID_MARKER in line:
                    self._record_sxid(line)
            self.malformed += parser.stats.malformed - malformed_before + unreadable

    def _learn_card(self, line: str) -> None:
        text = line[line.find(parse.NVRM_MARKER) + len(parse.NVRM_MARKER) :].strip()
        card = messages.read_gpu_at(text)
        if card is not None and card[1] is not None:
            self.uuid_by_pci[card[0]] = card[1]

    def _record(self, event: xid.KernelEvent) -> None:
        address = event.pci or ""
        uuid = event.uuid or self.uuid_by_pci.get(address, "")
        if event.uuid and address:
            self.uuid_by_pci[address] = event.uuid
        card = CardKey(address, uuid)
        if event.kind is xid.KernelEventKind.FALLEN_OFF_BUS:
            self.fallen_off[card] = self.fallen_off.get(card, 0) + 1
            return
        if event.xid is None:  # kernlog.parse names the code of every Xid event
            return
        gpu = self.gpu_index.get(uuid) or self.gpu_index.get(address, "")
        key = XidKey(gpu, uuid, address, event.xid, self._rule_of(event, uuid or address))
        self.xids[key] = self.xids.get(key, 0) + 1
        if event.recovery_action is not None:
            self.recovery[card] = str(event.recovery_action)

    def _record_sxid(self, line: str) -> None:
        fields = messages.read_sxid(line)
        if fields is None:
            self.malformed += 1
            return
        key = SxidKey(fields.pci or "", fields.code, fields.severity)
        self.sxids[key] = self.sxids.get(key, 0) + 1

    def _rule_of(self, event: xid.KernelEvent, card: str) -> str:
        """The id of the rule the event matched: a promotion its history fulfils first."""
        judged = self.rules.judge(event, self.driver_major)
        at = _seconds(event)
        if at is None:
            return judged.rule if judged else ""
        seen = event_rules.occurrence(event, card, at, judged.rule if judged else "")
        self.history.append(seen)
        chosen = event_rules.worse(self.rules.promotion(tuple(self.history), seen), judged)
        return chosen.rule if chosen else ""

    def counts(self) -> Counts:
        """What is counted now (copies: the follower thread goes on counting)."""
        with self.lock:
            return Counts(dict(self.xids), dict(self.fallen_off), dict(self.recovery),
                          dict(self.sxids), dict(self.uuid_by_pci), self.lines, self.malformed)

    def as_json(self) -> dict[str, Any]:
        return self.counts().as_json()

    def restore(self, saved: Mapping[str, Any]) -> None:
        """Continue from counts saved by ``as_json`` (ValueError/TypeError on a bad shape)."""
        counts = Counts.from_json(saved)
        with self.lock:
            self.xids, self.fallen_off = dict(counts.xids), dict(counts.fallen_off)
            self.recovery, self.sxids = dict(counts.recovery), dict(counts.sxids)
            self.uuid_by_pci = dict(counts.uuid_by_pci)
            self.lines, self.malformed = counts.lines, counts.malformed


def _seconds(event: xid.KernelEvent) -> float | None:
    """The event's time for the promotion windows: its wall time, else its uptime."""
    if event.timestamp is not None:
        return event.timestamp.timestamp()
    return event.uptime_s


@dataclass(frozen=True, slots=True)
class PodDevices:
    """The kubelet's answer on which containers hold which devices (``agent.podresources``)."""

    readable: bool
    uses: tuple[podresources.DeviceUse, ...]


@dataclass(frozen=True, slots=True)
class CheckCycle:
    """One run of the conformance checks: results, when it ended, how long it took."""

    results: tuple[result.CheckResult, ...]
    finished_at: float
    duration_s: float


class AgentCollector(Collector):
    """Renders a node's tally and latest check cycle on each scrape."""

    def __init__(self, node: str, tally: Tally) -> None:
        self.node = node
        self.tally = tally
        self.cycle: CheckCycle | None = None
        self.processes: gpu_processes.ProcessReport | None = None
        self.pod_devices: PodDevices | None = None  # None: the PodResources opt-in is off
        self.kernel_log_readable = True
        self.topology: topology.TopologyProbe | None = None  # opt-in: gpuguard agent --topology
        self.reporter: Writes | None = None  # node conditions reporting (on by default)
        self.classes: RuleClasses | None = None  # the cluster's classes, for each rule's class

    def collect(self) -> Iterator[Metric]:
        yield from self._kernel_log()
        if self.cycle is not None:
            yield from self._checks(self.cycle)
        if self.processes is not None:
            yield from self._processes(self.processes)
        if self.pod_devices is not None:
            yield from self._pods(self.pod_devices)
        if self.topology is not None:
            yield from self.topology.families()
        if self.reporter is not None:
            yield self._condition_writes(self.reporter.writes)

    def _condition_writes(self, writes: Mapping[str, int]) -> Metric:
        family = CounterMetricFamily(
            _base(names.AGENT_CONDITION_WRITES_TOTAL),
            "Patches of this node's gpuguard conditions, by result (ok, error: see its log).",
            labels=["node", "result"],
        )
        for outcome, n in sorted(writes.items()):
            family.add_metric([self.node, outcome], n)
        return family

    def _kernel_log(self) -> Iterator[Metric]:
        snapshot = self.tally.counts()
        node = self.node
        xids = CounterMetricFamily(
            _base(names.XID_TOTAL), "Xid lines in this node's kernel log.",
            labels=["node", "gpu", "uuid", "pci", "xid", "rule"],
        )
        for (gpu, uuid, address, code, rule), n in snapshot.xids.items():
            xids.add_metric([node, gpu, uuid, address, str(code), rule], n)
        fallen = CounterMetricFamily(
            _base(names.FALLEN_OFF_BUS_TOTAL), "GPU has fallen off the bus messages.",
            labels=["node", "pci", "uuid"],
        )
        for (address, uuid), n in snapshot.fallen_off.items():
            fallen.add_metric([node, address, uuid], n)
        recovery = GaugeMetricFamily(
            names.XID154_RECOVERY_ACTION, "1 for the last Xid 154 recovery action per GPU.",
            labels=["node", "pci", "uuid", "action"],
        )
        for (address, uuid), action in snapshot.recovery.items():
            recovery.add_metric([node, address, uuid, action], 1)
        sxids = CounterMetricFamily(
            _base(names.SXID_TOTAL), "NVSwitch SXid lines in this node's kernel log.",
            labels=["node", "pci", "sxid", "severity"],
        )
        for (address, code, severity), n in snapshot.sxids.items():
            sxids.add_metric([node, address, str(code), severity], n)
        lines = CounterMetricFamily(
            _base(names.AGENT_KERNEL_LINES_TOTAL), "Kernel log lines read.", labels=["node"]
        )
        lines.add_metric([node], snapshot.lines)
        malformed = CounterMetricFamily(
            _base(names.AGENT_MALFORMED_LINES_TOTAL),
            "Kernel log records that mention an Xid (or a whole record) that could not be read.",
            labels=["node"],
        )
        malformed.add_metric([node], snapshot.malformed)
        readable = GaugeMetricFamily(
            names.AGENT_KERNEL_LOG_READABLE,
            "1 while the agent can read its kernel-log source, 0 when it cannot (see its log).",
            labels=["node"],
        )
        readable.add_metric([node], int(self.kernel_log_readable))
        yield from (xids, fallen, recovery, sxids, lines, malformed, readable)
        if self.classes is not None:
            yield _rule_hardware(node, snapshot.xids, self.classes)

    def _checks(self, cycle: CheckCycle) -> Iterator[Metric]:
        node = self.node
        status = GaugeMetricFamily(
            names.CHECK_STATUS, "1 for each check's current status, 0 for the others.",
            labels=["node", "check", "status"],
        )
        for check in cycle.results:
            for each in decisions.CheckStatus:
                status.add_metric([node, check.check, str(each)], int(check.status is each))
        yield status
        if (mismatch := nvml_mismatch(cycle.results)) is not None:
            gauge = GaugeMetricFamily(
                names.NVML_MISMATCH, "1 when the loaded NVIDIA module and NVML library differ.",
                labels=["node"],
            )
            gauge.add_metric([node], mismatch)
            yield gauge
        duration = GaugeMetricFamily(
            names.AGENT_CHECK_DURATION, "Seconds the last check cycle took.", labels=["node"]
        )
        duration.add_metric([node], cycle.duration_s)
        last = GaugeMetricFamily(
            names.AGENT_LAST_CHECK, "Unix time the last check cycle ended.", labels=["node"]
        )
        last.add_metric([node], cycle.finished_at)
        yield from (duration, last)

    def _processes(self, found: gpu_processes.ProcessReport) -> Iterator[Metric]:
        counts = GaugeMetricFamily(
            names.GPU_PROCESSES,
            "Processes holding the GPU's device open (driver daemons not counted). Absent "
            "for a GPU when the last scan was incomplete and saw none.",
            labels=["node", "gpu", "pci", "uuid"],
        )
        for each in found.counts:
            card = each.card
            counts.add_metric([self.node, card.minor, card.pci, card.uuid], each.processes)
        complete = GaugeMetricFamily(
            names.GPU_PROCESS_SCAN_COMPLETE,
            "1 when the last /proc fd scan finished within its budget and read every process.",
            labels=["node"],
        )
        complete.add_metric([self.node], int(found.complete))
        yield from (counts, complete)


    def _pods(self, found: PodDevices) -> Iterator[Metric]:
        """1 per GPU a container holds (the kubelet's device ID: the GPU UUID under the NVIDIA
        plugin's ``deviceIDStrategy: uuid``); gpuguard names these pods when it isolates a GPU."""
        held = GaugeMetricFamily(
            names.GPU_POD,
            "1 for each GPU a pod's container holds, from the kubelet's PodResources API.",
            labels=["node", "uuid", "namespace", "pod", "container"],
        )
        for use in found.uses:
            if use.resource == GPU_RESOURCE:
                for device in use.device_ids:
                    held.add_metric([self.node, device, use.namespace, use.pod, use.container], 1)
        readable = GaugeMetricFamily(
            names.POD_RESOURCES_READABLE,
            "1 when the kubelet's PodResources API answered at the last check cycle.",
            labels=["node"],
        )
        readable.add_metric([self.node], int(found.readable))
        yield from (held, readable)


def _rule_hardware(node: str, xids: Iterable[XidKey], classes: RuleClasses) -> Metric:
    """1 when a rule the agent has counted makes its lines hardware under the cluster's classes,
    0 when not: alerts on ``gpuguard_xid_total`` drop the series whose rule says 0."""
    family = GaugeMetricFamily(
        names.XID_RULE_HARDWARE,
        "1 when lines of this per-event Xid rule are hardware faults here, 0 when not.",
        labels=["node", "rule"],
    )
    seen = {(key.xid, key.rule) for key in xids if key.rule}
    for code, rule in sorted(seen, key=lambda pair: (str(pair[0]), pair[1])):
        family.add_metric([node, rule], int(classes.is_hardware_event(code, rule)))
    return family


def nvml_mismatch(results: Iterable[result.CheckResult]) -> int | None:
    """1 when ``nvidia-match`` failed, 0 when it passed, None when it could not tell."""
    for check in results:
        if check.check == nvidia.NAME:
            if check.status is decisions.CheckStatus.FAIL:
                return 1
            if check.status is decisions.CheckStatus.PASS:
                return 0
    return None


def registry_for(collector: AgentCollector) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(collector)
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)


def read_driver_major(root: Path) -> int | None:
    """The loaded nvidia module's major version (``580`` of 580.126.09), None when unknown."""
    try:
        version = nvidia.loaded_module_version(root)
    except (hostfs.HostReadError, OSError):
        return None
    head = (version or "").split(".")[0]
    return int(head) if head.isdigit() else None


def read_gpu_indexes(root: Path) -> dict[str, str]:
    """PCI address and UUID → device minor, from the driver's per-GPU information files.

    Empty when the files are missing or unreadable (the ``gpu`` label is then ``""``).
    """
    indexes: dict[str, str] = {}
    for card in gpu_processes.read_cards(root):
        for key in (card.uuid, card.pci):
            if key:
                indexes[key] = card.minor
    return indexes
