"""Benchmark: the guard's tick over a simulated fleet, over real HTTP.

What it answers: can the controller keep up with a large GPU fleet — how long the first sync
takes and what it holds in memory, then per steady tick the seconds, the bytes read from the
Kubernetes API, the Prometheus queries and the controller's RSS — with nothing changing between
ticks, and with 1 % of the nodes changing between ticks. Targets (printed with each figure):
steady tick <= 1 s, API bytes per steady tick <= 1 % of one full list of Nodes and Pods,
RSS <= 500 MB after the initial sync, Prometheus queries per tick the same at every size.

The world runs in a second process (``multiprocessing``, forked before the controller starts a
thread), so the controller's RSS is its own: the simulator's Kubernetes API
(``sim.kubeapi.serve``) over a store of realistically sized objects (``FleetObjects``), whose
traffic counters say the bytes read from the API (what it sent the controller: status lines,
headers, bodies, watch streams; per verb), and a stand-in Prometheus (``/api/v1/query`` only)
answering each of the tick's queries (``sources.prometheus.QueryPlan``) with what a healthy
fleet of that size answers (``HealthyFleet``), counting queries and bytes. The controller
process wires a ``controller.tick.Guard`` as ``gpuguard run`` does (``controller.wiring``: the
lightkube client, the watch caches ``WatchedCluster`` — ``--reader watch``, the default — or a
list of every Node and Pod each tick — ``--reader list``, the caches' fallback —,
``PrometheusSource``, ``NodeWriter``, the packaged Xid catalog, default settings), dry-run, with
the isolation decision and the freshness check but without the optional steps (recovery,
return to pool, phantom, fault history, GPU isolation, changes, fleet health): those read
their own plans and objects and are not what this bench measures.

    .venv/bin/python bench/tick_bench.py                      # 1,000 and 10,000 nodes
    .venv/bin/python bench/tick_bench.py --sizes 100          # a quick smoke run
    .venv/bin/python bench/tick_bench.py --reader list        # list every tick (the fallback)
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import multiprocessing
import resource
import statistics
import sys
import threading
import time
import urllib.request
import uuid as uuidlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from multiprocessing.connection import Connection
from typing import Any, Protocol, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

import httpx2
from lightkube import Client

from gpuguard.actuators import nodes
from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller import tick, wiring
from gpuguard.model import annotation_keys, fleet, ports
from gpuguard.model import metric_names as names
from gpuguard.model import settings as settings_model
from gpuguard.sim import kube_objects, kubeapi, metrics_server, state, store
from gpuguard.sources import gpu_pods, kubernetes, prometheus, watched_cluster

Obj = dict[str, Any]
Result = TypeVar("Result")
GPUS_PER_NODE = 8
GPU_PODS_PER_NODE = 4  # 2 GPUs each; with one CPU pod and the 5 system pods: 10 per node
CHANGED_SHARE = 0.01
CREATED = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
DRIVER = "570.172.08"
PRODUCT = "NVIDIA H100 80GB HBM3"
READERS = ("watch", "list")
TARGET_TICK_S = 1.0
TARGET_BYTES_SHARE = 0.01
TARGET_RSS_MB = 500.0
ROUND_ANNOTATION = "bench.gpuguard.io/round"  # which change round last touched a node
_SETTLE_S = 0.2  # a watch stream is caught up when the API sent no byte for this long
_SETTLE_MAX_S = 10.0
_CATCH_UP_S = 120.0  # how long the watch caches may take to deliver a round of changes
_SYNC_TIMEOUT_S = 1800.0


# --- Realistically sized objects ------------------------------------------------------------
#
# A GPU Node of a real cluster is 10-20 KB of JSON: gpu-feature-discovery's ~30 nvidia.com/*
# labels, node-feature-discovery's dozens of feature.node.kubernetes.io/* labels (one per CPUID
# flag) and its feature-labels annotation, the CNI's and RKE2's annotations, managedFields
# naming each label again per manager, and status.images (the kubelet reports up to 50 images,
# nodeStatusMaxImages, each with its digests). What is built here is the simulator's Node
# (``sim.kube_objects.node_object`` + ``node_status``) padded with those fields: ~18 KB.
# A Pod is 4-8 KB: ownerReferences, the controller's labels, managedFields of the controller
# and the kubelet, a container with env, volumeMounts and resources, the projected
# service-account volume, the default tolerations, status with conditions and
# containerStatuses: the simulator's pods padded likewise, ~5 KB. The padding that is the same
# on every object is one shared value in the store's memory (the wire carries it in full).

_CPUID = (  # node-feature-discovery's cpu-cpuid flags of a Sapphire Rapids host
    "ADX", "AESNI", "AMXBF16", "AMXINT8", "AMXTILE", "AVX", "AVX2", "AVX512BF16",
    "AVX512BITALG", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512FP16", "AVX512IFMA",
    "AVX512VBMI", "AVX512VBMI2", "AVX512VL", "AVX512VNNI", "AVX512VPOPCNTDQ", "AVXVNNI",
    "CETIBT", "CETSS", "CLDEMOTE", "CMPXCHG8", "FMA3", "FSRM", "FXSR", "FXSROPT", "GFNI",
    "IBPB", "LAHF", "MOVBE", "MOVDIR64B", "MOVDIRI", "OSXSAVE", "SERIALIZE", "SHA", "STIBP",
    "SYSCALL", "SYSEE", "TSXLDTRK", "VAES", "VMX", "VPCLMULQDQ", "WAITPKG", "WBNOINVD", "X87",
    "XGETBV1", "XSAVE", "XSAVEC", "XSAVEOPT", "XSAVES"
)
_NFD = "feature.node.kubernetes.io/"


def _nfd_labels() -> dict[str, str]:
    labels = {f"{_NFD}cpu-cpuid.{flag}": "true" for flag in _CPUID}
    return labels | {
        f"{_NFD}{key}": value for key, value in (
            ("cpu-cpuid.vendor_id", "Intel"), ("cpu-hardware_multithreading", "true"),
            ("cpu-model.family", "6"), ("cpu-model.id", "143"), ("cpu-model.vendor_id", "Intel"),
            ("cpu-pstate.status", "active"), ("cpu-pstate.turbo", "true"),
            ("cpu-rdt.RDTCMT", "true"), ("cpu-rdt.RDTL3CA", "true"), ("cpu-rdt.RDTMBA", "true"),
            ("kernel-config.NO_HZ", "true"), ("kernel-config.NO_HZ_IDLE", "true"),
            ("kernel-version.full", "6.8.0-45-generic"), ("kernel-version.major", "6"),
            ("kernel-version.minor", "8"), ("kernel-version.revision", "0"),
            ("memory-numa", "true"), ("network-sriov.capable", "true"),
            ("pci-10de.present", "true"), ("pci-15b3.present", "true"),
            ("pci-15b3.sriov.capable", "true"), ("rdma.available", "true"),
            ("rdma.capable", "true"), ("storage-nonrotationaldisk", "true"),
            ("system-os_release.ID", "ubuntu"), ("system-os_release.VERSION_ID", "22.04"),
            ("system-os_release.VERSION_ID.major", "22"),
            ("system-os_release.VERSION_ID.minor", "04"),
        )
    }  # fmt: skip


def _gfd_labels() -> dict[str, str]:
    major, minor, rev = DRIVER.split(".")
    return {f"nvidia.com/{key}": value for key, value in (
        ("cuda.driver.major", major), ("cuda.driver.minor", minor), ("cuda.driver.rev", rev),
        ("cuda.driver-version.major", major), ("cuda.driver-version.minor", minor),
        ("cuda.driver-version.revision", rev), ("cuda.runtime.major", "12"),
        ("cuda.runtime.minor", "8"), ("cuda.runtime-version.full", "12.8"),
        ("cuda.runtime-version.major", "12"), ("cuda.runtime-version.minor", "8"),
        ("gfd.timestamp", "1772352000"), ("gpu.compute.major", "9"), ("gpu.compute.minor", "0"),
        ("gpu.family", "hopper"), ("gpu.machine", "PowerEdge-XE9680"), ("gpu.memory", "81559"),
        ("gpu.mode", "compute"), ("gpu.replicas", "1"), ("gpu.sharing-strategy", "none"),
        ("mig.capable", "true"), ("mig.strategy", "single"), ("mps.capable", "false"),
        ("vgpu.present", "false"), ("gpu-driver-upgrade-state", "upgrade-done"),
    )}  # fmt: skip


def _fields(section: str, keys: list[str]) -> Obj:
    return {"f:metadata": {f"f:{section}": {".": {}, **{f"f:{k}": {} for k in keys}}}}


def _managed(manager: str, fields_v1: Obj, subresource: str | None = None) -> Obj:
    entry = {"manager": manager, "operation": "Update", "apiVersion": "v1",
             "time": kube_objects.timestamp(CREATED), "fieldsType": "FieldsV1",
             "fieldsV1": fields_v1}  # fmt: skip
    return entry | ({"subresource": subresource} if subresource else {})


def _images() -> list[Obj]:
    """20 images as the kubelet reports them (digest and tag names, size)."""
    repos = ["nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/k8s/dcgm-exporter",
             "nvcr.io/nvidia/k8s-device-plugin", "nvcr.io/nvidia/gpu-feature-discovery",
             "docker.io/rancher/mirrored-calico-node", "docker.io/rancher/hardened-kubernetes",
             "registry.k8s.io/nfd/node-feature-discovery", "nvcr.io/nvidia/cuda",
             "ghcr.io/gpuguard/gpuguard", "docker.io/rancher/mirrored-pause"]  # fmt: skip
    return [
        {"names": [f"{repo}@sha256:{hashlib.sha256(f'{repo}{n}'.encode()).hexdigest()}",
                   f"{repo}:v{n}.{n + 3}.0"],
         "sizeBytes": 100_000_000 + 7_919_113 * (n * 10 + k)}
        for n in range(2) for k, repo in enumerate(repos)
    ]  # fmt: skip


@dataclass(frozen=True)
class _Shared:
    """The parts every Node or Pod carries alike (one value, referenced by each object)."""

    node_labels: Obj
    node_annotations: Obj
    node_managed: list[Obj]
    images: list[Obj]
    pod_managed: list[Obj]
    env: list[Obj]
    mounts: list[Obj]
    volumes: list[Obj]
    tolerations: list[Obj]


def _shared() -> _Shared:
    gfd, nfd = _gfd_labels(), _nfd_labels()
    annotations = {
        "nfd.node.kubernetes.io/feature-labels": ",".join(sorted(nfd)),
        "nfd.node.kubernetes.io/extended-resources": "",
        "flannel.alpha.coreos.com/backend-type": "vxlan",
        "flannel.alpha.coreos.com/kube-subnet-manager": "true",
        "rke2.io/node-args": json.dumps(["agent", "--node-label", "nvidia.com/gpu.deploy."
                                         "operands=true", "--kubelet-arg", "max-pods=110",
                                         "--kubelet-arg", "cpu-manager-policy=static",
                                         "--kubelet-arg", "topology-manager-policy=single-numa"
                                         "-node", "--protect-kernel-defaults", "true"]),
        "rke2.io/node-config-hash": "Q3LMVAIXDZFMVBUFQZUK3JSTDUPLSFWCQGMRW5J7JFQFIVWKHXWQ====",
        "rke2.io/node-env": "{}",
        "node.alpha.kubernetes.io/ttl": "0",
        "volumes.kubernetes.io/controller-managed-attach-detach": "true",
    }
    pod_spec_fields: Obj = {"f:spec": {"f:containers": {'k:{"name":"main"}': {
        ".": {}, "f:command": {}, "f:env": {".": {}}, "f:image": {}, "f:name": {},
        "f:resources": {".": {}, "f:limits": {}, "f:requests": {}}, "f:volumeMounts": {}}},
        "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:tolerations": {}, "f:volumes": {}}}
    pod_status_fields: Obj = {"f:status": {"f:conditions": {f'k:{{"type":"{t}"}}': {
        ".": {}, "f:lastProbeTime": {}, "f:lastTransitionTime": {}, "f:status": {}, "f:type": {}}
        for t in ("ContainersReady", "Initialized", "PodReadyToStartContainers", "Ready")},
        "f:containerStatuses": {}, "f:hostIP": {}, "f:hostIPs": {}, "f:phase": {},
        "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}
    return _Shared(
        node_labels=gfd | nfd,
        node_annotations=annotations,
        node_managed=[
            _managed("rke2", _fields("annotations", [k for k in annotations if "rke2" in k])),
            _managed("nfd-master", _fields("labels", sorted(nfd))
                     | {"f:metadata": {"f:annotations": {
                         "f:nfd.node.kubernetes.io/feature-labels": {}}}}),
            _managed("gpu-feature-discovery", _fields("labels", sorted(gfd))),
            _managed("kube-controller-manager", {"f:spec": {"f:podCIDR": {}, "f:podCIDRs": {}}}),
            _managed("kubelet", {"f:status": {"f:conditions": {}, "f:images": {},
                                              "f:nodeInfo": {"f:bootID": {}}}}, "status"),
        ],
        images=_images(),
        pod_managed=[_managed("kube-controller-manager", pod_spec_fields),
                     _managed("kubelet", pod_status_fields, "status")],
        env=[{"name": k, "value": v} for k, v in (
            ("NCCL_DEBUG", "WARN"), ("NCCL_IB_HCA", "mlx5_0,mlx5_1,mlx5_2,mlx5_3"),
            ("NCCL_SOCKET_IFNAME", "eth0"), ("OMP_NUM_THREADS", "16"),
            ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
            ("MASTER_ADDR", "train-llm-0.train-llm"), ("MASTER_PORT", "29500"),
            ("WORLD_SIZE", "64"), ("HF_HOME", "/cache/huggingface"),
            ("WANDB_PROJECT", "llm-pretrain"), ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        )] + [{"name": "POD_IP", "valueFrom": {"fieldRef": {
            "apiVersion": "v1", "fieldPath": "status.podIP"}}}],
        mounts=[
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "datasets", "mountPath": "/data", "readOnly": True},
            {"name": "checkpoints", "mountPath": "/checkpoints"},
            {"name": "kube-api-access-7xk2p", "mountPath":
             "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": True},
        ],
        volumes=[
            {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "64Gi"}},
            {"name": "datasets", "persistentVolumeClaim": {"claimName": "datasets",
                                                           "readOnly": True}},
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "checkpoints"}},
            {"name": "kube-api-access-7xk2p", "projected": {"defaultMode": 420, "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt",
                               "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                    "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ]}},
        ],
        tolerations=[
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
             "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
    )  # fmt: skip


def node_name(i: int) -> str:
    return f"gpu-node-{i:05d}"


def _generated_suffix(i: int) -> str:
    """A DaemonSet pod's 5-letter suffix, distinct per node: ``kube_objects.pod_name`` hashes
    the node's name into 5 letters, and among 10,000 nodes a few collide (the API server would
    generate another); ``i * 7919`` is a bijection modulo 27**5 (7919 is prime, not 3)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generateName letters
    n, suffix = i * 7919 % len(alphabet) ** 5, ""
    for _ in range(5):
        n, digit = divmod(n, len(alphabet))
        suffix += alphabet[digit]
    return suffix


