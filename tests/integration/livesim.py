"""The live simulated cluster for end-to-end tests: the world served over real HTTP (its
Kubernetes API, dcgm-exporter and kube-state-metrics), scraped by a real Prometheus, stepped to
the wall clock; a GPU falls off the bus (Xid 79) ``FAULT_AFTER`` in."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gpuguard.sim import clock, kubeapi, metrics_server, scenario, store, world
from tests import waits
from tests.integration import prometheus as prom_helper

FAULT_AFTER = timedelta(seconds=3)
# A scrape may take as long as the interval (Prometheus' scrape_timeout is at most it); one
# that times out marks every series of its target stale until the next. The exporters answer
# from this test process, which a loaded 2-core CI machine can stall for half a second while
# a command runs in it (seen: 0.49 s), so 2 s rather than 1 s: a node's series do not vanish
# under a test reading them.
SCRAPE = "2s"


@dataclass
class LiveSim:
    world: world.World
    api: kubeapi.KubeApiServer
    prom: prom_helper.Prometheus

    def catch_up(self) -> None:
        """Step the simulated world to the wall clock (the live world runs in real time)."""
        self.world.step_to(max(self.world.elapsed, datetime.now(UTC) - self.world.origin))

    def node(self, name: str) -> dict[str, object]:
        return self.world.store.get("Node", "", name)


def xid79_now() -> scenario.Scenario:
    start = datetime.now(UTC).replace(microsecond=0)
    return scenario.from_mapping(
        {
            "name": "e2e-xid79",
            "start": start.isoformat(),
            "duration": "1h",
            "fleet": {"nodes": ["gpu-node-a", "gpu-node-b"], "gpus_per_node": 8,
                      "model": "NVIDIA GeForce RTX 5090", "driver": "580.126.09"},
            "events": [
                {"at": "3s", "xid": {"node": "gpu-node-b", "gpu": 4, "xid": 79}},
            ],
        },
        source="e2e",
    )


@contextmanager
def live_sim(tmp_path: Path) -> Iterator[LiveSim]:
    spec = xid79_now()
    objects = store.ObjectStore()
    played = world.World.from_scenario(spec, objects, clock.SimClock(spec.start))
    config = {"global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE}}
    with ExitStack() as stack:
        api = stack.enter_context(kubeapi.serve(objects))
        metrics = stack.enter_context(metrics_server.serve(played))
        config |= metrics_server.scrape_config(metrics.url, played.nodes)
        prom = stack.enter_context(prom_helper.running(config, tmp_path / "prom"))
        # every target scraped and committed: a test reading both nodes must not see one first
        prom.wait_for_targets(prom_helper.target_count(config))
        yield LiveSim(played, api, prom)


def wait_for(
    predicate: Callable[[], bool],
    sim: LiveSim,
    timeout_s: float,
    step: Callable[[], object] | None = None,
) -> bool:
    """Whether ``predicate`` held within ``timeout_s``, the world caught up to the wall clock
    (and ``step`` run, a guard's tick say) before each look."""
    def caught_up() -> bool:
        sim.catch_up()
        if step is not None:
            step()
        return predicate()

    return waits.eventually(caught_up, timeout_s, every_s=0.5)

