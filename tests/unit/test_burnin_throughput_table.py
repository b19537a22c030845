"""The packaged GPU throughput table: tolerant, boundary-safe, longest-match name lookup."""

from __future__ import annotations

import json

import pytest

from gpuguard.catalog import gpu_throughput
from gpuguard.errors import CatalogError

TABLE = gpu_throughput.load_table()
FP16, BF16 = gpu_throughput.Dtype.FP16, gpu_throughput.Dtype.BF16


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
        pytest.param("NVIDIA A100-SXM4-64GB", None, id="unlisted-a100-is-not-an-a10"),
        pytest.param("NVIDIA H20", None, id="h20-is-not-h200"),
        pytest.param("CPU", None, id="cpu-unknown"),
    ],
)
def test_lookup(device_name: str, model: str | None) -> None:
    found = TABLE.lookup(device_name)
    assert (found.name if found else None) == model


def test_every_model_names_its_source_and_has_a_dense_fp16_figure() -> None:
    for model in TABLE.models:
        assert model.source.strip()
        assert (model.expected(FP16) or 0) > 0, model.name


def test_sparse_datasheet_figures_are_halved() -> None:
    h100 = TABLE.lookup("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.expected(FP16) == pytest.approx(1979 / 2)
    assert "halved" in h100.source


def test_volta_has_no_bf16() -> None:
    assert TABLE.expected("Tesla V100-SXM2-32GB", BF16) is None
    assert TABLE.expected("Tesla V100-SXM2-32GB", FP16) == 125.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{", "not valid JSON", id="broken-json"),
        pytest.param(
            json.dumps(
                {"about": "", "models": [{"name": "X", "fp16": -1, "bf16": 1, "source": "s"}]}
            ),
            "fp16",
            id="negative-tflops",
        ),
        pytest.param(
            json.dumps(
                {
                    "about": "",
                    "models": [
                        {"name": "NVIDIA X", "fp16": 1, "bf16": 1, "source": "s"},
                        {"name": "nvidia  x", "fp16": 1, "bf16": 1, "source": "s"},
                    ],
                }
            ),
            "listed twice",
            id="duplicate-model",
        ),
    ],
)
def test_bad_table_names_the_file(text: str, message: str) -> None:
    with pytest.raises(CatalogError, match=message) as caught:
        gpu_throughput.parse_table_json(text, source="cluster-table.json")
    assert "cluster-table.json" in str(caught.value)
