"""gpuguard's settings: one typed tree, validated at start, passed down explicitly.

Sources, later ones winning: defaults, a YAML file (``--config``), ``GPUGUARD_*`` environment
variables with ``__`` between levels (``GPUGUARD_ISOLATION__HOLD_WINDOW=5m``); a list or map
from a variable is JSON (``[79,48]``) or comma-separated (``79,48``; ``key=value,...``).
Durations need their unit: ``90s``/``10m``/``24h`` (a bare ``5`` is refused). A bad value fails
at start naming where it came from, e.g. ``settings.yaml: isolation.hold_window: ...`` or
``GPUGUARD_ISOLATION__HOLD_WINDOW='5': ...``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_origin

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)

from gpuguard.errors import InputError
from gpuguard.model import bounds, durations, input_files

_BARE_NUMBER = re.compile(r"\s*\d+(?:\.\d+)?\s*")


def _duration(value: Any) -> Any:
    """A duration with its unit: a bare number is refused (is ``5`` seconds or minutes?)."""
    if (isinstance(value, int | float) and not isinstance(value, bool)) or (
        isinstance(value, str) and _BARE_NUMBER.fullmatch(value)
    ):
        raise ValueError(f"{value!r} has no unit: write e.g. {value}s or {value}m")
    if isinstance(value, str):
        return durations.parse_duration(value)
    return value


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError(f"must be longer than 0s, got {durations.format_duration(value)}")
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]
# an interval, timeout or lease time: 0s would be a busy loop or a request that cannot succeed
PositiveDuration = Annotated[timedelta, BeforeValidator(_duration), AfterValidator(_positive)]
HttpUrl = Annotated[str, AfterValidator(bounds.http_url)]


DEFAULT_EVIDENCE_DEADLINE = timedelta(minutes=10)  # controller.evidence_deadline
DEFAULT_BURNIN_DEADLINE = timedelta(minutes=90)  # return_to_pool.burnin_deadline


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IsolationSettings(_Section):
    """When a node is auto-cordoned (docs/design.md#isolation)."""

    hold_window: Duration = Field(
        default=timedelta(minutes=10),
        description="GPU loss must hold this long with a hardware Xid before isolation "
        "(10 min filters driver-upgrade and MIG dips; docs/design.md#incidents).",
    )
    fast_path_xids: frozenset[int] = Field(
        default=frozenset({79}),
        description="Xids unambiguous enough to isolate on the first tick that also sees the "
        "GPU gone (capacity > allocatable), skipping the hold window.",
    )
    fast_path_fallen_off_bus: bool = Field(
        default=True,
        description="The kernel's non-Xid 'fallen off the bus' message takes the fast path.",
    )
    xid_lookback: Duration = Field(
        default=timedelta(hours=24),
        description="How far back an Xid counts as current (the gauge rule's 24 h).",
    )
    max_isolations_per_tick: int = Field(
        default=1, ge=0, description="At most this many nodes isolated per tick."
    )
    # The storm breaker; docs/breaker.md has the arithmetic for 4 to 10,000 nodes.
    breaker_window: Duration = Field(
        default=timedelta(hours=1),
        description="The sliding window of the rate limit.",
    )
    breaker_rate_fraction: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="Unconfirmed isolations allowed to start within the window, as a fraction"
        " of GPU nodes...",
    )
    breaker_rate_min: int = Field(
        default=2, ge=0, description="...but never fewer than this (the small-fleet floor)."
    )
    breaker_level_fraction: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Unconfirmed isolations allowed out of service at once, as a fraction of"
        " GPU nodes...",
    )
    breaker_level_min: int = Field(
        default=2, ge=0, description="...but never fewer than this (the small-fleet floor)..."
    )
    breaker_level_max_nodes: int | None = Field(
        default=None, ge=0, description="...and never more than this many nodes (unset: no cap)."
    )
    breaker_burst_fraction: float = Field(
        default=0.01,
        ge=0.0,
        le=1.0,
        description="This many candidates at one instant, as a fraction of GPU nodes, trip the"
        " breaker...",
    )
    breaker_burst_min: int = Field(
        default=3, ge=1, description="...but never fewer than this many candidates."
    )
    breaker_burst_admit: int = Field(
        default=1,
        ge=0,
        description="Candidates isolated at the instant of a trip (their evidence tells whether"
        " the storm is real); after it, none until the candidates clear or"
        " `gpuguard breaker reset`.",
    )


