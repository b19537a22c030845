"""Scenario files: the fleet, the timed events the world injects, and what a guard should do.

A scenario is YAML (see ``sim/scenarios/*.yaml`` for the shipped ones)::

    name: xid79-twice
    fleet:
      nodes: [gpu-node-a, gpu-node-b]   # or a count: 40 -> gpu-node-000 ... gpu-node-039
      gpus_per_node: 8
      model: NVIDIA GeForce RTX 5090
      driver: "580.126.09"
    events:
      - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
      - {at: 5d, power_cycle: {node: 1}}  # a node is a name or an index into the fleet
    expect:
      isolate: [gpu-node-b]
      never_isolate: [gpu-node-a]

Every event is ``at`` (an offset: ``90s``, ``10m``, ``25h``, ``3d``) plus exactly one kind
key (see ``PAYLOADS``). Host facts (kernel, DNS, ip_vs persistence, ...) are set fleet-wide in
``fleet`` and per node in ``fleet.overrides``. Loading checks everything up front, so a bad
file fails with a ``ScenarioError`` that names the file, the event index and the key — never
halfway through a run. What each event does to the world is documented in ``sim.world``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import pydantic
import yaml

from gpuguard.errors import InputError, ScenarioError
from gpuguard.model import durations, input_files
from gpuguard.sim import clock, state

DEFAULT_DURATION = timedelta(minutes=30)
GENERATED_NAME_PREFIX = "gpu-node-"
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _to_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    return durations.parse_duration(value)


Duration = Annotated[timedelta, pydantic.BeforeValidator(_to_duration)]
NodeRef = pydantic.StrictInt | pydantic.StrictStr
GpuRef = Annotated[pydantic.StrictStr, pydantic.Field(pattern=r"^[a-z0-9][-a-z0-9.]*/[0-9]+$")]
"""``node/index``: one GPU of a node, e.g. ``gpu-node-a/1``."""
Version = Annotated[pydantic.StrictStr, pydantic.Field(min_length=1)]
_Model = TypeVar("_Model", bound=pydantic.BaseModel)


class _Strict(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


# ---- event payloads: one model per kind ------------------------------------------------------


class NodePayload(_Strict):
    """Events that act on a whole node."""

    node: NodeRef


class GpuPayload(NodePayload):
    """Events that act on one GPU of a node (``gpu`` is the nvidia-smi index)."""

    gpu: Annotated[int, pydantic.Field(ge=0)]


class XidPayload(GpuPayload):
    xid: Annotated[int, pydantic.Field(ge=1, le=999)]
    message: str | None = None  # default: a real-format message for the code
    pid: int | None = None
    process: str | None = None


class GpuLostPayload(GpuPayload):
    off_bus: bool = False  # also off the bus, with the open driver's no-Xid message


class DbePayload(GpuPayload):
    remap: bool = False  # also Xid 63 (row marked for remapping, pending until reset)


class WorkloadPayload(NodePayload):
    gpus: Annotated[int, pydantic.Field(ge=1)] | list[Annotated[int, pydantic.Field(ge=0)]]
    profile: state.WorkloadProfile = state.WorkloadProfile.TRAINING
    duration: Duration | None = None  # None: runs until the scenario ends
    name: str | None = None
    namespace: str = "ml"
    outcome: Literal["Succeeded", "Failed"] = "Succeeded"


class RestartPayload(NodePayload):
    stay_lost: bool = False  # lost GPUs stay lost (a dead card)


class DriverUpgradePayload(NodePayload):
    version: Version
    kernel: Version | None = None  # a kernel installed with it, booted at the next reboot
    method: Literal["host", "operator"] = "host"
    dip: Duration = timedelta(minutes=3)  # operator method: allocatable dip while reloading


class DipPayload(NodePayload):
    dip: Duration = timedelta(seconds=60)
    gpus: Annotated[int, pydantic.Field(ge=0)] = 0  # 0: all GPUs


class DnsUpstreamPayload(NodePayload):
    servers: Annotated[list[str], pydantic.Field(min_length=1)]
    stub: bool | None = None  # /etc/resolv.conf -> 127.0.0.53; None keeps the node's setting


class CordonPayload(NodePayload):
    key: str | None = None  # a human's reason annotation, set with the cordon
    value: str | None = None


class AnnotatePayload(NodePayload):
    key: Annotated[str, pydantic.Field(min_length=1)]
    value: str | None = None  # None removes the annotation


class IpvsLoadPayload(NodePayload):
    persist: bool = False  # also write /etc/modules-load.d/ipvs.conf


class CountPayload(NodePayload):
    count: Annotated[int, pydantic.Field(ge=1)] = 1


class PcieDegradePayload(GpuPayload):
    width: Annotated[int, pydantic.Field(ge=1, le=16)] = 8  # negotiated lanes (nominal x16)
    speed: Annotated[float, pydantic.Field(gt=0)] | None = None  # GT/s; None keeps the speed


class BadMetricPayload(GpuPayload):
    """A GPU reported faulty by its node's telemetry while the card is sound."""

    xid: Annotated[int, pydantic.Field(ge=1, le=999)] = 79


