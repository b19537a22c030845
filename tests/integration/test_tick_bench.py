"""``bench/tick_bench.py`` runs end to end on a tiny fleet and prints what its README promises:
per size the sync, changed-tick, ratio and target lines, ending with the steady tick's
``steady tick: nodes=N pods=P seconds=S api_bytes=B prom_queries=Q rss_mb=M``. A benchmark is
not a timed test: this holds the format and the figures' consistency, never their speed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "tick_bench.py"
SIZES = {"watch": (12, 30), "list": (12,)}
STEADY = re.compile(
    r"^steady tick: nodes=(\d+) pods=(\d+) seconds=([\d.]+) api_bytes=(\d+) "
    r"prom_queries=(\d+) rss_mb=(\d+)$"
)
FIGURE = re.compile(r"(\w+)=([\d.]+)")


@pytest.fixture(scope="module")
def runs() -> dict[str, list[str]]:
    """Each reader's output lines."""
    found = {}
    for reader, sizes in SIZES.items():
        done = subprocess.run(
            [sys.executable, str(BENCH), "--sizes", ",".join(map(str, sizes)), "--ticks", "1",
             "--reader", reader],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        found[reader] = done.stdout.splitlines()
    return found


def blocks(lines: list[str]) -> list[list[str]]:
    """Each size's lines, from its ``fleet:`` line to its ``steady tick:`` line."""
    starts = [i for i, line in enumerate(lines) if line.startswith("fleet: ")]
    return [lines[i : next(j for j in range(i, len(lines)) if STEADY.match(lines[j])) + 1]
            for i in starts]  # fmt: skip


def figures(block: list[str], prefix: str) -> dict[str, float]:
    line = next(line for line in block if line.startswith(prefix))
    return {key: float(value) for key, value in FIGURE.findall(line)}


@pytest.mark.parametrize("reader", sorted(SIZES))
def test_each_size_ends_with_the_steady_tick_line(runs: dict[str, list[str]], reader: str) -> None:
    found = blocks(runs[reader])
    assert len(found) == len(SIZES[reader])
    for size, block in zip(SIZES[reader], found, strict=True):
        steady = STEADY.match(block[-1])
        assert steady is not None
        nodes, pods, seconds, _, queries, rss = map(float, steady.groups())
        assert (nodes, pods) == (size, 10 * size)
        assert min(seconds, queries, rss) > 0


def test_the_list_reader_reads_one_full_list_per_tick(runs: dict[str, list[str]]) -> None:
    """Listing every Node and Pod each tick reads one full list (plus the HTTP headers),
    whether or not anything changed."""
    for block in blocks(runs["list"]):
        fleet = figures(block, "fleet: ")
        full = fleet["full_list_bytes"]
        assert full > fleet["nodes"] * fleet["node_json"]
        assert full <= figures(block, "steady tick: ")["api_bytes"] < 1.01 * full
        assert figures(block, "changed tick")["api_bytes"] >= full
        assert "api bytes per steady tick ≤ 1% of a full list MISSED" in " ".join(block)


def test_the_watch_reader_reads_the_fleet_once_then_what_changed(
    runs: dict[str, list[str]],
) -> None:
    """The watch caches list once (the sync), then read only the changes: nothing more in a
    steady tick than bookmarks, the changed objects in a changed tick; never a fresh list."""
    for block in blocks(runs["watch"]):
        full = figures(block, "fleet: ")["full_list_bytes"]
        sync = figures(block, "sync: ")
        assert sync["api_bytes"] >= full
        assert sync["fallback_lists"] == 0
        steady = figures(block, "steady tick: ")["api_bytes"]
        changed = figures(block, "changed tick")["api_bytes"]
        assert steady <= 0.01 * full
        assert steady < changed < full
        assert "api bytes per steady tick ≤ 1% of a full list met" in " ".join(block)


def test_queries_per_tick_do_not_grow_with_the_fleet(runs: dict[str, list[str]]) -> None:
    lines = runs["watch"]
    counts = {figures(block, "steady tick: ")["prom_queries"] for block in blocks(lines)}
    assert len(counts) == 1
    assert re.fullmatch(r"queries per tick: .* \(target: constant in fleet size\) met", lines[-1])