class GpuIsolationSettings(_Section):
    """When one GPU is taken out instead of its node (docs/gpu-isolation.md)."""

    enabled: bool = Field(
        default=True,
        description="Isolate one GPU (its node keeps serving) when the fault belongs to that "
        "card; false: every isolation cordons the node.",
    )
    gpu_xids: frozenset[int] = Field(
        default=frozenset({48, 63, 64, 94, 95}),
        description="Xids that belong to one card (ECC double-bit errors, row remapping, "
        "contained/uncontained ECC errors): the GPU is isolated when its node is otherwise "
        "sound.",
    )
    fabric_xids: frozenset[int] = Field(
        default=frozenset({74}),
        description="NVLink / fabric Xids: the node is isolated (the fault spans GPUs).",
    )
    node_after_slot_faults: int = Field(
        default=3,
        ge=1,
        description="The fault that makes this many in one slot (the ledger's history, this "
        "one included) isolates the node: the slot, riser or power needs hands.",
    )
    evict_pods: bool = Field(
        default=False,
        description="Evict the pods on an isolated GPU (only those, through the Eviction API: "
        "a PodDisruptionBudget that forbids it makes gpuguard retry next tick, never force), "
        "once the GPU is held; false: they are named and left running.",
    )
    dra_taint_effect: Literal["NoSchedule", "NoExecute"] = Field(
        default="NoSchedule",
        description="On clusters serving DRA DeviceTaintRules (resource.k8s.io/v1): "
        "NoSchedule keeps new claims off the isolated GPU; NoExecute also evicts the pods "
        "whose claims use it (tolerations aside).",
    )
    rma_deadline: Duration = Field(
        default=timedelta(days=14),
        description="An isolated card waiting longer than this raises "
        "GpuguardIsolatedCardOverdue (the ECC incident's card waited 38 days).",
    )
    mechanisms: tuple[Literal["compute-prohibited", "device-plugin"], ...] = Field(
        default=("compute-prohibited", "device-plugin"),
        description="How the GPU is kept out: compute mode PROHIBITED (the safety net, also "
        "for jobs started on the host) and the per-node device-plugin instance that does not "
        "advertise it (host drivers).",
    )


class PrometheusSettings(_Section):
    url: HttpUrl = Field(
        default="http://prometheus-operated.monitoring:9090",
        description="Prometheus' base URL (the one holding dcgm-exporter, kube-state-metrics "
        "and the agent's series); --prometheus-url overrides it.",
    )
    staleness: PositiveDuration = Field(
        default=timedelta(minutes=2),
        description="Data older than this is an error (fail closed), not 'all healthy'.",
    )
    timeout: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description="How long one Prometheus query may take before the tick fails closed.",
    )
    scrape_scope: dict[str, str] = Field(
        default_factory=dict,
        description="Metric name prefix -> the label matchers of the scrape job that exports "
        "it, added to every selector of every query gpuguard sends (the controller, backtest, "
        "change, phantom, audit, health, gate), e.g. {DCGM_: "
        "'job=\"nvidia-dcgm-exporter\", namespace=\"gpu-operator\"'}: a series a tenant "
        "exports under an exporter's metric name is not read (docs/security.md#metric-forgery). "
        "Empty: unscoped by job; a series is still read only for its scrape target's node.",
    )


