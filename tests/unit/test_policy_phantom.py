"""Phantom utilization (the phantom incident [docs/design.md#incidents]): busy with nothing, held,
and no pod — the pod join decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gpuguard.catalog import gpu_models
from gpuguard.model import annotation_keys, decisions, fleet
from gpuguard.model import metric_names as mn
from gpuguard.model import settings as settings_model
from gpuguard.policy import phantom
from gpuguard.sim import profiles
from gpuguard.sources import gpu_metrics
from tests.builders import PHANTOM_READINGS, stats, window

NOW = datetime(2026, 4, 21, 5, 0, tzinfo=UTC)
SETTINGS = settings_model.PhantomSettings()
MODELS = gpu_models.load_table()
PROFILING = (mn.DCGM_SM_ACTIVE, mn.DCGM_GR_ENGINE_ACTIVE, mn.DCGM_DRAM_ACTIVE)

def with_values(drop: tuple[str, ...] = (), **values: float) -> dict[str, float]:
    named = {getattr(mn, k): v for k, v in values.items()}
    return stats({m: v for m, v in (PHANTOM_READINGS | named).items() if m not in drop})


CASES = [
    pytest.param(window(), True, id="seed000-busy-with-nothing-is-phantom"),
    pytest.param(
        window(pods=("ml/tiny-kernel-bench",), stats=with_values(DCGM_FB_USED=50.0)),
        False,
        id="small-compute-with-a-pod-is-not-phantom",
    ),
    pytest.param(window(seen_at_start=False), False, id="held-less-than-the-window"),
    pytest.param(window(stats=with_values(DCGM_DRAM_ACTIVE=0.3)), False, id="dram-busy"),
    pytest.param(window(stats=with_values(DCGM_FB_USED=2048.0)), False, id="framebuffer-used"),
    pytest.param(window(stats=with_values(DCGM_PSTATE=8.0)), False, id="p8-idle-clocks"),
    pytest.param(window(stats=with_values(DCGM_POWER=22.0)), False, id="power-at-idle"),
    pytest.param(
        window(stats=with_values(drop=PROFILING)), True, id="no-profiling-util-100-is-phantom"
    ),
    pytest.param(
        window(stats=with_values(drop=PROFILING, DCGM_GPU_UTIL=60.0)),
        False,
        id="no-profiling-util-60",
    ),
    pytest.param(
        window(stats=with_values(drop=(mn.DCGM_PSTATE,))), True, id="no-pstate-clock-at-max"
    ),
    pytest.param(
        window(stats=with_values(drop=(mn.DCGM_PSTATE,), DCGM_SM_CLOCK=210.0)),
        False,
        id="no-pstate-clock-idle",
    ),
    pytest.param(
        window(stats=with_values(drop=(mn.DCGM_PSTATE, mn.DCGM_SM_CLOCK))),
        False,
        id="no-pstate-no-clock-is-unknown",
    ),
    pytest.param(
        window(stats=with_values(drop=(mn.DCGM_FB_USED,))), False, id="no-framebuffer-series"
    ),
    pytest.param(window(node_gpu_pods=2), False, id="gpu-pod-on-node-without-dcgm-pod-mapping"),
    pytest.param(window(node_gpu_pods=None), False, id="kube-state-metrics-missing-is-unknown"),
]


@pytest.mark.parametrize(("gpu_window", "expected"), CASES)
def test_the_phantom_signature(gpu_window: fleet.GpuWindow, expected: bool) -> None:
    found = phantom.decide([gpu_window], SETTINGS, MODELS, NOW).phantoms
    assert [p.gpu for p in found] == (["5"] if expected else [])


def test_dcgm_pod_mapping_decides_per_gpu_when_another_gpu_has_a_pod() -> None:
    """With dcgm's pod labels in use, a pod on GPU 0 does not hide the phantom on GPU 5."""
    busy_neighbour = window("0", pods=("ml/train",), stats=with_values(DCGM_FB_USED=30000.0))
    found = phantom.decide([busy_neighbour, window(node_gpu_pods=1)], SETTINGS, MODELS, NOW)
    assert [p.gpu for p in found.phantoms] == ["5"]


def test_a_pod_label_on_another_node_vouches_for_nothing_here() -> None:
    other_node = window("0", node="gpu-node-2", pods=("ml/train",))
    found = phantom.decide([other_node, window(node_gpu_pods=1)], SETTINGS, MODELS, NOW)
    assert found.phantoms == ()


@pytest.mark.parametrize(("count", "expected"), [(0, ["5"]), (1, [])], ids=["none", "one"])
def test_a_process_on_the_gpu_rules_phantom_out(count: int, expected: list[str]) -> None:
    found = phantom.decide([window()], SETTINGS, MODELS, NOW, processes={"GPU-5": count})
    assert [p.gpu for p in found.phantoms] == expected


def test_the_finding_carries_wasted_watts_and_gpu_hours() -> None:
    (p,) = phantom.decide([window(signature_minutes=180)], SETTINGS, MODELS, NOW).phantoms
    assert p.finding.kind == "phantom"
    assert p.finding.reason is decisions.Reason.PHANTOM_UTILIZATION
    assert p.wasted_w == pytest.approx(113.0 - 15.0)
    assert p.hours == pytest.approx(3.0)
    assert p.wasted_kwh == pytest.approx(98 * 3 / 1000)
    assert "98 W over idle" in p.finding.detail


