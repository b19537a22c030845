"""gpuguard's settings: one typed tree, validated at start, passed down explicitly.

Every field documents its default and why. A bad value fails at start with the field's path
(pydantic's error locations), never in the middle of a tick.
"""

from __future__ import annotations

from datetime import timedelta

from pydantic import BaseModel, ConfigDict, Field


class IsolationSettings(BaseModel):
    """When a node is auto-cordoned (DESIGN §5)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    hold_window: timedelta = Field(
        default=timedelta(minutes=10),
        description="GPU loss must hold this long with a hardware Xid before isolation "
        "(seed: 10 min, filters driver-upgrade and MIG dips).",
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
    xid_lookback: timedelta = Field(
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


class GuardSettings(BaseModel):
    """The whole tree."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    isolation: IsolationSettings = IsolationSettings()