class ForgedMetricPayload(GpuPayload):
    """A tenant's pod on ``node`` exports an Xid series for GPU ``gpu`` of node ``claims``
    (docs/security.md#metric-forgery): dcgm-exporter's gauge with ``Hostname: claims``, or the
    agent's counter with ``node: claims``, scraped by the cluster's pod-annotation job."""

    claims: Annotated[str, pydantic.Field(min_length=1)]
    xid: Annotated[int, pydantic.Field(ge=1, le=999)] = 79
    metric: Literal["dcgm", "agent"] = "dcgm"
    pod: Annotated[str, pydantic.Field(min_length=1)] = "metrics-sidecar"
    namespace: Annotated[str, pydantic.Field(min_length=1)] = "tenant-a"


class HostJobPayload(GpuPayload):
    """A job started on the host outside Kubernetes (``docker run --gpus device=N``)."""

    name: Annotated[str, pydantic.Field(min_length=1)] = "host-docker-job"


class GpuSlowPayload(GpuPayload):
    """A degraded card: its matmul runs at ``share`` of the model's dense throughput."""

    share: Annotated[float, pydantic.Field(gt=0, le=1)] = 0.5


class PrometheusDownPayload(_Strict):
    duration: Duration


class ExporterDownPayload(NodePayload):
    duration: Duration


class JobHangPayload(NodePayload):
    job: Literal["evidence", "burnin"]


class HostConfigPayload(NodePayload):
    """A host setting as people configured it (takes effect as the host would: ip_vs
    persistence at the next boot)."""

    ip_vs_persisted: bool | None = None


def _canary_then_all() -> list[int | str]:
    return [1, "100%"]


class RolloutPayload(_Strict):
    """A person declares a change (a ConfigMap labelled ``gpuguard.io/change`` in
    ``namespace``); the world's applying tool installs ``driver``/``kernel`` on the nodes
    gpuguard asks it to (docs/change-management.md)."""

    name: Annotated[str, pydantic.Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,50}[a-z0-9])?$")]
    driver: Version | None = None
    kernel: Version | None = None
    waves: list[pydantic.StrictInt | pydantic.StrictStr] = pydantic.Field(
        default_factory=_canary_then_all
    )
    canary: list[pydantic.StrictStr] = pydantic.Field(default_factory=list)
    max_unavailable: Annotated[int, pydantic.Field(ge=1)] | None = None
    min_available: Annotated[float, pydantic.Field(ge=0, le=1)] | None = None
    checks: list[str] | None = None
    namespace: str = "gpuguard"
    job_template: Annotated[str, pydantic.Field(pattern=r"^[a-z0-9-]{1,40}$")] | None = None
    """Applied by a Job from the admin's template of that name (method job), not the tool."""