def _uid(*parts: object) -> str:
    return str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, "/".join(map(str, parts))))


class FleetObjects:
    """Builds each node's Node and its 10 Pods."""

    def __init__(self) -> None:
        self.shared = _shared()

    def node(self, i: int) -> Obj:
        name = node_name(i)
        gpus = [state.SimGpu(g, f"GPU-{_uid(name, g)}", f"0000:{0x18 + g:02x}:00.0", PRODUCT)
                for g in range(GPUS_PER_NODE)]  # fmt: skip
        sim = state.SimNode(name, state.new_boot_id(name), DRIVER, DRIVER, gpus=gpus,
                            gpu_operator=True)  # fmt: skip
        obj = kube_objects.node_object(sim, CREATED, i)
        meta, spec, status = obj["metadata"], obj["spec"], obj["status"]
        status |= kube_objects.node_status(sim, CREATED, CREATED)
        meta["uid"] = _uid("node", name)
        meta["labels"] |= self.shared.node_labels
        meta["annotations"] = meta["annotations"] | self.shared.node_annotations | {
            "flannel.alpha.coreos.com/public-ip": status["addresses"][0]["address"],
            "rke2.io/internal-ip": status["addresses"][0]["address"],
            "rke2.io/hostname": name,
            "csi.volume.kubernetes.io/nodeid": json.dumps({"csi.tigera.io": name}),
        }
        meta["managedFields"] = self.shared.node_managed
        spec["podCIDRs"] = [spec["podCIDR"]]
        spec["providerID"] = f"rke2://{name}"
        status["images"] = self.shared.images
        status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": 10250}}
        return obj

    def pods(self, i: int, generation: int = 0) -> list[tuple[str, Obj]]:
        """(namespace, Pod) of node ``i``: 5 system pods, 4 GPU pods, 1 CPU pod."""
        found = [(sp.namespace, self._system_pod(sp, i)) for sp in kube_objects.SYSTEM_PODS]
        found += [("train", self.workload(i, k, generation)) for k in range(5)]
        return found

    def _system_pod(self, sp: kube_objects.SystemPod, i: int) -> Obj:
        node = node_name(i)
        pod = kube_objects.system_pod_object(sp, node, CREATED)
        if not sp.static:
            pod["metadata"]["name"] = sp.prefix + _generated_suffix(i)
        pod["status"] = kube_objects.system_pod_status(sp, True, 0, CREATED)
        owner = ("Node", node) if sp.static else ("DaemonSet", sp.prefix.rstrip("-"))
        return self._padded(pod, node, owner)

    def workload(self, i: int, k: int, generation: int) -> Obj:
        """Pod ``k`` of node ``i``'s training job (k < 4: 2 GPUs); ``generation`` names its
        replacement after the one before finished."""
        node = node_name(i)
        gpus = 2 if k < GPU_PODS_PER_NODE else 0
        job = f"train-llm-{i // 8:04d}"
        name = f"{job}-{i % 8 * 5 + k}-g{generation}"
        pod = kube_objects.workload_pod(name, "train", gpus, "training", CREATED)
        if not gpus:
            del pod["spec"]["containers"][0]["resources"]
        pod = kube_objects.bound(pod, node, CREATED)
        pod["metadata"]["labels"] |= {"batch.kubernetes.io/job-name": job, "job-name": job,
                                      "batch.kubernetes.io/controller-uid": _uid("job", job)}
        return self._padded(pod, node, ("Job", job))

    def _padded(self, pod: Obj, node: str, owner: tuple[str, str]) -> Obj:
        meta, spec, status = pod["metadata"], pod["spec"], pod["status"]
        meta["uid"] = _uid("pod", meta.get("namespace", ""), meta["name"])
        meta["generateName"] = meta["name"].rsplit("-", 1)[0] + "-"
        meta["ownerReferences"] = [{
            "apiVersion": "batch/v1" if owner[0] == "Job" else "apps/v1", "kind": owner[0],
            "name": owner[1], "uid": _uid(*owner), "controller": True,
            "blockOwnerDeletion": True}]  # fmt: skip
        meta["managedFields"] = self.shared.pod_managed
        container = spec["containers"][0]
        container |= {"command": ["torchrun", "--nproc-per-node=2", "/workspace/train.py"],
                      "env": self.shared.env, "volumeMounts": self.shared.mounts,
                      "imagePullPolicy": "IfNotPresent",
                      "terminationMessagePath": "/dev/termination-log",
                      "terminationMessagePolicy": "File"}  # fmt: skip
        spec |= {"volumes": self.shared.volumes, "tolerations": self.shared.tolerations,
                 "dnsPolicy": "ClusterFirst", "enableServiceLinks": True,
                 "preemptionPolicy": "PreemptLowerPriority", "priority": 0,
                 "schedulerName": "default-scheduler", "securityContext": {},
                 "serviceAccountName": "default", "terminationGracePeriodSeconds": 30}
        subnet = int(hashlib.md5(node.encode()).hexdigest()[:4], 16) % 256
        ip = f"10.42.{subnet}.{len(meta['name'])}"
        status |= {"hostIP": "10.0.0.10", "hostIPs": [{"ip": "10.0.0.10"}], "podIP": ip,
                   "podIPs": [{"ip": ip}], "qosClass": "Burstable",
                   "startTime": kube_objects.timestamp(CREATED)}  # fmt: skip
        for cs in status.get("containerStatuses", []):
            cs["containerID"] = f"containerd://{hashlib.sha256(meta['uid'].encode()).hexdigest()}"
            cs["imageID"] = self.shared.images[0]["names"][0]
        return pod


