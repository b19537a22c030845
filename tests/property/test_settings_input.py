"""Settings come from a file and ``GPUGUARD_*`` variables an operator types by hand: any of
them loads or fails with one InputError naming where it came from — never a traceback."""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from gpuguard.errors import InputError
from gpuguard.model import settings

SECTIONS = ["isolation", "prometheus", "controller", "phantom", "return_to_pool", "notifications",
            "x"]  # fmt: skip
FIELDS = ["hold_window", "interval", "url", "staleness", "breaker_max_nodes",
          "breaker_max_fraction", "namespace", "image", "webhook_url", "y"]  # fmt: skip
SCALAR = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["10m", "-1s", "1e9h", "0", "nan", "http://x", "ten minutes"]),
)  # fmt: skip
TREE = st.dictionaries(
    st.sampled_from(SECTIONS),
    st.one_of(SCALAR, st.dictionaries(st.sampled_from(FIELDS), SCALAR, max_size=4)),
    max_size=4,
)
ENV_KEY = st.builds(
    lambda parts: "GPUGUARD_" + "__".join(parts),
    st.lists(st.sampled_from([*SECTIONS, *FIELDS]).map(str.upper), min_size=1, max_size=3),
)
ENV = st.dictionaries(ENV_KEY, st.text(max_size=12), max_size=4)


@given(st.one_of(TREE.map(yaml.safe_dump), st.text(max_size=200)), ENV)
@example("isolation: null\n", {"GPUGUARD_ISOLATION__HOLD_WINDOW": "5m"})  # was a TypeError
@example("isolation:\n  hold_window: 86400000000000\n", {})  # was an OverflowError
@example("", {"GPUGUARD_ISOLATION__HOLD_WINDOW": "nan"})
def test_any_file_and_environment_load_or_name_the_problem(text: str, env: dict[str, str])\
        -> None:  # fmt: skip
    with TemporaryDirectory() as tmp:
        path = Path(tmp) / "settings.yaml"
        path.write_text(text, encoding="utf-8")
        refused: InputError | None = None
        try:
            loaded = settings.GuardSettings.load(path, env)
        except InputError as e:
            refused = e
    if refused is not None:
        said = str(refused)
        assert str(path) in said or "environment" in said or any(k in said for k in env)
    else:
        assert loaded.isolation.hold_window.total_seconds() >= 0
