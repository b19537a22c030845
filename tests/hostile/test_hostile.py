"""Every hostile request is refused by the policies named for it, and only by them; gpuguard's
own requests, in every opt-in shape of the chart, and everyday writes by others are admitted.
The same cases are replayed against a real API server (tests/realcluster)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import kubernetes_validate
import pytest

from tests.hostile import model, own
from tests.hostile.model import Case
from tests.hostile.suite import CASES

SECURITY_DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_each_request_is_answered_by_the_policies_named_for_it(case: Case) -> None:
    assert model.answer(case) == case.refused_by


def test_the_cases_are_unique_and_say_what_they_try() -> None:
    ids = Counter(c.id for c in CASES)
    assert [i for i, n in ids.items() if n > 1] == []
    assert all(c.tries for c in CASES if c.refused_by)


def test_every_policy_of_the_chart_refuses_some_attack() -> None:
    named = {name for c in CASES for name in c.refused_by}
    every = {p["metadata"]["name"] for vals in own.OPT_INS.values()
             for p in model.policies(vals)}
    assert every - named == set()


def counts() -> dict[str, tuple[int, int]]:
    """attacker class -> (refused, admitted)."""
    found: dict[str, tuple[int, int]] = {}
    for case in CASES:
        refused, admitted = found.get(case.attacker, (0, 0))
        found[case.attacker] = (refused + bool(case.refused_by),
                                admitted + (not case.refused_by))
    return found


def test_at_least_150_hostile_requests_and_the_security_doc_counts_them() -> None:
    assert sum(refused for refused, _ in counts().values()) >= 150
    table = dict(re.findall(r"^\| `([a-z-]+)` \| (\d+ \| \d+) \|", SECURITY_DOC.read_text(),
                            flags=re.M))
    assert table == {k: f"{r} | {a}" for k, (r, a) in counts().items()}


SCHEMA_LESS = {"TokenRequest", "PodExecOptions", "PodAttachOptions", "PodPortForwardOptions",
               "Eviction", "DeviceTaintRule", "ResourceClaim", "ResourceClaimTemplate"}


@pytest.mark.parametrize("case", [c for c in CASES if (c.obj or c.old or {}).get("kind")
                                  not in SCHEMA_LESS], ids=lambda c: c.id)
def test_every_object_is_one_the_api_server_would_take_but_for_the_policies(case: Case) -> None:
    version = kubernetes_validate.latest_version()
    for obj in (case.obj, case.old):
        if obj is not None:
            kubernetes_validate.validate(obj, version, strict=True)
