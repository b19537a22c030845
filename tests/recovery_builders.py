"""A node gpuguard isolated for Xid 79, and the recovery step wired to fakes."""

from __future__ import annotations

from gpuguard.catalog import xid as xid_catalog
from gpuguard.controller import recovery
from gpuguard.model import annotation_keys, fleet
from tests import fakes
from tests.fakes import FakeJobs, FakeLedger


def isolated_node() -> fleet.Node:
    return fleet.Node(
        "gpu-node-b", "boot-2", 8, 7, unschedulable=True,
        annotations={
            annotation_keys.ISOLATED_AT: "2026-09-21T06:05:10Z",
            annotation_keys.REASON: "xid-79",
            annotation_keys.GPU_UUID: "GPU-1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d",
            annotation_keys.GPU_PCI: "0000:99:00.0",
        },
    )


def make(
    ledger: FakeLedger | None = None,
) -> tuple[recovery.Recovery, FakeJobs, FakeLedger, fakes.FakeWriter]:
    step_jobs, book, writer = FakeJobs(), ledger or FakeLedger(), fakes.FakeWriter()
    rec = recovery.Recovery(
        jobs=step_jobs, ledger=book, writer=writer, catalog=xid_catalog.load_catalog(),
        image="gpuguard:test",
    )
    return rec, step_jobs, book, writer
