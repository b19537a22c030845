"""``dns-upstream``: are the resolvers the kubelet hands to pods all allowed?

The lifecycle report (docs/design.md#incidents) (August): two onboarded nodes had a public resolver
in ``/run/systemd/resolve/resolv.conf``; CoreDNS replicas on them (``dnsPolicy: Default``)
inherited it and answered internal registry names with public records. The check reads the file
the kubelet really uses, by RKE2's rule: an explicit ``resolv-conf`` in
``/etc/rancher/rke2/config.yaml`` (or ``kubelet-arg: resolv-conf=...``); else the first of
``/etc/resolv.conf`` and ``/run/systemd/resolve/resolv.conf`` whose nameservers are all global
unicast (no loopback such as the 127.0.0.53 stub, no link-local) and that has at least one; else
RKE2 writes ``<data-dir>/agent/etc/resolv.conf`` with 8.8.8.8. Every nameserver must lie in the
allowed networks (default: private ranges).
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from gpuguard.agent.checks import hostfs, result, rke2_config, settings

NAME = "dns-upstream"

CANDIDATES = ("etc/resolv.conf", "run/systemd/resolve/resolv.conf")
RKE2_FALLBACK_NAMESERVER = "8.8.8.8"
_NAMESERVER = re.compile(r"^nameserver\s+(\S*)")

Choice = tuple[str, list[str], str]  # (host path, nameservers, how RKE2 came to use it)


def nameservers(text: str) -> list[str]:
    return [match.group(1) for line in text.splitlines() if (match := _NAMESERVER.match(line))]


def _global_unicast(address: str) -> bool:
    """Go's net.IP.IsGlobalUnicast, which RKE2 applies; unparsable addresses are not."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    broadcast = ip == ipaddress.IPv4Address("255.255.255.255")
    return not (
        ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified or broadcast
    )


def _rke2_would_use(root: Path, rel: str) -> tuple[list[str], str]:
    """(nameservers, "") if RKE2 would use this file, else ([], why not) — as RKE2 decides."""
    try:
        servers = nameservers(hostfs.read_text(root, rel))
    except hostfs.HostReadError as e:
        return [], str(e)
    bad = [server for server in servers if not _global_unicast(server)]
    if bad:
        return [], f"{hostfs.shown(rel)} has non-global nameserver {', '.join(bad)}"
    if not servers:
        return [], f"{hostfs.shown(rel)} has no nameserver"
    return servers, ""


def _rke2_fallback(root: Path, config: dict[str, Any], skipped: list[str]) -> Choice:
    """Neither candidate is usable: RKE2 writes <data-dir>/agent/etc/resolv.conf (8.8.8.8)."""
    if not any(hostfs.exists(root, rel) for rel in CANDIDATES):
        raise hostfs.HostReadError(
            f"neither {' nor '.join(hostfs.shown(r) for r in CANDIDATES)} exists"
        )
    generated = f"{rke2_config.data_dir(config).lstrip('/')}/agent/etc/resolv.conf"
    servers = (
        nameservers(hostfs.read_text(root, generated))
        if hostfs.exists(root, generated)
        else [RKE2_FALLBACK_NAMESERVER]
    )
    return hostfs.shown(generated), servers, f"RKE2's fallback ({'; '.join(skipped)})"


def kubelet_resolv_conf(root: Path) -> Choice:
    """(host path, nameservers, how it was chosen) of the kubelet's resolv.conf, by RKE2's rule."""
    config = rke2_config.load(root)
    override = rke2_config.resolv_conf_override(config)
    if override:
        servers = nameservers(hostfs.read_text(root, override))
        return hostfs.shown(override), servers, f"set in {hostfs.shown(rke2_config.CONFIG_FILE)}"
    skipped: list[str] = []
    for rel in CANDIDATES:
        servers, why_not = _rke2_would_use(root, rel)
        if servers:
            how = f"skipped: {'; '.join(skipped)}" if skipped else "RKE2's first choice"
            return hostfs.shown(rel), servers, how
        skipped.append(why_not)
    return _rke2_fallback(root, config, skipped)


def _outside(servers: list[str], allowed: tuple[settings.Network, ...]) -> list[str]:
    outside = []
    for server in servers:
        try:
            ip = ipaddress.ip_address(server)
        except ValueError:
            outside.append(server)
            continue
        if not any(ip.version == net.version and ip in net for net in allowed):
            outside.append(server)
    return outside


def check(
    root: Path = Path("/"), allowed: tuple[settings.Network, ...] | None = None
) -> result.CheckResult:
    allowed_networks = settings.PRIVATE_RESOLVER_NETWORKS if allowed is None else allowed
    allowed_text = ", ".join(str(net) for net in allowed_networks)
    if allowed is None:
        allowed_text = f"default private ranges {allowed_text}"
    path, servers, how = kubelet_resolv_conf(root)
    if not servers:
        return result.unknown(NAME, f"kubelet resolv.conf {path} ({how}) lists no nameserver")
    evidence = f"kubelet resolv.conf {path} ({how}): nameservers {', '.join(servers)}"
    outside = _outside(servers, allowed_networks)
    if outside:
        return result.failed(
            NAME,
            f"{evidence}; outside the allowed networks ({allowed_text}): {', '.join(outside)}",
            "fix the node's resolver source (netplan, systemd-resolved, DHCP) rather than the "
            "generated file, then restart rke2-agent so the kubelet rereads it",
        )
    return result.passed(NAME, f"{evidence}; all within {allowed_text}")
