"""The ``gpuguard.io/`` annotation and taint keys: gpuguard's only durable marks on a Node.

A cordoned node without ``ISOLATED_AT`` is a human's cordon and is never touched.
"""

from __future__ import annotations

PREFIX = "gpuguard.io/"
REASON = PREFIX + "reason"
ISOLATED_AT = PREFIX + "isolated-at"
BOOT_ID = PREFIX + "boot-id"
GPU_CAPACITY = PREFIX + "gpu-capacity"
GPU_UUID = PREFIX + "gpu-uuid"
GPU_PCI = PREFIX + "gpu-pci"
VERDICT = PREFIX + "verdict"
HOLD = PREFIX + "hold"
RESET_DONE = PREFIX + "reset-done"
RETURN_FAILED = PREFIX + "return-failed"
REQUEST = PREFIX + "request"  # the drafted request for the infra team (recovery)
ESCALATION = PREFIX + "escalation"  # none / inspection / replacement / slot-check
INSPECTED = PREFIX + "inspected"  # a human's timestamp: the card was inspected, history ok
ONBOARDING_TAINT = PREFIX + "onboarding"
GATE_REPORT = PREFIX + "gate-report"  # the onboarding gate's last report (JSON)
BURNIN_NODE_LABEL = PREFIX + "burnin-node"  # on a burn-in Job: the node it burns in
WITHHELD = PREFIX + "withheld"  # a fault the breaker withheld, pending (model.withheld)
EVIDENCE_STARTED = PREFIX + "evidence-started"  # the isolation its evidence Job was made for
BURNIN_FAILED = PREFIX + "burnin-failed"  # the burn-in key (isolation/boot/reset/...) that failed

PER_ISOLATION = (
    REASON,
    ISOLATED_AT,
    BOOT_ID,
    GPU_CAPACITY,
    GPU_UUID,
    GPU_PCI,
    VERDICT,
    REQUEST,
    ESCALATION,
    RETURN_FAILED,
    WITHHELD,
    EVIDENCE_STARTED,
    BURNIN_FAILED,
)
"""gpuguard's own marks of one isolation: a new isolation replaces them all, a return removes
them. A human's ``HOLD`` is never among them."""


FIELD_MANAGER = "gpuguard"
"""The field manager of every write gpuguard makes: the API server records it in the object's
``metadata.managedFields`` as the owner of the marks gpuguard wrote."""


def is_gpuguard_key(key: str) -> bool:
    return key.startswith(PREFIX)
