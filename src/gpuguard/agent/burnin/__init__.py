"""The burn-in a validation Job runs on an isolated node before it returns to the pool.

A square matmul on every visible GPU at once (or a memory test for memory-class faults),
measured by shared code over a small device backend (PyTorch CUDA when available; a pure-Python
CPU backend for tests only), judged by ``gpuguard.policy.burnin``.
"""
