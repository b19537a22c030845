"""The agent's PodResources reader against the simulated kubelet over a real unix socket:
gRPC over HTTP/2 with prior knowledge, the v1 List answer decoded, fields gpuguard does not
read skipped, and a kubelet that does not answer is a SourceError, never an empty list."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from gpuguard.agent import podresources
from gpuguard.errors import SourceError
from gpuguard.sim import podresources as kubelet
from gpuguard.sim import state

BAD = "GPU-0a8e0faa-d59d-595d-bf96-0adbb520ef6b"


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(dir="/tmp") as d:  # AF_UNIX paths: at most 107 bytes
        yield Path(d)


def test_list_names_the_pods_on_each_gpu(socket_dir: Path) -> None:
    found = [("team-a", "train-0", "main", "nvidia.com/gpu", (BAD, "GPU-2")),
             ("team-b", "infer-1", "main", "nvidia.com/gpu", ("GPU-3",))]
    path = socket_dir / "kubelet.sock"
    with kubelet.PodResourcesServer(path, lambda: kubelet.encode_list(found)):
        uses = podresources.KubeletPodResources(path).list()
    (on_bad,) = podresources.pods_on(uses, BAD)
    assert (on_bad.namespace, on_bad.pod, on_bad.container) == ("team-a", "train-0", "main")


def test_the_world_s_workloads_are_the_kubelet_s_pods() -> None:
    gpus = [state.SimGpu(i, f"GPU-{i}", f"0000:{i:02x}:00.0", "H100") for i in range(4)]
    node = state.SimNode(name="gpu-node-a", boot_id="b", driver_module="580",
                         driver_library="580", gpus=gpus)
    node.workloads.append(state.Workload("train-0", "team-a", (1, 2),
                                         state.WorkloadProfile.TRAINING,
                                         datetime(2026, 1, 1, tzinfo=UTC), None))
    assert kubelet.containers(node) == [
        ("team-a", "train-0", "main", "nvidia.com/gpu", ("GPU-1", "GPU-2"))]


def test_fields_gpuguard_does_not_read_are_skipped() -> None:
    device = (b"\x0a\x0envidia.com/gpu" + b"\x12\x05GPU-1"
              + b"\x1a\x04\x0a\x02\x08\x01")  # topology {nodes {ID: 1}}
    container = b"\x0a\x04main" + b"\x12" + bytes([len(device)]) + device + b"\x18\x07"  # cpu 7
    pod = b"\x0a\x01p\x12\x01n" + b"\x1a" + bytes([len(container)]) + container
    message = b"\x0a" + bytes([len(pod)]) + pod
    (use,) = podresources.decode_list(message)
    assert (use.pod, use.namespace, use.device_ids) == ("p", "n", ("GPU-1",))


def test_a_compressed_or_short_frame_is_refused() -> None:
    with pytest.raises(podresources.DecodeError, match="compressed"):
        podresources.unframe(b"\x01\x00\x00\x00\x00")
    with pytest.raises(podresources.DecodeError, match="says 9 bytes"):
        podresources.unframe(b"\x00\x00\x00\x00\x09abc")


def test_no_kubelet_is_a_source_error(socket_dir: Path) -> None:
    with pytest.raises(SourceError, match="kubelet PodResources"):
        podresources.KubeletPodResources(socket_dir / "absent.sock", timeout_s=1).list()
