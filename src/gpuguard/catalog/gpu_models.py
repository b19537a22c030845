"""Per-GPU-model facts, packaged as one table: power, max SM clock and dense tensor TFLOPS.

The phantom detector estimates wasted watts as (power now - the model's idle power) and reads
"pinned at max clock" against the model's max SM clock; the burn-in compares each card with
the dense fp16/bf16 throughput its model should deliver, so a uniformly slow node fails (seed
004 compares cards only with each other). Both read ``data/gpu_models.json``: one row per
model, each fact with its source, null where the row does not state it.

One matching rule, for every fact: the name a device reports (dcgm-exporter's ``modelName``,
``torch.cuda.get_device_name()``, nvidia-smi) and a row's names are normalised (case, runs of
spaces, ``-`` and ``_``); a row matches only on word boundaries (``NVIDIA A10`` is not an
A100, ``H20`` not an H200); the longest matching name wins (``NVIDIA H200 NVL`` over
``H200``), and a fact comes from the longest-matching row that states it, so an H100 PCIe's
power facts come from the ``H100`` row. An unknown model gets the ``generic`` power facts,
flagged ``known=False`` so reports can say the numbers are assumptions, and no throughput, so
the burn-in's floor check is UNKNOWN, never PASS.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from typing import Self

import pydantic

from gpuguard.catalog import packaged
from gpuguard.errors import CatalogError

PACKAGED_RESOURCE = "data/gpu_models.json"


class Dtype(StrEnum):
    """The matmul precisions the burn-in runs."""

    FP16 = "fp16"
    BF16 = "bf16"


@dataclass(frozen=True, slots=True)
class PowerFacts:
    """A model's idle power, board power and max SM clock, and where the numbers come from."""

    names: tuple[str, ...]
    idle_power_w: float
    max_power_w: float
    max_sm_clock_mhz: float
    source: str
    known: bool = True


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One row of the table; None where the row does not state a fact.

    ``tflops`` maps each precision to dense tensor TFLOPS (None: no tensor path there).
    """

    names: tuple[str, ...]
    power: PowerFacts | None
    tflops: Mapping[Dtype, float | None] | None
    throughput_source: str | None

    @property
    def name(self) -> str:
        return self.names[0]

    def expected(self, dtype: Dtype) -> float | None:
        """Dense TFLOPS at ``dtype``; None when not stated or no tensor path."""
        return self.tflops.get(dtype) if self.tflops else None


@dataclass(frozen=True, slots=True, eq=False)
class GpuModelTable:
    """The models gpuguard knows, and the power facts it assumes for any other."""

    models: tuple[GpuModel, ...]
    generic: PowerFacts

    def matches(self, device_name: str) -> list[GpuModel]:
        """The rows with a name in ``device_name`` on word boundaries, longest name first."""
        wanted = normalise(device_name)
        found = [(_longest_match(wanted, m), i) for i, m in enumerate(self.models)]
        return [self.models[i] for length, i in sorted(found, key=lambda f: -f[0]) if length]

    def lookup(self, device_name: str) -> PowerFacts:
        """The power facts of the longest-matching row that states them, else generic."""
        rows = self.matches(device_name)
        return next((m.power for m in rows if m.power), self.generic)

    def throughput(self, device_name: str) -> GpuModel | None:
        """The longest-matching row that states throughput; None when no row does."""
        return next((m for m in self.matches(device_name) if m.tflops), None)

    def expected(self, device_name: str, dtype: Dtype) -> float | None:
        """Expected dense TFLOPS of ``device_name`` at ``dtype``; None when unknown."""
        model = self.throughput(device_name)
        return model.expected(dtype) if model else None


def normalise(name: str) -> str:
    """Lower case, with runs of spaces, ``-`` and ``_`` as one space."""
    return re.sub(r"[\s_\-]+", " ", name).strip().lower()


def _longest_match(device: str, model: GpuModel) -> int:
    """Length of ``model``'s longest name found in ``device`` on word boundaries; 0 if none."""
    names = (normalise(name) for name in model.names)
    return max((len(n) for n in names if _contains(device, n)), default=0)


def _contains(device: str, name: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])", device) is not None


class _Power(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    idle_power_w: float = pydantic.Field(ge=0)
    max_power_w: float = pydantic.Field(gt=0)
    max_sm_clock_mhz: float = pydantic.Field(gt=0)
    source: str = pydantic.Field(min_length=1)

    def to_facts(self, names: tuple[str, ...], *, known: bool) -> PowerFacts:
        return PowerFacts(
            names, self.idle_power_w, self.max_power_w, self.max_sm_clock_mhz, self.source, known
        )


class _ModelRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    names: tuple[str, ...] = pydantic.Field(min_length=1)
    idle_power_w: float | None = pydantic.Field(default=None, ge=0)
    max_power_w: float | None = pydantic.Field(default=None, gt=0)
    max_sm_clock_mhz: float | None = pydantic.Field(default=None, gt=0)
    power_source: str | None = pydantic.Field(default=None, min_length=1)
    fp16: float | None = pydantic.Field(default=None, gt=0)
    bf16: float | None = pydantic.Field(default=None, gt=0)
    throughput_source: str | None = pydantic.Field(default=None, min_length=1)

    @pydantic.model_validator(mode="after")
    def _sourced(self) -> Self:
        if not all(normalise(name) for name in self.names):
            raise ValueError("empty name")
        power = (self.idle_power_w, self.max_power_w, self.max_sm_clock_mhz, self.power_source)
        if any(v is not None for v in power) and any(v is None for v in power):
            raise ValueError("power facts: state all of idle, max, clock and power_source, or none")
        if (self.fp16, self.bf16) != (None, None) and self.throughput_source is None:
            raise ValueError("throughput without a throughput_source")
        return self

    def to_model(self) -> GpuModel:
        power = None
        idle, most, clock = self.idle_power_w, self.max_power_w, self.max_sm_clock_mhz
        if idle is not None and most is not None and clock is not None and self.power_source:
            power = PowerFacts(self.names, idle, most, clock, self.power_source)
        tflops = None
        if self.throughput_source is not None:
            tflops = {Dtype.FP16: self.fp16, Dtype.BF16: self.bf16}
        return GpuModel(self.names, power, tflops, self.throughput_source)


class _TableFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    about: str
    generic: _Power
    models: tuple[_ModelRecord, ...]


def parse_table_json(text: str, *, source: str) -> GpuModelTable:
    """Parse and validate a model table; ``source`` names it in errors."""
    parsed = packaged.parse_json(text, _TableFile, source=source)
    names = [normalise(name) for record in parsed.models for name in record.names]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CatalogError(f"{source}: name listed twice: {', '.join(duplicates)}")
    models = tuple(record.to_model() for record in parsed.models)
    return GpuModelTable(models, parsed.generic.to_facts((), known=False))


@cache
def load_table() -> GpuModelTable:
    """The table shipped with gpuguard, parsed once per process."""
    text = packaged.read_text(PACKAGED_RESOURCE, "table")
    return parse_table_json(text, source=PACKAGED_RESOURCE)
