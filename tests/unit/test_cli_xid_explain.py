"""``gpuguard xid explain``: what an operator sees for a code, with and without the cluster's
override file, and how bad input is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuguard.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "data/catalog"
OVERRIDES = FIXTURES / "cluster-overrides.yaml"


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner(env={"COLUMNS": "120"}).invoke(main.app, ["xid", "explain", *args])
    return result.exit_code, result.stdout, result.stderr


def explained(*args: str) -> dict[str, object]:
    exit_code, stdout, stderr = run(*args, "-o", "json")
    assert exit_code == 0, stderr
    parsed = json.loads(stdout)
    assert isinstance(parsed, dict)
    return parsed


@pytest.mark.parametrize(
    ("code", "xid_class", "verdict", "says"),
    [
        pytest.param("79", "hardware", "power-cycle", "takes the fast path", id="79-fast-path"),
        pytest.param("48", "hardware", "gpu-reset", "counts toward isolation", id="48-dbe"),
        pytest.param("94", "hardware", "gpu-reset", "capacity > allocatable", id="94-contained"),
        pytest.param("143", "hardware", "rma", "hold window", id="143-init-failure"),
        pytest.param("74", "hardware", "human-diagnosis", "counts toward isolation", id="74"),
        pytest.param("13", "user", None, "never masks a later hardware Xid", id="13-user"),
        pytest.param("109", "user", None, "never isolates a node", id="109-user"),
        pytest.param("63", "informational", None, "Recorded only", id="63-informational"),
        pytest.param("500", "informational", None, "Not in gpuguard's catalog", id="unknown"),
    ],
)
def test_json_says_what_gpuguard_does_with_the_code(
    code: str, xid_class: str, verdict: str | None, says: str
) -> None:
    out = explained(code)
    assert (out["code"], out["class"], out["verdict"]) == (int(code), xid_class, verdict)
    assert says in str(out["handling"])


def test_json_carries_nvidias_catalog_entry() -> None:
    out = explained("79")
    assert out["mnemonic"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert (out["immediate_action"], out["cause"], out["known"]) == ("RESTART_BM", "bus", True)
    assert out["fast_path"] is True


@pytest.mark.parametrize(
    ("code", "xid_class", "says"),
    [
        pytest.param("163", "informational", "No GPU reset is needed", id="163-pshc-disengaged"),
        pytest.param("168", "hardware", "enable ECC", id="168-reduced-memory"),
    ],
)
def test_nvidias_resolution_prose_is_shown_for_163_and_168(
    code: str, xid_class: str, says: str
) -> None:
    out = explained(code)
    assert (out["class"], out["immediate_action"]) == (xid_class, None)
    assert says in str(out["resolution"])
    exit_code, table, _ = run(code)
    assert exit_code == 0
    assert "NVIDIA resolution" in table


def test_codes_with_a_bucket_carry_no_resolution_prose() -> None:
    assert explained("79")["resolution"] is None


def test_only_79_takes_the_fast_path() -> None:
    assert explained("48")["fast_path"] is False
    assert "fast path" not in str(explained("48")["handling"])


def test_table_is_the_default_output() -> None:
    exit_code, stdout, _ = run("79")
    assert exit_code == 0
    assert "Xid 79: GPU has fallen off the bus" in stdout
    for fragment in ("RESTART_BM", "hardware", "power-cycle"):
        assert fragment in stdout


def test_table_for_a_user_code_shows_no_repair_verdict() -> None:
    exit_code, stdout, _ = run("13", "-o", "table")
    assert exit_code == 0
    assert "user" in stdout
    assert "repair verdict" not in stdout


def test_overrides_flag_applies_the_clusters_classes() -> None:
    out = explained("137", "--overrides", str(OVERRIDES))
    assert (out["class"], out["catalog_class"], out["overridden"]) == (
        "user",
        "informational",
        True,
    )
    assert "never isolates a node" in str(out["handling"])
    assert explained("137")["class"] == "informational"


def test_table_marks_an_overridden_class() -> None:
    exit_code, stdout, _ = run("137", "--overrides", str(OVERRIDES))
    assert exit_code == 0
    assert "cluster override" in stdout


def test_override_can_make_an_unknown_code_hardware() -> None:
    out = explained("200", "--overrides", str(OVERRIDES))
    assert (out["known"], out["class"], out["verdict"]) == (False, "hardware", "human-diagnosis")


@pytest.mark.parametrize(
    ("code", "complaint"),
    [
        pytest.param("abc", "valid integer", id="not-a-number"),
        pytest.param("7.9", "valid integer", id="not-an-integer"),
        pytest.param("0", "greater than or equal to 1", id="zero"),
        pytest.param("1001", "less than or equal to 1000", id="above-range"),
    ],
)
def test_a_bad_code_exits_2_with_a_clear_message(code: str, complaint: str) -> None:
    exit_code, _, stderr = run(code)
    assert exit_code == 2
    assert "Invalid value for 'CODE'" in stderr
    assert complaint in stderr


@pytest.mark.parametrize(
    ("fixture", "names"),
    [
        pytest.param("bad-class-name.yaml", "classes entry 48", id="bad-class"),
        pytest.param("bad-yaml-syntax.yaml", "invalid YAML", id="bad-yaml"),
        pytest.param("no-such-file.yaml", "cannot read", id="missing-file"),
    ],
)
def test_a_bad_override_file_exits_2_naming_file_and_entry(fixture: str, names: str) -> None:
    path = FIXTURES / fixture
    exit_code, stdout, stderr = run("48", "--overrides", str(path))
    assert exit_code == 2
    assert stdout == ""
    assert str(path) in stderr
    assert names in stderr


def test_help_teaches_the_override_format_and_gives_examples() -> None:
    exit_code, stdout, _ = run("--help")
    assert exit_code == 0
    for fragment in ("classes:", "94: hardware", "gpuguard xid explain 79", "-o json"):
        assert fragment in stdout


def test_a_code_judged_per_line_lists_its_rules_with_the_clusters_classes(tmp_path: Path) -> None:
    overrides = tmp_path / "overrides.yaml"
    overrides.write_text('events:\n  "xid145:RLW_CTRL:0:0x80000000": hardware\n')
    rules = explained("145", "--overrides", str(overrides))["event_rules"]
    assert isinstance(rules, list)
    by_id = {r["id"]: r["class"] for r in rules}
    assert len(by_id) == 36
    assert by_id["xid145:RLW_CTRL:0:0x80000000"] == "hardware"
    assert by_id["xid145:RLW_REMAP:0:0x00000001"] == "informational"
    assert explained("79")["event_rules"] == []
    exit_code, stdout, _ = run("145")
    assert exit_code == 0
    assert "36 rule(s) judge each line" in stdout
