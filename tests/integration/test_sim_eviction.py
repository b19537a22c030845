"""The simulator's ``pods/eviction`` against gpuguard's Evictor over real HTTP: an eviction is
a PodDisruptionBudget-checked delete (429 while the budget forbids it), as
https://kubernetes.io/docs/concepts/scheduling-eviction/api-eviction/ describes."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import lightkube
import pytest

from gpuguard.actuators import eviction
from gpuguard.sim import store
from tests.conftest import SimApi

pytestmark = pytest.mark.integration
Evicted = eviction.Evicted


def add_pod(s: store.ObjectStore, name: str, *, phase: str = "Running") -> None:
    spec = {"nodeName": "gpu-node-a", "containers": [{"name": "main", "image": "trainer"}]}
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}
    s.create("Pod", "ml", {"metadata": {"name": name, "labels": {"app": "train"}},
                           "spec": spec, "status": status})


def add_budget(s: store.ObjectStore, name: str, **spec: object) -> None:
    body = {"metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, **spec}}
    s.create("PodDisruptionBudget", "ml", body)


@pytest.fixture
def evictor(sim_api: SimApi) -> Iterator[eviction.Evictor]:
    with lightkube.Client(config=sim_api.config()) as c:
        yield eviction.Evictor(c)


def pods(s: store.ObjectStore) -> list[str]:
    return sorted(p["metadata"]["name"] for p in s.list("Pod", "ml"))


def test_a_pod_without_a_budget_is_evicted_and_a_second_eviction_finds_it_gone(
    sim_api: SimApi, evictor: eviction.Evictor
) -> None:
    add_pod(sim_api.store, "train-0")
    assert evictor.evict("ml", "train-0") is Evicted.EVICTED
    assert pods(sim_api.store) == []
    assert evictor.evict("ml", "train-0") is Evicted.GONE


def test_a_budget_refuses_with_429_until_it_allows_the_disruption(
    sim_api: SimApi, evictor: eviction.Evictor
) -> None:
    add_pod(sim_api.store, "train-0")
    add_pod(sim_api.store, "train-1")
    add_budget(sim_api.store, "train", minAvailable=2)
    assert evictor.evict("ml", "train-0") is Evicted.BLOCKED
    assert pods(sim_api.store) == ["train-0", "train-1"]
    add_pod(sim_api.store, "train-2")  # a replacement is up: one may go now
    assert evictor.evict("ml", "train-0") is Evicted.EVICTED
    assert evictor.evict("ml", "train-1") is Evicted.BLOCKED
    assert pods(sim_api.store) == ["train-1", "train-2"]


def test_max_unavailable_as_a_percentage_and_pending_pods_skip_the_check(
    sim_api: SimApi, evictor: eviction.Evictor
) -> None:
    for name in ("train-0", "train-1", "train-2"):
        add_pod(sim_api.store, name)
    add_pod(sim_api.store, "train-3", phase="Pending")
    add_budget(sim_api.store, "train", maxUnavailable="25%")  # 1 of 4, already unavailable
    assert evictor.evict("ml", "train-0") is Evicted.BLOCKED
    assert evictor.evict("ml", "train-3") is Evicted.EVICTED


def test_the_eviction_subresource_takes_only_post(sim_api: SimApi) -> None:
    add_pod(sim_api.store, "train-0")
    answer = httpx.get(f"{sim_api.url}/api/v1/namespaces/ml/pods/train-0/eviction")
    assert answer.status_code == 405
