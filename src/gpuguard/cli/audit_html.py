"""The audit as one self-contained HTML page a person can send to their team: inline CSS, no
script, no external asset, findings grouped by severity, every value escaped."""

from __future__ import annotations

from html import escape
from typing import Any

from gpuguard.model.audit import SEVERITIES

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#1d1d1f}
h1{font-size:1.5em;margin-bottom:.2em}.meta{color:#555;margin-top:0}
.counts span{display:inline-block;margin:0 .6em .6em 0;padding:.25em .7em;border-radius:1em;
color:#fff;font-weight:600}
section{margin-top:1.6em}h2{font-size:1.15em;border-bottom:2px solid #ddd;padding-bottom:.2em}
.f{border-left:6px solid #999;background:#fafafa;margin:.7em 0;padding:.5em .9em}
.f .id{font-weight:700}.f .obj{font-family:ui-monospace,monospace;font-size:.92em}
.f p{margin:.25em 0}.k{color:#555;font-weight:600}
.high{background:#c0392b;border-color:#c0392b}.medium{background:#d35400;border-color:#d35400}
.low{background:#b7950b;border-color:#b7950b}.info{background:#2471a3;border-color:#2471a3}
.none{background:#7f8c8d}.f.high,.f.medium,.f.low,.f.info{background:#fafafa}
table{border-collapse:collapse;width:100%}td:first-child{white-space:nowrap}
td,th{border-bottom:1px solid #e5e5e5;
text-align:left;padding:.3em .5em;vertical-align:top}
"""


def render(report: dict[str, Any]) -> str:
    """The page for ``report`` (the data ``gpuguard audit -o json`` prints)."""
    rules = report["rules"]
    findings = [(r, f) for r in rules for f in r["findings"]]
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width,initial-scale=1'>",
        f"<title>gpuguard audit {_e(report['at'])}</title><style>{_CSS}</style></head><body>",
        "<h1>gpuguard audit</h1>",
        f"<p class='meta'>cluster {_e(report['cluster'])} · Prometheus "
        f"{_e(report['prometheus'])} · {_e(report['at'])}</p>",
        _counts(report["summary"]),
    ]
    for severity in SEVERITIES:
        shown = [(r, f) for r, f in findings if f["severity"] == severity]
        if shown:
            parts.append(f"<section><h2>{_e(str(severity).title())} ({len(shown)})</h2>")
            parts += [_finding(r, f) for r, f in shown]
            parts.append("</section>")
    parts.append(_rule_table("Not checked (why)", [r for r in rules
                                                   if r["status"] == "not-checked"], True))
    parts.append(_rule_table("Checked: no finding", [r for r in rules
                                                     if r["status"] == "no-finding"], False))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _counts(summary: dict[str, int]) -> str:
    pills = [f"<span class='{_e(s)}'>{_e(s)}: {summary.get(str(s), 0)}</span>"
             for s in SEVERITIES]
    pills.append(f"<span class='none'>not checked: {summary.get('not-checked', 0)}</span>")
    return f"<p class='counts'>{''.join(pills)}</p>"


def _finding(rule: dict[str, Any], finding: dict[str, Any]) -> str:
    objects = ", ".join(finding["objects"])
    return (
        f"<div class='f {_e(finding['severity'])}'>"
        f"<p><span class='id'>{_e(rule['rule'])}</span> {_e(rule['title'])}</p>"
        f"<p class='obj'>{_e(objects)}</p>"
        f"<p><span class='k'>Evidence:</span> {_e(finding['evidence'])}</p>"
        f"<p><span class='k'>Fix:</span> {_e(finding['fix'])}</p>"
        f"<p><span class='k'>Source:</span> {_link(finding['source'])}</p></div>"
    )


def _rule_table(title: str, rules: list[dict[str, Any]], why: bool) -> str:
    if not rules:
        return ""
    rows = "".join(
        f"<tr><td>{_e(r['rule'])}</td><td>{_e(r['title'])}</td>"
        + (f"<td>{_e(r['why'])}</td>" if why else "") + "</tr>"
        for r in rules
    )
    head = "<th>rule</th><th>title</th>" + ("<th>why</th>" if why else "")
    return (f"<section><h2>{_e(title)} ({len(rules)})</h2>"
            f"<table><tr>{head}</tr>{rows}</table></section>")


def _link(url: str) -> str:
    """An anchor for an http(s) source; anything else (a docs/ path) as plain text."""
    if url.startswith(("https://", "http://")):
        return f"<a href='{_e(url)}'>{_e(url)}</a>"
    return _e(url)


def _e(value: object) -> str:
    return escape(str(value), quote=True)
