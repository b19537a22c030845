"""``auto-upgrade`` and ``package-pin``: can the OS change the kernel or NVIDIA driver alone?

The lifecycle report (docs/design.md#incidents) (May 21, again July 25): unattended-upgrades
installed a new driver and kernel on GPU nodes; NVML broke before the reboot and ip_vs was missing
after it. ``auto-upgrade`` only reports the periodic run (WARN, never FAIL: the seed's site had no
policy yet). ``package-pin`` checks that, while it runs, every installed kernel and NVIDIA package
is held (``apt-mark hold``) or matched by ``Unattended-Upgrade::Package-Blacklist``. The blacklist
entries are Python regexes applied with ``re.match`` — anchored at the start of the name only —
exactly as unattended-upgrades applies them: ``"nvidia-"`` does not protect ``libnvidia-*``,
and ``"linux-"`` also freezes ``linux-firmware`` and ``linux-libc-dev`` (WARN: over-broad).
"""

from __future__ import annotations

import re
from pathlib import Path

from gpuguard.agent.checks import apt_config, dpkg, hostfs, result

AUTO_UPGRADE = "auto-upgrade"
PACKAGE_PIN = "package-pin"

PERIODIC_KEY = "APT::Periodic::Unattended-Upgrade"
ENABLE_KEY = "APT::Periodic::Enable"
BLACKLIST_KEY = "Unattended-Upgrade::Package-Blacklist"
BLACKLIST_FILE = "/etc/apt/apt.conf.d/50unattended-upgrades"
KERNEL_PREFIXES = (
    "linux-image-",
    "linux-modules-",
    "linux-headers-",
    "linux-objects-",
    "linux-signatures-",
    "linux-generic",
)
# The blacklist entry to suggest for an unprotected package, most specific first.
SUGGESTED_ENTRIES = (
    "libnvidia-",
    "nvidia-",
    "xserver-xorg-video-nvidia-",
    "linux-modules-nvidia-",
    "linux-objects-nvidia-",
    "linux-signatures-nvidia-",
    *KERNEL_PREFIXES,
)
MAX_NAMES_SHOWN = 8


def is_kernel_or_nvidia(name: str) -> bool:
    return name.startswith(KERNEL_PREFIXES) or "nvidia" in name


def periodic_run(config: apt_config.AptConfig) -> tuple[bool, str]:
    """(is the periodic unattended-upgrade on, evidence naming the setting and its file)."""
    enable = config.scalar(ENABLE_KEY)
    if enable is not None and enable[0].strip() == "0":
        return False, f'{ENABLE_KEY} "0" ({enable[1]}): all periodic APT jobs are off'
    setting = config.scalar(PERIODIC_KEY)
    if setting is None:
        return False, f"{PERIODIC_KEY} not set in any of {len(config.files)} APT files"
    value, source = setting
    return value.strip() not in ("", "0"), f'{PERIODIC_KEY} "{value}" ({source})'


def check_auto_upgrade(root: Path = Path("/")) -> result.CheckResult:
    enabled, evidence = periodic_run(apt_config.load(root))
    if not enabled:
        return result.passed(AUTO_UPGRADE, f"unattended-upgrades periodic run is off: {evidence}")
    return result.warned(
        AUTO_UPGRADE,
        f"unattended-upgrades runs on its own: {evidence}; a kernel or NVIDIA driver update "
        "breaks NVML until reboot (see package-pin)",
        f'set {PERIODIC_KEY} "0" in /etc/apt/apt.conf.d/20auto-upgrades, or keep it and hold '
        "or blacklist the kernel and NVIDIA packages",
    )


def _compile(entries: list[str]) -> list[re.Pattern[str]]:
    patterns = []
    for entry in entries:
        try:
            patterns.append(re.compile(entry))
        except re.error as e:
            raise hostfs.HostReadError(
                f"{BLACKLIST_KEY} entry {entry!r} is not a valid regex ({e})"
            ) from e
    return patterns


def _names(packages: list[dpkg.Package]) -> str:
    names = sorted({package.name for package in packages})
    more = len(names) - MAX_NAMES_SHOWN
    return ", ".join(names[:MAX_NAMES_SHOWN]) + (f" and {more} more" if more > 0 else "")


def _suggested_entries(packages: list[dpkg.Package]) -> list[str]:
    suggestions = []
    for package in packages:
        entry = next((e for e in SUGGESTED_ENTRIES if package.name.startswith(e)), package.name)
        if entry not in suggestions:
            suggestions.append(entry)
    return suggestions


