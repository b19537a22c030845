"""A declared host change (driver, kernel, or any named change) and where each node stands in
its rollout (docs/change-management.md).

A change is a ConfigMap in gpuguard's namespace labelled ``gpuguard.io/change``: its
``change.yaml`` key is the declaration people write, its ``control`` key is ``run``, ``pause``
or ``abort`` (``gpuguard change pause|resume|abort``), and its ``status`` key is gpuguard's
report. Where a node stands is gpuguard's node annotation ``gpuguard.io/change`` (JSON), so a
restarted controller or a new leader reads the same rollout from the cluster alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Literal

import pydantic
import yaml

from gpuguard.errors import InputError
from gpuguard.model import annotation_keys, durations, fleet, timestamps
from gpuguard.model import return_to_pool as return_model

CONFIGMAP_LABEL = annotation_keys.PREFIX + "change"
"""On a ConfigMap in gpuguard's namespace: it declares a change (its value: the change's name)."""
SPEC_KEY = "change.yaml"
CONTROL_KEY = "control"
STATUS_KEY = "status"
KURED_LOCK = "weave.works/kured-node-lock"
"""kured's reboot lock: an annotation on its DaemonSet (kured's ``--lock-annotation``
default, see https://kured.dev/docs/operation/#manual-unlock)."""
DRIVER_LABELS = ("nvidia.com/cuda.driver-version.full",)
"""gpu-feature-discovery's label with the loaded driver's full version."""
GFD_DRIVER_PARTS = ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor",
                    "nvidia.com/cuda.driver.rev")  # older gpu-feature-discovery releases
_PERCENT = re.compile(r"^(100|[1-9][0-9]?)%$")
_TEMPLATE_NAME = r"^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$"
JOB_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+:~_-]{0,63}$")
"""What a change may pass to its Job's environment (a package version, the change's name): no
shell metacharacters, whatever the template's script does with it (the admission policy
``gpuguard-change-jobs`` checks the same pattern)."""
TEMPLATE_LABEL = annotation_keys.PREFIX + "change-template"
"""On a change Job and its pod: the admin's template it was built from."""


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """A Job template the cluster admin approved for changes (docs/change-management.md): keys
    ``NAME.image``, ``NAME.script`` and optionally ``NAME.privileged`` (``"true"``: a privileged
    container in the host's PID namespace, to nsenter into the host) of the admin's ConfigMap,
    which the ``gpuguard-change-jobs`` admission policy reads too."""

    name: str
    image: str
    script: str
    privileged: bool = False


def job_template(data: Mapping[str, str], name: str) -> JobTemplate:
    """Template ``name`` of the admin's ConfigMap data; InputError when it is not there."""
    image, script = data.get(f"{name}.image"), data.get(f"{name}.script")
    if not image or not script:
        raise InputError(f"job template {name}: no {name}.image and {name}.script in the "
                         "admin's template ConfigMap (docs/change-management.md)")
    return JobTemplate(name, image, script, data.get(f"{name}.privileged") == "true")


class Control(StrEnum):
    RUN = "run"
    PAUSE = "pause"
    ABORT = "abort"


class Method(StrEnum):
    """How a node gets changed: an external tool (Ansible, a person) that marks the node with
    ``gpuguard.io/change-applied=NAME`` once done, or a Job from the operator's template,
    pinned to the node. gpuguard never runs a package manager itself."""

    EXTERNAL = "external"
    JOB = "job"


class Phase(StrEnum):
    """Where one node stands (its ``gpuguard.io/change`` annotation)."""

    CORDONED = "cordoned"  # out of service for the change, waiting for its GPU pods to end
    APPLYING = "applying"  # the change was requested; waiting for it, the reboot, the checks
    BURN_IN = "burn-in"  # verified; the burn-in Job runs on the boot it verified
    DONE = "done"  # verified and returned to service
    FAILED = "failed"  # a check failed: stays cordoned, the rollout stops


