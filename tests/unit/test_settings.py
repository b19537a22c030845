"""Settings load from YAML and GPUGUARD_* env, and name the field when a value is bad."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from gpuguard.errors import InputError
from gpuguard.model import settings


def test_defaults_are_the_seed_values() -> None:
    s = settings.GuardSettings.load()
    assert s.isolation.hold_window == timedelta(minutes=10)
    assert s.isolation.max_isolations_per_tick == 1
    assert s.isolation.breaker_rate_min == 2
    assert s.controller.interval == timedelta(seconds=30)


def test_file_then_env_with_human_durations(tmp_path: Path) -> None:
    path = tmp_path / "gpuguard.yaml"
    path.write_text("isolation:\n  hold_window: 5m\n  fast_path_xids: [79, 95]\n")
    s = settings.GuardSettings.load(path, {"GPUGUARD_ISOLATION__BREAKER_LEVEL_MIN": "3"})
    assert s.isolation.hold_window == timedelta(minutes=5)
    assert s.isolation.fast_path_xids == frozenset({79, 95})
    assert s.isolation.breaker_level_min == 3


@pytest.mark.parametrize(
    ("text", "env", "fragment"),
    [
        pytest.param("isolation:\n  hold_window: soon\n", {}, "isolation.hold_window", id="dur"),
        pytest.param("isolation:\n  holdwindow: 5m\n", {}, "isolation.holdwindow", id="typo"),
        pytest.param("", {"GPUGUARD_ISOLATION__BREAKER_LEVEL_FRACTION": "2"}, "fraction", id="env"),
        pytest.param("- a\n- b\n", {}, "must be a mapping", id="not-a-mapping"),
        pytest.param("isolation: [\n", {}, "not valid YAML", id="yaml-syntax"),
    ],
)
def test_bad_settings_name_the_file_and_field(
    tmp_path: Path, text: str, env: dict[str, str], fragment: str
) -> None:
    path = tmp_path / "gpuguard.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=fragment):
        settings.GuardSettings.load(path, env)


@pytest.mark.parametrize("text", ["79,48", "[79, 48]", " 79 , 48 "])
def test_lists_from_the_environment_comma_separated_or_json(text: str) -> None:
    s = settings.GuardSettings.load(None, {"GPUGUARD_ISOLATION__FAST_PATH_XIDS": text})
    assert s.isolation.fast_path_xids == frozenset({79, 48})


def test_a_bare_number_is_not_a_duration(tmp_path: Path) -> None:
    path = tmp_path / "gpuguard.yaml"
    path.write_text("isolation:\n  hold_window: 5\n")
    with pytest.raises(InputError, match=r"gpuguard.yaml: isolation.hold_window: .*no unit.*5s"):
        settings.GuardSettings.load(path, {})
    with pytest.raises(InputError, match=r"^invalid settings: GPUGUARD_CONTROLLER__INTERVAL='30'"):
        settings.GuardSettings.load(None, {"GPUGUARD_CONTROLLER__INTERVAL": "30"})


def test_an_environment_error_is_not_blamed_on_the_file(tmp_path: Path) -> None:
    path = tmp_path / "gpuguard.yaml"
    path.write_text("isolation:\n  hold_window: 5m\n")
    with pytest.raises(InputError) as raised:
        settings.GuardSettings.load(path, {"GPUGUARD_ISOLATION__FAST_PATH_XIDS": "[79, 4"})
    assert str(raised.value).startswith("GPUGUARD_ISOLATION__FAST_PATH_XIDS=")
    assert "gpuguard.yaml" not in str(raised.value)


def test_a_renamed_section_is_refused_with_its_new_name(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text("restore:\n  burnin: matmul\n")
    with pytest.raises(InputError, match="'restore' is now 'return_to_pool'"):
        settings.GuardSettings.load(old)
    with pytest.raises(InputError, match="GPUGUARD_RETURN_TO_POOL__"):
        settings.GuardSettings.load(None, {"GPUGUARD_RESTORE__BURN_IN": "matmul"})
