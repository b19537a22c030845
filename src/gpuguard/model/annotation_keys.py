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
EVIDENCE_JOB_UID = PREFIX + "evidence-job-uid"  # the uid of the evidence Job gpuguard created
BURNIN_FAILED = PREFIX + "burnin-failed"  # the burn-in key (isolation/boot/reset/...) that failed
BURNIN_JOB_UID = PREFIX + "burnin-job-uid"  # <name>=<uid> of the burn-in Job gpuguard created
GPU_ISOLATED = PREFIX + "gpu-isolated"  # GPUs taken out on a serving node (model.gpu_isolation)
GPU_RETURN = PREFIX + "gpu-return"  # a human's request: return these GPU UUIDs (comma list)
GPU_REQUEST = PREFIX + "gpu-request"  # the drafted request for the isolated GPUs' cards
REMEDIATION = PREFIX + "remediation"  # gpuguard's own repair of this isolation (model.remediation)
DEVICE_PLUGIN_LABEL = PREFIX + "device-plugin"  # node label: the per-node plugin instance
DEVICE_PLUGIN_VISIBLE_LABEL = PREFIX + "device-plugin-visible"  # node label: its GPU indices
FIT_LABEL = PREFIX + "fit-to-train"  # opt-in node label: yes/no (docs/audit.md#health-verdict)
OPERATOR_DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
"""The GPU Operator's operand switch for its device plugin on a node: ``false`` removes the
operator's plugin pod from the node (docs/gpu-isolation.md#gpu-operator)."""

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
    EVIDENCE_JOB_UID,
    BURNIN_FAILED,
    BURNIN_JOB_UID,
    REMEDIATION,
)
"""gpuguard's own marks of one isolation: a new isolation replaces them all, a return removes
them. A human's ``HOLD`` is never among them."""


FIELD_MANAGER = "gpuguard"
"""The field manager of every write gpuguard makes: the API server records it in the object's
``metadata.managedFields`` as the owner of the marks gpuguard wrote."""

GPU_LEVEL = (GPU_ISOLATED, GPU_RETURN, GPU_REQUEST)
"""gpuguard's marks of GPU isolations on a node that keeps serving (docs/gpu-isolation.md):
they outlive a node isolation and are removed only when the last GPU returns."""


def is_gpuguard_key(key: str) -> bool:
    return key.startswith(PREFIX)


FOR_PEOPLE = (HOLD, RESET_DONE, INSPECTED, GATE_REPORT, GPU_RETURN, PREFIX + "change-applied")
"""The keys people write (a hold, a done reset, an inspection, the gate's report written by
`gpuguard gate` under a person's credentials, a request to return isolated GPUs). Every other
``gpuguard.io/`` key is gpuguard's own: the Node admission policy lets only gpuguard's service
account write them. As node labels none is people's: every ``gpuguard.io/`` label is
gpuguard's (the policy's ``node-labels`` rule, docs/security.md). ``change-applied`` is
written by the tool that applies a declared change (or a person): gpuguard only reads it and
checks the result itself (docs/change-management.md#who-writes-what)."""

# Change management (docs/change-management.md): where a node stands in a declared change,
# the request to the tool that applies it, and the tool's (or a person's) "done".
CHANGE = PREFIX + "change"  # gpuguard's: JSON NodeMark (model.change)
CHANGE_REQUESTED = PREFIX + "change-requested"  # gpuguard's: apply change NAME to this node
CHANGE_APPLIED = PREFIX + "change-applied"  # the applying tool's or a person's: NAME done
