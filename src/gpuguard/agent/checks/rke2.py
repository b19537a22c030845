"""``rke2-unit`` and ``rke2-version``: does the node run the right RKE2, at the right version?

The lifecycle report (docs/design.md#incidents), the August 7 batch: a worker was left with
rke2-server enabled and, on its next reboot, started a one-node cluster of its own; another ran
kubelet v1.35.7 against a v1.34.3 control plane (outside the version-skew policy, and RKE2's
kube-proxy follows the node).

The node's version is read from disk, not from a command: RKE2 extracts its runtime into
``<data-dir>/data/<tag>-<hash>/`` and points ``<data-dir>/bin`` at the one it runs, so the tag
(``v1.31.4-rke2r1``) is the version of the running kubelet. Without that link a single data
dir is used; several without a link are UNKNOWN.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

from gpuguard.agent.checks import hostfs, result, rke2_config, rke2_release, settings

UNIT = "rke2-unit"
VERSION = "rke2-version"

WANTS_DIR = "etc/systemd/system/multi-user.target.wants"
_UNIT_FOR_ROLE = {settings.NodeRole.WORKER: "rke2-agent", settings.NodeRole.SERVER: "rke2-server"}


def _enabled(root: Path, unit: str) -> bool:
    """Enabled for boot: linked into multi-user.target.wants and not masked."""
    if hostfs.link_target(root, f"etc/systemd/system/{unit}.service") == "/dev/null":
        return False
    return os.path.lexists(hostfs.resolve(root, WANTS_DIR) / f"{unit}.service")


def check_unit(
    root: Path = Path("/"), role: settings.NodeRole = settings.NodeRole.WORKER
) -> result.CheckResult:
    if not hostfs.exists(root, WANTS_DIR):
        raise hostfs.HostReadError(f"{hostfs.shown(WANTS_DIR)}: not found (no systemd?)")
    expected = _UNIT_FOR_ROLE[role]
    (forbidden,) = set(_UNIT_FOR_ROLE.values()) - {expected}
    where = f"({hostfs.shown(WANTS_DIR)})"
    if _enabled(root, forbidden):
        return result.failed(
            UNIT,
            f"{forbidden} is enabled on a {role} node {where}: at the next reboot it starts "
            "instead of joining the cluster as intended",
            f"systemctl disable --now {forbidden} && systemctl enable {expected}",
        )
    if not _enabled(root, expected):
        return result.failed(
            UNIT,
            f"{expected} is not enabled on a {role} node {where}: "
            "it will not rejoin the cluster after a reboot",
            f"systemctl enable {expected}",
        )
    return result.passed(UNIT, f"{expected} enabled, {forbidden} not {where}")


def _release_of_bin_link(root: Path, data_dir: str) -> tuple[str, rke2_release.Rke2Release] | None:
    target = hostfs.link_target(root, f"{data_dir}/bin")
    if target is None:
        return None
    name = PurePosixPath(target).parent.name
    release = rke2_release.from_data_dir_name(name)
    if release is None:
        raise hostfs.HostReadError(f"{hostfs.shown(data_dir)}/bin -> {target}: not a release dir")
    return f"{hostfs.shown(data_dir)}/bin -> {target}", release


def _release_of_only_data_dir(root: Path, data_dir: str) -> tuple[str, rke2_release.Rke2Release]:
    data = f"{data_dir}/data"
    releases = {
        name: release
        for name in hostfs.list_dir(root, data)
        if (release := rke2_release.from_data_dir_name(name)) is not None
    }
    if len(releases) != 1:
        found = ", ".join(releases) or "none"
        raise hostfs.HostReadError(
            f"{hostfs.shown(data)}: cannot tell the running release without the bin link "
            f"(release dirs: {found})"
        )
    ((name, release),) = releases.items()
    return f"{hostfs.shown(data)}/{name}", release


def node_release(root: Path) -> tuple[str, rke2_release.Rke2Release]:
    """(evidence path, release) of the RKE2 runtime this node runs."""
    data_dir = rke2_config.data_dir(rke2_config.load(root)).lstrip("/")
    return _release_of_bin_link(root, data_dir) or _release_of_only_data_dir(root, data_dir)


def check_version(
    root: Path = Path("/"), control_plane: rke2_release.Rke2Release | None = None
) -> result.CheckResult:
    where, node = node_release(root)
    if control_plane is None:
        return result.unknown(
            VERSION, f"node runs {node} ({where}); no --control-plane-version to compare with"
        )
    skew = rke2_release.skew(node, control_plane)
    evidence = f"node {node} ({where}), control plane {control_plane}"
    reinstall = (
        f"curl -sfL https://get.rke2.io | INSTALL_RKE2_VERSION={control_plane} sh - "
        "(then restart rke2-agent or rke2-server)"
    )
    if skew is rke2_release.Skew.MINOR:
        return result.failed(
            VERSION,
            f"{evidence}: minor differs (kubelet and kube-proxy outside the version-skew policy)",
            reinstall,
        )
    if skew is not rke2_release.Skew.SAME:
        return result.warned(VERSION, f"{evidence}: {skew} differs", reinstall)
    return result.passed(VERSION, evidence)
