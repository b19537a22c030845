"""The alert rules (rules/gpuguard-alerts.yaml) and the Helm PrometheusRule generated from them.

What promtool cannot see: every alert carries severity and the three annotations an on-call
needs; every metric a rule reads is one that gpuguard, dcgm-exporter or kube-state-metrics
emits (a typo in a metric name makes an alert silent forever, the failure mode of the lifecycle
report (docs/design.md#incidents)); the user-Xid set is the catalog's everywhere; every alert has a
firing and a silent promtool case; the PrometheusRule is up to date and renders back to the rule
file. The promtool unit tests themselves run in scripts/test (`promtool test rules
rules/tests/*.yaml`).
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from gpuguard.catalog import xid as xid_catalog
from tests import scripts, tools
from tests.known_metrics import known_metrics, metric_names_in

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / "tests" / "data" / "reference"
RULES = REPO / "rules" / "gpuguard-alerts.yaml"
RULE_TESTS = REPO / "rules" / "tests"
PROMETHEUSRULE = REPO / "deploy" / "helm" / "gpuguard" / "templates" / "prometheusrule.yaml"
HELM_VALUES = REPO / "deploy" / "helm" / "gpuguard" / "values.yaml"

REQUIRED_ALERTS = {
    "GpuHardwareXid",
    "GpuHardwareXidCount",
    "GpuHardwareXidAgent",
    "GpuUncorrectableRemap",
    "GpuRowRemapFailure",
    "GpuThermal",
    "GpuLost",
    "GpuFeatureDiscoveryRestarting",
    "NodeServiceNetworkDown",
    "NodeCordonedTooLong",
    "NodeCordonedWithHardwareXid",
    "GpuPhantomUtilization",
    "GpuPhantomUtilizationNoProfiling",
    "GpuNvmlMismatch",
    "GpuguardBreakerOpen",
    "GpuguardTickStale",
    "GpuguardNodeReturned",
    "GpuIdleExpensive",
}
SEVERITIES = {"critical", "warning", "info"}
ANNOTATIONS = ("summary", "description", "runbook")

@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param(
            "max by (Hostname, gpu) (increase(DCGM_FI_DEV_XID_ERRORS[5m])) > 0",
            {"DCGM_FI_DEV_XID_ERRORS"},
            id="aggregation-by-before-parenthesis",
        ),
        pytest.param(
            "sum(rate(gpuguard_ticks_total[5m])) by (kind) * 60",
            {"gpuguard_ticks_total"},
            id="by-after-aggregation",
        ),
        pytest.param(
            'a_total offset 24h unless on (node, gpu) b{xid!~"13|31", x="on(y)"} == bool 1',
            {"a_total", "b"},
            id="offset-on-matchers-strings",
        ),
        pytest.param(
            'label_replace(X, "node", "$1", "Hostname", "(.+)") * on (n) group_left (node) Y',
            {"X", "Y"},
            id="label-replace-group-left",
        ),
        pytest.param(
            'sum_over_time((m{node=~"$node"} < 1)[$__range:5m]) * 5 / 60 / 1e3',
            {"m"},
            id="grafana-variables-subquery-numbers",
        ),
        pytest.param(
            "gpuguard:dcgm_fb_used:node < 100 and time() - ts > 900",
            {"gpuguard:dcgm_fb_used:node", "ts"},
            id="recorded-name-and-time",
        ),
    ],
)
def test_metric_names_in(expr: str, expected: set[str]) -> None:
    assert metric_names_in(expr) == expected


def test_known_metrics_come_from_all_three_sources() -> None:
    known = known_metrics()
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"} <= known
    assert {"kube_node_spec_unschedulable", "kube_pod_container_resource_requests"} <= known
    assert {"gpuguard_xid_total", "gpuguard_breaker_open"} <= known
    assert "DCGM_EXP_XID_ERRORS_TOTAL" not in known  # the counters file says it does not exist


# --------------------------------------------------------------------------- the rule file


@cache
def _rule_file() -> dict[str, Any]:
    data = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _rules() -> list[dict[str, Any]]:
    return [rule for group in _rule_file()["groups"] for rule in group["rules"]]


def _alerts() -> list[dict[str, Any]]:
    return [rule for rule in _rules() if "alert" in rule]


def _recorded() -> set[str]:
    return {rule["record"] for rule in _rules() if "record" in rule}


def test_required_alerts_exist_once() -> None:
    names = [alert["alert"] for alert in _alerts()]
    assert len(names) == len(set(names)), "duplicate alert names"
    assert set(names) >= REQUIRED_ALERTS, f"missing: {sorted(REQUIRED_ALERTS - set(names))}"


@pytest.mark.parametrize("alert", _alerts(), ids=lambda a: a["alert"])
def test_alert_has_severity_and_runbook(alert: dict[str, Any]) -> None:
    assert alert.get("labels", {}).get("severity") in SEVERITIES
    annotations = alert.get("annotations", {})
    for key in ANNOTATIONS:
        assert str(annotations.get(key, "")).strip(), f"{alert['alert']}: no {key}"
    assert "gpuguard " in annotations["runbook"], "the runbook names a gpuguard command"


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r.get("alert") or r["record"])
def test_rule_reads_only_emitted_metrics(rule: dict[str, Any]) -> None:
    unknown = metric_names_in(rule["expr"]) - known_metrics() - _recorded()
    assert not unknown, f"not emitted by gpuguard, dcgm-exporter or kube-state-metrics: {unknown}"


def test_recording_rules_are_defined_before_use() -> None:
    defined: set[str] = set()
    for rule in _rules():
        used = metric_names_in(rule["expr"]) & _recorded()
        assert used <= defined, f"{rule.get('alert') or rule['record']} reads {used - defined}"
        if "record" in rule:
            defined.add(rule["record"])


def _user_xid_sets(text: str) -> list[frozenset[int]]:
    """Each written copy of the user-Xid set: value chains `!= 13 != 31 ...` and xid regexes."""
    chains = re.findall(r"(?:!=\s*\d+\s*){2,}", text)
    regexes = re.findall(r'xid!~"([\d|]+)"', text)
    sets = [frozenset(int(n) for n in re.findall(r"\d+", c)) for c in chains]
    return sets + [frozenset(int(n) for n in r.split("|")) for r in regexes]


def test_user_xid_set_is_the_catalogs_everywhere() -> None:
    sets = _user_xid_sets(RULES.read_text(encoding="utf-8"))
    assert len(sets) >= 4
    assert all(s == xid_catalog.DEFAULT_USER_CODES for s in sets), sets


# --------------------------------------------------------------------------- promtool tests


def _rule_test_files() -> list[Path]:
    return sorted(RULE_TESTS.glob("*.yaml"))


@pytest.mark.parametrize("path", _rule_test_files(), ids=lambda p: p.name)
def test_every_yaml_in_rules_tests_is_a_promtool_test(path: Path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(data) >= {"rule_files", "tests"}, "helper rule files belong in rules/tests/fixtures/"
    assert "../gpuguard-alerts.yaml" in data["rule_files"]


def _cases() -> dict[str, set[bool]]:
    """Alert name -> {True if some case expects it firing, False if some expects silence}."""
    seen: dict[str, set[bool]] = {}
    for path in _rule_test_files():
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]:
            for case in group.get("alert_rule_test", []):
                seen.setdefault(case["alertname"], set()).add(bool(case.get("exp_alerts")))
    return seen


@pytest.mark.parametrize("alert", sorted(a["alert"] for a in _alerts()))
def test_every_alert_has_a_firing_and_a_silent_case(alert: str) -> None:
    assert _cases().get(alert) == {True, False}


# --------------------------------------------------------------------------- PrometheusRule


def _generator() -> ModuleType:
    return scripts.load("gen-prometheusrule")


def test_prometheusrule_is_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "prometheusrule.yaml"
    assert _generator().main(["--output", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == PROMETHEUSRULE.read_text(encoding="utf-8"), (
        "stale: run scripts/gen-prometheusrule"
    )


def test_prometheusrule_renders_back_to_the_rule_file() -> None:
    gen = _generator()
    source = RULES.read_text(encoding="utf-8")
    template = PROMETHEUSRULE.read_text(encoding="utf-8")
    assert gen.spec_of(template) == gen.rules_body(source)
    assert yaml.safe_load(gen.spec_of(template)) == _rule_file()


def test_prometheusrule_is_helm_guarded_and_namespaced() -> None:
    template = PROMETHEUSRULE.read_text(encoding="utf-8")
    assert template.startswith("{{- if .Values.prometheusRule.enabled }}\n")
    assert template.endswith("{{- end }}\n")
    assert "namespace: {{ .Release.Namespace }}" in template
    assert "kind: PrometheusRule" in template
    assert "apiVersion: monitoring.coreos.com/v1" in template
    # Outside the Helm header and footer, every template is a raw string Helm leaves alone.
    body = template.split("\nspec:\n", 1)[1].rsplit("{{- end }}", 1)[0]
    assert "{{" not in re.sub(r"\{\{`.*?`\}\}", "", body)


def _render_like_helm(template: str, release: str, namespace: str) -> str:
    """What `helm template` renders with default values (empty labels and annotations)."""
    name = '{{ printf "%s-gpuguard" .Release.Name | trunc 63 | trimSuffix "-" }}'
    values = {
        name: f"{release}-gpuguard",
        "{{ .Release.Namespace }}": namespace,
        "{{ .Release.Name }}": release,
        "{{ .Release.Service }}": "Helm",
        '{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}': "gpuguard-0.1.0",
    }
    lines = [line for line in template.splitlines() if not line.lstrip().startswith("{{-")]
    text = "\n".join(lines) + "\n"
    for directive, value in values.items():
        text = text.replace(directive, value)
    assert not re.search(r"\{\{ *[.a-z]", text), "a Helm directive the test does not render"
    return _generator().unescape(text)


def test_prometheusrule_renders_to_a_valid_object() -> None:
    rendered = _render_like_helm(PROMETHEUSRULE.read_text(encoding="utf-8"), "rel", "monitoring")
    obj = yaml.safe_load(rendered)
    assert obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert obj["kind"] == "PrometheusRule"
    assert obj["metadata"]["name"] == "rel-gpuguard"
    assert obj["metadata"]["namespace"] == "monitoring"
    assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == "gpuguard"
    assert obj["spec"] == _rule_file()


@pytest.mark.parametrize(
    ("line", "message"),
    [
        pytest.param('summary: "{{ `x` }}"', "backtick", id="backtick-in-template"),
        pytest.param('summary: "{{ $labels.node "', "unbalanced", id="unclosed-template"),
    ],
)
def test_generator_refuses_what_helm_would_break(line: str, message: str) -> None:
    gen = _generator()
    with pytest.raises(gen.GenerateError, match=message):
        gen.escape_line(line, 1)


def test_helm_values_switch_the_rule_on_and_take_labels() -> None:
    values = yaml.safe_load(HELM_VALUES.read_text(encoding="utf-8"))
    assert values["prometheusRule"]["enabled"] is True
    assert values["prometheusRule"]["labels"] == {}


# --------------------------------------------------------------------------- promtool


@pytest.mark.integration
def test_promtool_accepts_the_rule_file_and_the_generated_spec(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(_generator().spec_of(PROMETHEUSRULE.read_text(encoding="utf-8")))
    result = subprocess.run(
        [tools.require("promtool"), "check", "rules", str(RULES), str(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
