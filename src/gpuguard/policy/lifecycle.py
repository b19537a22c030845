"""A node's lifecycle state, derived — never stored twice (docs/design.md#lifecycle).

From ``spec.unschedulable``, gpuguard's annotations and readiness: gpuguard's own cordon
(isolated), a human's cordon (never touched), onboarding (registration taint, later), or
serving.
"""

from __future__ import annotations

from enum import StrEnum

from gpuguard.model import annotation_keys, change, fleet


class LifecycleState(StrEnum):
    SERVING = "serving"
    ISOLATED = "isolated"
    CORDONED_BY_HUMAN = "cordoned-by-human"
    NOT_READY = "not-ready"
    CHANGING = "changing"  # cordoned for a declared change (docs/change-management.md)


def state_of(node: fleet.Node) -> LifecycleState:
    if node.unschedulable:
        if node.isolated_by_gpuguard:  # marks someone else wrote are not gpuguard's cordon
            return LifecycleState.ISOLATED
        if change.out_for_change(node):
            return LifecycleState.CHANGING
        return LifecycleState.CORDONED_BY_HUMAN
    if not node.ready:
        return LifecycleState.NOT_READY
    return LifecycleState.SERVING


def gpuguard_marks(node: fleet.Node) -> dict[str, str]:
    """gpuguard's annotations on the node, prefix stripped, for display."""
    return {
        key.removeprefix(annotation_keys.PREFIX): value
        for key, value in sorted(node.annotations.items())
        if annotation_keys.is_gpuguard_key(key)
    }