# --- The world process: API server, stand-in Prometheus --------------------------------------


Value = Callable[[float], float]  # a series' value at an evaluation time (Unix seconds)


class HealthyFleet:
    """What Prometheus answers the tick's queries with for a healthy fleet of ``n`` nodes (every
    GPU's Xid gauge at 0): per node, the newest dcgm-exporter and agent sample; the two
    freshness stamps; nothing for the queries that select faults (the Xid gauge now and a
    lookback ago, Xid counts, the agent's counters, held GPU loss: ``> 0`` filters) and for the
    agent's opt-in GPU-to-pod series. No node has a fault, so the tick asks no node's GPU pods
    (``sources.gpu_pods``). A query it does not know is refused (HTTP 400), so a changed plan
    fails the bench rather than reading as healthy.

    Each series' JSON is encoded once; an answer joins them around the evaluation time, so the
    stand-in costs the tick next to nothing (``sim.prometheus_api`` builds and encodes every
    sample per request: ~3 s a tick at 10,000 nodes, which the tick would be charged with)."""

    def __init__(self, n: int, plan: Mapping[str, str]) -> None:
        per_node = {key: [_series_head({key: node_name(i)}) for i in range(n)]
                    for key in ("node", "Hostname")}  # fmt: skip
        fleet_wide = [_series_head({})]
        zero: Value = lambda t: 0.0  # noqa: E731
        answers: dict[str, tuple[list[str], Value]] = {
            names.DCGM_NODE_NEWEST: (per_node["Hostname"], lambda t: t - 7),
            names.AGENT_NODE_NEWEST: (per_node["node"], lambda t: t - 4),
            names.FRESHNESS_KSM: (fleet_wide, lambda t: t - 3),
            names.FRESHNESS_DCGM: (fleet_wide, lambda t: t - 2),
        }
        empty = (names.DCGM_XID_LAST, names.XID_LAST_24H_AGO, names.GPU_LOSS_HELD,
                 names.XID_COUNT_RECENT, names.XID_TOTAL_RECENT, names.FALLEN_OFF_BUS_RECENT,
                 names.GPU_POD)  # fmt: skip
        answers |= {name: ([], zero) for name in empty}
        self._by_query = {promql: answers[name] for name, promql in plan.items()}
        self._lock = threading.Lock()
        self._queries = self._bytes = 0

    def answer(self, query: str, at: float) -> tuple[int, bytes]:
        """(HTTP status, body) of ``GET /api/v1/query`` as Prometheus answers it
        (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)."""
        found = self._by_query.get(query)
        if found is None:
            return no_answer(query)
        heads, value = found
        point = f'{at},"{value(at)!r}"]}}'
        result = (point + ",").join(heads) + point if heads else ""
        encoded = vector_body(result)
        with self._lock:
            self._queries += 1
            self._bytes += len(encoded)
        return 200, encoded

    def counters(self) -> tuple[int, int]:
        """Queries answered and their bytes, so far."""
        with self._lock:
            return self._queries, self._bytes


