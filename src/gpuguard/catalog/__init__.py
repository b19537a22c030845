"""Packaged knowledge (the Xid catalog) and typed loaders with per-cluster overrides.

``xid`` holds the catalog (every Xid 1-172: NVIDIA's facts, gpuguard's class, the repair
verdict per code); ``events`` the per-event rules (NVLink5 decode, register bits, reset flags,
promotions); ``dcgm_fields`` the dcgm-exporter fields gpuguard reads; ``overrides`` reads a
cluster's override file. ``data/`` is generated from ``reference/`` by
``scripts/build-xid-catalog``.
"""
