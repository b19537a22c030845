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
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuguard.sim.control_plane import cluster
from tests import cel
from tests.realcluster import replay
from tests.realcluster.conftest import install_chart

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
HOSTILE = "tests/hostile/"


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


@pytest.fixture(scope="module")
def admission_plane(
    bin_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[cluster.ControlPlane]:
    """An API server alone (no controller-manager, whose node lifecycle controller would
    change a Node between the case's old object and its update) with the chart installed."""
    with cluster.start(
        tmp_path_factory.mktemp("admission"), controllers=False, scheduler=False
    ) as plane:
        install_chart(plane)
        yield plane


def test_the_real_api_server_judges_every_case_as_the_offline_tests(
    admission_plane: cluster.ControlPlane, cases: list[replay.Case]
) -> None:
    # A case judged offline with a policy the chart renders only with opt-in values (a test's
    # chart values: the GPU reset, the hand-off) is not this default install's: the opt-in
    # shapes are replayed on a plane upgraded to their values by test_hostile_replay.py.
    opt_in = [c for c in cases if not c.default_install]
    cases = [c for c in cases if c.default_install]
    replayer = replay.Replayer(admission_plane)
    replayer.warm_up(cases)
    outcomes = [replayer.replay(case) for case in cases]
    by_verdict: collections.Counter[tuple[str, str, str]] = collections.Counter(
        (o.case.policy, "refused" if o.case.refused else "admitted", o.verdict) for o in outcomes
    )
    print(
        f"\nadmission replay: {sum(o.agrees for o in outcomes)}/{len(outcomes)} cases agree "
        f"(refused offline: {sum(o.case.refused for o in outcomes)}); {len(opt_in)} judged "
        f"with opt-in values, not replayed on the default install"
    )
    print(f"  {'policy':28} {'offline':9} server")
    for (policy, offline, verdict), count in sorted(by_verdict.items()):
        print(f"  {policy:28} {offline:9} {verdict}: {count}")
    hostile = [o for o in outcomes if o.case.test.startswith(HOSTILE)]
    print(f"  of them tests/hostile: {sum(o.agrees for o in hostile)}/{len(hostile)} agree "
          f"({sum(o.verdict == 'unreplayable' for o in hostile)} not replayable here)")
    # The hostile suite's per-policy evaluations are judged offline with each case's chart
    # values and name subresources this corpus does not record: reported here; each hostile
    # case is gated as its whole request, with its values and subresource, by
    # test_hostile_replay.py (docs/real-control-plane.md).
    wrong = [o for o in outcomes if not o.agrees and not o.case.test.startswith(HOSTILE)]
    named = {
        o.case.test: reason
        for o in wrong
        for key, reason in (KNOWN_DIFFERENCES | UNSTABLE).items()
        if key in o.case.test
    }
    print(f"  named differences: {len(named)} cases ({len(KNOWN_DIFFERENCES)} named)")
    unnamed = [o for o in wrong if o.case.test not in named]
    assert not unnamed, "\n".join(
        f"{o.case.test}: {o.case.operation} {o.case.kind} as {o.case.username}: offline "
        f"{'refused' if o.case.refused else 'admitted'} by {o.case.policy}; server {o.status} "
        f"{o.setup_error or o.message[:300]}"
        for o in unnamed[:25]
    )
    stale = [key for key in KNOWN_DIFFERENCES if not any(key in test for test in named)]
    assert not stale, f"named differences no longer seen (remove them): {stale}"


# Where cel-python's verdict and the real API server's differ, and why that is not a hole.
_PRUNED = (
    "resource.k8s.io/v1 (1.37) has no such field in DeviceTaintRule's spec: the server "
    "drops it before admission, so the rule stored selects the one device the policy "
    "checks; the offline case tests a field no served version has"
)
_RENAME = (
    "an update that renames an object is no request a server can receive (the name is "
    "the path's); the rename as a create of a second rule is replayed and refused"
)
_UNREACHABLE = (
    "its old object (a labelled ledger ConfigMap named x) cannot exist under the "
    "chart's policies: neither the admin nor gpuguard may create it"
)
_NO_OP = (
    "an update that changes nothing is sometimes refused by the server's "
    "node-conditions-only rule and admitted offline (not yet explained: it differs from run "
    "to run); the agent never sends one: it writes on a change or with a new heartbeat time"
)
KNOWN_DIFFERENCES = {
    "own_rule_shape[selects-by-device-class]": _PRUNED,
    "own_rule_shape[selects-by-cel]": _PRUNED,
    "own_rule_shape[extra-spec-field]": _PRUNED,
    "own_rule_shape[not-gpuguard-named]": _RENAME,
    "tenant-strips-the-labels": _UNREACHABLE,
}
# Cases that may differ or agree from one run to the next: allowed either way, never stale.
UNSTABLE = {
    "agent-heartbeat-system:serviceaccount:gpuguard:gpuguard-agent-extra1": _NO_OP,
}