class RolloutState(StrEnum):
    RUNNING = "running"
    PAUSED = "paused"
    STOPPED = "stopped"
    ABORTED = "aborted"
    COMPLETED = "completed"


WaveSize = int | str


def _default_waves() -> list[int | str]:
    return [1, "100%"]


class _Spec(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    driver: Annotated[str, pydantic.Field(min_length=1)] | None = None
    kernel: Annotated[str, pydantic.Field(min_length=1)] | None = None
    check: Annotated[str, pydantic.Field(min_length=1)] | None = None
    checks: list[str] | None = None
    selector: dict[str, str] = pydantic.Field(default_factory=dict)
    waves: list[pydantic.StrictInt | pydantic.StrictStr] = pydantic.Field(
        default_factory=_default_waves, min_length=1
    )
    canary: list[str] = pydantic.Field(default_factory=list)
    max_unavailable: Annotated[int, pydantic.Field(ge=1)] = 1
    min_available: Annotated[float, pydantic.Field(ge=0, le=1)] = 0.5
    method: Method = Method.EXTERNAL
    reboot: bool | None = None
    apply_timeout: str = "2h"
    verify_timeout: str = "30m"
    kured: str | None = "kube-system/kured"
    burnin: return_model.BurninMode | Literal["none"] = return_model.BurninMode.MATMUL
    burnin_timeout: str = "2h"
    drain_after: str | None = None
    job_template: Annotated[str, pydantic.Field(pattern=_TEMPLATE_NAME)] | None = None

    @pydantic.field_validator("waves")
    @classmethod
    def _waves(cls, waves: list[int | str]) -> list[int | str]:
        for wave in waves:
            if isinstance(wave, int) and wave < 1:
                raise ValueError(f"a wave of {wave} nodes: at least 1")
            if isinstance(wave, str) and not _PERCENT.match(wave):
                raise ValueError(f"{wave!r}: a node count or a percentage like '25%'")
        return waves


@dataclass(frozen=True, slots=True)
class ChangeSpec:
    """A change as declared. ``checks``: the conformance checks that must PASS after the
    change (None: the checks that passed on that node before the change, recorded in its mark
    as ``NodeMark.passed``); ``check`` adds the expected-state
    check of an arbitrary change. ``min_available``: the share of the pool's nodes that must
    stay schedulable (the pool's free-capacity floor). ``burnin``: the burn-in's mode after
    the checks pass (the Job the return to pool runs; None: no burn-in, e.g. a taint)."""

    name: str
    driver: str | None = None
    kernel: str | None = None
    check: str | None = None
    checks: tuple[str, ...] | None = None
    selector: Mapping[str, str] = field(default_factory=dict)
    waves: tuple[WaveSize, ...] = (1, "100%")
    canary: tuple[str, ...] = ()
    max_unavailable: int = 1
    min_available: float = 0.5
    method: Method = Method.EXTERNAL
    reboot: bool = True
    apply_timeout: timedelta = timedelta(hours=2)
    verify_timeout: timedelta = timedelta(minutes=30)
    kured: tuple[str, str] | None = ("kube-system", "kured")
    burnin: return_model.BurninMode | None = return_model.BurninMode.MATMUL
    burnin_timeout: timedelta = timedelta(hours=2)
    drain_after: timedelta | None = None  # opt-in: evict its GPU pods after this long cordoned
    job_template: str | None = None  # method job: the admin's approved template's name
    control: Control = Control.RUN

    def selects(self, node: fleet.Node) -> bool:
        return all(node.labels.get(k) == v for k, v in self.selector.items())


def parse_spec(name: str, text: str, control: str | None = None) -> ChangeSpec:
    """The change declared in a ConfigMap's ``change.yaml``; InputError names what is wrong."""
    where = f"change {name}: {SPEC_KEY}"
    try:
        raw = yaml.safe_load(text) or {}
        _refuse_renamed(raw, where)
        spec = _Spec.model_validate(raw)
    except yaml.YAMLError as e:
        raise InputError(f"{where}: not valid YAML: {e}") from e
    except pydantic.ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise InputError(f"{where}: {key}: {first['msg']}") from e
    if not (spec.driver or spec.kernel or spec.check):
        raise InputError(f"{where}: declare a driver, a kernel or an expected-state check")
    if (spec.method is Method.JOB) != (spec.job_template is not None):
        raise InputError(f"{where}: method job names its job_template, and only it does "
                         "(docs/change-management.md#how-a-node-is-changed)")
    for what, version in (("driver", spec.driver), ("kernel", spec.kernel)):
        if spec.method is Method.JOB and version and not JOB_VALUE.match(version):
            raise InputError(f"{where}: {what}: {version!r} is not a package version (letters, "
                             "digits and . + : ~ _ - only): it is passed to the change's Job")
    return ChangeSpec(
        name=name, driver=spec.driver, kernel=spec.kernel, check=spec.check,
        checks=tuple(spec.checks) if spec.checks is not None else None,
        selector=dict(spec.selector), waves=tuple(spec.waves), canary=tuple(spec.canary),
        max_unavailable=spec.max_unavailable, min_available=spec.min_available,
        method=spec.method,
        reboot=spec.reboot if spec.reboot is not None else bool(spec.driver or spec.kernel),
        apply_timeout=durations.parse_duration(spec.apply_timeout, what=f"{where}: apply_timeout"),
        verify_timeout=durations.parse_duration(spec.verify_timeout,
                                                what=f"{where}: verify_timeout"),
        kured=_kured(spec.kured, where),
        burnin=None if spec.burnin == "none" else return_model.BurninMode(spec.burnin),
        burnin_timeout=durations.parse_duration(spec.burnin_timeout,
                                                 what=f"{where}: burnin_timeout"),
        drain_after=None if spec.drain_after is None else durations.parse_duration(
            spec.drain_after, what=f"{where}: drain_after"),
        job_template=spec.job_template,
        control=parse_control(control, name),
    )  # fmt: skip


RENAMED_KEYS = {"burn_in": "burnin", "burn_in_timeout": "burnin_timeout"}
"""Keys of ``change.yaml`` that were renamed: burn-in is one word in every key (docs/design.md)."""


def _refuse_renamed(raw: object, where: str) -> None:
    for old, new in RENAMED_KEYS.items():
        if isinstance(raw, dict) and old in raw:
            raise InputError(f"{where}: {old} is now spelled {new} (docs/change-management.md)")


def parse_control(text: str | None, name: str) -> Control:
    try:
        return Control((text or Control.RUN).strip())
    except ValueError as e:
        raise InputError(
            f"change {name}: {CONTROL_KEY}: {text!r} is not run, pause or abort"
        ) from e


def _kured(text: str | None, where: str) -> tuple[str, str] | None:
    if not text:
        return None
    namespace, _, name = text.partition("/")
    if not namespace or not name:
        raise InputError(f"{where}: kured: {text!r} is not NAMESPACE/DAEMONSET")
    return namespace, name


@dataclass(frozen=True, slots=True)
class NodeMark:
    """One node's place in a change (its ``gpuguard.io/change`` annotation)."""

    change: str
    phase: Phase
    wave: int
    since: datetime
    boot: str = ""  # the boot ID when the change was requested (a reboot must change it)
    check: str | None = None  # the check that failed
    detail: str = ""
    gpus: int = 0  # GPU capacity when it was taken (0: unknown): all must come back
    was: str = ""  # "DRIVER|KERNEL" it ran when the change was requested (a stale label)
    passed: tuple[str, ...] | None = None
    """The checks that passed on the node when the change was requested: what a change
    without its own ``checks`` requires afterwards (None: not recorded, an older mark)."""

    def encode(self) -> str:
        body: dict[str, Any] = {"change": self.change, "phase": str(self.phase),
                                "wave": self.wave, "since": timestamps.format_utc(self.since)}
        if self.boot:
            body["boot"] = self.boot
        if self.check:
            body["check"] = self.check
        if self.detail:
            body["detail"] = self.detail[:300]
        if self.gpus:
            body["gpus"] = self.gpus
        if self.was:
            body["was"] = self.was
        if self.passed is not None:
            body["passed"] = sorted(self.passed)
        return json.dumps(body, separators=(",", ":"), sort_keys=True)


def read_mark(node: fleet.Node) -> NodeMark | None:
    """The node's change mark; InputError when it is there but unreadable (the caller skips
    that node: a malformed mark must never look like "not in the rollout")."""
    text = node.annotations.get(annotation_keys.CHANGE)
    if text is None:
        return None
    try:
        raw = json.loads(text)
        since = timestamps.parse_utc(raw["since"])
        if since is None:
            raise ValueError("since is not a time")
        return NodeMark(change=str(raw["change"]), phase=Phase(raw["phase"]),
                        wave=int(raw["wave"]), since=since, boot=str(raw.get("boot", "")),
                        check=raw.get("check"), detail=str(raw.get("detail", "")),
                        gpus=int(raw.get("gpus", 0)), was=str(raw.get("was", "")),
                        passed=_names(raw.get("passed")))
    except (ValueError, KeyError, TypeError) as e:
        raise InputError(
            f"node {node.name}: annotation {annotation_keys.CHANGE}: unreadable ({e})"
        ) from e


def _names(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise TypeError(f"passed: expected a list of check names, got {value!r}")
    return tuple(str(v) for v in value)


def driver_version(node: fleet.Node) -> str | None:
    """The loaded driver as gpu-feature-discovery labelled it (None: not labelled)."""
    for key in DRIVER_LABELS:
        if node.labels.get(key):
            return node.labels[key]
    parts = [node.labels.get(k) for k in GFD_DRIVER_PARTS]
    return ".".join(p for p in parts if p) if all(parts) else None


def out_for_change(node: fleet.Node) -> bool:
    """The node is out of service for a change (cordoned with gpuguard's change mark, not yet
    returned): never a fault, but capacity out, which the breaker's level counts
    (docs/breaker.md#change-cordons)."""
    if not node.unschedulable or annotation_keys.CHANGE not in node.annotations:
        return False
    try:
        mark = read_mark(node)
    except InputError:
        return True  # unreadable: counted as out (an unknown never makes room)
    return mark is not None and mark.phase is not Phase.DONE


def kured_holder(lock: str | None, now: datetime) -> str | None:
    """The holder named in kured's lock annotation, None when free. kured writes
    ``{"nodeID", "created", "TTL"}`` (TTL in nanoseconds, 0: no expiry; an expired lock is
    free, as kured's ``--lock-ttl`` treats it), or with ``--concurrency`` above 1
    ``{"maxOwners", "locks": [...]}``. A lock that cannot be read is held by someone unknown
    (never read as free)."""
    if lock is None or not lock.strip():
        return None
    try:
        raw = json.loads(lock)
    except ValueError:
        return "unknown (unreadable lock)"
    if not isinstance(raw, dict):
        return "unknown (unreadable lock)"
    entries = raw.get("locks") if "locks" in raw else [raw]
    if not isinstance(entries, list):
        return "unknown (unreadable lock)"
    held = [_holder(e, now) for e in entries]
    names = [h for h in held if h is not None]
    return ", ".join(names) or None


def _holder(entry: Any, now: datetime) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("nodeID"), str):
        return "unknown (unreadable lock)"
    ttl = entry.get("TTL") or 0
    created = timestamps.parse_utc(entry.get("created")) if isinstance(
        entry.get("created"), str) else None
    if (isinstance(ttl, int) and ttl > 0 and created is not None
            and created + timedelta(microseconds=ttl / 1000) < now):
        return None  # expired
    return str(entry["nodeID"])
