"""What the checks need to know about the cluster, validated once at start.

The node role, the control plane's RKE2 version and the DNS resolvers the site allows are not
on the host: the CLI flags (or the agent's configuration) supply them. Parsing lives here so
the CLI and the agent reject the same bad values with the same message.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpuguard import errors
from gpuguard.agent.checks import rke2_release

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# Private and carrier-grade NAT ranges plus IPv6 ULA: a site's own resolvers live here, a
# public resolver (8.8.8.8, the seed's CoreDNS pollution) does not.
PRIVATE_RESOLVER_NETWORKS: tuple[Network, ...] = tuple(
    ipaddress.ip_network(cidr)
    for cidr in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "fc00::/7")
)

DEFAULT_CHECK_TIMEOUT_S = 10.0


class NodeRole(StrEnum):
    """Which RKE2 unit the node must run: ``worker`` runs rke2-agent, ``server`` rke2-server."""

    WORKER = "worker"
    SERVER = "server"


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """Inputs of the checks that the host cannot tell us."""

    role: NodeRole = NodeRole.WORKER
    """The role the node is meant to have; GPU nodes are workers."""

    control_plane_version: rke2_release.Rke2Release | None = None
    """The control plane's RKE2 version; ``None`` makes ``rke2-version`` UNKNOWN."""

    allowed_dns: tuple[Network, ...] | None = None
    """Resolvers the kubelet may hand to pods; ``None`` means the private ranges."""

    check_timeout_s: float = DEFAULT_CHECK_TIMEOUT_S
    """Hard limit for one check (and its commands); past it the check is UNKNOWN."""

    driver_version: str | None = None
    """The declared NVIDIA driver (``580.159.03``); ``package-pin`` reports installed NVIDIA
    packages of another version as drift (docs/change-management.md)."""

    kernel_version: str | None = None
    """The declared kernel release (``6.8.0-60-generic``); an installed newer kernel image,
    which boots next, or the declared one missing is drift."""

    declared_dir: Path | None = None
    """A directory whose ``driver``/``kernel`` files, read at each run, override the two above
    (the chart's ConfigMap ``gpuguard-agent-declared``)."""


def parse_allowed_dns(text: str) -> tuple[Network, ...]:
    """``"10.0.0.0/8,192.168.1.53"`` → networks; InputError naming the bad entry."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    if not entries:
        raise errors.InputError("--allowed-dns: empty list of CIDRs")
    networks: list[Network] = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as e:
            raise errors.InputError(f"--allowed-dns: {entry!r} is not a CIDR ({e})") from e
    return tuple(networks)


# A Debian version or kernel release: what dpkg and uname print, nothing a shell would read.
_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.+:~_-]{0,63}$")


def declared_versions(checks: CheckSettings) -> tuple[str | None, str | None]:
    """The declared (driver, kernel), read now from ``declared_dir``'s ``driver`` and
    ``kernel`` files when it is set: a mounted ConfigMap, which the kubelet refreshes in place,
    so a new declaration reaches the agent at its next check run without a restart
    (docs/change-management.md#declared-versions). A missing or empty file keeps the flag's
    value; InputError names a file that holds no version (the check is then UNKNOWN)."""
    if checks.declared_dir is None:
        return checks.driver_version, checks.kernel_version
    return (
        _declared(checks.declared_dir / "driver") or checks.driver_version,
        _declared(checks.declared_dir / "kernel") or checks.kernel_version,
    )


def _declared(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise errors.InputError(f"{path}: unreadable declared version ({e})") from e
    if text and not _VERSION.match(text):
        raise errors.InputError(f"{path}: {text[:80]!r} is not a package version")
    return text or None