def _unprotected_result(
    unprotected: list[dpkg.Package], entries: list[str], source: str
) -> result.CheckResult:
    blacklist = ", ".join(f'"{entry}"' for entry in entries) or "empty"
    suggestions = " ".join(f'"{entry}";' for entry in _suggested_entries(unprotected))
    return result.failed(
        PACKAGE_PIN,
        f"unattended-upgrades is on: {source}; these kernel/NVIDIA packages are neither held "
        f"nor blacklisted: {_names(unprotected)} (Package-Blacklist: {blacklist}; entries match "
        'from the start of the name only, so "nvidia-" does not cover libnvidia-*)',
        f"apt-mark hold {' '.join(sorted({p.name for p in unprotected}))}, or add "
        f"{suggestions} to {BLACKLIST_KEY} in {BLACKLIST_FILE}",
    )


def _over_broad(
    patterns: list[re.Pattern[str]], packages: list[dpkg.Package]
) -> dict[str, list[dpkg.Package]]:
    """Blacklist entries that also freeze installed packages outside kernel/NVIDIA."""
    others = [package for package in packages if not is_kernel_or_nvidia(package.name)]
    caught = {pattern.pattern: [p for p in others if pattern.match(p.name)] for pattern in patterns}
    return {entry: hits for entry, hits in caught.items() if hits}


def check_package_pin(
    root: Path = Path("/"), driver: str | None = None, kernel: str | None = None
) -> result.CheckResult:
    """Pinned, and — when a driver or kernel is declared — at the declared versions."""
    if driver or kernel:
        drift = package_drift(dpkg.installed_packages(root), driver, kernel)
        if drift:
            return result.failed(
                PACKAGE_PIN,
                f"drift from the declared versions: {'; '.join(drift)}",
                "roll out the declared change (docs/change-management.md) or correct the "
                "declaration; then hold the packages (apt-mark hold)",
            )
    return _pinned(root)


_NVIDIA_VERSION = re.compile(r"^(\d{3}\.\d+(?:\.\d+)?)")
_KERNEL_IMAGE = "linux-image-"


def package_drift(
    packages: list[dpkg.Package], driver: str | None, kernel: str | None
) -> list[str]:
    """What differs from the declared versions: NVIDIA packages of another driver version,
    the declared kernel image missing or a newer one installed (it boots next)."""
    drift = []
    if driver:
        for p in packages:
            m = _NVIDIA_VERSION.match(p.version) if "nvidia" in p.name else None
            if m and m[1] != driver:
                drift.append(f"{p.name} {p.version} (declared {driver})")
    if kernel:
        images = [p.name.removeprefix(_KERNEL_IMAGE) for p in packages
                  if p.name.startswith(_KERNEL_IMAGE) and p.name[len(_KERNEL_IMAGE)].isdigit()]
        if kernel not in images:
            drift.append(f"kernel image {_KERNEL_IMAGE}{kernel} not installed "
                         f"(installed: {', '.join(sorted(images)) or 'none'})")
        newer = [i for i in images if _release_key(i) > _release_key(kernel)]
        if newer:
            drift.append(f"newer kernel image(s) {', '.join(sorted(newer))} boot next "
                         f"(declared {kernel})")
    return drift


def _release_key(release: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", release))


def _pinned(root: Path) -> result.CheckResult:
    config = apt_config.load(root)
    enabled, evidence = periodic_run(config)
    if not enabled:
        return result.passed(
            PACKAGE_PIN,
            f"unattended-upgrades periodic run is off ({evidence}); nothing upgrades on its own",
        )
    packages = dpkg.installed_packages(root)
    critical = [package for package in packages if is_kernel_or_nvidia(package.name)]
    entries = config.items(BLACKLIST_KEY)
    patterns = _compile(entries)
    unprotected = [
        package
        for package in critical
        if not package.held and not any(pattern.match(package.name) for pattern in patterns)
    ]
    if unprotected:
        return _unprotected_result(unprotected, entries, evidence)
    over_broad = _over_broad(patterns, packages)
    if over_broad:
        detail = "; ".join(
            f'"{entry}" also freezes {_names(hits)}' for entry, hits in over_broad.items()
        )
        return result.warned(
            PACKAGE_PIN,
            f"all {len(critical)} kernel/NVIDIA packages are held or blacklisted, but {detail} "
            "(their security updates stop too)",
            f"narrow the entries in {BLACKLIST_FILE}, e.g. "
            + " ".join(
                f'"{entry}";'
                for entry in ("linux-image-", "linux-modules-", "linux-headers-", "linux-generic")
            ),
        )
    return result.passed(
        PACKAGE_PIN,
        f"all {len(critical)} kernel/NVIDIA packages are held or blacklisted ({evidence})",
    )
