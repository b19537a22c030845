"""Notifications reach a webhook in Alertmanager's or a generic JSON shape; failures are
typed errors the loop logs, never lost actions."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import httpx
import pytest

from gpuguard.actuators import notify
from gpuguard.controller import tick
from gpuguard.errors import GpuguardError
from gpuguard.model import decisions, fleet, settings
from gpuguard.model import metric_names as names
from tests import fakes

NOW = datetime(2026, 9, 21, 5, 53, 30, tzinfo=UTC)
ACTION = decisions.Action(
    kind=decisions.ActionKind.ISOLATE,
    node="gpu-node-b",
    reason=decisions.Reason.FAST_PATH,
    evidence=(decisions.Evidence("DCGM_FI_DEV_XID_ERRORS{gpu=4}", "79", NOW),),
    annotations={"gpuguard.io/reason": "xid-79"},
    detail="xid-79 on GPU 4",
)


def capture(status: int = 200) -> tuple[httpx.Client, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, text="ok" if status < 300 else "nope")

    return httpx.Client(transport=httpx.MockTransport(handler)), seen


def test_alertmanager_format_posts_one_alert_with_labels_and_evidence() -> None:
    client, seen = capture()
    notify.WebhookNotifier(
        "http://am:9093/api/v2/alerts", notify.NotifyFormat.ALERTMANAGER, client=client
    ).notify(ACTION, NOW)
    (alert,) = json.loads(seen[0].content)
    assert alert["labels"]["alertname"] == "GpuguardNodeIsolated"
    assert alert["labels"]["node"] == "gpu-node-b"
    assert "79" in alert["annotations"]["evidence"]
    assert alert["startsAt"] == NOW.isoformat()


def test_json_format_carries_reason_annotations_and_evidence() -> None:
    client, seen = capture()
    notify.WebhookNotifier("http://hook", client=client).notify(ACTION, NOW)
    body = json.loads(seen[0].content)
    assert (body["event"], body["node"], body["reason"]) == ("isolate", "gpu-node-b", "fast-path")
    assert body["annotations"] == {"gpuguard.io/reason": "xid-79"}


def test_a_refused_notification_is_a_typed_error() -> None:
    client, _ = capture(status=500)
    with pytest.raises(GpuguardError, match="HTTP 500"):
        notify.WebhookNotifier("http://hook", client=client).notify(ACTION, NOW)


class Recorder:
    def __init__(self, error: Exception | None = None) -> None:
        self.sent: list[str] = []
        self.error = error

    def notify(self, action: decisions.Action, now: datetime) -> None:
        if self.error:
            raise self.error
        self.sent.append(action.node)


class Classifier:
    def is_hardware(self, code: int) -> bool:
        return True


@pytest.mark.parametrize("error", [None, GpuguardError("webhook down")], ids=["ok", "down"])
def test_the_guard_notifies_after_isolating_and_survives_a_failed_notice(
    error: Exception | None,
) -> None:
    node = fleet.Node("gpu-node-b", "b", 8, 7, conditions={"Ready": "True"})
    xid = fleet.MetricSample(names.DCGM_XID_LAST, {"Hostname": "gpu-node-b", "gpu": "4"}, 79, NOW)
    recorder = Recorder(error)
    guard = tick.Guard(
        metrics=fakes.FakeMetrics([xid]),
        cluster=fakes.FakeCluster([node]),
        writer=fakes.FakeWriter(),
        classifier=Classifier(),
        settings=settings.GuardSettings(),
        clock=fakes.FakeClock(NOW),
        notifier=recorder,
    )
    result = guard.tick()
    assert [a.node for a in result.applied] == ["gpu-node-b"]
    assert recorder.sent == ([] if error else ["gpu-node-b"])


def test_a_gpu_isolation_is_a_warning_of_its_own() -> None:
    action = decisions.Action(
        kind=decisions.ActionKind.ISOLATE_GPU,
        node="gpu-node-a",
        reason=decisions.Reason.HARDWARE_XID_WITH_GPU_LOSS,
        detail="GPU 1 out, the node keeps serving",
    )
    (alert,) = notify.alertmanager_payload(action, datetime(2026, 8, 10, tzinfo=UTC))
    assert alert["labels"]["alertname"] == "GpuguardGpuIsolated"
    assert alert["labels"]["severity"] == "warning"