class ControllerSettings(_Section):
    interval: PositiveDuration = Field(
        default=timedelta(seconds=30), description="Time between ticks."
    )
    watch: bool = Field(
        default=True,
        description="`gpuguard run` keeps watch caches of Nodes and unfinished Pods (a paged "
        "list, then a watch) instead of listing them every tick, and ticks at once when a node "
        "newly reports a GPU gone from the bus (docs/design.md#fast-path). false: every tick "
        "lists them (small clusters; an API that refuses watches).",
    )
    namespace: str = Field(default="gpuguard", description="Where the Lease and ledger live.")
    image: str = Field(
        default="ghcr.io/gpuguard/gpuguard:0.1.0",
        description="gpuguard's image for the evidence and burn-in Jobs (the admission policy "
        "admits exactly this image; the Helm chart sets both).",
    )
    job_runtime_class: str | None = Field(
        default="nvidia",
        description="runtimeClassName of the evidence and burn-in Jobs: the NVIDIA container "
        "toolkit's RuntimeClass (the GPU Operator creates `nvidia`); null where the toolkit is "
        "the node's default runtime. The admission policy admits exactly this value.",
    )
    change_templates: str = Field(
        default="kube-system/gpuguard-change-templates",
        pattern=r"^[a-z0-9-]+/[a-z0-9.-]+$",
        description="NAMESPACE/NAME of the cluster admin's ConfigMap of approved change Job "
        "templates (method job, docs/change-management.md); the admission policy "
        "gpuguard-change-jobs reads the same one (the Helm chart sets both).",
    )
    recovery: bool = Field(
        default=True,
        description="After an isolation: evidence Job, verdict, ledger line, drafted request.",
    )
    evidence_deadline: PositiveDuration = Field(
        default=DEFAULT_EVIDENCE_DEADLINE,
        description="The evidence Job's activeDeadlineSeconds: the Job controller ends one that "
        "hangs (a read stuck in a dead GPU's driver) and gpuguard reads it as failed evidence "
        "(docs/design.md#recovery).",
    )
    lease_name: str = Field(
        default="gpuguard-leader",
        description="The Lease (in `namespace`) whose holder is the one replica that acts.",
    )
    lease_duration: PositiveDuration = Field(
        default=timedelta(seconds=15),
        description="A standby takes over after the Lease went unrenewed this long.",
    )
    renew_deadline: PositiveDuration = Field(
        default=timedelta(seconds=10),
        description="A leader stops acting if it could not renew for this long.",
    )
    renew_every: PositiveDuration = Field(
        default=timedelta(seconds=2), description="Lease retry period."
    )
    metrics_port: int = Field(
        default=9808, ge=0, le=65535,
        description="Port of the controller's /metrics, /healthz and /readyz.",
    )
    xid_overrides: Path | None = Field(
        default=None, description="YAML file of Xid class overrides (see `xid explain --help`)."
    )


class ChangeLimitSettings(_Section):
    """The cluster admin's ceiling on every declared change (docs/change-management.md): a
    change's author writes its ConfigMap, the installer these settings; a change asking for
    more is bounded here, never trusted."""

    max_unavailable: int = Field(
        default=3, ge=1,
        description="At most this many nodes out for one change at once, whatever the "
        "change's own max_unavailable says.",
    )
    min_available: float = Field(
        default=0.5, ge=0, le=1,
        description="At least this share of a change's pool stays schedulable, whatever the "
        "change's own min_available says.",
    )


class NotificationSettings(_Section):
    webhook_url: HttpUrl | None = Field(
        default=None, description="Where to post a notice for every action; unset = off."
    )
    format: Literal["alertmanager", "json"] = Field(
        default="json",
        description="alertmanager: POST /api/v2/alerts of Alertmanager; json: a generic object.",
    )
    timeout: PositiveDuration = Field(
        default=timedelta(seconds=5),
        description="How long one notice may take to post (a failure is logged, never fatal).",
    )


class PhantomSettings(_Section):
    """When a GPU counts as phantom-busy (docs/design.md#phantom-utilization): busy with nothing,
held.

    Phantom is waste to report, not a fault: by default gpuguard never cordons for it.
    """

    hold: Duration = Field(
        default=timedelta(minutes=15),
        description="The signature must hold this long (the phantom incident's draft rule: "
        "for: 15m; the incident's GPUs stayed stuck for hours; docs/design.md#incidents).",
    )
    sm_active_min: float = Field(
        default=0.95, ge=0.0, le=1.0,
        description="SM (or graphics engine) active ratio above which the GPU looks busy.",
    )
    util_min_pct: float = Field(
        default=95.0, ge=0.0, le=100.0,
        description="GPU util (%) used instead when DCGM profiling metrics are absent.",
    )
    dram_active_max: float = Field(
        default=0.02, ge=0.0, le=1.0, description="DRAM active ratio below which memory is idle."
    )
    fb_used_max_mib: float = Field(
        default=100.0, ge=0.0, description="Framebuffer used (MiB) below which FB is empty."
    )
    power_over_idle_min_w: float = Field(
        default=30.0, ge=0.0,
        description="Power must stay this far above the model's idle power (the phantom "
        "incident: ~114 W vs "
        "~15 W idle; the alert rule's 60 W sits between).",
    )
    sm_clock_near_max: float = Field(
        default=0.9, gt=0.0, le=1.0,
        description="Without a P-state series, SM clock >= this fraction of the model's max "
        "counts as pinned at P0.",
    )
    age_lookback: Duration = Field(
        default=timedelta(hours=24),
        description="How far back the signature's minutes are counted for GPU-hours so far.",
    )
    cordon: bool = Field(
        default=False,
        description="Opt-in: isolate a node with a phantom GPU instead of only reporting it.",
    )


