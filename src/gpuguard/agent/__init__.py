"""Node side: kernel-log Xid watcher, host conformance checks, evidence collection, burn-in.
Every check takes a root: Path.
"""
