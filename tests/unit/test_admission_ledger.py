"""The ledger ConfigMap policy, evaluated (cel-python): only gpuguard writes its ledger, and
gpuguard's token writes nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from gpuguard.actuators import ledger
from tests import cel, chart

GPUGUARD = "system:serviceaccount:gpuguard:gpuguard"
TENANT = "system:serviceaccount:gpuguard:tenant-ci"
Obj = dict[str, Any]


def config_map(name: str, labels: dict[str, str] | None = None) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "gpuguard", **(
                {"labels": labels} if labels is not None else {})},
            "data": {"gpu-node-b": "2026-09-21T05:52:44Z xid-79 - - manual\n"}}


SEGMENT = config_map("gpuguard-ledger-2026-09-0", dict(ledger.LEDGER_LABELS))


@pytest.mark.parametrize(("name", "obj", "old", "user", "operation", "refused_by"), [
    ("gpuguard-creates-a-segment", SEGMENT, None, GPUGUARD, "CREATE", []),
    ("gpuguard-appends", SEGMENT, SEGMENT, GPUGUARD, "UPDATE", []),
    ("tenant-injects-a-labelled-configmap",
     config_map("gpu-fault-ledger", dict(ledger.LEDGER_LABELS)), None, TENANT, "CREATE",
     ["ledger-writer"]),
    ("tenant-edits-a-segment", SEGMENT, SEGMENT, TENANT, "UPDATE", ["ledger-writer"]),
    ("tenant-strips-the-labels", config_map("x"), config_map("x", dict(ledger.LEDGER_LABELS)),
     TENANT, "UPDATE", ["ledger-writer"]),
    ("tenant-deletes-a-segment", None, SEGMENT, TENANT, "DELETE", ["ledger-writer"]),
    ("tenant-own-configmap", config_map("app-config"), None, TENANT, "CREATE", []),
    ("stolen-token-rewrites-settings", config_map("gpuguard-settings"), config_map(
        "gpuguard-settings"), GPUGUARD, "UPDATE", ["ledger-only"]),
    ("stolen-token-deletes-history", None, SEGMENT, GPUGUARD, "DELETE", ["ledger-only"]),
])
def test_ledger_configmaps_are_written_only_by_gpuguard(
    name: str, obj: Obj | None, old: Obj | None, user: str, operation: str,
    refused_by: list[str],
) -> None:
    policy = chart.by_name("ValidatingAdmissionPolicy", "gpuguard-ledger")
    refused = cel.refusals(policy, obj, old=old, username=user, operation=operation)
    assert cel.rule_names(refused) == refused_by