class UtilizationSettings(_Section):
    """How a busy GPU's telemetry is read (docs/design.md#what-utilisation-means: util is not
efficiency)."""

    window: Duration = Field(default=timedelta(hours=1), description="Diagnosis window.")
    busy_util_pct: float = Field(
        default=80.0, ge=0.0, le=100.0, description="Average util at or above this is busy."
    )
    idle_util_pct: float = Field(
        default=1.0, ge=0.0, le=100.0,
        description="Max util below this over the window is idle (the GpuIdleExpensive rule).",
    )
    idle_window_min: Duration = Field(
        default=timedelta(hours=1),
        description="idle-expensive needs at least this long a window (a short pause is not).",
    )
    tensor_active_low: float = Field(
        default=0.10, ge=0.0, le=1.0, description="Average tensor pipe activity below this is low."
    )
    dram_active_high: float = Field(
        default=0.50, ge=0.0, le=1.0, description="Average DRAM activity above this is high."
    )
    sm_occupancy_low: float = Field(
        default=0.20, ge=0.0, le=1.0, description="Average SM occupancy below this is low."
    )


class HygieneSettings(_Section):
    """Workload settings that keep a failed job from leaving orphaned CUDA contexts."""

    min_grace_period: Duration = Field(
        default=timedelta(seconds=60),
        description="GPU pods with a shorter terminationGracePeriodSeconds are reported "
        "(Kubernetes' default is 30 s; cleanup needs time before SIGKILL, the phantom incident).",
    )


class ReturnSettings(_Section):
    """When an isolated node may go back to the pool (docs/design.md#return-to-pool)."""

    max_card_faults: int = Field(
        default=2,
        ge=1,
        description="Hold for a human when the faulty card has this many ledger faults "
        "(the 2nd fault of a card asks for inspection; docs/ledger.md).",
    )
    memory_test_xids: frozenset[int] = Field(
        default=frozenset({48, 63, 64, 94, 95, 140}),
        description="Memory-class Xids: the burn-in adds a memory test (tens of minutes; the "
        "ECC incident's card passed matmul and failed only memtest; docs/design.md#incidents).",
    )
    burnin_deadline: PositiveDuration = Field(
        default=DEFAULT_BURNIN_DEADLINE,
        description="The burn-in Job's activeDeadlineSeconds: a memory test (`dcgmi diag -r 4`) "
        "takes tens of minutes, up to ~45 on a 4-GPU Hopper; one that runs longer failed.",
    )
    require_conformance: bool = Field(
        default=False,
        description="Host conformance must be reported by the agent; when false, a node "
        "without the agent is not held for it (any reported FAIL still holds).",
    )
    require_row_remap: bool = Field(
        default=False,
        description="Row-remap pending must be reported; when false, a node whose cards do not "
        "export it (no ECC row remapping, e.g. pre-Ampere or GeForce) is not held for it.",
    )
    service_network_pods: tuple[str, ...] = Field(
        default=(
            "kube-proxy-",
            "rke2-canal-",
            "canal-",
            "calico-node-",
            "cilium-",
            "kube-flannel-ds-",
            "kube-router-",
            "antrea-agent-",
        ),
        description="Name prefixes of the kube-proxy and CNI pods that must be Ready on the node.",
    )


class HealthSettings(_Section):
    """The yes/no "fit to run training" verdict per node (docs/audit.md#health-verdict)."""

    label: bool = Field(
        default=False,
        description="Opt-in: the controller keeps the node label gpuguard.io/fit-to-train=yes|no "
        "up to date every tick, so training can select fit nodes (nodeSelector).",
    )


