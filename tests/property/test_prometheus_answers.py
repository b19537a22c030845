"""Whatever a Prometheus (or a proxy, or Thanos) answers, the reader returns finite samples
with real times or refuses with a SourceError naming the query: never a crash, never a
NaN or a year-5000 timestamp handed to a decision."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuguard.errors import SourceError
from gpuguard.sources import prometheus

QUERY = "DCGM_FI_DEV_XID_ERRORS"
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)  # fmt: skip
NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr), st.integers().map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e20", "", "x"]),
)  # fmt: skip
STAMP = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), NUMBER_TEXT)
SAMPLE = st.fixed_dictionaries(
    {"metric": st.one_of(st.none(), st.dictionaries(st.text(max_size=8), JSON, max_size=3)),
     "value": st.one_of(st.tuples(STAMP, st.one_of(NUMBER_TEXT, JSON)).map(list), JSON)}
)  # fmt: skip
VECTOR = st.fixed_dictionaries(
    {"status": st.sampled_from(["success", "error", None]),
     "data": st.fixed_dictionaries({"resultType": st.sampled_from(["vector", "matrix"]),
                                    "result": st.one_of(st.lists(SAMPLE, max_size=4), JSON)})},
    optional={"warnings": st.lists(st.text(max_size=20), max_size=2), "error": JSON},
)  # fmt: skip


def check(status: int, body: bytes) -> None:
    refused: SourceError | None = None
    try:
        series = prometheus.parse_answer(QUERY, status, body, "vector")
    except SourceError as e:
        refused, series = e, []
    assert refused is None or QUERY in str(refused)
    for sample in series:
        labels, value, when = sample.labels, sample.value, sample.timestamp
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
        assert math.isfinite(value)
        assert datetime(1970, 1, 1, tzinfo=UTC) <= when < datetime(2100, 1, 1, tzinfo=UTC)


@given(VECTOR, st.sampled_from([200, 400, 422, 503]))
def test_any_shaped_answer_is_samples_or_a_source_error(payload: dict[str, Any], status: int)\
        -> None:  # fmt: skip
    check(status, json.dumps(payload).encode())


@given(st.one_of(JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def test_any_body_is_samples_or_a_source_error(body: bytes) -> None:
    check(200, body)
