"""Evaluates a ValidatingAdmissionPolicy the way the API server does, with cel-python:
matchConditions first (all true, or the policy does not apply), then its variables in order,
then every validation. A validation that errors counts as refused (failurePolicy Fail).
See https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any

import celpy

NOT_MATCHED = None
_ENV = celpy.Environment()
# Set to a folder, every evaluation is also written there as one JSON line (a file per
# process), so the real-cluster tier replays each case against the real API server
# (tests/realcluster/test_admission_replay.py): where the two disagree, the server wins.
CORPUS_ENV = "GPUGUARD_ADMISSION_CORPUS"


def _truthy(result: Any) -> bool:
    return isinstance(result, bool | celpy.celtypes.BoolType) and bool(result)


@functools.cache
def _program(expression: str) -> celpy.Runner:
    return _ENV.program(_ENV.compile(expression))


def _evaluate(expression: str, activation: dict[str, Any]) -> Any:
    try:
        return _program(expression).evaluate(activation)
    except celpy.CELEvalError as e:
        return e


def refusals(
    policy: dict[str, Any],
    obj: dict[str, Any] | None,
    *,
    username: str,
    old: dict[str, Any] | None = None,
    operation: str = "CREATE",
    params: dict[str, Any] | None = None,
    extra: dict[str, list[str]] | None = None,
) -> list[str] | None:
    """The messages of the validations that refuse ``obj``; None when the policy does not
    match the request (its matchConditions are not all true). ``params``: the object the
    binding's ``paramRef`` names (a policy with a ``paramKind``); ``extra``: the user's extra
    attributes (a pod-bound token's ``authentication.kubernetes.io/node-name``)."""
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "params": celpy.json_to_cel(params),
        "request": celpy.json_to_cel({
            "userInfo": {"username": username, **({"extra": extra} if extra else {})},
            "operation": operation,
        }),
    }
    verdict = _verdict(policy["spec"], activation)
    _record(policy, obj, old, username, operation, params, extra, verdict)
    return verdict


def _verdict(spec: dict[str, Any], activation: dict[str, Any]) -> list[str] | None:
    for condition in spec.get("matchConditions", []):
        if not _truthy(_evaluate(condition["expression"], activation)):
            return NOT_MATCHED
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[variable["name"]] = _evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    return [
        rule["message"]
        for rule in spec["validations"]
        if not _truthy(_evaluate(rule["expression"], activation))
    ]


def _record(policy: dict[str, Any], obj: dict[str, Any] | None, old: dict[str, Any] | None,
            username: str, operation: str, params: dict[str, Any] | None,
            extra: dict[str, list[str]] | None, verdict: list[str] | None) -> None:
    folder = os.environ.get(CORPUS_ENV)
    if not folder:
        return
    case = {"policy": policy["metadata"]["name"], "object": obj, "old": old, "username": username,
            "operation": operation, "params": params, "extra": extra, "refused": verdict,
            "test": os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" ", 1)[0],
            "default_install": _as_installed_by_default(policy)}
    with (Path(folder) / f"cases-{os.getpid()}.jsonl").open("a") as out:
        out.write(json.dumps(case, sort_keys=True) + "\n")


def _as_installed_by_default(policy: dict[str, Any]) -> bool:
    """Whether ``policy`` is the one the chart's default values render (else a test rendered
    it with opt-in values, or changed it)."""
    from tests import chart  # only when recording: rendering the chart runs helm

    installed = [p for p in chart.by_kind("ValidatingAdmissionPolicy")
                 if p["metadata"]["name"] == policy["metadata"]["name"]]  # fmt: skip
    return bool(installed) and installed[0]["spec"] == policy["spec"]


def rule_names(messages: list[str] | None) -> list[str]:
    """``name: text`` messages -> their names."""
    assert messages is not None, "the policy did not match the request"
    return [message.split(":", 1)[0] for message in messages]
