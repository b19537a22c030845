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
INSPECTED = PREFIX + "inspected"  # a human's timestamp: the card was inspected, history ok
ONBOARDING_TAINT = PREFIX + "onboarding"


def is_gpuguard_key(key: str) -> bool:
    return key.startswith(PREFIX)
