"""Evidence collection on an isolated node (docs/design.md#evidence-and-verdict): what the evidence
Job runs.

It reads, never writes: the kernel log's Xid events, each NVIDIA GPU's PCI config space and link
from sysfs, the upstream root port's AER counters and, only when the driver looks responsive,
``nvidia-smi -q``. ``collect.collect`` assembles a ``model.evidence.EvidenceBundle`` and the
verdict ``policy.verdict`` draws from it. Every host path is read under a ``root`` (``/host`` in
the Job) without following a link out of it.
"""