def _series_head(labels: Mapping[str, str]) -> str:
    """One vector item's JSON up to its sample: ``{"metric":{...},"value":[``."""
    return f'{{"metric":{json.dumps(labels, separators=(",", ":"))},"value":['


def no_answer(query: str) -> tuple[int, bytes]:
    """A stand-in's 400 for a query it was not built to answer (the bench is then wrong)."""
    body = {"status": "error", "errorType": "bad_data",
            "error": f"the bench has no answer for {query!r}"}  # fmt: skip
    return 400, json.dumps(body).encode()


def vector_body(result: str) -> bytes:
    """An instant query's success body around ``result``, the vector's items already JSON
    (https://prometheus.io/docs/prometheus/latest/querying/api/#instant-queries)."""
    return f'{{"status":"success","data":{{"resultType":"vector","result":[{result}]}}}}'.encode()


class Answers(Protocol):
    """A Prometheus stand-in's instant-query answers (this bench's and plans_bench's)."""

    def answer(self, query: str, at: float) -> tuple[int, bytes]: ...


def prometheus_handler(
    fleet_: Answers, counters: Callable[[], Mapping[str, int]] | None = None
) -> type[BaseHTTPRequestHandler]:
    """``/api/v1/query`` answered by ``fleet_``; ``/bench/counters`` by ``counters`` (JSON)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            params = dict(parse_qsl(url.query))
            if url.path == "/bench/counters" and counters is not None:
                body = json.dumps(counters()).encode()
                metrics_server.reply(self, 200, "application/json", body)
                return
            if url.path != "/api/v1/query":
                metrics_server.reply(self, 404, "text/plain", b"not found")
                return
            status, body = fleet_.answer(params.get("query", ""), float(params["time"]))
            metrics_server.reply(self, status, "application/json", body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet."""

    return Handler


