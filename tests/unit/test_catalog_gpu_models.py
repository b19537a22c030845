"""The packaged GPU model table: tolerant, boundary-safe, longest-match name lookup."""

from __future__ import annotations

import json

import pytest

from gpuguard.catalog import gpu_models
from gpuguard.errors import CatalogError

TABLE = gpu_models.load_table()
FP16, BF16 = gpu_models.Dtype.FP16, gpu_models.Dtype.BF16


@pytest.mark.parametrize(
    ("device_name", "model"),
    [
        pytest.param("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", id="h100-sxm"),
        pytest.param("NVIDIA H200", "NVIDIA H200", id="h200"),
        pytest.param("NVIDIA H200 NVL", "NVIDIA H200 NVL", id="h200-nvl-longest-match"),
        pytest.param("nvidia  a100-sxm4_80gb", "NVIDIA A100-SXM4-80GB", id="case-spaces-dashes"),
        pytest.param("NVIDIA L40S", "NVIDIA L40S", id="l40s-not-l40-not-l4"),
        pytest.param("NVIDIA L4", "NVIDIA L4", id="l4"),
        pytest.param(
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            "NVIDIA RTX PRO 6000 Blackwell Server Edition",
            id="rtx-pro-6000-server",
        ),
        pytest.param("NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 5090", id="rtx-5090"),
        pytest.param("NVIDIA A10", "NVIDIA A10", id="a10"),
        pytest.param("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-32GB", id="v100"),
        pytest.param(
            "NVIDIA A100-SXM4-64GB", "NVIDIA A100-SXM4-80GB", id="unlisted-a100-is-not-an-a10"
        ),
        pytest.param("NVIDIA A10G", None, id="a10g-is-not-an-a10"),
        pytest.param("NVIDIA H20", None, id="h20-is-not-h200"),
        pytest.param("NVIDIA GH200 480GB", "NVIDIA GH200", id="gh200-is-not-h200"),
        pytest.param("CPU", None, id="cpu-unknown"),
    ],
)
def test_lookup(device_name: str, model: str | None) -> None:
    found = TABLE.throughput(device_name)
    assert (found.name if found else None) == model


def test_every_model_names_its_sources_and_has_a_dense_fp16_figure() -> None:
    for model in TABLE.models:
        assert (model.throughput_source or "").strip()
        assert model.power is None or model.power.source.strip()
        assert (model.expected(FP16) or 0) > 0, model.name


@pytest.mark.parametrize(
    ("device_name", "names", "known"),
    [
        pytest.param("NVIDIA GeForce RTX 5090", ("NVIDIA GeForce RTX 5090", "RTX 5090"), True,
                     id="rtx-5090"),
        pytest.param("NVIDIA H100 PCIe", ("NVIDIA H100 80GB HBM3", "H100"), True,
                     id="h100-pcie-power-from-the-h100-row"),
        pytest.param("NVIDIA H200 NVL", ("NVIDIA H200", "H200"), True, id="h200-nvl-from-h200"),
        pytest.param("NVIDIA L40", (), False, id="l40-is-not-l4-so-generic"),
        pytest.param("NVIDIA H20", (), False, id="h20-is-not-h200-so-generic"),
        pytest.param("Acme X1", (), False, id="unknown-is-generic"),
    ],
)  # fmt: skip
def test_power_facts(device_name: str, names: tuple[str, ...], known: bool) -> None:
    facts = TABLE.lookup(device_name)
    assert (facts.names, facts.known) == (names, known)
    if not known:
        assert facts == TABLE.generic


def test_sparse_datasheet_figures_are_halved() -> None:
    h100 = TABLE.throughput("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.expected(FP16) == pytest.approx(1979 / 2)
    assert "halved" in (h100.throughput_source or "")


def test_volta_has_no_bf16() -> None:
    assert TABLE.expected("Tesla V100-SXM2-32GB", BF16) is None
    assert TABLE.expected("Tesla V100-SXM2-32GB", FP16) == 125.0


def table(*models: dict[str, object]) -> str:
    generic = {"idle_power_w": 1, "max_power_w": 2, "max_sm_clock_mhz": 3, "source": "s"}
    return json.dumps({"about": "", "generic": generic, "models": list(models)})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{", "not valid JSON", id="broken-json"),
        pytest.param(
            table({"names": ["X"], "fp16": -1, "bf16": 1, "throughput_source": "s"}),
            "fp16",
            id="negative-tflops",
        ),
        pytest.param(
            table(
                {"names": ["NVIDIA X"], "fp16": 1, "bf16": 1, "throughput_source": "s"},
                {"names": ["nvidia  x"], "fp16": 1, "bf16": 1, "throughput_source": "s"},
            ),
            "listed twice",
            id="duplicate-model",
        ),
        pytest.param(
            table({"names": ["X"], "fp16": 1, "bf16": 1}), "throughput_source", id="unsourced"
        ),
        pytest.param(
            table({"names": ["X"], "idle_power_w": 10, "power_source": "s"}),
            "power facts",
            id="partial-power-facts",
        ),
        pytest.param(table({"names": [" - "]}), "empty name", id="empty-name"),
        pytest.param(
            json.dumps({"about": "", "models": []}), "generic", id="no-generic-power-facts"
        ),
    ],
)
def test_bad_table_names_the_file(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as caught:
        gpu_models.parse_table_json(text, source="cluster-table.json")
    assert "cluster-table.json" in str(caught.value)


def test_the_packaged_table_parses_with_its_own_parser() -> None:
    assert gpu_models.load_table().generic.known is False
