"""Every PromQL query gpuguard sends, scoped to the exporters' own scrape targets.

Anyone who can run a pod that Prometheus scrapes can export a series named
``DCGM_FI_DEV_XID_ERRORS`` with another node's ``Hostname``: unscoped, gpuguard would read it
as that node's GPU fault (docs/security.md#metric-forgery). ``scoped`` adds the label
matchers of the scrape job a metric family comes from (``prometheus.scrape_scope``: a metric
name prefix -> matchers such as ``job="nvidia-dcgm-exporter", namespace="gpu-operator"``) to
every selector of that family in a query, so only the exporters' own targets answer. Target
labels (``job``, ``namespace``) are Prometheus' own unless a scrape honours the exported ones
(``honor_labels``): the scrape configuration that makes this sound is in docs/security.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SELECTOR = re.compile(r"(?<![\w:\"'])([A-Za-z_][\w:]*)(\s*\{([^}]*)\})?")


def scoped(promql: str, scopes: Mapping[str, str]) -> str:
    """``promql`` with the matchers of ``scopes`` (metric name prefix -> matchers) added to
    every selector of a metric whose name starts with a prefix; other text is unchanged."""
    if not scopes:
        return promql

    def scope(m: re.Match[str]) -> str:
        name, braces, inside = m[1], m[2], m[3]
        matchers = next((v for prefix, v in scopes.items() if name.startswith(prefix)), None)
        if matchers is None or _is_keyword_call(promql, m.end(1)):
            return m[0]
        if braces is None:
            return f"{name}{{{matchers}}}"
        return f"{name}{{{matchers}, {inside}}}" if inside.strip() else f"{name}{{{matchers}}}"

    return _SELECTOR.sub(scope, promql)


def _is_keyword_call(promql: str, end: int) -> bool:
    """A name followed by ``(`` is a function or aggregation, not a metric."""
    rest = promql[end:].lstrip()
    return rest.startswith("(")
