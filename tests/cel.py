"""Evaluates a ValidatingAdmissionPolicy the way the API server does, with cel-python:
matchConditions first (all true, or the policy does not apply), then its variables in order,
then every validation. A validation that errors counts as refused (failurePolicy Fail).
See https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/."""

from __future__ import annotations

import functools
from typing import Any

import celpy

NOT_MATCHED = None
_ENV = celpy.Environment()


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
    spec = policy["spec"]
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


def rule_names(messages: list[str] | None) -> list[str]:
    """``name: text`` messages -> their names."""
    assert messages is not None, "the policy did not match the request"
    return [message.split(":", 1)[0] for message in messages]
