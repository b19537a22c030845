"""Scenario files are written by hand: any text or any mapping loads or fails with one
ScenarioError naming the file — never halfway through a run, never a traceback."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from gpuguard.errors import ScenarioError
from gpuguard.sim import scenario

SOURCE = "scenarios/fuzzed.yaml"
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-3, 20), st.text(max_size=8),
                   st.sampled_from(["10m", "3d", "-1s", "gpu-node-a", "Hostname"]))  # fmt: skip
PAYLOAD = st.dictionaries(
    st.sampled_from(["node", "gpu", "xid", "duration", "job", "gpus", "count", "key", "value",
                     "servers", "dip", "remap", "z"]),
    st.one_of(SCALAR, st.lists(SCALAR, max_size=3)), max_size=4,
)  # fmt: skip
EVENT = st.one_of(
    st.builds(lambda at, kind, payload: {"at": at, kind: payload},
              SCALAR, st.sampled_from([*scenario.PAYLOADS, "unknown"]), PAYLOAD),
    PAYLOAD,
)  # fmt: skip
FILE = st.fixed_dictionaries(
    {"name": SCALAR,
     "fleet": st.one_of(SCALAR, st.fixed_dictionaries(
         {"nodes": st.one_of(st.integers(-1, 3), st.lists(SCALAR, max_size=3))},
         optional={"gpus_per_node": SCALAR, "overrides": st.dictionaries(SCALAR, PAYLOAD)}))},
    optional={"events": st.one_of(st.lists(EVENT, max_size=5), SCALAR),
              "expect": st.dictionaries(st.sampled_from(["isolate", "never_isolate"]),
                                        st.lists(SCALAR, max_size=2)),
              "duration": SCALAR, "start": SCALAR},
)  # fmt: skip


def load(text: str) -> None:
    refused: ScenarioError | None = None
    try:
        loaded = scenario.loads(text, source=SOURCE)
    except ScenarioError as e:
        refused = e
    if refused is not None:
        assert str(refused).startswith(SOURCE), refused
    else:
        assert loaded.nodes
        assert all(event.at.total_seconds() >= 0 for event in loaded.events)


@given(FILE)
def test_any_scenario_mapping_loads_or_names_the_file(data: dict[str, Any]) -> None:
    load(yaml.safe_dump(data, allow_unicode=True))


@given(st.text(max_size=300))
def test_any_text_loads_or_names_the_file(text: str) -> None:
    load(text)