def test_gpu_hours_are_at_least_the_hold() -> None:
    (p,) = phantom.decide([window()], SETTINGS, MODELS, NOW).phantoms
    assert p.hours == pytest.approx(0.25)


def test_the_evidence_commands_name_the_node_and_gpu() -> None:
    (p,) = phantom.decide([window()], SETTINGS, MODELS, NOW).phantoms
    commands = [c.command for c in p.commands]
    assert any("spec.nodeName=gpu-node-1" in c and "exitCode" in c for c in commands)
    assert "nvidia-smi -q -d ACCOUNTING -i 5" in commands
    assert "nvidia-smi -q -d PIDS -i 5" in commands
    assert "nvidia-smi -q -d FIRMWARE -i 5" in commands
    assert "dmesg | grep -iE 'gsp|nvrm'" in commands
    assert any(c.startswith("dcgmi dmon -e 1001 -i 5") for c in commands)
    assert {c.run_on for c in p.commands} == {"workstation", "gpu-node-1"}
    assert any("nvidia-persistenced" in line and "nvidia-smi -r" in line for line in p.advice)
    assert any("drain" in line and "reboot" in line for line in p.advice)


def test_phantom_never_cordons_unless_opted_in() -> None:
    windows = [window("1"), window("3")]
    assert phantom.decide(windows, SETTINGS, MODELS, NOW).actions == ()
    opted = SETTINGS.model_copy(update={"cordon": True})
    (action,) = phantom.decide(windows, opted, MODELS, NOW).actions
    assert action.kind is decisions.ActionKind.ISOLATE
    assert action.node == "gpu-node-1"
    assert action.annotations[annotation_keys.REASON] == "phantom-utilization"


def test_an_unknown_model_uses_the_generic_idle_power_and_says_so() -> None:
    (p,) = phantom.decide([window(model="Acme X1")], SETTINGS, MODELS, NOW).phantoms
    assert not p.idle_power_known
    assert p.idle_power_w == MODELS.generic.idle_power_w


@pytest.mark.parametrize("spec", profiles.SPECS, ids=lambda s: s.match)
def test_model_table_agrees_with_the_simulator(spec: profiles.GpuSpec) -> None:
    entry = MODELS.lookup(f"NVIDIA {spec.match}")
    assert spec.match in entry.names
    assert entry.idle_power_w == spec.idle_power_w
    assert entry.max_sm_clock_mhz == spec.max_sm_clock_mhz


def sample(name: str, value: float, **labels: str) -> fleet.MetricSample:
    base = {"Hostname": "gpu-node-1", "gpu": "5", "UUID": "GPU-5", "modelName": "RTX 5090"}
    return fleet.MetricSample(name, base | labels, value, NOW)


def test_a_phantom_gpu_that_gets_a_new_workload_clears() -> None:
    """The phantom incident: a new workload on a phantom GPU ended it. Its pod-labelled series joins
    the window, so the GPU is not phantom for as long as that series is in the window."""
    phantom_only = [
        sample(mn.window_stat(m, s), v)
        for m, v in PHANTOM_READINGS.items()
        for s in mn.WINDOW_STATS
    ]
    phantom_only += [sample(mn.GPU_SEEN_AT_WINDOW_START, 1)]
    phantom_only += [fleet.MetricSample(mn.NODE_GPU_PODS_MAX, {"node": "gpu-node-1"}, 0, NOW)]
    new_pod = [sample(mn.window_stat(mn.DCGM_GPU_UTIL, "max"), 100, namespace="ml", pod="run5")]
    before = gpu_metrics.windows_from_samples(phantom_only)
    after = gpu_metrics.windows_from_samples(phantom_only + new_pod)
    assert [p.gpu for p in phantom.decide(before, SETTINGS, MODELS, NOW).phantoms] == ["5"]
    assert after[0].pods == ("ml/run5",)
    assert phantom.decide(after, SETTINGS, MODELS, NOW).phantoms == ()


def test_settings_hold_is_configurable() -> None:
    loaded = settings_model.GuardSettings.load(None, {"GPUGUARD_PHANTOM__HOLD": "30m"})
    assert loaded.phantom.hold == timedelta(minutes=30)
    assert loaded.phantom.cordon is False


POD_LABELS = [
    pytest.param({"namespace": "ml", "pod": "run5"}, ("ml/run5",), id="honor-labels-workload"),
    pytest.param(
        {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x2b9k",
         "exported_namespace": "default", "exported_pod": "pod1"},
        ("default/pod1",),
        id="servicemonitor-exported-pod-workload",
    ),
    pytest.param(
        {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-x2b9k"},
        (),
        id="servicemonitor-exporter-pod-is-no-workload",
    ),
    pytest.param({}, (), id="no-pod-mapping"),
]  # fmt: skip


@pytest.mark.parametrize(("labels", "pods"), POD_LABELS)
def test_the_workload_pod_is_read_whichever_way_prometheus_scraped_it(
    labels: dict[str, str], pods: tuple[str, ...]
) -> None:
    (w,) = gpu_metrics.windows_from_samples([sample(mn.GPU_SEEN_AT_WINDOW_START, 1, **labels)])
    assert w.pods == pods
