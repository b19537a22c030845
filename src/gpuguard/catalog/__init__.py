"""Packaged knowledge (the Xid catalog) and typed loaders with per-cluster overrides."""
