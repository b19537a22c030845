"""The simulator's dcgm-exporter and kube-state-metrics endpoints look like the real ones."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from prometheus_client import parser

from gpuguard.model import metric_names as mn
from gpuguard.sim import exporters, metrics_server, profiles, state, store

NOW = datetime(2026, 9, 21, 3, 0, tzinfo=UTC)
SAMPLES = Path(__file__).resolve().parents[1] / "data" / "reference"
H100 = "NVIDIA H100 80GB HBM3"


def make_gpu(index: int, model: str = H100, **kw: object) -> state.SimGpu:
    pci = f"0000:{0x18 + 0x10 * index:02x}:00.0"
    return state.SimGpu(index, state.new_uuid(f"node-a/{index}"), pci, model, **kw)  # type: ignore[arg-type]


def make_node(gpus: int = 2, model: str = H100, **kw: object) -> state.SimNode:
    node = state.SimNode("node-a", "boot-1", "580.95.05", "580.95.05", **kw)  # type: ignore[arg-type]
    node.gpus = [make_gpu(i, model) for i in range(gpus)]
    return node


def families(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in parser.text_string_to_metric_families(text):
        for s in fam.samples:  # counters: the parser names samples <family>_total
            for name in {fam.name, s.name}:
                out.setdefault(name, []).append((s.labels, s.value))
    return out


def dcgm(
    node: state.SimNode, now: datetime = NOW, **kw: bool
) -> dict[str, list[tuple[dict[str, str], float]]]:
    return families(exporters.render_dcgm(node, exporters.pods_by_gpu(node, None, now), now, **kw))


def one(series: list[tuple[dict[str, str], float]], gpu: str) -> tuple[dict[str, str], float]:
    (found,) = [s for s in series if s[0]["gpu"] == gpu]
    return found


def sample_line(metric: str, sample_no: int) -> str:
    text = (SAMPLES / "dcgm_exporter_sample_metrics.txt").read_text()
    block = text.split("# ==== SAMPLE ")[sample_no]
    return next(line for line in block.splitlines() if line.startswith(metric + "{"))


def label_names(line: str) -> list[str]:
    (fam,) = parser.text_string_to_metric_families(line + "\n")
    return list(fam.samples[0].labels)


def rendered_line(text: str, metric: str, gpu: str) -> str:
    return next(x for x in text.splitlines() if x.startswith(metric + "{") and f'gpu="{gpu}"' in x)


# ------------------------------------------------------------------------------ label set


def test_label_names_match_the_real_exporter_for_a_gpu_a_pod_holds() -> None:
    node = make_node()
    node.workloads.append(
        state.Workload("cuda-1", "default", (0,), state.WorkloadProfile.IDLE, NOW, None)
    )
    text = exporters.render_dcgm(node, exporters.pods_by_gpu(node, None, NOW), NOW)
    ours = label_names(rendered_line(text, mn.DCGM_GPU_UTIL, "0"))
    assert ours == label_names(sample_line(mn.DCGM_GPU_UTIL, 1))  # GPU Operator v25.10, pod mapped


def test_label_names_match_the_real_exporter_for_a_free_gpu() -> None:
    text = exporters.render_dcgm(make_node(), {}, NOW)
    ours = label_names(rendered_line(text, mn.DCGM_GPU_UTIL, "1"))
    assert ours == label_names(sample_line(mn.DCGM_GPU_UTIL, 2))  # no pod labels at all


def test_old_exporters_render_empty_pod_labels_on_free_gpus() -> None:
    labels, _ = one(dcgm(make_node(dcgm_empty_pod_labels=True))[mn.DCGM_GPU_UTIL], "1")
    assert (labels["container"], labels["namespace"], labels["pod"]) == ("", "", "")


@pytest.mark.parametrize("spelling", ["Hostname", "hostname"])
def test_hostname_label_spelling_follows_the_node(spelling: str) -> None:
    labels, _ = one(dcgm(make_node(hostname_label=spelling))[mn.DCGM_GPU_UTIL], "0")
    assert labels[spelling] == "node-a"
    assert ({"Hostname", "hostname"} - {spelling}).isdisjoint(labels)


def test_pci_bus_id_uses_dcgms_eight_digit_domain() -> None:
    labels, _ = one(dcgm(make_node())[mn.DCGM_GPU_UTIL], "1")
    assert labels["pci_bus_id"] == "00000000:28:00.0"
    assert labels["device"] == "nvidia1"
    assert labels["DCGM_FI_DRIVER_VERSION"] == "580.95.05"
    assert exporters.dcgm_pci("0001:b1:00.0") == "00000001:B1:00.0"


def test_pod_labels_name_the_pod_and_its_gpu_container_from_the_store() -> None:
    objects = store.ObjectStore()
    objects.create("Pod", "ml", {"metadata": {"name": "train-0"}, "spec": {"containers": [
        {"name": "sidecar"},
        {"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
    ]}})  # fmt: skip
    node = make_node()
    node.workloads.append(
        state.Workload("train-0", "ml", (1,), state.WorkloadProfile.TRAINING, NOW, None)
    )
    pods = exporters.pods_by_gpu(node, objects, NOW)
    assert pods == {1: exporters.PodRef("ml", "train-0", "trainer")}
    assert exporters.pods_by_gpu(node, objects, NOW - timedelta(seconds=1)) == {}


# ------------------------------------------------------------------------------ XID gauge


def test_xid_series_is_absent_before_the_first_xid() -> None:
    assert mn.DCGM_XID_LAST not in dcgm(make_node())
    assert f"# TYPE {mn.DCGM_XID_LAST}" not in exporters.render_dcgm(make_node(), {}, NOW)


def test_xid_gauge_holds_the_last_value_in_one_series() -> None:
    node = make_node()
    gpu = node.gpu(1)
    gpu.xid_history += [(NOW - timedelta(hours=2), 13), (NOW - timedelta(hours=1), 79)]
    series = dcgm(node)[mn.DCGM_XID_LAST]
    assert len(series) == 1
    labels, value = series[0]
    assert value == 79
    assert (labels["gpu"], labels["err_code"], labels["err_msg"]) == (
        "1", "79", "GPU has fallen off the bus",
    )  # fmt: skip
    # between the two Xids the gauge showed 13; it still shows 79 a day later (sticky)
    assert dcgm(node, NOW - timedelta(minutes=90))[mn.DCGM_XID_LAST][0][1] == 13
    assert dcgm(node, NOW + timedelta(days=1))[mn.DCGM_XID_LAST][0][1] == 79


def test_xid_last_without_history_is_shown_as_is() -> None:
    node = make_node()
    node.gpu(0).xid_last = 48
    ((labels, value),) = dcgm(node)[mn.DCGM_XID_LAST]
    assert (value, labels["err_msg"]) == (48, "Double Bit ECC Error")


def test_exporter_restart_resets_the_xid_gauge() -> None:
    node = make_node()
    node.gpu(0).xid_history.append((NOW - timedelta(hours=1), 94))
    node.gpu(0).xid_last = 94
    node.exporter_started = NOW - timedelta(minutes=30)
    assert mn.DCGM_XID_LAST not in dcgm(node)
    node.gpu(0).xid_history.append((NOW - timedelta(minutes=10), 31))
    assert dcgm(node)[mn.DCGM_XID_LAST][0][1] == 31


def test_a_gpu_off_the_bus_without_an_xid_has_no_series_at_all() -> None:
    node = make_node()
    node.gpu(1).on_bus = False
    text = exporters.render_dcgm(node, {}, NOW, xid_count_metric=True)
    assert node.gpu(1).uuid not in text
    assert node.gpu(0).uuid in text


def test_a_gpu_off_the_bus_keeps_only_its_last_xid_series() -> None:
    node = make_node()
    node.gpu(1).xid_history.append((NOW - timedelta(minutes=1), 79))
    node.gpu(1).on_bus = False
    fams = dcgm(node, xid_count_metric=True)
    ((labels, value),) = fams[mn.DCGM_XID_LAST]  # "a series with value 79 appears"
    assert (labels["UUID"], value) == (node.gpu(1).uuid, 79)
    assert [s[0]["gpu"] for s in fams[mn.DCGM_GPU_UTIL]] == ["0"]
    assert {s[0]["gpu"]: s[1] for s in fams[mn.DCGM_XID_COUNT] if "xid" in s[0]} == {"1": 1}


def test_a_gpu_off_the_bus_has_no_xid_where_dcgm_cannot_report_it() -> None:
    node = make_node(dcgm_keeps_lost_gpu_xid=False)
    node.gpu(1).xid_history.append((NOW - timedelta(minutes=1), 79))
    node.gpu(1).on_bus = False
    text = exporters.render_dcgm(node, {}, NOW, xid_count_metric=True)
    assert node.gpu(1).uuid not in text
    assert mn.DCGM_XID_LAST not in families(text)


def test_xid_count_metric_is_off_by_default() -> None:
    node = make_node()
    node.gpu(0).xid_history.append((NOW - timedelta(minutes=1), 79))
    assert mn.DCGM_XID_COUNT not in dcgm(node)


def test_xid_count_metric_counts_per_xid_in_the_last_five_minutes() -> None:
    node = make_node()
    node.gpu(0).xid_history += [
        (NOW - timedelta(minutes=20), 13),
        (NOW - timedelta(minutes=4), 79),
        (NOW - timedelta(minutes=2), 79),
        (NOW - timedelta(minutes=1), 13),
    ]
    series = dcgm(node, xid_count_metric=True)[mn.DCGM_XID_COUNT]
    gpu0 = {s[0].get("xid"): s[1] for s in series if s[0]["gpu"] == "0"}
    assert gpu0 == {"79": 2, "13": 1}
    gpu1 = [s for s in series if s[0]["gpu"] == "1"]
    assert [(s[0].get("xid"), s[1]) for s in gpu1] == [(None, 0)]  # the real "none" series
    assert gpu1[0][0]["window_size_in_ms"] == "300000"
    later = dcgm(node, NOW + timedelta(minutes=10), xid_count_metric=True)[mn.DCGM_XID_COUNT]
    assert all("xid" not in s[0] and s[1] == 0 for s in later)


def test_node_flag_enables_the_count_metric_on_the_server() -> None:
    node = make_node(xid_count_metric=True)
    status, body = metrics_server.render_path(
        World([node], store.ObjectStore()), "/dcgm/node-a/metrics"
    )
    assert status == 200
    assert mn.DCGM_XID_COUNT in families(body)


# ------------------------------------------------------------------------------ shapes


def test_phantom_gpu_shows_the_seed_signature() -> None:
    node = make_node(gpus=8, model="NVIDIA GeForce RTX 5090")
    for gpu in node.gpus:
        gpu.phantom = True
    fams = dcgm(node)
    for g in map(str, range(8)):
        assert one(fams[mn.DCGM_GPU_UTIL], g)[1] == 100
        assert one(fams[mn.DCGM_FB_USED], g)[1] == 0
        assert one(fams[mn.DCGM_PSTATE], g)[1] == 0
        assert one(fams[mn.DCGM_DRAM_ACTIVE], g)[1] == 0
        assert one(fams[mn.DCGM_SM_ACTIVE], g)[1] > 0.95
        assert one(fams[mn.DCGM_SM_CLOCK], g)[1] == 2940
        assert one(fams[mn.DCGM_MEM_CLOCK], g)[1] == 14001
        assert 108 <= one(fams[mn.DCGM_POWER], g)[1] <= 127.5


def test_idle_gpu_without_pod_draws_idle_power() -> None:
    fams = dcgm(make_node(model="NVIDIA L40S"))
    _, power = one(fams[mn.DCGM_POWER], "0")
    assert 30 <= power <= 40
    assert one(fams[mn.DCGM_GPU_UTIL], "0")[1] == 0
    assert one(fams[mn.DCGM_FB_USED], "0")[1] == 0
    assert one(fams[mn.DCGM_FB_FREE], "0")[1] == 45459  # as the real L40S sample
    assert one(fams[mn.DCGM_PSTATE], "0")[1] == 8


@pytest.mark.parametrize(
    ("profile", "util", "tensor", "fb_min", "fb_max"),
    [
        pytest.param(
            state.WorkloadProfile.TRAINING, (95, 100), (0.5, 0.7), 10_000, 80_000, id="training"
        ),
        pytest.param(
            state.WorkloadProfile.SMALL_COMPUTE, (100, 100), (0, 0), 40, 60, id="small-compute"
        ),
        pytest.param(state.WorkloadProfile.IDLE, (0, 0), (0, 0), 100, 1000, id="idle-pod"),
    ],
)
def test_workload_profiles_have_their_shapes(
    profile: state.WorkloadProfile,
    util: tuple[float, float],
    tensor: tuple[float, float],
    fb_min: float,
    fb_max: float,
) -> None:
    node = make_node(gpus=1)
    node.workloads.append(state.Workload("p", "ns", (0,), profile, NOW - timedelta(hours=1), None))
    fams = dcgm(node)
    assert util[0] <= one(fams[mn.DCGM_GPU_UTIL], "0")[1] <= util[1]
    assert tensor[0] <= one(fams[mn.DCGM_TENSOR_ACTIVE], "0")[1] <= tensor[1]
    assert fb_min <= one(fams[mn.DCGM_FB_USED], "0")[1] <= fb_max


def test_small_compute_is_busy_with_a_pod_and_a_little_memory() -> None:
    spec = profiles.spec_for(H100)
    shape = profiles.shape(profiles.Activity.SMALL_COMPUTE, spec, "GPU-x", NOW)
    assert shape.sm_active > 0.95
    assert shape.dram_active < 0.02
    assert shape.fb_used_mib < 100
    assert spec.idle_power_w < shape.power_w < spec.max_power_w


def test_rendering_is_deterministic() -> None:
    node = make_node()
    node.workloads.append(
        state.Workload("p", "ns", (0,), state.WorkloadProfile.TRAINING, NOW, None)
    )
    a = exporters.render_dcgm(node, {}, NOW)
    assert a == exporters.render_dcgm(node, {}, NOW)
    assert a != exporters.render_dcgm(node, {}, NOW + timedelta(seconds=15))


def test_profiling_metrics_can_be_turned_off() -> None:
    fams = dcgm(make_node(profiling_metrics=False))
    assert not [name for name in fams if name.startswith("DCGM_FI_PROF_")]
    assert mn.DCGM_GPU_UTIL in fams


def test_custom_fields_off_leaves_the_shipped_default_set() -> None:
    fams = dcgm(make_node(dcgm_custom_fields=False))
    assert mn.DCGM_PSTATE not in fams
    assert mn.DCGM_PCIE_LINK_WIDTH not in fams
    assert mn.DCGM_UNCORRECTABLE_REMAPPED_ROWS in fams


def test_hardware_counters_and_overrides_are_rendered() -> None:
    node = make_node()
    gpu = node.gpu(1)
    gpu.uncorrectable_remapped_rows, gpu.row_remap_failure, gpu.row_remap_pending = 3, 1, 1
    gpu.link_width, gpu.link_speed_gts = 8, 16.0
    gpu.metric_overrides[mn.DCGM_GPU_TEMP] = 94
    fams = dcgm(node)
    assert one(fams[mn.DCGM_UNCORRECTABLE_REMAPPED_ROWS], "1")[1] == 3
    assert one(fams[mn.DCGM_ROW_REMAP_FAILURE], "1")[1] == 1
    assert one(fams[mn.DCGM_ROW_REMAP_PENDING], "1")[1] == 1
    assert one(fams[mn.DCGM_PCIE_LINK_WIDTH], "1")[1] == 8
    assert one(fams[mn.DCGM_PCIE_LINK_GEN], "1")[1] == 4
    assert one(fams[mn.DCGM_GPU_TEMP], "1")[1] == 94


def test_every_family_has_help_and_type_like_the_real_exporter() -> None:
    text = exporters.render_dcgm(make_node(), {}, NOW)
    assert (
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        in text
    )
    assert f"# TYPE {mn.DCGM_UNCORRECTABLE_REMAPPED_ROWS} counter" in text


# ------------------------------------------------------------------------ kube-state-metrics


def ksm_store() -> store.ObjectStore:
    objects = store.ObjectStore()
    objects.create("Node", "", {
        "metadata": {"name": "node-a",
                     "annotations": {"gpuguard.io/reason": "xid-79", "other": "x"}},
        "spec": {"unschedulable": True,
                 "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "128", "memory": "2Ti", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": "7", "cpu": "127500m", "memory": "2040Gi",
                            "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
            "nodeInfo": {"kernelVersion": "6.8.0-45-generic", "kubeletVersion": "v1.34.3+rke2r1"},
        },
    })  # fmt: skip
    objects.create("Node", "", {"metadata": {"name": "node-b"}, "status": {
        "capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
        "conditions": [{"type": "Ready", "status": "Unknown"}],
    }})  # fmt: skip
    objects.create("Pod", "ml", {
        "metadata": {"name": "train-0", "uid": "u-1"},
        "spec": {"nodeName": "node-a", "containers": [
            {"name": "trainer", "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "8"}}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    })  # fmt: skip
    objects.create("Pod", "gpu-operator", {
        "metadata": {"name": "gpu-feature-discovery-x"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "gfd"}]},
        "status": {"phase": "Running", "containerStatuses": [
            {"name": "gfd", "restartCount": 12,
             "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]},
    })  # fmt: skip
    return objects


def value_of(
    fams: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str
) -> float:
    (found,) = [v for ls, v in fams[name] if all(ls.get(k) == x for k, x in labels.items())]
    return found


def test_ksm_node_gpu_capacity_allocatable_and_cordon() -> None:
    fams = families(exporters.render_ksm(ksm_store(), NOW))
    gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}
    assert value_of(fams, mn.KSM_NODE_CAPACITY, node="node-a", **gpu) == 8
    assert value_of(fams, mn.KSM_NODE_ALLOCATABLE, node="node-a", **gpu) == 7
    assert (
        value_of(fams, mn.KSM_NODE_ALLOCATABLE, node="node-a", resource="cpu", unit="core") == 127.5
    )
    assert (
        value_of(fams, mn.KSM_NODE_CAPACITY, node="node-a", resource="memory", unit="byte") == 2**41
    )
    assert value_of(fams, mn.KSM_NODE_UNSCHEDULABLE, node="node-a") == 1
    assert value_of(fams, mn.KSM_NODE_UNSCHEDULABLE, node="node-b") == 0


def test_ksm_node_conditions_info_taints_and_annotations() -> None:
    fams = families(exporters.render_ksm(ksm_store(), NOW))
    ready_b = {ls["status"]: v for ls, v in fams[mn.KSM_NODE_CONDITION] if ls["node"] == "node-b"}
    assert ready_b == {"true": 0, "false": 0, "unknown": 1}
    info = value_of(fams, mn.KSM_NODE_INFO, node="node-a", kernel_version="6.8.0-45-generic")
    assert info == 1
    assert value_of(fams, mn.KSM_NODE_TAINT, node="node-a", effect="NoSchedule") == 1
    (annotated,) = [ls for ls, _ in fams[mn.KSM_NODE_ANNOTATIONS] if ls["node"] == "node-a"]
    assert annotated == {"node": "node-a", "annotation_gpuguard_io_reason": "xid-79"}


def test_ksm_pod_series() -> None:
    fams = families(exporters.render_ksm(ksm_store(), NOW))
    req = value_of(fams, mn.KSM_POD_REQUESTS, pod="train-0", resource="nvidia_com_gpu")
    assert req == 4
    (labels,) = [ls for ls, _ in fams[mn.KSM_POD_REQUESTS] if ls["resource"] == "nvidia_com_gpu"]
    assert list(labels) == ["namespace", "pod", "uid", "container", "node", "resource", "unit"]
    assert labels["node"] == "node-a"
    assert value_of(fams, mn.KSM_POD_PHASE, pod="train-0", phase="Running") == 1
    assert value_of(fams, mn.KSM_POD_PHASE, pod="train-0", phase="Failed") == 0
    assert value_of(fams, mn.KSM_POD_READY, pod="train-0", condition="true") == 1
    assert value_of(fams, mn.KSM_POD_INFO, pod="train-0", node="node-a") == 1
    assert value_of(fams, mn.KSM_CONTAINER_RESTARTS, pod="gpu-feature-discovery-x") == 12
    reason = value_of(
        fams, mn.KSM_CONTAINER_WAITING_REASON, container="gfd", reason="CrashLoopBackOff"
    )
    assert reason == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [("8", 8), ("500m", 0.5), ("64Gi", 64 * 2**30), ("1e3", 1000), ("2k", 2000), (".5", 0.5)],
)
def test_parse_quantity(text: str, value: float) -> None:
    assert exporters.parse_quantity(text) == value


def test_parse_quantity_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        exporters.parse_quantity("eight")


# ------------------------------------------------------------------------------ HTTP


class World:
    """The smallest thing the server accepts: nodes, a store and a clock."""

    def __init__(self, nodes: list[state.SimNode], objects: store.ObjectStore) -> None:
        self.nodes = nodes
        self.store = objects
        self.clock = self
        self.t = NOW

    def now(self) -> datetime:
        return self.t


def test_server_serves_each_node_and_ksm() -> None:
    down = make_node()
    down.name = "node-b"
    down.down_until = NOW + timedelta(minutes=5)
    world = World([make_node(), down], ksm_store())
    with metrics_server.serve(world) as srv, httpx.Client() as client:
        ok = client.get(srv.dcgm_url("node-a"))
        assert ok.status_code == 200
        assert ok.headers["content-type"].startswith("text/plain; version=0.0.4")
        assert mn.DCGM_GPU_UTIL in families(ok.text)
        assert client.get(srv.dcgm_url("node-b")).status_code == 503
        assert client.get(srv.dcgm_url("node-z")).status_code == 404
        assert client.get(srv.url + "/nothing").status_code == 404
        assert mn.KSM_NODE_CAPACITY in families(client.get(srv.ksm_url).text)
        world.t = NOW + timedelta(minutes=6)
        assert client.get(srv.dcgm_url("node-b")).status_code == 200


def test_scrape_config_has_one_target_per_node() -> None:
    cfg = metrics_server.scrape_config(
        "http://127.0.0.1:4321", [make_node(), "node-b"], scrape_interval="1s"
    )
    dcgm_job, node_job, ksm_job = cfg["scrape_configs"]
    assert dcgm_job["job_name"] == "dcgm-exporter"
    assert [t["labels"]["instance"] for t in node_job["static_configs"]] == [
        "node-a:9100", "node-b:9100"]  # node-exporter's port: the IB series' node
    assert ksm_job["job_name"] == "kube-state-metrics"
    assert [t["labels"] for t in dcgm_job["static_configs"]] == [
        {"__metrics_path__": "/dcgm/node-a/metrics", "instance": "node-a:9400"},
        {"__metrics_path__": "/dcgm/node-b/metrics", "instance": "node-b:9400"},
    ]
    assert all(t["targets"] == ["127.0.0.1:4321"] for t in dcgm_job["static_configs"])
    assert ksm_job["metrics_path"] == "/ksm/metrics"
    assert ksm_job["scrape_interval"] == "1s"
