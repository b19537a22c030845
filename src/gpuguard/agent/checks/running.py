"""Run every conformance check with a hard time limit; one broken check never stops the rest.

This is the API the CLI, the agent DaemonSet and the onboarding gate call. Each check runs in
a daemon thread joined with the settings' timeout: a read that blocks (a hung mount, a stuck
sysfs file) yields UNKNOWN instead of hanging the agent, and any exception becomes UNKNOWN with
the error as evidence — never PASS.
"""

from __future__ import annotations

import threading
from pathlib import Path

from gpuguard import errors
from gpuguard.agent.checks import registry, result, settings
from gpuguard.model import ports


def run_checks(
    root: Path,
    settings: settings.CheckSettings,
    runner: ports.CommandRunner,
    fix: bool = False,
    extra: tuple[registry.Check, ...] = (),
) -> list[result.CheckResult]:
    """All checks in report order, then ``extra`` (e.g. ``registry.GPU_STATE_CHECKS``).
    Only ipvs-persist and ipvs-loaded act on ``fix``."""
    context = registry.CheckContext(root=root, settings=settings, runner=runner, fix=fix)
    return [run_one(check, context) for check in (*registry.CHECKS, *extra)]


def run_one(check: registry.Check, context: registry.CheckContext) -> result.CheckResult:
    outcome: list[result.CheckResult] = []
    failure: list[Exception] = []

    def target() -> None:
        try:
            outcome.append(check.run(context))
        except Exception as e:  # any failure of a check is UNKNOWN, by design
            failure.append(e)

    thread = threading.Thread(target=target, name=f"check-{check.name}", daemon=True)
    thread.start()
    thread.join(context.settings.check_timeout_s)
    if thread.is_alive():
        return result.unknown(
            check.name, f"timed out after {context.settings.check_timeout_s:g}s (abandoned)"
        )
    if failure:
        return result.unknown(check.name, describe_error(failure[0], context.root))
    return outcome[0]


def describe_error(error: Exception, root: Path) -> str:
    """The error as evidence, with the root prefix removed from any path it mentions."""
    text = (
        str(error)
        if isinstance(error, errors.GpuguardError)
        else (f"{type(error).__name__}: {error}")
    )
    return text if root == Path("/") else text.replace(str(root).rstrip("/"), "")
