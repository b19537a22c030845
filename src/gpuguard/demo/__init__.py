"""Runs scenarios with the guard attached and scores it: the world (``gpuguard.sim``) on one
side, the real guard (policy, lightkube adapters over HTTP, node writer) on the other."""