def tick_plan(guard_settings: settings_model.GuardSettings) -> prometheus.QueryPlan:
    """The tick's plan, as ``wiring.build_guard`` makes it."""
    isolation = guard_settings.isolation
    return prometheus.QueryPlan(isolation.hold_window, isolation.xid_lookback)


class Churn:
    """1 % (``share``) of the nodes change between two ticks, a different 1 % each round: the
    kubelet posts the Node's status (a new heartbeat in its conditions), one of its training
    pods has finished (deleted) and its replacement is bound there (created)."""

    def __init__(self, objects: store.ObjectStore, builder: FleetObjects, n: int, share: float):
        self._store, self._fleet, self._n = objects, builder, n
        self._count = max(1, round(n * share))
        self._round = 0
        self._generations: dict[int, int] = {}

    def apply(self) -> Changed:
        """Change the next nodes; their names and the versions their last changes made."""
        self._round += 1
        first = (self._round - 1) * self._count
        changed = [(first + k) % self._n for k in range(self._count)]
        beat = kube_objects.timestamp(CREATED + timedelta(minutes=5 * self._round))
        for i in changed:
            name = node_name(i)
            conditions = self._store.get("Node", "", name)["status"]["conditions"]
            fresh = [c | {"lastHeartbeatTime": beat} for c in conditions]
            node = self._store.merge_patch("Node", "", name, {
                "metadata": {"annotations": {ROUND_ANNOTATION: str(self._round)}},
                "status": {"conditions": fresh}})  # fmt: skip
            old = self._generations.get(i, 0)
            finished = self._fleet.workload(i, 0, old)["metadata"]["name"]
            self._store.delete("Pod", "train", finished)
            pod = self._store.create("Pod", "train", self._fleet.workload(i, 0, old + 1))
            self._generations[i] = old + 1
        return Changed([node_name(i) for i in changed], node["metadata"]["resourceVersion"],
                       pod["metadata"]["resourceVersion"])  # fmt: skip


@dataclass(frozen=True)
class Changed:
    """One round of changes: the nodes changed, and the resourceVersions of the last Node and
    the last Pod written (a watch cache that reached them holds the whole round)."""

    nodes: list[str]
    node_version: str
    pod_version: str


@dataclass(frozen=True)
class Counters:
    """The world's counters: bytes the API sent the controller, Prometheus queries and the
    bytes of their answers."""

    api_bytes: int
    prom_queries: int
    prom_bytes: int
    api_by_verb: Mapping[str, int]  # API bytes per request verb (list, watch, get...)

    def __sub__(self, earlier: Counters) -> Counters:
        by_verb = {verb: count - earlier.api_by_verb.get(verb, 0)
                   for verb, count in self.api_by_verb.items()}  # fmt: skip
        return Counters(self.api_bytes - earlier.api_bytes,
                        self.prom_queries - earlier.prom_queries,
                        self.prom_bytes - earlier.prom_bytes,
                        {verb: count for verb, count in by_verb.items() if count})  # fmt: skip


@dataclass(frozen=True)
class WorldReady:
    """What the world process reports once it serves."""

    api_url: str
    prometheus_url: str
    nodes: int
    pods: int
    node_list_bytes: int  # one full list, as ``GET /api/v1/nodes`` answers it (body)
    pod_list_bytes: int
    node_bytes: int  # one Node's JSON
    pod_bytes: int  # one training Pod's JSON
    built_s: float


def _body_bytes(url: str) -> int:
    """The length of a GET's body, read in chunks (never held whole)."""
    total = 0
    with urllib.request.urlopen(url, timeout=600) as response:
        while chunk := response.read(1 << 20):
            total += len(chunk)
    return total


def world(n: int, share: float, conn: Connection) -> None:
    """The world process: serve until told ``stop``; answer ``counters`` with ``Counters``
    and ``change`` with the changed nodes' names."""
    started = time.perf_counter()
    builder, objects = FleetObjects(), store.ObjectStore()
    for i in range(n):
        objects.create("Node", "", builder.node(i))
        for namespace, pod in builder.pods(i):
            objects.create("Pod", namespace, pod)
    built = time.perf_counter() - started
    answers = HealthyFleet(n, tick_plan(settings_model.GuardSettings()).queries())
    churn = Churn(objects, builder, n, share)
    handler = prometheus_handler(answers)
    with kubeapi.serve(objects) as api, \
            metrics_server.serving(handler, "127.0.0.1", 0, "prometheus") as prom:
        conn.send(WorldReady(
            api_url=api.url, prometheus_url=prom, nodes=n, pods=n * 10,
            node_list_bytes=_body_bytes(f"{api.url}/api/v1/nodes"),
            pod_list_bytes=_body_bytes(f"{api.url}/api/v1/pods"),
            node_bytes=len(json.dumps(builder.node(0))),
            pod_bytes=len(json.dumps(builder.workload(0, 0, 0))), built_s=built,
        ))  # fmt: skip
        while (command := conn.recv()) != "stop":
            if command == "counters":
                served = api.traffic()
                conn.send(Counters(served.total.bytes, *answers.counters(),
                                   {verb: u.bytes for verb, u in served.by_verb.items()}))
            elif command == "change":
                conn.send(churn.apply())