class FleetHealthSettings(_Section):
    """Scheduling and interconnect health findings (docs/fleet-health.md): read-only reports,
    never an action on a node or a workload."""

    gang_grace: Duration = Field(
        default=timedelta(minutes=10),
        description="A job's pod must be unschedulable this long, while others of the job hold "
        "GPUs, to be a partial-allocation deadlock (docs/fleet-health.md#gang-deadlock).",
    )
    window: Duration = Field(
        default=timedelta(minutes=15),
        description="Throttling and interconnect error counts are taken over this window.",
    )
    persistence_window: Duration = Field(
        default=timedelta(hours=6),
        description="A node that throttles or flaps over this longer window is listed in "
        "`gpuguard status` as persistently unhealthy.",
    )
    throttle_min_fraction: float = Field(
        default=0.25, ge=0.0, le=1.0,
        description="Share of the window a GPU must report a counted clock-event reason.",
    )
    throttle_reasons: frozenset[str] = Field(
        default=frozenset({"sw-thermal", "hw-thermal", "hw-slowdown", "hw-power-brake"}),
        description="Clock-event reasons that count as throttling; sw-power-cap is left out by "
        "default (a GPU at its power limit under full load reports it all the time).",
    )
    nvlink_errors_min: float = Field(
        default=10.0, ge=0.0,
        description="NVLink CRC (flit + data) and replay errors in the window that make a "
        "finding; any NVLink recovery error does.",
    )
    pcie_replays_min: float = Field(
        default=10.0, ge=0.0, description="PCIe replays in the window that make a finding."
    )
    ib_flaps_min: float = Field(
        default=1.0, ge=0.0,
        description="InfiniBand link-downed events of one port in the window that make a finding.",
    )
    persistent_ib_flaps: float = Field(
        default=3.0, ge=0.0,
        description="Link-downed events of one port over the persistence window that list the "
        "node as flapping persistently.",
    )
    topology_refresh: Duration = Field(
        default=timedelta(minutes=30), gt=timedelta(0),
        description="The agent's GPU topology is read fleet-wide this often and kept between "
        "reads (nodes without one are read on their own); kept at most twice this long when a "
        "read fails (docs/fleet-health.md#topology).",
    )


class RemediationSettings(_Section):
    """gpuguard's own repairs after a verdict, all opt-in per pool (docs/remediation.md)."""

    pool_label: str = Field(
        default="nvidia.com/gpu.product",
        description="The node label whose value names a node's pool (as `change drift`).",
    )
    power_cycle_pools: frozenset[str] = Field(
        default=frozenset(),
        description="Pools (values of `pool_label`) whose nodes gpuguard power-cycles through "
        "their BMC (Redfish) after a power-cycle verdict, once drained through the Eviction "
        "API; empty: none (the person's request, as before).",
    )
    hand_off_pools: frozenset[str] = Field(
        default=frozenset(),
        description="Pools whose power-cycle verdicts are handed to the cluster's remediator "
        "(medik8s NodeHealthCheck, Cluster API MachineHealthCheck, Karpenter node repair) as "
        "the node condition GpuguardRemediationRequired instead; a pool in both lists is "
        "refused at start (one actor per node).",
    )
    gpu_reset_pools: frozenset[str] = Field(
        default=frozenset(),
        description="Pools whose GPUs gpuguard resets (`nvidia-smi -r -i`, a pinned Job with "
        "CAP_SYS_ADMIN) after a gpu-reset verdict, the GPU held out and idle; empty: none (the "
        "person's request). The chart admits the reset Job only when it names a pool.",
    )
    bmc_secrets: dict[str, str] = Field(
        default={},
        description="Node name or pool -> the Secret (in `controller.namespace`) holding that "
        "BMC's address, username and password; a node's own entry wins. The chart grants "
        "`get` on exactly these names.",
    )
    bmc_timeout: PositiveDuration = Field(
        default=timedelta(seconds=60),
        description="How long one power cycle may take at the BMC (each request, and the wait "
        "for the power to go off); past it the action failed and the person's request says so.",
    )
    max_in_flight: int = Field(
        default=1,
        ge=1,
        description="Repairs carried out whose nodes have not returned yet, at most: a further "
        "node waits its turn (the breaker's limit on what gpuguard does at once).",
    )

    @model_validator(mode="after")
    def _one_actor(self) -> RemediationSettings:
        both = self.power_cycle_pools & self.hand_off_pools
        if both:
            raise ValueError(f"pools {sorted(both)} are in both power_cycle_pools and "
                             "hand_off_pools: one actor per node")
        return self


