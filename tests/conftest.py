"""Fixtures shared by every test layer.

``sim_api`` — the simulator's Kubernetes API server (``gpuguard.sim.kubeapi``) on
127.0.0.1 with an OS-picked port, over a fresh, empty ``ObjectStore``. Seed objects through
``sim_api.store`` (as the simulated world does) and talk to it over real HTTP with lightkube::

    def test_cordon(sim_api: SimApi) -> None:
        sim_api.store.create("Node", "", {"metadata": {"name": "gpu-1"}, "spec": {}})
        with lightkube.Client(config=sim_api.config()) as client:
            client.patch(Node, "gpu-1", {"spec": {"unschedulable": True}},
                         patch_type=PatchType.MERGE)
        assert sim_api.store.get("Node", "", "gpu-1")["spec"]["unschedulable"] is True
        assert [r.method for r in sim_api.server.requests] == ["PATCH"]

``sim_api.server.fail_next("PATCH", "/api/v1/nodes/gpu-1", 500)`` makes the next such request
fail with a Kubernetes ``Status``; ``sim_api.server.requests`` lists what was asked.

``serve_store`` — the same for a store you built yourself (a world's):
``api = serve_store(world.store)``.

Servers, their connections and any open watches are stopped at teardown; close your own
lightkube clients (``with`` / ``async with``).

``demo_played_once`` — ``gpuguard demo`` (``harness.play``) plays each (scenario, settings)
once per session (``tests.demo_runs``), sharing the run with the modules that play it.

Every test also fails if it opened or listed a path beside the repository (an audit hook,
``tests.selfcontained``): a clone with nothing beside it must pass.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import lightkube
import pytest

from gpuguard.cli import output
from gpuguard.demo import harness
from gpuguard.sim import kubeapi, store
from tests import demo_runs, selfcontained

sys.addaudithook(selfcontained.watch_reads)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Collection (module imports, parametrisation) must not read beside the repository."""
    reads = selfcontained.take_reads_beside()
    if reads:
        raise pytest.UsageError(f"collecting tests read beside the repository: {reads}")


@pytest.fixture(autouse=True)
def _reads_stay_in_repository() -> Iterator[None]:
    """Fail the test that opened or listed a path beside the repository."""
    yield
    reads = selfcontained.take_reads_beside()
    assert not reads, f"the test read beside the repository: {reads}"


@dataclass(frozen=True)
class SimApi:
    """A running simulated API server: its base URL, its store, and a lightkube config."""

    url: str
    store: store.ObjectStore
    server: kubeapi.KubeApiServer

    def config(self, namespace: str = "default") -> lightkube.KubeConfig:
        """Configuration for ``lightkube.Client`` / ``AsyncClient`` (default namespace set)."""
        return kubeapi.lightkube_config(self.url, namespace)


ServeStore = Callable[[store.ObjectStore], SimApi]


@pytest.fixture
def serve_store() -> Iterator[ServeStore]:
    """Serve any ObjectStore on loopback; every server started is stopped at teardown."""
    with contextlib.ExitStack() as running:

        def start(object_store: store.ObjectStore) -> SimApi:
            server = running.enter_context(kubeapi.serve(object_store))
            return SimApi(server.url, server.store, server)

        yield start


@pytest.fixture
def sim_api(serve_store: ServeStore) -> SimApi:
    """The simulator's Kubernetes API on loopback over an empty store; stopped at teardown."""
    return serve_store(store.ObjectStore())


@pytest.fixture
def demo_played_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpuguard demo`` shares each (scenario, settings) run of the session (tests.demo_runs)."""
    monkeypatch.setattr(harness, "play", demo_runs.play)


@pytest.fixture(autouse=True)
def _output_width_not_from_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI output does not follow the terminal that runs pytest (pytest-xdist's workers set
    COLUMNS=80): a test that wants a width says so (``CliRunner(env={"COLUMNS": ...})``).
    The CLI's consoles were sized when ``cli.output`` was imported, from that COLUMNS; each
    test starts with them sized afresh (a test that invokes a sub-app such as ``cli.ledger``
    directly skips the root command's reset, and would otherwise see 80 columns or not
    depending on what ran before it on its worker)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    output.reset()