# --- The controller process ------------------------------------------------------------------


@dataclass(frozen=True)
class Figures:
    """One measured tick (or the initial sync)."""

    seconds: float
    api_bytes: int
    prom_queries: int
    rss_mb: float
    nodes: int
    pods: int
    cluster_s: float = 0.0  # of ``seconds``: in the cluster reader (nodes() and pods())
    prometheus_s: float = 0.0  # in the Prometheus source (every query of the plan)
    prom_bytes: int = 0  # the answers' bodies
    api_by_verb: Mapping[str, int] = field(default_factory=dict)


class WorldProcess:
    """The world in its own process, and the controller's line to it."""

    def __init__(self, n: int, share: float) -> None:
        context = multiprocessing.get_context("fork")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=world, args=(n, share, child), daemon=True)
        self._process.start()
        child.close()
        if not self._conn.poll(1800):
            raise BenchError(f"the world of {n} nodes did not start within 30 minutes")
        try:
            self.ready: WorldReady = self._conn.recv()
        except EOFError:
            raise BenchError(f"the world of {n} nodes ended while starting (exit code "
                             f"{self._process.exitcode}; out of memory?)") from None

    def counters(self) -> Counters:
        self._conn.send("counters")
        counters: Counters = self._conn.recv()
        return counters

    def change(self) -> Changed:
        self._conn.send("change")
        changed: Changed = self._conn.recv()
        return changed

    def rss_mb(self) -> float:
        return _vm_rss_mb(f"/proc/{self._process.pid}/status")

    def settle(self) -> None:
        """Wait until no byte has flowed to the controller for a moment (its watches, if any,
        have delivered what changed)."""
        deadline = time.monotonic() + _SETTLE_MAX_S
        last = self.counters().api_bytes
        while time.monotonic() < deadline:
            time.sleep(_SETTLE_S)
            now = self.counters().api_bytes
            if now == last:
                return
            last = now

    def stop(self) -> None:
        with contextlib.suppress(OSError, BrokenPipeError):
            self._conn.send("stop")
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()


class BenchError(Exception):
    """The bench could not measure (the message says what went wrong)."""


def _vm_rss_mb(status_path: str = "/proc/self/status") -> float:
    with open(status_path) as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise BenchError(f"no VmRSS in {status_path}")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Stopwatch:
    """Seconds spent in the cluster reader and in the Prometheus source, since ``reset``."""

    def __init__(self) -> None:
        self.cluster_s = self.prometheus_s = 0.0

    def reset(self) -> None:
        self.cluster_s = self.prometheus_s = 0.0


@dataclass
class TimedCluster:
    reader: ports.ClusterReader
    watch: Stopwatch

    def nodes(self) -> tuple[fleet.Node, ...]:
        started = time.perf_counter()
        try:
            return self.reader.nodes()
        finally:
            self.watch.cluster_s += time.perf_counter() - started

    def pods(self) -> tuple[fleet.Pod, ...]:
        started = time.perf_counter()
        try:
            return self.reader.pods()
        finally:
            self.watch.cluster_s += time.perf_counter() - started


@dataclass
class TimedMetrics:
    source: ports.MetricsSource
    watch: Stopwatch

    def samples(self, at: datetime) -> tuple[fleet.MetricSample, ...]:
        started = time.perf_counter()
        try:
            return self.source.samples(at)
        finally:
            self.watch.prometheus_s += time.perf_counter() - started


@dataclass(frozen=True)
class Cluster:
    """The cluster reader, the node writer it goes with, and how often it listed afresh."""

    reader: ports.ClusterReader
    writer: nodes.NodeWriter
    fallback_lists: Callable[[], int]
    holds: Callable[[Changed], bool]  # whether the reader will see a round of changes


@contextlib.contextmanager
def cluster_reader(
    kind: str, client: Client, guard_settings: settings_model.GuardSettings
) -> Iterator[Cluster]:
    """``list``: every Node and Pod listed each tick (``KubernetesReader``); ``watch``: the
    watch caches ``gpuguard run`` keeps (``WatchedCluster``), started and synced."""
    if kind == "list":
        yield Cluster(kubernetes.KubernetesReader(client), nodes.NodeWriter(client), lambda: 0,
                      lambda changed: True)  # it lists at the tick
        return
    if kind != "watch":
        raise BenchError(f"unknown reader {kind!r}")
    cluster = watched_cluster.watched_cluster(
        client, guard_settings.controller.interval, pod_annotations=wiring.GANG_ANNOTATIONS
    )
    cluster.start()
    try:
        if not cluster.wait_synced(_SYNC_TIMEOUT_S):
            raise BenchError(f"the watch caches did not sync within {_SYNC_TIMEOUT_S:g} s")
        writer = nodes.NodeWriter(client, on_written=cluster.node_written)
        yield Cluster(cluster, writer, lambda: cluster.fallback_lists,
                      lambda c: cluster.holds(c.node_version, c.pod_version, _CATCH_UP_S))
    finally:
        cluster.stop()


@contextlib.contextmanager
def controller(ready: WorldReady, options: Options, watch: Stopwatch) -> Iterator[
    tuple[tick.Guard, Cluster]
]:
    """The tick's Guard wired as ``wiring.build_guard`` wires it (dry-run, core steps only);
    the lightkube client as ``wiring.kube_client`` makes it, with the read timeout asked for
    (lightkube's default, 10 s, is what ``gpuguard run`` uses)."""
    guard_settings = settings_model.GuardSettings()
    client = Client(
        config=kubeapi.lightkube_config(ready.api_url),
        field_manager=annotation_keys.FIELD_MANAGER,
        timeout=httpx2.Timeout(options.kube_timeout_s),
    )
    metrics = prometheus.PrometheusSource(
        ready.prometheus_url, tick_plan(guard_settings),
        staleness=guard_settings.prometheus.staleness,
        timeout_s=guard_settings.prometheus.timeout.total_seconds(),
    )  # fmt: skip
    try:
        with cluster_reader(options.reader, client, guard_settings) as cluster:
            yield tick.Guard(
                metrics=TimedMetrics(metrics, watch),
                pods_on_gpus=gpu_pods.source(metrics),  # a healthy fleet: never asked
                cluster=TimedCluster(cluster.reader, watch),
                writer=cluster.writer,
                classifier=xid_catalog.load_catalog(guard_settings.controller.xid_overrides),
                settings=guard_settings,
                clock=wiring.SystemClock(),
                dry_run=True,
            ), cluster
    finally:
        metrics.close()
        client.close()