class GangJobPayload(_Strict):
    """A job of several GPU pods placed as ``scheduler`` would (``sim.gangs``)."""

    name: Annotated[str, pydantic.Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")]
    pods: Annotated[int, pydantic.Field(ge=1, le=256)]
    gpus_per_pod: Annotated[int, pydantic.Field(ge=1, le=16)]
    scheduler: Literal["default", "volcano", "kueue"] = "default"
    # the label system the pods carry (default: the scheduler's own; "none": no marker at all)
    marker: Literal["job", "volcano", "coscheduling", "kueue", "training-operator", "jobset",
                    "kuberay", "none"] | None = None  # fmt: skip
    namespace: str = "ml"
    duration: Duration | None = None  # None: the placed pods run until the scenario ends


CLOCK_EVENT_REASONS = Literal["sw-power-cap", "hw-slowdown", "sw-thermal", "hw-thermal",
                              "hw-power-brake"]  # fmt: skip


class ThrottlePayload(GpuPayload):
    """The GPU reports a clock-event reason (DCGM_FI_DEV_CLOCKS_EVENT_REASONS bit) for a while."""

    reason: CLOCK_EVENT_REASONS = "hw-thermal"
    duration: Duration = timedelta(hours=1)


class NvlinkErrorsPayload(GpuPayload):
    """The GPU's NVLink error counter grows at ``rate`` per minute for ``duration``."""

    rate: Annotated[float, pydantic.Field(gt=0)]
    duration: Duration = timedelta(hours=1)
    counter: Literal["crc_flit", "crc_data", "replay", "recovery"] = "crc_flit"


class SxidPayload(NodePayload):
    """An NVSwitch ``SXid`` kernel line from one of the node's switches (``switch`` is its
    index), in the driver's format (NVIDIA Fabric Manager user guide, "NVSwitch SXid errors")."""

    sxid: Annotated[int, pydantic.Field(ge=1, le=99999)]
    severity: Literal["Fatal", "Non-fatal"]
    message: Annotated[str, pydantic.Field(min_length=1)]
    switch: Annotated[int, pydantic.Field(ge=0, le=15)] = 0


class FabricPayload(NodePayload):
    """Every GPU of the node reports this NVLink fabric registration (``nvidia-smi -q``'s
    Fabric State and Status): ``Not Started`` when Fabric Manager never came up."""

    state: Literal["Not Started", "In Progress", "Completed"]
    status: Annotated[str, pydantic.Field(min_length=1)] = "N/A"


class GpuRecoveryPayload(GpuPayload):
    """The driver's recovery action on the GPU changes (Xid 154); nvidia-smi's
    ``gpu_recovery_action`` reports it until the repair. ``logged: false``: its kernel line
    never reaches the node's kernel log file (journald rate-limited or rotated it)."""

    action: Literal["GPU Reset", "Node Reboot", "Drain P2P", "Drain and Reset"]
    logged: bool = True


class IbFlapPayload(NodePayload):
    """An InfiniBand port (``device/port``) goes down and back ``count`` times, ``every`` apart."""

    port: Annotated[str, pydantic.Field(pattern=r"^[A-Za-z0-9_.-]+/[0-9]+$")] = "mlx5_0/1"
    count: Annotated[int, pydantic.Field(ge=1, le=1000)] = 1
    every: Duration = timedelta(minutes=2)


PAYLOADS: dict[str, type[_Strict]] = {
    "xid": XidPayload,
    "gpu_lost": GpuLostPayload,
    "dbe": DbePayload,
    "phantom": GpuPayload,
    "phantom_clear": GpuPayload,
    "workload": WorkloadPayload,
    "reboot": RestartPayload,
    "power_cycle": RestartPayload,
    "gpu_reset": GpuPayload,
    "driver_upgrade": DriverUpgradePayload,
    "pcie_degrade": PcieDegradePayload,
    "dcgm_exporter_restart": NodePayload,
    "device_plugin_restart": NodePayload,
    "gfd_restart": CountPayload,
    "mig_reconfig": DipPayload,
    "kube_proxy_down": NodePayload,
    "ipvs_unpersist": NodePayload,
    "ipvs_load": IpvsLoadPayload,
    "dns_upstream": DnsUpstreamPayload,
    "cordon": CordonPayload,
    "uncordon": NodePayload,
    "annotate": AnnotatePayload,
    "prometheus_down": PrometheusDownPayload,
    "bad_metric": BadMetricPayload,
    "forged_metric": ForgedMetricPayload,
    "exporter_down": ExporterDownPayload,
    "job_hang": JobHangPayload,
    "host_job": HostJobPayload,
    "nvreg_exclude": GpuPayload,
    "host_config": HostConfigPayload,
    "rollout": RolloutPayload,
    "gpu_slow": GpuSlowPayload,
    "gang_job": GangJobPayload,
    "throttle": ThrottlePayload,
    "nvlink_errors": NvlinkErrorsPayload,
    "ib_flap": IbFlapPayload,
    "sxid": SxidPayload,
    "fabric": FabricPayload,
    "gpu_recovery": GpuRecoveryPayload,
}

# ---- file sections ---------------------------------------------------------------------------


class HostSettings(_Strict):
    """Host facts of a node; fleet-wide in ``fleet``, per node in ``fleet.overrides``."""

    driver: Version | None = None
    kernel_release: Version | None = None
    kubelet_version: Version | None = None
    ipvs_persisted: bool | None = None
    ipvs_module_available: bool | None = None
    dns_servers: list[str] | None = None
    resolv_stub: bool | None = None
    auto_upgrades: bool | None = None
    nvidia_blacklisted: bool | None = None
    packages_held: bool | None = None
    rke2_units: list[str] | None = None
    swap_enabled: bool | None = None
    # gpuguard's node agent runs there (the demo runs the real one, as the chart's DaemonSet
    # does on every GPU node; a scenario switches it off per node or fleet-wide)
    agent: bool | None = None
    # the agent also reads the GPUs' persistent states each cycle (``gpuguard agent
    # --gpu-state``: the driver's recovery action, the NVLink fabric registration)
    gpu_state: bool | None = None
    # the NVIDIA GPU Operator manages the node: its nvidia.com/gpu.deploy.* labels, its
    # device plugin follows nvidia.com/gpu.deploy.device-plugin (sim/gpu_operator.py)
    gpu_operator: bool | None = None
    # how the node's BMC answers a Redfish power cycle (sim/bmc.py): it does it, refuses
    # (401) or never answers (timeout)
    bmc: Literal["answers", "refuses", "times-out"] | None = None
    # how the node's GPUs answer gpuguard's reset Job (`nvidia-smi -r -i`, demo/job_commands.py):
    # they reset, or nvidia-smi fails ("Unable to reset", the GPU untouched)
    gpu_reset: Literal["answers", "fails"] | None = None


class FleetSpec(HostSettings):
    nodes: Annotated[int, pydantic.Field(ge=1, le=10_000)] | list[pydantic.StrictStr]
    gpus_per_node: Annotated[int, pydantic.Field(ge=1, le=16)] = 8
    model: str = "NVIDIA GeForce RTX 5090"
    overrides: dict[NodeRef, HostSettings] = pydantic.Field(default_factory=dict)


class ExpectSpec(_Strict):
    isolate: list[NodeRef] = pydantic.Field(default_factory=list)
    never_isolate: list[NodeRef] = pydantic.Field(default_factory=list)
    isolate_within: Duration | None = None
    isolate_gpus: list[GpuRef] = pydantic.Field(default_factory=list)  # GPU-level isolations


class ScenarioFile(_Strict):
    name: Annotated[str, pydantic.Field(min_length=1)]
    description: str = ""
    fleet: FleetSpec
    events: list[Any] = pydantic.Field(default_factory=list)
    expect: ExpectSpec = ExpectSpec()
    start: datetime | None = None
    hostname_label: Literal["Hostname", "hostname"] = "Hostname"
    xid_count_metric: bool = False
    xid_gauge_zero: bool = False  # dcgm-exporter's Xid gauge reads 0 on a GPU without one
    duration: Duration = DEFAULT_DURATION
    dra: bool = False  # NVIDIA's DRA driver publishes ResourceSlices (sim/dra.py)


# ---- the loaded scenario ---------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    """One node of the fleet with every host fact decided (fleet value, then override)."""

    name: str
    gpus: int
    model: str
    driver: str = "580.126.09"
    kernel_release: str = "6.8.0-45-generic"
    kubelet_version: str = "v1.34.3+rke2r1"
    ipvs_persisted: bool = True
    ipvs_module_available: bool = True
    dns_servers: tuple[str, ...] = ("10.0.0.2",)
    resolv_stub: bool = True
    auto_upgrades: bool = False
    nvidia_blacklisted: bool = False
    packages_held: bool = False
    rke2_units: tuple[str, ...] = ("rke2-agent",)
    swap_enabled: bool = False
    agent: bool = True
    gpu_state: bool = False
    gpu_operator: bool = False
    bmc: str = "answers"
    gpu_reset: str = "answers"


@dataclass(frozen=True)
class Event:
    """One timed event; ``node`` is the resolved node name (None for cluster-wide events)."""

    index: int  # position in the file, for messages
    at: timedelta
    kind: str
    node: str | None
    payload: _Strict


@dataclass(frozen=True)
class Expectations:
    isolate: tuple[str, ...] = ()
    never_isolate: tuple[str, ...] = ()
    isolate_within: timedelta | None = None
    isolate_gpus: tuple[str, ...] = ()  # node/index


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    source: str  # the file it came from, for messages
    nodes: tuple[NodeSpec, ...]
    events: tuple[Event, ...]  # sorted by (at, index)
    expect: Expectations
    start: datetime
    hostname_label: str
    xid_count_metric: bool
    duration: timedelta  # how long to run after the last event
    dra: bool = False  # the cluster allocates GPUs through DRA (sim/dra.py)
    xid_gauge_zero: bool = False  # dcgm-exporter's Xid gauge reads 0 on a GPU without one

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    @property
    def end(self) -> timedelta:
        """The offset the scenario runs to: the last event plus ``duration``."""
        last = max((e.at for e in self.events), default=timedelta(0))
        return last + self.duration


# ---- loading ---------------------------------------------------------------------------------


def load(path: Path) -> Scenario:
    """Read and validate a scenario file; ScenarioError names the file on any problem."""
    try:
        text = input_files.read_text(path)
    except InputError as e:
        raise ScenarioError(f"cannot read scenario file: {e}") from e
    return loads(text, source=str(path))


def loads(text: str, *, source: str = "<scenario>") -> Scenario:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ScenarioError(f"{source}: not valid YAML: {_yaml_problem(e)}") from e
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: expected a mapping with name, fleet, events")
    return from_mapping(data, source=source)


LONGEST_OFFSET = timedelta(days=3650)  # a decade: far beyond any fleet's history, and a date


def from_mapping(data: Mapping[str, Any], *, source: str = "<scenario>") -> Scenario:
    parsed = _validate(ScenarioFile, data, f"{source}: ")
    nodes = _fleet_nodes(parsed.fleet, source)
    names = tuple(n.name for n in nodes)
    events = [_event(raw, i, names, parsed.fleet.gpus_per_node, source) for i, raw in
              enumerate(parsed.events)]
    _check_workload_names(events, source)
    return Scenario(
        name=parsed.name,
        description=parsed.description.strip(),
        source=source,
        nodes=nodes,
        events=tuple(sorted(events, key=lambda e: (e.at, e.index))),
        expect=_expectations(parsed.expect, names, source),
        start=_start(parsed.start, source),
        hostname_label=parsed.hostname_label,
        xid_count_metric=parsed.xid_count_metric,
        duration=parsed.duration,
        dra=parsed.dra,
        xid_gauge_zero=parsed.xid_gauge_zero,
    )


def shipped_names() -> list[str]:
    """Names of the scenarios packaged with gpuguard (``gpuguard sim list``)."""
    folder = resources.files("gpuguard.sim") / "scenarios"
    return sorted(p.name.removesuffix(".yaml") for p in folder.iterdir()
                  if p.name.endswith(".yaml"))


def load_shipped(name: str) -> Scenario:
    if name not in shipped_names():
        known = ", ".join(shipped_names())
        raise ScenarioError(f"{name}: no such file or shipped scenario (shipped: {known})")
    text = (resources.files("gpuguard.sim") / "scenarios" / f"{name}.yaml").read_text("utf-8")
    return loads(text, source=f"{name}.yaml")


def resolve(ref: str) -> Scenario:
    """A scenario from a file path, else from the shipped scenario of that name."""
    path = Path(ref)
    if path.is_file():
        return load(path)
    return load_shipped(ref.removesuffix(".yaml"))


# ---- helpers ---------------------------------------------------------------------------------


def _validate(model: type[_Model], data: Any, where: str) -> _Model:
    """Validate with pydantic; the first problem becomes a ScenarioError naming its key path."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(part) for part in first["loc"] if not _is_type_tag(part))
        raise ScenarioError(f"{where}{key}: {_message(first)}") from e


def _is_type_tag(part: int | str) -> bool:
    """pydantic puts the union member tried (``int``, ``list[int]``) into error locations."""
    return isinstance(part, str) and (part in _TYPE_TAGS or "[" in part)


_TYPE_TAGS = frozenset({"int", "str", "float", "bool", "constrained-int", "constrained-float",
                        "constrained-str", "none"})


def _message(error: Any) -> str:
    inner = (error.get("ctx") or {}).get("error")
    if isinstance(inner, InputError):
        return str(inner).removeprefix("duration: ")
    if error["type"] == "missing":
        return "missing"
    hint = ""
    if error["type"] == "string_type" and isinstance(error.get("input"), int | float):
        hint = "; YAML read it as a number: quote it, e.g. \"580.95.05\""
    return f"{error['msg']} (got {error.get('input')!r}){hint}"


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{getattr(e, 'problem', None) or e}{where}"


def _start(start: datetime | None, source: str) -> datetime:
    if start is None:
        return clock.DEFAULT_EPOCH
    if start.tzinfo is None:
        raise ScenarioError(f"{source}: start: needs a timezone, e.g. 2026-09-10T13:00:00Z")
    return start


def _fleet_nodes(fleet: FleetSpec, source: str) -> tuple[NodeSpec, ...]:
    names = _node_names(fleet.nodes, source)
    overrides = {_resolve_node(ref, names, f"{source}: fleet.overrides.{ref}"): settings
                 for ref, settings in fleet.overrides.items()}
    return tuple(_node_spec(name, fleet, overrides.get(name)) for name in names)


def _node_names(nodes: int | list[str], source: str) -> tuple[str, ...]:
    if isinstance(nodes, int):
        width = max(3, len(str(nodes - 1)))
        return tuple(f"{GENERATED_NAME_PREFIX}{i:0{width}d}" for i in range(nodes))
    if not nodes:
        raise ScenarioError(f"{source}: fleet.nodes: needs at least one node")
    for i, name in enumerate(nodes):
        if not _NODE_NAME.match(name):
            raise ScenarioError(f"{source}: fleet.nodes.{i}: {name!r} is not a valid node name")
        if name in nodes[:i]:
            raise ScenarioError(f"{source}: fleet.nodes.{i}: {name!r} appears twice")
    return tuple(nodes)


def _node_spec(name: str, fleet: FleetSpec, override: HostSettings | None) -> NodeSpec:
    values: dict[str, Any] = {}
    for layer in (fleet, override):
        if layer is None:
            continue
        for key in HostSettings.model_fields:
            value = getattr(layer, key)
            if value is not None:
                values[key] = tuple(value) if isinstance(value, list) else value
    return NodeSpec(name=name, gpus=fleet.gpus_per_node, model=fleet.model, **values)


def _resolve_node(ref: int | str, names: tuple[str, ...], where: str) -> str:
    if isinstance(ref, int):
        if 0 <= ref < len(names):
            return names[ref]
        raise ScenarioError(f"{where}: node index {ref} is outside the fleet (0-{len(names) - 1})")
    if ref in names:
        return ref
    raise ScenarioError(f"{where}: no node {ref!r} in the fleet ({_preview(names)})")


def _preview(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f", ... {len(names)} nodes" if len(names) > 5 else "")


def _event(raw: Any, index: int, names: tuple[str, ...], gpus: int, source: str) -> Event:
    where = f"{source}: events[{index}]"
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where}: expected a mapping like {{at: 10m, xid: {{...}}}}")
    if "at" not in raw:
        raise ScenarioError(f"{where}.at: missing (an offset like 90s, 10m, 3d)")
    try:
        at = durations.parse_duration(raw["at"], what=f"{where}.at")
    except InputError as e:
        raise ScenarioError(str(e)) from e
    if at > LONGEST_OFFSET:
        raise ScenarioError(f"{where}.at: {raw['at']!r} is more than "
                            f"{LONGEST_OFFSET.days} days after the start")
    kinds = [k for k in raw if k != "at"]
    if len(kinds) != 1:
        raise ScenarioError(f"{where}: expected exactly one event kind beside 'at', got {kinds}")
    kind = str(kinds[0])
    if kind not in PAYLOADS:
        raise ScenarioError(f"{where}.{kind}: unknown event kind (known: {', '.join(PAYLOADS)})")
    payload = _validate(PAYLOADS[kind], raw[kind] or {}, f"{where}.{kind}.")
    node = _payload_node(payload, names, f"{where}.{kind}.node")
    if isinstance(payload, ForgedMetricPayload):
        _resolve_node(payload.claims, names, f"{where}.{kind}.claims")
    _check_gpus(payload, gpus, f"{where}.{kind}")
    return Event(index=index, at=at, kind=kind, node=node, payload=payload)


def _payload_node(payload: _Strict, names: tuple[str, ...], where: str) -> str | None:
    if isinstance(payload, NodePayload):
        return _resolve_node(payload.node, names, where)
    return None


def _check_gpus(payload: _Strict, gpus: int, where: str) -> None:
    indices: list[int] = []
    if isinstance(payload, GpuPayload):
        indices = [payload.gpu]
        where += ".gpu"
    elif isinstance(payload, WorkloadPayload):
        where += ".gpus"
        if isinstance(payload.gpus, int):
            if payload.gpus > gpus:
                raise ScenarioError(f"{where}: asks for {payload.gpus} GPUs, a node has {gpus}")
            return
        indices = payload.gpus
        if not indices or len(set(indices)) != len(indices):
            raise ScenarioError(f"{where}: expected distinct GPU indices, got {indices}")
    for index in indices:
        if index >= gpus:
            raise ScenarioError(f"{where}: GPU {index} is outside 0-{gpus - 1}")


def _check_workload_names(events: list[Event], source: str) -> None:
    """Workload pods are created in the store: two with one name would collide mid-run."""
    seen: set[tuple[str, str]] = set()
    for event in events:
        payload = event.payload
        if isinstance(payload, WorkloadPayload) and payload.name is not None:
            key = (payload.namespace, payload.name)
            if key in seen:
                raise ScenarioError(f"{source}: events[{event.index}].workload.name: "
                                    f"{payload.name!r} is already used by an earlier workload")
            seen.add(key)


def _expectations(expect: ExpectSpec, names: tuple[str, ...], source: str) -> Expectations:
    isolate = tuple(_resolve_node(r, names, f"{source}: expect.isolate") for r in expect.isolate)
    never = tuple(
        _resolve_node(r, names, f"{source}: expect.never_isolate") for r in expect.never_isolate
    )
    both = sorted(set(isolate) & set(never))
    if both:
        raise ScenarioError(f"{source}: expect: {both} both in isolate and never_isolate")
    for ref in expect.isolate_gpus:
        _resolve_node(ref.split("/")[0], names, f"{source}: expect.isolate_gpus")
    return Expectations(isolate=isolate, never_isolate=never,
                        isolate_within=expect.isolate_within,
                        isolate_gpus=tuple(expect.isolate_gpus))
