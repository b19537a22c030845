"""The settings reference is generated from the settings model: docs/settings.md is what
`gpuguard settings --markdown` prints now, every setting says what it does, and the defaults
the Helm chart restates in values.yaml are the model's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from gpuguard.cli.main import app
from gpuguard.model import settings, settings_reference

REPO = Path(__file__).resolve().parents[2]
VALUES = REPO / "deploy" / "helm" / "gpuguard" / "values.yaml"
# values the chart sets on purpose to something else than the model's default, and why
CHART_CHOICES = {
    "notifications.format": "the chart's webhook is Alertmanager (kube-prometheus-stack)",
}


def test_docs_settings_md_is_generated_from_the_model() -> None:
    result = CliRunner().invoke(app, ["settings", "--markdown"])
    assert result.exit_code == 0, result.stderr
    assert (REPO / "docs" / "settings.md").read_text(encoding="utf-8") == result.stdout, (
        "docs/settings.md is stale: gpuguard settings --markdown > docs/settings.md"
    )


def test_every_setting_has_a_type_a_default_and_says_what_it_does() -> None:
    found = settings_reference.reference()
    assert len(found) == len({s.path for s in found}) > 70
    assert [s.path for s in found if not s.help] == []
    assert all(s.type and s.default for s in found)
    hold = next(s for s in found if s.path == "isolation.hold_window")
    assert (hold.type, hold.default, hold.variable) == (
        "duration", "10m", "GPUGUARD_ISOLATION__HOLD_WINDOW")


def _leaves(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_charts_restated_defaults_are_the_models() -> None:
    chart = yaml.safe_load(VALUES.read_text(encoding="utf-8"))["controller"]["settings"]
    restated = _leaves(chart)
    defaults = {s.path: s.default for s in settings_reference.reference()}
    assert set(restated) <= set(defaults), "values.yaml names a setting that does not exist"
    chart_model = settings.GuardSettings.model_validate(chart)
    differ = {
        path: (settings_reference.shown(_value(chart_model, path)), defaults[path])
        for path in restated
        if settings_reference.shown(_value(chart_model, path)) != defaults[path]
    }
    assert set(differ) == set(CHART_CHOICES), differ


def _value(model: Any, path: str) -> Any:
    for key in path.split("."):
        model = getattr(model, key)
    return model


def test_settings_lists_every_setting_as_json() -> None:
    result = CliRunner().invoke(app, ["settings", "-o", "json"])
    assert result.exit_code == 0, result.stderr
    assert '"variable": "GPUGUARD_NOTIFICATIONS__WEBHOOK_URL"' in result.stdout