def measured(
    guard: tick.Guard, world_: WorldProcess, watch: Stopwatch, since: Counters
) -> tuple[Figures, tick.TickResult]:
    """One tick; bytes and queries counted from ``since`` (counters before any change)."""
    watch.reset()
    started = time.perf_counter()
    result = guard.tick()
    seconds = time.perf_counter() - started
    print(f"  tick: {seconds:.2f} s", file=sys.stderr, flush=True)  # progress, not a figure
    counted = world_.counters() - since
    if not result.ok or result.step_errors or result.snapshot is None:
        raise BenchError(f"the tick failed: {result.error or result.step_errors}")
    decision = result.decision
    if decision is None or decision.actions or result.silent:
        raise BenchError("a healthy fleet was not read as healthy: "
                         f"{decision and decision.actions} {result.silent[:3]}")
    snapshot = result.snapshot
    return Figures(seconds, counted.api_bytes, counted.prom_queries, _vm_rss_mb(),
                   len(snapshot.nodes), len(snapshot.pods), watch.cluster_s,
                   watch.prometheus_s, counted.prom_bytes, counted.api_by_verb), result  # fmt: skip


def _check_changed(result: tick.TickResult, changed: list[str], round_: int) -> None:
    """The tick saw every change made before it (a watch that lags would show here)."""
    snapshot = result.snapshot
    assert snapshot is not None
    seen = {n.name for n in snapshot.nodes
            if n.annotations.get(ROUND_ANNOTATION) == str(round_)}  # fmt: skip
    missing = sorted(set(changed) - seen)
    if missing:
        raise BenchError(f"the tick missed changes to {len(missing)} nodes, e.g. {missing[0]}")


@dataclass(frozen=True)
class SizeResult:
    ready: WorldReady
    reader: str
    sync: Figures
    sync_peak_rss_mb: float
    steady: list[Figures]
    changed: list[Figures]
    changed_nodes: int
    world_rss_mb: float
    fallback_lists: int  # ticks the watching reader listed afresh (a cache not fresh)
    reader_rss_mb: float  # the reader ready (caches synced), before the first tick


@dataclass(frozen=True)
class Options:
    reader: str
    ticks: int
    share: float
    kube_timeout_s: float
    pause_s: float  # between two ticks (the tick interval: a watch's bookmarks flow meanwhile)


def run_size(n: int, options: Options) -> SizeResult:
    """The initial sync (reader built, first tick), ``options.ticks`` steady ticks, then as
    many ticks each after ``options.share`` of the nodes changed."""
    world_ = WorldProcess(n, options.share)
    try:
        since, started, watch = world_.counters(), time.perf_counter(), Stopwatch()
        with controller(world_.ready, options, watch) as (guard, cluster):
            reader_rss = _vm_rss_mb()
            first, _ = measured(guard, world_, watch, since)  # a watching reader syncs here
            sync = replace(first, seconds=time.perf_counter() - started)
            peak = _peak_rss_mb()
            steady = [_steady_tick(guard, world_, watch, options.pause_s)
                      for _ in range(options.ticks)]  # fmt: skip
            changed = [_changed_tick(guard, world_, cluster, watch, k, options.pause_s)
                       for k in range(options.ticks)]  # fmt: skip
            fallbacks = cluster.fallback_lists()
        return SizeResult(world_.ready, options.reader, sync, peak, steady,
                          [f for f, _ in changed], changed[-1][1], world_.rss_mb(),
                          fallbacks, reader_rss)  # fmt: skip
    finally:
        world_.stop()


def _steady_tick(
    guard: tick.Guard, world_: WorldProcess, watch: Stopwatch, pause_s: float
) -> Figures:
    """A tick ``pause_s`` after the last one, nothing changed; the bytes of the pause count."""
    since = world_.counters()
    time.sleep(pause_s)
    return measured(guard, world_, watch, since)[0]


def _changed_tick(
    guard: tick.Guard, world_: WorldProcess, cluster: Cluster, watch: Stopwatch, k: int,
    pause_s: float,
) -> tuple[Figures, int]:
    """A tick after the world changed nodes (round ``k + 1``); its figures count the bytes the
    change (and the pause) sent the controller before the tick too. Also the number of
    changed nodes."""
    since = world_.counters()
    changed = world_.change()
    time.sleep(pause_s)
    # the caches holding the round's last versions, not a quiet moment, says they caught up: a
    # loaded machine can delay the watch's delivery past any quiet interval
    if not cluster.holds(changed):
        raise BenchError(f"the watch caches did not deliver round {k + 1} within {_CATCH_UP_S:g} s")
    world_.settle()
    figures, result = measured(guard, world_, watch, since)
    _check_changed(result, changed.nodes, k + 1)
    return figures, len(changed.nodes)


