"""Per-GPU-model facts, packaged as data: idle power, board power, max SM clock.

The phantom detector estimates wasted watts as (power now - the model's idle power) and reads
"pinned at max clock" against the model's max SM clock; both need a per-model table. Models are
matched on dcgm-exporter's ``modelName`` by substring, longest match first (``H200 NVL`` before
``H200``), so a new card variant falls to its family; an unknown model gets the ``generic``
entry, flagged as ``known=False`` so reports can say the numbers are assumptions. Other
per-model facts (expected TFLOPS for burn-in) belong in this same table.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from gpuguard.errors import CatalogError

PACKAGED_RESOURCE = "data/gpu_power.json"


@dataclass(frozen=True, slots=True)
class GpuModel:
    """Facts about one GPU model; ``source`` says where each number comes from."""

    match: str
    idle_power_w: float
    max_power_w: float
    max_sm_clock_mhz: float
    source: str
    known: bool = True


@dataclass(frozen=True, slots=True)
class GpuModelTable:
    models: tuple[GpuModel, ...]
    generic: GpuModel

    def lookup(self, model_name: str) -> GpuModel:
        """The entry whose ``match`` occurs in ``model_name`` (longest first), else generic."""
        lowered = model_name.lower()
        matches = [m for m in self.models if m.match.lower() in lowered]
        return max(matches, key=lambda m: len(m.match), default=self.generic)


@functools.cache
def load_table() -> GpuModelTable:
    """The packaged table; CatalogError naming the entry when it is malformed."""
    resource = resources.files("gpuguard.catalog").joinpath(PACKAGED_RESOURCE)
    try:
        raw = json.loads(resource.read_text(encoding="utf-8"))
        models = tuple(_entry(item, f"models[{i}]") for i, item in enumerate(raw["models"]))
        generic = _entry(raw["generic"], "generic", known=False)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CatalogError(f"{PACKAGED_RESOURCE}: {e}") from e
    return GpuModelTable(models, generic)


def _entry(item: Any, where: str, *, known: bool = True) -> GpuModel:
    try:
        return GpuModel(
            match=str(item["match"]),
            idle_power_w=float(item["idle_power_w"]),
            max_power_w=float(item["max_power_w"]),
            max_sm_clock_mhz=float(item["max_sm_clock_mhz"]),
            source=str(item["source"]),
            known=known,
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CatalogError(f"{PACKAGED_RESOURCE}: {where}: {e!r}") from e
