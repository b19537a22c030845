"""The whole hostile suite: every attacker's cases and gpuguard's own, in one list (judged
offline by tests/hostile/test_hostile.py and on a real API server by
tests/realcluster/test_hostile_replay.py)."""

from __future__ import annotations

from tests.hostile import dra, identity, nodes, own, tenant
from tests.hostile.model import Case

CASES: list[Case] = [*tenant.CASES, *identity.CASES, *nodes.CASES, *dra.CASES, *own.CASES]
