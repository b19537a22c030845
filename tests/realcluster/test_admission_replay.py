"""Every admission case of the offline policy tests, replayed as a real request against the
real API server with the chart installed by Helm: the server must refuse exactly what
cel-python refused, for the same policy (tests/realcluster/replay.py says how).

The cases come from ``GPUGUARD_ADMISSION_REPLAY`` (a folder ``tests.cel`` recorded into:
``scripts/test`` records the whole suite's cases, then runs this module) or, run alone, from
the offline admission tests run here in a subprocess.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuguard.sim.control_plane import cluster
from tests import cel
from tests.realcluster import replay

REPO = Path(__file__).resolve().parents[2]
OFFLINE = [
    "tests/unit/test_admission_change_jobs.py",
    "tests/unit/test_admission_dra_taints.py",
    "tests/unit/test_admission_ledger.py",
    "tests/unit/test_admission_nodes.py",
    "tests/unit/test_admission_policy.py",
    "tests/unit/test_policy_admission.py",
]
REPLAY_ENV = "GPUGUARD_ADMISSION_REPLAY"


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> list[replay.Case]:
    folder = os.environ.get(REPLAY_ENV)
    if not folder:
        recorded = tmp_path_factory.mktemp("admission-corpus")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *OFFLINE],
            cwd=REPO,
            env={**os.environ, cel.CORPUS_ENV: str(recorded)},
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        folder = str(recorded)
    loaded = replay.load(Path(folder))
    assert len(loaded) > 100, f"only {len(loaded)} admission cases recorded in {folder}"
    return loaded


def test_the_real_api_server_judges_every_case_as_the_offline_tests(
    installed: cluster.ControlPlane, cases: list[replay.Case]
) -> None:
    replayer = replay.Replayer(installed)
    outcomes = [replayer.replay(case) for case in cases]
    by_policy: collections.Counter[tuple[str, str]] = collections.Counter(
        (o.case.policy, "agree" if o.agrees else "DISAGREE") for o in outcomes
    )
    print(
        f"\nadmission replay: {sum(o.agrees for o in outcomes)}/{len(outcomes)} cases agree "
        f"(refused offline: {sum(o.case.refused for o in outcomes)})"
    )
    for (policy, verdict), count in sorted(by_policy.items()):
        print(f"  {policy:32} {verdict:9} {count}")
    wrong = [o for o in outcomes if not o.agrees]
    assert not wrong, "\n".join(
        f"{o.case.test}: {o.case.operation} {o.case.kind} as {o.case.username}: offline "
        f"{'refused' if o.case.refused else 'admitted'} by {o.case.policy}; server {o.status} "
        f"{o.setup_error or o.message[:300]}"
        for o in wrong[:25]
    )
