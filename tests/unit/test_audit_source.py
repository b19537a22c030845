"""What the audit reads: Prometheus' rules answer parsed or refused, and over the simulator's
API a list the API forbids becomes "missing, with the error" (its rules not checked), a custom
resource whose type is not installed reads as none, and no Prometheus is named as missing."""

from __future__ import annotations

import lightkube
import pytest

from gpuguard.errors import SourceError
from gpuguard.model import settings
from gpuguard.model.audit import Input
from gpuguard.sources import audit
from tests.audit_builders import AT
from tests.conftest import SimApi


def test_rules_answer_is_parsed_and_a_malformed_one_refused() -> None:
    body = {"status": "success", "data": {"groups": [
        {"name": "gpu", "rules": [{"name": "GpuXid", "query": "DCGM_FI_DEV_XID_ERRORS > 0"}]}]}}
    [rule] = audit.rules_from("u", 200, body)
    assert (rule.group, rule.name, rule.expr) == ("gpu", "GpuXid", "DCGM_FI_DEV_XID_ERRORS > 0")
    with pytest.raises(SourceError, match="malformed"):
        audit.rules_from("u", 200, {"status": "success", "data": {"groups": [{"name": "x"}]}})
    with pytest.raises(SourceError, match="HTTP 503"):
        audit.rules_from("u", 503, {"status": "error"})


def test_forbidden_and_missing_inputs_are_named_with_their_error(sim_api: SimApi) -> None:
    sim_api.store.create("Node", "", {"metadata": {"name": "gpu-1"}, "spec": {}})
    sim_api.server.fail_next("GET", "/api/v1/pods", 403, "Forbidden")
    with lightkube.Client(config=sim_api.config()) as client:
        view = audit.AuditReader(client, None).read(AT, settings.GuardSettings())
    assert [n["metadata"]["name"] for n in view.of(Input.NODES)] == ["gpu-1"]
    assert "403" in view.missing[Input.PODS]
    assert Input.NODECLAIMS not in view.missing  # not installed: none, not an error
    assert view.of(Input.NODECLAIMS) == ()
    assert view.missing[Input.PROM_RULES] == "no Prometheus URL given"
    assert view.missing[Input.PROM_FLEET_HEALTH] == "no Prometheus URL given"
    assert view.api_server_version is not None
