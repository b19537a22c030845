"""Host conformance checks (docs/design.md#host-conformance-and-onboarding): one small module per
check family.

Every check reads a host tree under ``root: Path`` (``/`` on the host, ``/host`` in the agent
DaemonSet, a fixture tree in tests) and returns a :class:`result.CheckResult`. The entry point
for callers (CLI, agent, onboarding gate) is :func:`running.run_checks`.
"""
