"""``bench/plans_bench.py`` runs end to end on a tiny fleet and prints, per size and plan, what
its README promises: ``plan: name=P nodes=N queries=Q series=S answer_mb=M seconds=T
rss_mb=R``. A benchmark is not a timed test: this holds the format and that the healthy fleet
was read as healthy (the bench exits non-zero otherwise), never the speed."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "bench" / "plans_bench.py"
SIZES = (3, 12)
LINE = re.compile(
    r"^plan: name=([\w-]+) nodes=(\d+) queries=(\d+) series=(\d+) answer_mb=([\d.]+) "
    r"seconds=([\d.]+) rss_mb=(\d+)$"
)


def test_each_plan_and_size_prints_one_line() -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--sizes", ",".join(map(str, SIZES))],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    found = [m.groups() for line in done.stdout.splitlines() if (m := LINE.match(line))]
    assert [(plan, int(nodes)) for plan, nodes, *_ in found] == [
        (plan, n) for n in SIZES for plan in ("phantom", "fleet-health", "fleet-health-steady")
    ]
    queries = {plan: {q for p, _, q, *_ in found if p == plan} for plan, *_ in found}
    assert all(len(counts) == 1 for counts in queries.values())  # constant in fleet size
    for _, _, _, series, _, seconds, rss in found:
        assert min(int(series), float(seconds), int(rss)) > 0
