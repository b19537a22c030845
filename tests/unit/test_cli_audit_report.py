"""The audit's registry and its reports: every catalogue rule is well formed, the exit status
follows --fail-on, and the HTML page is self-contained and escapes every value."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from gpuguard.cli import audit as audit_cli
from gpuguard.cli import audit_html
from gpuguard.cli.main import app
from gpuguard.model.audit import AuditView, Input, RuleStatus
from gpuguard.policy.audit import catalogue, registry
from tests.audit_builders import AT, node, pod, view

HOSTILE = "<script>alert(1)</script>"


def test_catalogue_rules_have_unique_ids_sources_and_fixes() -> None:
    ids = [r.id for r in catalogue.RULES]
    assert len(ids) == len(set(ids))
    for rule in catalogue.RULES:
        assert re.fullmatch(r"[A-Z]+-\d", rule.id), rule.id
        assert rule.source.startswith(("https://", "docs/")), rule.id
        assert rule.fix, rule.id
        assert rule.needs, rule.id


def test_an_empty_cluster_view_leaves_no_rule_passing_on_missing_inputs() -> None:
    everything_missing = {i: "forbidden" for i in Input if i is not Input.NODES}
    results = registry.run(view({Input.NODES: [node("a")]}, missing=everything_missing),
                           catalogue.RULES)
    checked = [r.rule for r in results if r.status is not RuleStatus.NOT_CHECKED]
    assert set(checked) == {"CORDON-1", "COND-1", "COND-2", "GG-1"}  # the node-only rules


def report_with(*names: str) -> dict[str, object]:
    nodes = [node(n, cordoned=True) for n in names]
    results = registry.run(view({Input.NODES: nodes, Input.PODS: [pod("p")]}), catalogue.RULES)
    return audit_cli.report(results, AT, "https://api.example:6443", "http://prom:9090")


def test_report_summary_counts_findings_by_severity() -> None:
    data = report_with("gpu-1", "gpu-2")
    summary = data["summary"]
    assert isinstance(summary, dict)
    assert summary["medium"] >= 2  # two cordons without a reason
    assert summary["rules"] == len(catalogue.RULES)


class Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.links: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("href", "src")]

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def test_html_is_self_contained_escaped_and_grouped_by_severity() -> None:
    page = audit_html.render(report_with(HOSTILE))
    parsed = Collector()
    parsed.feed(page)
    assert "script" not in parsed.tags
    assert HOSTILE in "".join(parsed.text)  # shown as text, not markup
    assert all(link.startswith("https://") for link in parsed.links)  # no local/external asset
    assert "<link" not in page
    assert "<img" not in page
    assert page.index("Medium (") < page.index("Low (") < page.index("Not checked (why)")


@pytest.mark.parametrize(("fail_on", "code"), [("high", 0), ("medium", 1)])
def test_exit_status_follows_the_threshold(fail_on: str, code: int, monkeypatch:
                                           pytest.MonkeyPatch) -> None:
    class Reader:
        def __init__(self, *_: object) -> None: ...

        def read(self, *_: object) -> AuditView:
            return view({Input.NODES: [node("gpu-1", cordoned=True)], Input.PODS: []})

    monkeypatch.setattr(audit_cli.audit_source, "AuditReader", Reader)
    result = CliRunner().invoke(app, ["audit", "--kube-server", "http://127.0.0.1:1",
                                      "--fail-on", fail_on, "-o", "json"])
    assert result.exit_code == code, result.output
