"""Notifications: tell people what gpuguard did, off by default.

Two formats: ``alertmanager`` posts to Alertmanager's v2 API (``POST /api/v2/alerts``) so the
existing routing, silences and receivers apply; ``json`` posts one generic JSON object to any
webhook. A failing notification never undoes or blocks an action: the caller logs it.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from gpuguard.clients import webhook
from gpuguard.model import decisions


class NotifyFormat(StrEnum):
    ALERTMANAGER = "alertmanager"
    JSON = "json"


ALERT_NAMES = {
    decisions.ActionKind.ISOLATE: "GpuguardNodeIsolated",
    decisions.ActionKind.ISOLATE_GPU: "GpuguardGpuIsolated",
    decisions.ActionKind.UNCORDON: "GpuguardNodeReturned",
}


_WARNINGS = frozenset({decisions.ActionKind.ISOLATE, decisions.ActionKind.ISOLATE_GPU})


def json_payload(action: decisions.Action, now: datetime) -> dict[str, Any]:
    return {
        "source": "gpuguard",
        "event": str(action.kind),
        "node": action.node,
        "reason": str(action.reason),
        "detail": action.detail,
        "at": now.isoformat(),
        "annotations": dict(action.annotations),
        "evidence": [e.describe() for e in action.evidence],
    }


def alertmanager_payload(action: decisions.Action, now: datetime) -> list[dict[str, Any]]:
    """One alert; it resolves by itself after a day (``endsAt``): a notice, not a page loop."""
    name = ALERT_NAMES.get(action.kind, "GpuguardAction")
    return [
        {
            "labels": {
                "alertname": name,
                "node": action.node,
                "reason": str(action.reason),
                "severity": "warning" if action.kind in _WARNINGS else "info",
                "source": "gpuguard",
            },
            "annotations": {
                "summary": f"gpuguard {action.kind} {action.node}: {action.reason}",
                "description": action.detail,
                "evidence": "\n".join(e.describe() for e in action.evidence),
                "runbook": f"gpuguard explain {action.node}",
            },
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(days=1)).isoformat(),
        }
    ]


class WebhookNotifier:
    """Posts each action to one URL in one format."""

    def __init__(
        self,
        url: str,
        fmt: NotifyFormat = NotifyFormat.JSON,
        *,
        client: webhook.Http | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self._url = url
        self._fmt = fmt
        self._client = client or webhook.http(timeout_s)

    def close(self) -> None:
        self._client.close()

    def notify(self, action: decisions.Action, now: datetime) -> None:
        if self._fmt is NotifyFormat.ALERTMANAGER:
            body: Any = alertmanager_payload(action, now)
        else:
            body = json_payload(action, now)
        webhook.post_json(self._client, self._url, body, "notification")
