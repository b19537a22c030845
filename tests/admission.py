"""The chart's ValidatingAdmissionPolicy, rendered as ``helm template`` would with default
values, and its CEL rules evaluated (cel-python) against a Job: which rules it fails."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import celpy
import yaml

from gpuguard.actuators import jobs

CHART = Path(__file__).resolve().parents[1] / "deploy" / "helm" / "gpuguard"
IMAGE = "ghcr.io/gpuguard/gpuguard:0.1.0"


def render_default() -> list[dict[str, Any]]:
    """What `helm template -n gpuguard` renders with default values, for this template only."""
    text = (CHART / "templates" / "validatingadmissionpolicy.yaml").read_text()
    text = re.sub(r"\{\{-? /\*.*?\*/ -?\}\}\n?", "", text, flags=re.S)
    text = re.sub(r"\{\{-? (if|end)[^}]*\}\}\n?", "", text)
    text = text.replace("{{ .Release.Namespace }}", "gpuguard")
    text = text.replace(
        "{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}", IMAGE
    )
    assert "{{" not in text, "an unrendered template expression is left"
    return [doc for doc in yaml.safe_load_all(text) if doc]


def policy() -> dict[str, Any]:
    (vap,) = [d for d in render_default() if d["kind"] == "ValidatingAdmissionPolicy"]
    return vap


def failed_rules(job: dict[str, Any]) -> list[str]:
    spec = policy()["spec"]
    env = celpy.Environment()
    activation: dict[str, Any] = {"object": celpy.json_to_cel(job)}
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        program = env.program(env.compile(variable["expression"]))
        variables[variable["name"]] = program.evaluate(
            activation | {"variables": celpy.json_to_cel(variables)}
        )
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    failed = []
    for rule in spec["validations"]:
        result = env.program(env.compile(rule["expression"])).evaluate(activation)
        if result is not True and not (isinstance(result, celpy.celtypes.BoolType) and result):
            failed.append(rule["message"])
    return failed


def evidence() -> dict[str, Any]:
    return jobs.evidence_job("gpu-node-b", "2026-09-21T06:05:10Z", image=IMAGE)