class GuardSettings(_Section):
    """The whole tree."""

    isolation: IsolationSettings = IsolationSettings()
    gpu_isolation: GpuIsolationSettings = GpuIsolationSettings()
    prometheus: PrometheusSettings = PrometheusSettings()
    controller: ControllerSettings = ControllerSettings()
    changes: ChangeLimitSettings = ChangeLimitSettings()
    phantom: PhantomSettings = PhantomSettings()
    utilization: UtilizationSettings = UtilizationSettings()
    hygiene: HygieneSettings = HygieneSettings()
    return_to_pool: ReturnSettings = ReturnSettings()
    health: HealthSettings = HealthSettings()
    notifications: NotificationSettings = NotificationSettings()
    fleet: FleetHealthSettings = FleetHealthSettings()
    remediation: RemediationSettings = RemediationSettings()

    @classmethod
    def load(
        cls, path: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> GuardSettings:
        """Defaults, then the YAML file, then ``GPUGUARD_*`` variables of ``environ``."""
        tree: dict[str, Any] = _read_yaml(path) if path else {}
        _refuse_renamed(tree, str(path))
        origins: dict[tuple[str, ...], str] = {}
        for name, value in sorted((environ or {}).items()):
            if name.startswith(_ENV_PREFIX) and "__" in name:
                keys = tuple(name.removeprefix(_ENV_PREFIX).lower().split("__"))
                _refuse_renamed({keys[0]: None}, name)
                _set_path(tree, keys, _env_value(cls, keys, value, name), path)
                origins[keys] = f"{name}={value!r}"
        try:
            return cls.model_validate(tree)
        except ValidationError as e:
            raise InputError(_describe(e, path, origins)) from e


_ENV_PREFIX = "GPUGUARD_"
RENAMED_SECTIONS = {"restore": "return_to_pool"}  # old name -> new (the lifecycle's vocabulary)


def _refuse_renamed(tree: Mapping[str, Any], where: str) -> None:
    """A section under its old name is refused with the new one, never silently ignored."""
    for old, new in RENAMED_SECTIONS.items():
        if old in tree:
            raise InputError(
                f"{where}: the settings section {old!r} is now {new!r} (GPUGUARD_{old.upper()}__*"
                f" is now GPUGUARD_{new.upper()}__*)"
            )
_COLLECTIONS = (list, tuple, set, frozenset, dict)


def _read_yaml(path: Path) -> dict[str, Any]:
    text = input_files.read_text(path, what="--config")
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from e
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InputError(f"{path}: settings must be a mapping, got {type(loaded).__name__}")
    return loaded


def _field_type(model: type[BaseModel], keys: tuple[str, ...]) -> Any:
    """The annotation of the field at ``keys`` (None for an unknown key: validation names it)."""
    annotation: Any = model
    for key in keys:
        fields = getattr(annotation, "model_fields", None)
        if fields is None or key not in fields:
            return None
        annotation = fields[key].annotation
    return annotation


def _env_value(model: type[BaseModel], keys: tuple[str, ...], value: str, name: str) -> Any:
    """A variable's text as the field wants it: lists and maps from JSON or comma-separated."""
    kind = get_origin(_field_type(model, keys)) or _field_type(model, keys)
    if kind not in _COLLECTIONS:
        return value
    text = value.strip()
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"{name}={value!r}: not valid JSON ({e.msg})") from e
    items = [item.strip() for item in text.split(",") if item.strip()]
    if kind is not dict:
        return items
    pairs = [item.partition("=") for item in items]
    if any(not sep for _, sep, _ in pairs):
        raise InputError(f"{name}={value!r}: expected key=value,... or a JSON object")
    return {k.strip(): v.strip() for k, _, v in pairs}


def _set_path(tree: dict[str, Any], keys: tuple[str, ...], value: Any, path: Path | None) -> None:
    for depth, key in enumerate(keys[:-1]):
        section = tree.setdefault(key, {})
        if not isinstance(section, dict):
            where = f"{path}: " if path else ""
            raise InputError(f"{where}{'.'.join(keys[: depth + 1])}: expected a mapping of "
                             f"settings, got {section!r}")
        tree = section
    tree[keys[-1]] = value


def _describe(
    error: ValidationError, path: Path | None, origins: Mapping[tuple[str, ...], str]
) -> str:
    """One line: each wrong field with where it came from (the variable, or file and field)."""
    problems = []
    for item in error.errors():
        loc = tuple(str(p) for p in item["loc"])
        field = ".".join(loc)
        origin = next((origins[loc[:n]] for n in range(len(loc), 0, -1) if loc[:n] in origins),
                      None)
        where = f"{origin} ({field})" if origin else (f"{path}: {field}" if path else field)
        problems.append(f"{where}: {item['msg']}")
    return "invalid settings: " + "; ".join(problems)
