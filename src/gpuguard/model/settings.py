"""gpuguard's settings: one typed tree, validated at start, passed down explicitly.

Sources, later ones winning: defaults, a YAML file (``--config``), ``GPUGUARD_*`` environment
variables with ``__`` between levels (``GPUGUARD_ISOLATION__HOLD_WINDOW=5m``). Durations take
``90s``/``10m``/``24h``. A bad value fails at start with the field's path, e.g.
``settings.yaml: isolation.hold_window: expected a duration like 90s, 10m ...``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from gpuguard.errors import InputError
from gpuguard.model import durations


def _duration(value: Any) -> Any:
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return durations.parse_duration(value)
    return value


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class IsolationSettings(_Section):
    """When a node is auto-cordoned (DESIGN §5)."""

    hold_window: Duration = Field(
        default=timedelta(minutes=10),
        description="GPU loss must hold this long with a hardware Xid before isolation "
        "(seed: 10 min; filters driver-upgrade and MIG dips).",
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
    max_isolations_per_tick: int = Field(default=1, ge=0, description="Seed: one per cycle.")
    breaker_max_nodes: int = Field(
        default=5, ge=0, description="No new isolation while this many nodes are auto-isolated."
    )
    breaker_max_fraction: float = Field(
        default=0.10,
        ge=0.0,
        le=1.0,
        description="...or this fraction of GPU nodes (whichever cap is smaller; at least one).",
    )


class PrometheusSettings(_Section):
    url: str = Field(default="http://prometheus-operated.monitoring:9090")
    staleness: Duration = Field(
        default=timedelta(minutes=2),
        description="Data older than this is an error (fail closed), not 'all healthy'.",
    )
    timeout: Duration = Field(default=timedelta(seconds=10))


class ControllerSettings(_Section):
    interval: Duration = Field(default=timedelta(seconds=30), description="Time between ticks.")
    namespace: str = Field(default="gpuguard", description="Where the Lease and ledger live.")
    lease_name: str = Field(default="gpuguard-leader")
    lease_duration: Duration = Field(
        default=timedelta(seconds=15),
        description="A standby takes over after the Lease went unrenewed this long.",
    )
    renew_deadline: Duration = Field(
        default=timedelta(seconds=10),
        description="A leader stops acting if it could not renew for this long.",
    )
    renew_every: Duration = Field(default=timedelta(seconds=2), description="Lease retry period.")
    metrics_port: int = Field(default=9808, ge=0, le=65535)
    xid_overrides: Path | None = Field(
        default=None, description="YAML file of Xid class overrides (see `xid explain --help`)."
    )


class NotificationSettings(_Section):
    webhook_url: str | None = Field(
        default=None, description="Where to post a notice for every action; unset = off."
    )
    format: Literal["alertmanager", "json"] = Field(
        default="json",
        description="alertmanager: POST /api/v2/alerts of Alertmanager; json: a generic object.",
    )
    timeout: Duration = Field(default=timedelta(seconds=5))


class GuardSettings(_Section):
    """The whole tree."""

    isolation: IsolationSettings = IsolationSettings()
    prometheus: PrometheusSettings = PrometheusSettings()
    controller: ControllerSettings = ControllerSettings()
    notifications: NotificationSettings = NotificationSettings()

    @classmethod
    def load(
        cls, path: Path | None = None, environ: Mapping[str, str] | None = None
    ) -> GuardSettings:
        """Defaults, then the YAML file, then ``GPUGUARD_*`` variables of ``environ``."""
        tree: dict[str, Any] = _read_yaml(path) if path else {}
        for key, value in (environ or {}).items():
            if key.startswith("GPUGUARD_") and "__" in key:
                _set_path(tree, key.removeprefix("GPUGUARD_").lower().split("__"), value)
        try:
            return cls.model_validate(tree)
        except ValidationError as e:
            raise InputError(_describe(e, str(path) if path else "environment")) from e


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputError(f"{path}: cannot read settings: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InputError(f"{path}: not valid YAML: {e}") from e
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise InputError(f"{path}: settings must be a mapping, got {type(loaded).__name__}")
    return loaded


def _set_path(tree: dict[str, Any], keys: list[str], value: str) -> None:
    for key in keys[:-1]:
        tree = tree.setdefault(key, {})
    tree[keys[-1]] = value


def _describe(error: ValidationError, origin: str) -> str:
    lines = [
        f"{origin}: {'.'.join(str(p) for p in item['loc'])}: {item['msg']}"
        for item in error.errors()
    ]
    return "invalid settings:\n  " + "\n  ".join(lines)
