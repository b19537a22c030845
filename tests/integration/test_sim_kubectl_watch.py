"""``kubectl get -w`` against the simulated API server (what ``gpuguard sim serve`` users run to
watch a node being cordoned): the list, then watch events as server-side Table rows, so the
watched line carries STATUS (``Ready,SchedulingDisabled``) as on a real cluster."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from gpuguard.sim import store
from tests import tools
from tests.conftest import SimApi

pytestmark = pytest.mark.integration

TIMEOUT_S = 60.0  # kubectl starting on a loaded machine; a passing test returns early
CORDON = {"spec": {"unschedulable": True}}
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def add_node(s: store.ObjectStore, name: str) -> None:
    s.create("Node", "", {"metadata": {"name": name}, "spec": {},
                          "status": {"conditions": [{"type": "Ready", "status": "True"}]}})


@contextmanager
def lines_of(argv: list[str]) -> Iterator[queue.Queue[str]]:
    """The process's stdout lines as they come; the process is ended on exit."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True) as proc:
        lines: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stdout = proc.stdout
        reader = threading.Thread(target=lambda: [lines.put(line) for line in stdout],
                                  daemon=True)
        reader.start()
        try:
            yield lines
        finally:
            proc.terminate()
            proc.communicate(timeout=10)


def next_line_with(lines: queue.Queue[str], *words: str) -> str:
    deadline = time.monotonic() + TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        line = lines.get(timeout=left)
        if all(word in line for word in words):
            return line
    raise AssertionError(f"no line with {words} within {TIMEOUT_S}s")


def test_kubectl_get_watch_prints_a_cordon_as_it_happens(sim_api: SimApi) -> None:
    add_node(sim_api.store, "gpu-node-a")
    add_node(sim_api.store, "gpu-node-b")
    argv = [tools.require("kubectl"), "--server", sim_api.url, "get", "nodes", "--watch"]
    with lines_of(argv) as lines:
        next_line_with(lines, "NAME", "STATUS")
        next_line_with(lines, "gpu-node-b", "Ready")
        sim_api.store.merge_patch("Node", "", "gpu-node-b", CORDON)
        watched = next_line_with(lines, "gpu-node-b", "SchedulingDisabled")
    assert watched.split()[1] == "Ready,SchedulingDisabled"


def test_watch_events_are_table_rows_with_columns_in_the_first_only(sim_api: SimApi) -> None:
    add_node(sim_api.store, "gpu-node-a")
    add_node(sim_api.store, "gpu-node-b")
    params = {"watch": "1", "timeoutSeconds": "1"}
    with httpx.stream("GET", f"{sim_api.url}/api/v1/nodes", params=params,
                      headers={"Accept": TABLE}, timeout=TIMEOUT_S) as answer:
        events = [json.loads(line) for line in answer.iter_lines() if line]
    tables = [event["object"] for event in events]
    assert [t["kind"] for t in tables] == ["Table", "Table"]
    # later events carry "columnDefinitions": null, as a real API server writes them
    assert [bool(t["columnDefinitions"]) for t in tables] == [True, False]
    assert [t["rows"][0]["object"]["metadata"]["name"] for t in tables] == [
        "gpu-node-a", "gpu-node-b"]
