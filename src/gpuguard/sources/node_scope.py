"""Queries scoped to some nodes by a node label matcher, so a plan's answers grow with the
nodes asked about, not with the fleet (docs/design.md#return-to-pool): the selector, the
batching that keeps each query's GET URL within what proxies accept, the reader of a scoped
plan, and the scope read back for an emulation answering such queries."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from urllib import parse

from gpuguard.model import fleet, series
from gpuguard.sources import prometheus

MATCHER_CHARS = 2_000
"""The longest URL-encoded node regex of one query: three of them (one per node label) keep a
query's GET URL within the 8 KiB that proxies in front of Prometheus commonly accept."""
MOST_BATCHES = 8
"""Nodes that need more batches than this (about 100 nodes each) are read as the whole fleet,
once, and kept of those nodes: past it, a query per batch outgrows the one whole-fleet read (a
fleet without dcgm's pod mapping, where every busy node is a phantom candidate; a scale-up, or
a Prometheus that lost its recent data and shows every node's topology as new)."""


def selector(metric: str, nodes: Iterable[str], around: str = "{}", matchers: str = "") -> str:
    """``metric`` (inside ``around``, with the extra label ``matchers``), of ``nodes``: one
    selector per label a series may name its node in (``model.series.NODE_LABELS``), so every
    series whose ``node_of`` is one of them is selected, whatever its exporter's spelling."""
    regex = _promql_string(node_regex(nodes))
    each = [
        around.format(f"{metric}{{{label}=~{regex}{matchers}}}") for label in series.NODE_LABELS
    ]
    return f"({' or '.join(each)})"


def batches(nodes: Iterable[str], max_chars: int) -> list[tuple[str, ...]]:
    """``nodes`` (sorted, once each) in as many batches as keep each node regex within
    ``max_chars`` once quoted and URL-encoded (the queries go in GET URLs); no nodes, none."""
    out: list[tuple[str, ...]] = []
    batch: list[str] = []
    for node in sorted(set(nodes)):
        if batch and encoded_length([*batch, node]) > max_chars:
            out.append(tuple(batch))
            batch = []
        batch.append(node)
    if batch:
        out.append(tuple(batch))
    return out


class ScopedSource:
    """``ports.NodeMetricsSource``: the plan ``scoped`` makes for each batch of the asked nodes,
    each read (freshness included) through one ``PrometheusSource``."""

    def __init__(
        self,
        reader: prometheus.PrometheusSource,
        scoped: Callable[[tuple[str, ...]], prometheus.Plan],
        *,
        max_regex_chars: int = MATCHER_CHARS,
    ) -> None:
        self._reader = reader
        self._scoped = scoped
        self._max_chars = max_regex_chars

    def samples_of(self, at: datetime, nodes: Sequence[str]) -> tuple[fleet.MetricSample, ...]:
        found: list[fleet.MetricSample] = []
        for batch in batches(nodes, self._max_chars):
            found += self._reader.samples(at, self._scoped(batch))
        return tuple(found)


def node_regex(nodes: Iterable[str]) -> str:
    """An RE2 alternation matching exactly these names (Prometheus anchors label regexes)."""
    return "|".join("".join(map(_re2_literal, node)) for node in nodes)


def encoded_length(nodes: Iterable[str]) -> int:
    """The length of the nodes' regex as a PromQL string in a URL's query."""
    return len(parse.quote(_promql_string(node_regex(nodes)), safe=""))


def scope_of(query: str) -> tuple[str, ...] | None:
    """The nodes a scoped query selects (``node_regex`` read back); None when the query names
    no node regex. For an emulation answering the scoped queries."""
    found = re.search(r'=~"((?:[^"\\]|\\.)*)"', query)
    if found is None:
        return None
    regex = re.sub(r"\\(.)", r"\1", found.group(1))  # the PromQL string's escapes
    return tuple(re.sub(r"\\(.)", r"\1", n) for n in re.findall(r"(?:[^\\|]|\\.)+", regex))


def _re2_literal(char: str) -> str:
    """RE2 reads a backslash before any ASCII character that is not a letter or digit as that
    character itself (https://github.com/google/re2/wiki/Syntax), and only before those."""
    return "\\" + char if char.isascii() and not char.isalnum() else char


def _promql_string(text: str) -> str:
    """``text`` as a double-quoted PromQL string literal (Go's escapes)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
