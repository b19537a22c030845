"""The burn-in verdict (the lifecycle report [docs/design.md#incidents] plus its gaps): count,
errors, balance, floor per model."""

from __future__ import annotations

import pytest

from gpuguard.catalog import gpu_models
from gpuguard.errors import InputError
from gpuguard.policy import burnin

H100 = "NVIDIA H100 80GB HBM3"
H100_DENSE_FP16 = 989.5
FP16 = gpu_models.Dtype.FP16
TABLE = gpu_models.load_table()


def node(*tflops: float, name: str = H100) -> list[burnin.GpuResult]:
    return [burnin.GpuResult(i, name, f"GPU-{i:04d}", value) for i, value in enumerate(tflops)]


def statuses(verdict: burnin.BurninVerdict) -> dict[str, str]:
    return {check.check: check.status.value for check in verdict.checks}


def judge(results: list[burnin.GpuResult], expected: int | None = 8) -> burnin.BurninVerdict:
    return burnin.evaluate(results, expected, TABLE, burnin.DEFAULT_FLOOR, dtype=FP16)


HEALTHY = 0.75 * H100_DENSE_FP16  # a real 8192² fp16 matmul, well below datasheet peak


@pytest.mark.parametrize(
    ("results", "expected", "passed", "failing"),
    [
        pytest.param(node(*[HEALTHY] * 8), 8, True, {}, id="eight-equal-gpus-pass"),
        pytest.param(
            node(*[HEALTHY] * 7, HEALTHY * 0.5),
            8,
            False,
            {"throughput-balance": "FAIL", "throughput-floor": "FAIL"},
            id="one-gpu-at-half-of-the-others-fails-the-burn-in",
        ),
        pytest.param(
            node(*[H100_DENSE_FP16 * 0.5] * 8),
            8,
            False,
            {"throughput-floor": "FAIL"},
            id="all-gpus-uniformly-at-half-of-expected-fail",
        ),
        pytest.param(
            node(*[HEALTHY] * 7), 8, False, {"gpu-count": "FAIL"}, id="gpu-missing-7-of-8-fails"
        ),
        pytest.param(
            node(*[HEALTHY] * 8), None, False, {"gpu-count": "UNKNOWN"}, id="no-expected-count"
        ),
        pytest.param(
            node(*[0.75 * 312.0] * 8, name="NVIDIA A100-SXM4-80GB"),
            8,
            True,
            {},
            id="a100-healthy-against-its-own-model",
        ),
    ],
)
def test_verdict(
    results: list[burnin.GpuResult], expected: int | None, passed: bool, failing: dict[str, str]
) -> None:
    verdict = judge(results, expected)
    assert verdict.passed is passed
    assert {k: v for k, v in statuses(verdict).items() if v != "PASS"} == failing


def test_seed_node_b_return_203_to_212_tflops_is_balanced() -> None:
    seed = node(203.6, 205.0, 207.1, 208.3, 209.9, 210.4, 211.8, 212.7, name="gpu-node-b")
    check = burnin.balance_check(seed, burnin.SEED_MIN_MAX_RATIO)
    assert check.status is burnin.PASS
    assert "min/max 0.96" in check.evidence


def test_cuda_error_on_one_gpu_fails_with_its_text_and_others_still_count() -> None:
    results = node(*[HEALTHY] * 8)
    results[3] = burnin.GpuResult(3, H100, None, None, "CUDA error: uncorrectable ECC error")
    verdict = judge(results)
    assert not verdict.passed
    by_check = {check.check: check for check in verdict.checks}
    assert by_check["gpu-errors"].status is burnin.FAIL
    assert "GPU 3" in by_check["gpu-errors"].evidence
    assert "uncorrectable ECC error" in by_check["gpu-errors"].evidence
    assert by_check["throughput-balance"].status is burnin.PASS  # the 7 others were measured
    assert by_check["gpu-count"].status is burnin.PASS


def test_unknown_model_makes_the_floor_unknown_and_never_passes() -> None:
    verdict = judge(node(*[500.0] * 8, name="NVIDIA Z9000 Prototype"))
    floor = {check.check: check for check in verdict.checks}["throughput-floor"]
    assert floor.status is burnin.UNKNOWN
    assert "NVIDIA Z9000 Prototype" in floor.evidence
    assert not verdict.passed


def test_a_slow_card_fails_the_floor_even_when_its_model_is_partly_unknown() -> None:
    mixed = [*node(HEALTHY, HEALTHY * 0.3), burnin.GpuResult(2, "Mystery GPU", None, HEALTHY)]
    assert burnin.floor_check(mixed, TABLE, 0.7, FP16).status is burnin.FAIL


def test_floor_is_per_dtype_and_a_model_without_bf16_is_unknown() -> None:
    volta = node(100.0, 100.0, name="Tesla V100-SXM2-32GB")
    assert burnin.floor_check(volta, TABLE, 0.7, FP16).status is burnin.PASS
    bf16 = burnin.floor_check(volta, TABLE, 0.7, gpu_models.Dtype.BF16)
    assert bf16.status is burnin.UNKNOWN


def test_fraction_of_expected() -> None:
    (gpu,) = node(H100_DENSE_FP16 / 2)
    assert burnin.fraction_of_expected(gpu, TABLE, FP16) == pytest.approx(0.5)


def test_nothing_ran_is_never_a_pass() -> None:
    verdict = judge([], 0)
    assert not verdict.passed
    assert statuses(verdict)["gpu-errors"] == "UNKNOWN"


@pytest.mark.parametrize(
    ("requested", "reason", "chosen"),
    [
        pytest.param(burnin.Mode.AUTO, "xid-48", burnin.Mode.MEMORY, id="xid48-dbe-memory-test"),
        pytest.param(burnin.Mode.AUTO, "xid-94", burnin.Mode.MEMORY, id="xid94-contained-ecc"),
        pytest.param(burnin.Mode.AUTO, "XID_95", burnin.Mode.MEMORY, id="xid95-uncontained"),
        pytest.param(burnin.Mode.AUTO, "xid-63", burnin.Mode.MEMORY, id="xid63-retirement"),
        pytest.param(burnin.Mode.AUTO, "xid-64", burnin.Mode.MEMORY, id="xid64-retire-failure"),
        pytest.param(burnin.Mode.AUTO, "xid-140", burnin.Mode.MEMORY, id="xid140-ecc-escape"),
        pytest.param(burnin.Mode.AUTO, "xid-79", burnin.Mode.MATMUL, id="xid79-off-bus-matmul"),
        pytest.param(burnin.Mode.AUTO, None, burnin.Mode.MATMUL, id="no-reason-matmul"),
        pytest.param(burnin.Mode.MATMUL, "xid-48", burnin.Mode.MATMUL, id="explicit-mode-wins"),
    ],
)
def test_mode_choice(requested: burnin.Mode, reason: str | None, chosen: burnin.Mode) -> None:
    assert burnin.choose_mode(requested, burnin.parse_reason(reason)) is chosen


@pytest.mark.parametrize("reason", ["48", "ecc", "xid-", "xid-4800"])
def test_bad_reason_names_the_flag(reason: str) -> None:
    with pytest.raises(InputError, match="--reason"):
        burnin.parse_reason(reason)
