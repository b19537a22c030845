"""gpuguard: keeps Kubernetes GPU clusters healthy.

Detect GPU faults, isolate nodes safely, collect evidence and classify the repair, keep a
per-card fault ledger, validate and return nodes to the pool, and gate new nodes. See
docs/design.md#architecture for the layers: model < catalog/kernlog < policy; sources/actuators;
controller; agent; sim; cli.
"""

__version__ = "0.1.0"
