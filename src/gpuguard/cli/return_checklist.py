"""The return-to-pool checklist as ``gpuguard explain`` shows it: every condition, in order.

A human asking "why is gpu-node-b still cordoned?" needs the whole list — the seed's 9/22
return went wrong on a condition nobody was shown — so every condition is rendered, not
the first miss. Pure functions from a ``ReturnDecision`` to plain data (for ``-o json|yaml``)
and from that data to table rows and text lines; printing stays with ``cli/output.py``.
"""

from __future__ import annotations

from typing import Any

from gpuguard.model import return_to_pool

COLUMNS = ("#", "condition", "status", "summary")


def as_data(decision: return_to_pool.ReturnDecision) -> dict[str, Any]:
    """The decision and its checklist as plain, JSON-ready data."""
    return {
        "step": str(decision.step),
        "reason": str(decision.reason),
        "detail": decision.detail,
        "blocking": str(decision.blocking.name) if decision.blocking else None,
        "burnin_mode": str(decision.burnin_mode) if decision.burnin_mode else None,
        "remove_annotations": list(decision.remove_annotations),
        "checks": [
            {
                "n": number,
                "condition": str(check.name),
                "status": str(check.status),
                "summary": check.summary,
                "evidence": [item.describe() for item in check.evidence],
            }
            for number, check in enumerate(decision.checks, start=1)
        ],
    }


def rows(data: dict[str, Any]) -> list[list[str]]:
    """Table rows under ``COLUMNS``, one per condition."""
    return [
        [str(check["n"]), check["condition"], check["status"], check["summary"]]
        for check in data["checks"]
    ]


def lines(data: dict[str, Any]) -> list[str]:
    """The checklist as indented text: the step first, then each condition and its evidence."""
    head = f"return to pool: {data['step']} ({data['reason']}): {data['detail']}"
    body = []
    for check in data["checks"]:
        body.append(
            f"  {check['n']:>2}. [{check['status']}] {check['condition']}: {check['summary']}"
        )
        body.extend(f"        evidence: {item}" for item in check["evidence"])
    return [head, *body]
