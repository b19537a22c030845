"""Expected dense tensor throughput per GPU model: the yardstick that fails a uniformly slow node.

The seed's burn-in (004 "적합성 검사와 풀 복귀") compares cards only with each other, so a node
whose cards are all slow passes. The burn-in therefore also compares each card with what its
model should deliver. The numbers live in ``data/gpu_throughput.json`` (vendor datasheets, each
with its source); this module loads them and matches the name a device reports
(``torch.cuda.get_device_name()`` or nvidia-smi) tolerantly: case, spaces, ``-`` and ``_`` are
normalised, a table name matches only on word boundaries (``NVIDIA A10`` is not an A100), and
the longest matching name wins (``NVIDIA H200 NVL`` over ``NVIDIA H200``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from importlib import resources

import pydantic

from gpuguard.errors import CatalogError

PACKAGED_RESOURCE = "data/gpu_throughput.json"


class Dtype(StrEnum):
    """The matmul precisions the burn-in runs."""

    FP16 = "fp16"
    BF16 = "bf16"


@dataclass(frozen=True, slots=True)
class ModelThroughput:
    """One GPU model's dense tensor TFLOPS per precision (None: no tensor path) and its source."""

    name: str
    tflops: Mapping[Dtype, float | None]
    source: str

    def expected(self, dtype: Dtype) -> float | None:
        return self.tflops.get(dtype)


@dataclass(frozen=True, slots=True, eq=False)
class ThroughputTable:
    """The models gpuguard knows, matched by normalised name (longest match wins)."""

    models: tuple[ModelThroughput, ...]

    def lookup(self, device_name: str) -> ModelThroughput | None:
        """The model whose name appears, on word boundaries, in ``device_name``; else None."""
        wanted = normalise(device_name)
        matches = [model for model in self.models if _contains(wanted, normalise(model.name))]
        return max(matches, key=lambda model: len(normalise(model.name)), default=None)

    def expected(self, device_name: str, dtype: Dtype) -> float | None:
        """Expected dense TFLOPS of ``device_name`` at ``dtype``; None when unknown."""
        model = self.lookup(device_name)
        return model.expected(dtype) if model else None


def normalise(name: str) -> str:
    """Lower case, with runs of spaces, ``-`` and ``_`` as one space."""
    return re.sub(r"[\s_\-]+", " ", name).strip().lower()


def _contains(device: str, model: str) -> bool:
    return re.search(rf"(?<![a-z0-9]){re.escape(model)}(?![a-z0-9])", device) is not None


class _ModelRecord(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    name: str = pydantic.Field(min_length=1)
    fp16: float | None = pydantic.Field(gt=0)
    bf16: float | None = pydantic.Field(gt=0)
    source: str = pydantic.Field(min_length=1)

    def to_model(self) -> ModelThroughput:
        tflops = {Dtype.FP16: self.fp16, Dtype.BF16: self.bf16}
        return ModelThroughput(self.name, tflops, self.source)


class _TableFile(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    about: str
    models: tuple[_ModelRecord, ...]


def parse_table_json(text: str, *, source: str) -> ThroughputTable:
    """Parse and validate a throughput table; ``source`` names it in errors."""
    try:
        parsed = _TableFile.model_validate(json.loads(text))
    except json.JSONDecodeError as e:
        raise CatalogError(f"{source}: not valid JSON: {e}") from e
    except pydantic.ValidationError as e:
        raise CatalogError(f"{source}: {e.errors()[0]['loc']}: {e.errors()[0]['msg']}") from e
    names = [normalise(record.name) for record in parsed.models]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CatalogError(f"{source}: model listed twice: {', '.join(duplicates)}")
    return ThroughputTable(tuple(record.to_model() for record in parsed.models))


@cache
def load_table() -> ThroughputTable:
    """The table shipped with gpuguard, parsed once per process."""
    resource = resources.files("gpuguard.catalog").joinpath(PACKAGED_RESOURCE)
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as e:
        raise CatalogError(f"cannot read the packaged table {PACKAGED_RESOURCE}: {e}") from e
    return parse_table_json(text, source=PACKAGED_RESOURCE)
