"""The chart's ``controller.settings`` in values.yaml restate some of gpuguard's setting
defaults (so a reader of the chart sees them): each must be a setting that exists and, read
the way gpuguard reads it, equal the default in ``model/settings.py``; the chart overrides a
default only where it names why here. Otherwise a default changed in code would silently stay
old for every Helm install."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest
import yaml

from gpuguard.model import settings
from tests import chart

# path in controller.settings -> why the chart differs from the code's default
CHART_CHOICES: dict[str, str] = {
    "notifications.format": "in a cluster the webhook is most often Alertmanager's v2 API (the "
    "example URL beside it in values.yaml); the code's default stays the plain JSON webhook",
}


def _leaves(
    tree: dict[str, Any], model: Any, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    """Each setting's path in ``tree``: into a section, not into a mapping-valued setting."""
    found: list[tuple[str, ...]] = []
    for key, value in tree.items():
        section = getattr(model, key, None)
        if isinstance(value, dict) and isinstance(section, pydantic.BaseModel):
            found += _leaves(value, section, (*prefix, key))
        else:
            found.append((*prefix, key))
    return found


def _at(tree: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        tree = getattr(tree, key)
    return tree


def _chart_settings() -> dict[str, Any]:
    values = yaml.safe_load((chart.CHART / "values.yaml").read_text())
    found: dict[str, Any] = values["controller"]["settings"]
    return found


@pytest.mark.parametrize(
    "path", _leaves(_chart_settings(), settings.GuardSettings()), ids=".".join
)
def test_each_setting_the_chart_restates_is_the_codes_default(path: tuple[str, ...]) -> None:
    read = settings.GuardSettings.model_validate(_chart_settings())
    chart_value, default = _at(read, path), _at(settings.GuardSettings(), path)
    if ".".join(path) in CHART_CHOICES:
        assert chart_value != default, f"{'.'.join(path)} is the default now: drop its choice"
    else:
        assert chart_value == default, (
            f"values.yaml controller.settings.{'.'.join(path)} = {chart_value!r}, but the "
            f"code's default is {default!r}: make them equal, or name the chart's reason in "
            "CHART_CHOICES"
        )


def test_the_chart_restates_only_settings_that_exist() -> None:
    """A misspelt or removed key fails gpuguard at start (extra keys are refused): here first."""
    settings.GuardSettings.model_validate(_chart_settings())
