"""``sim serve --start-paused``: the live scenario holds at its first instant until a
``gpuguard run`` connects (its Lease appears), then runs on from there — no fault fires before
the guard watches."""

from __future__ import annotations

import time
from pathlib import Path

from gpuguard.sim import live, scenario


def test_the_scenario_waits_for_the_lease_then_runs_on_from_its_first_instant(
    tmp_path: Path,
) -> None:
    spec = scenario.load_shipped("xid79-twice")
    with live.serve(spec, tmp_path, speed=3600, with_prometheus=False) as cluster:
        cluster.catch_up()
        assert not cluster.someone_leads()
        cluster.started -= 10  # ten wall seconds pass: ten scenario hours at x3600 ...
        cluster.world.store.create("Lease", "gpuguard", {
            "metadata": {"name": "gpuguard-leader"}, "spec": {"holderIdentity": "run-1"}})
        assert cluster.someone_leads()
        cluster.resume()  # ... but it was paused: time runs on from its first instant
        cluster.catch_up()
        assert cluster.world.elapsed.total_seconds() < 3600
        time.sleep(0.01)
        cluster.catch_up()
        assert cluster.world.elapsed.total_seconds() > 0
