"""Every DCGM field gpuguard reads: listed with what goes blind without it, shipped in the
chart's dcgm-exporter counters file, and held to dcgm-exporter's own default file."""

from __future__ import annotations

import re
from pathlib import Path

from gpuguard.catalog import dcgm_fields
from gpuguard.model import metric_names as names
from tests import chart

REFERENCE = Path(__file__).resolve().parents[1] / "data/reference/dcgm_exporter_counters.md"


def dcgm_names_gpuguard_reads() -> set[str]:
    values = (getattr(names, n) for n in dir(names) if n.startswith("DCGM_"))
    field = re.compile(r"DCGM_(FI|EXP)_[A-Z0-9_]+")
    return {v for v in values if isinstance(v, str) and field.fullmatch(v)}


def enabled_by_default() -> set[str]:
    """dcgm-exporter's default-counters.csv as summarised in the reference: ENABLED rows."""
    row = re.compile(r"^\| \d+ \| [^|]+ \| `(?P<name>\w+)` \| \w+ \| ENABLED \|", re.MULTILINE)
    return {m["name"] for m in row.finditer(REFERENCE.read_text(encoding="utf-8"))}


def test_every_dcgm_field_gpuguard_reads_is_listed_with_what_it_costs() -> None:
    listed = {f.name for f in dcgm_fields.FIELDS} | dcgm_fields.ALIASES
    assert dcgm_names_gpuguard_reads() == listed
    assert all(f.blind and f.kind in {"gauge", "counter"} for f in dcgm_fields.FIELDS)


def test_the_default_flags_are_dcgm_exporters_own_file() -> None:
    ours = {f.name for f in dcgm_fields.FIELDS if f.default}
    assert ours == enabled_by_default() & {f.name for f in dcgm_fields.FIELDS}
    assert len(dcgm_fields.FIELDS) - len(ours) == 15


def test_the_charts_counters_file_lists_every_field() -> None:
    (config_map,) = [o for o in chart.by_kind("ConfigMap")
                     if o["metadata"]["name"] == "gpuguard-dcgm-counters"]
    assert config_map["data"]["dcgm-metrics.csv"] == dcgm_fields.counters_csv()


def test_the_counters_file_can_be_left_out() -> None:
    values = chart.defaults()
    values["dcgmExporter"]["counters"] = False
    assert not [o for o in chart.by_kind("ConfigMap", values)
                if o["metadata"]["name"] == "gpuguard-dcgm-counters"]


def test_not_collected_names_the_missing_fields_and_accepts_the_old_throttle_name() -> None:
    present = frozenset(f.name for f in dcgm_fields.FIELDS if f.default)
    missing = {f.name for f in dcgm_fields.not_collected(present)}
    assert {names.DCGM_PSTATE, names.DCGM_SM_ACTIVE} <= missing
    older = present | {names.DCGM_CLOCK_THROTTLE_REASONS}
    assert names.DCGM_CLOCKS_EVENT_REASONS not in {f.name for f in dcgm_fields.not_collected(older)}
