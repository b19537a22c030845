"""Label and field selectors match as the real Kubernetes API's do.

Including the parts that surprise: ``!=`` and ``notin`` match objects without the label, and
a missing field compares as the empty string.
"""

from __future__ import annotations

import pytest

from gpuguard.sim import selectors

LABELS = {"nvidia.com/gpu.present": "true", "pool": "serving", "zone": "a"}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("", True, id="empty-matches-all"),
        pytest.param("nvidia.com/gpu.present=true", True, id="prefixed-equality"),
        pytest.param("pool==serving", True, id="double-equals"),
        pytest.param("pool=repair", False, id="equality-other-value"),
        pytest.param("pool!=repair", True, id="inequality"),
        pytest.param("rack!=r1", True, id="inequality-matches-missing-label"),
        pytest.param("zone in (a, b)", True, id="in-set"),
        pytest.param("zone in (b,c)", False, id="not-in-set"),
        pytest.param("rack notin (r1)", True, id="notin-matches-missing-label"),
        pytest.param("zone notin (a)", False, id="notin-excludes"),
        pytest.param("pool", True, id="exists"),
        pytest.param("!pool", False, id="not-exists-present"),
        pytest.param("!rack", True, id="not-exists-missing"),
        pytest.param("pool=serving,zone in (a,b),!rack", True, id="comma-is-and"),
        pytest.param("pool=serving,zone=b", False, id="and-one-fails"),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert selectors.parse_label_selector(selector).matches(LABELS) is matches


@pytest.mark.parametrize("selector", ["a in (x", "a=b,,c=d", "a in ()", "=b", "a b", "a=(b)"])
def test_malformed_label_selectors_are_errors(selector: str) -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_label_selector(selector)


POD = {
    "metadata": {"name": "llm-0", "namespace": "train"},
    "spec": {"nodeName": "gpu-1", "hostNetwork": False},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        pytest.param("spec.nodeName=gpu-1", True, id="equality"),
        pytest.param("spec.nodeName==gpu-2", False, id="double-equals-other"),
        pytest.param(
            "status.phase!=Succeeded,status.phase!=Failed", True, id="not-in-as-inequalities"
        ),
        pytest.param("metadata.name=llm-0,metadata.namespace=train", True, id="name-and-namespace"),
        pytest.param("spec.hostNetwork=false", True, id="boolean-as-text"),
        pytest.param("spec.schedulerName=", True, id="missing-field-is-empty"),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert selectors.parse_field_selector(selector).matches(POD) is matches


def test_malformed_field_selector_is_an_error() -> None:
    with pytest.raises(selectors.SelectorError):
        selectors.parse_field_selector("spec.nodeName")
