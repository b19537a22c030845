"""Packaged knowledge (the Xid catalog) and typed loaders with per-cluster overrides.

``xid`` holds the catalog (every Xid 1-172: NVIDIA's facts, gpuguard's class, the repair
verdict per code); ``overrides`` reads a cluster's class override file. ``data/`` is generated
from ``reference/`` by ``scripts/build-xid-catalog``.
"""