# --- Report ----------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def _verbs(figures: Figures) -> str:
    return " ".join(f"{verb}={count}" for verb, count in sorted(figures.api_by_verb.items())
                    ) or "none"  # fmt: skip


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def report(r: SizeResult, share: float) -> list[str]:
    """The lines of one size; the last is the steady tick's."""
    ready, full = r.ready, r.ready.node_list_bytes + r.ready.pod_list_bytes
    steady = Figures(
        statistics.median(f.seconds for f in r.steady),
        round(statistics.median(f.api_bytes for f in r.steady)),
        max(f.prom_queries for f in r.steady), max(f.rss_mb for f in r.steady),
        r.steady[-1].nodes, r.steady[-1].pods,
        statistics.median(f.cluster_s for f in r.steady),
        statistics.median(f.prometheus_s for f in r.steady),
        max(f.prom_bytes for f in r.steady),
    )  # fmt: skip
    changed_bytes = round(statistics.median(f.api_bytes for f in r.changed))
    changed_s = statistics.median(f.seconds for f in r.changed)
    share_steady, share_changed = steady.api_bytes / full, changed_bytes / full
    return [
        f"fleet: nodes={ready.nodes} pods={ready.pods} gpus={ready.nodes * GPUS_PER_NODE} "
        f"node_json={ready.node_bytes} pod_json={ready.pod_bytes} "
        f"full_list_bytes={full} (nodes {_mb(ready.node_list_bytes)}, pods "
        f"{_mb(ready.pod_list_bytes)}) built_s={ready.built_s:.1f} "
        f"world_rss_mb={r.world_rss_mb:.0f}",
        f"sync: reader={r.reader} nodes={r.sync.nodes} pods={r.sync.pods} "
        f"seconds={r.sync.seconds:.2f} api_bytes={r.sync.api_bytes} "
        f"prom_queries={r.sync.prom_queries} rss_mb={r.sync.rss_mb:.0f} "
        f"peak_rss_mb={r.sync_peak_rss_mb:.0f} fallback_lists={r.fallback_lists} "
        f"reader_rss_mb={r.reader_rss_mb:.0f} (before the first tick's Prometheus answers)",
        f"changed tick ({share:.0%} of nodes, {r.changed_nodes} nodes): nodes={ready.nodes} "
        f"seconds={changed_s:.3f} api_bytes={changed_bytes} "
        f"prom_queries={max(f.prom_queries for f in r.changed)} "
        f"rss_mb={max(f.rss_mb for f in r.changed):.0f}",
        f"api bytes by verb: sync {_verbs(r.sync)}; steady {_verbs(r.steady[-1])}; changed "
        f"{_verbs(r.changed[-1])}",
        f"ratio: api_bytes per tick / one full list of Nodes and Pods: steady "
        f"{share_steady:.2%}, changed {share_changed:.2%}",
        f"targets: steady tick ≤ {TARGET_TICK_S:g} s {_verdict(steady.seconds <= TARGET_TICK_S)}"
        f"; api bytes per steady tick ≤ {TARGET_BYTES_SHARE:.0%} of a full list "
        f"{_verdict(share_steady <= TARGET_BYTES_SHARE)}; rss after sync ≤ "
        f"{TARGET_RSS_MB:g} MB {_verdict(r.sync.rss_mb <= TARGET_RSS_MB)}",
        f"steady split: cluster_read_s={steady.cluster_s:.3f} "
        f"prometheus_s={steady.prometheus_s:.3f} prom_bytes={steady.prom_bytes} "
        f"decide_and_rest_s={steady.seconds - steady.cluster_s - steady.prometheus_s:.3f}",
        f"steady tick: nodes={steady.nodes} pods={steady.pods} seconds={steady.seconds:.3f} "
        f"api_bytes={steady.api_bytes} prom_queries={steady.prom_queries} "
        f"rss_mb={steady.rss_mb:.0f}",
    ]


def _in_child(run: Callable[..., object], args: tuple[object, ...], conn: Connection) -> None:
    try:
        conn.send(run(*args))
    except BenchError as e:
        conn.send(e)


def in_fresh_process(run: Callable[..., Result], *args: object) -> Result:
    """``run(*args)`` in a fresh (forked) process, so one run's RSS owes nothing to the last;
    its BenchError is raised here."""
    context = multiprocessing.get_context("fork")
    conn, child = context.Pipe()
    process = context.Process(target=_in_child, args=(run, args, child))
    process.start()
    child.close()  # the child's end lives in the child: its exit is our end of file
    try:
        answer = conn.recv()
    except EOFError:
        answer = BenchError(f"the measured process ended with exit code {process.exitcode}")
    process.join()
    if isinstance(answer, BenchError):
        raise answer
    return cast(Result, answer)


def measured_size(n: int, options: Options) -> SizeResult:
    """``run_size`` in a fresh controller process."""
    return in_fresh_process(run_size, n, options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000",
                        help="node counts, comma-separated (default: 1000,10000)")
    parser.add_argument("--reader", choices=READERS, default=READERS[0],
                        help="how the controller reads the cluster (watch: the watch caches of "
                             "gpuguard run; list: every object, every tick)")
    parser.add_argument("--ticks", type=int, default=3,
                        help="steady ticks, then as many changed ticks (medians reported)")
    parser.add_argument("--change-share", type=float, default=CHANGED_SHARE,
                        help="share of nodes that change between changed ticks")
    parser.add_argument("--kube-timeout", type=float, default=10.0,
                        help="the lightkube client's timeout in seconds (default: lightkube's "
                             "10 s, as gpuguard run)")
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds between ticks (the controller's interval is 30 s; what a "
                             "watch receives meanwhile counts in the next tick's bytes)")
    args = parser.parse_args()
    options = Options(args.reader, args.ticks, args.change_share, args.kube_timeout, args.pause)
    print(f"tick bench: reader={args.reader}; Kubernetes: sim.kubeapi over HTTP, bytes "
          "from its traffic counters; Prometheus: a stand-in answering the tick's queries as "
          "for a healthy fleet (per-GPU Xid gauges at 0: no fault, no GPU-pods query); guard: "
          "tick.Guard dry-run, core steps", flush=True)
    queries: dict[int, int] = {}
    for n in (int(s) for s in args.sizes.split(",")):
        try:
            result = measured_size(n, options)
        except BenchError as e:
            raise SystemExit(f"tick bench at {n} nodes: {e}") from e
        for line in report(result, args.change_share):
            print(line, flush=True)
        queries[n] = max(f.prom_queries for f in result.steady)
    counts = ", ".join(f"{q} at {n} nodes" for n, q in queries.items())
    print(f"queries per tick: {counts} (target: constant in fleet size) "
          f"{_verdict(len(set(queries.values())) == 1)}")


if __name__ == "__main__":
    main()
