"""The node's RKE2 configuration (``/etc/rancher/rke2/config.yaml``), read-only.

Two checks depend on it: ``rke2-version`` needs ``data-dir`` to find the runtime data, and
``dns-upstream`` honours an explicit ``resolv-conf`` (or ``kubelet-arg: resolv-conf=...``),
which RKE2 uses instead of its own choice. A missing file means RKE2's defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpuguard.agent.checks import hostfs

CONFIG_FILE = "etc/rancher/rke2/config.yaml"
DEFAULT_DATA_DIR = "/var/lib/rancher/rke2"


def load(root: Path) -> dict[str, Any]:
    """config.yaml as a mapping; {} when absent; HostReadError naming it when malformed."""
    if not hostfs.exists(root, CONFIG_FILE):
        return {}
    text = hostfs.read_text(root, CONFIG_FILE)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise hostfs.HostReadError(f"{hostfs.shown(CONFIG_FILE)}: not valid YAML ({e})") from e
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise hostfs.HostReadError(f"{hostfs.shown(CONFIG_FILE)}: not a mapping of options")
    return data


def data_dir(config: dict[str, Any]) -> str:
    value = config.get("data-dir", DEFAULT_DATA_DIR)
    return str(value).rstrip("/") or DEFAULT_DATA_DIR


def resolv_conf_override(config: dict[str, Any]) -> str | None:
    """The resolv.conf given explicitly to RKE2 or the kubelet, None when RKE2 chooses."""
    kubelet_args = config.get("kubelet-arg", [])
    if isinstance(kubelet_args, str):
        kubelet_args = [kubelet_args]
    for arg in reversed([str(arg) for arg in kubelet_args]):
        key, _, value = arg.lstrip("-").partition("=")
        if key == "resolv-conf" and value:
            return value
    explicit = config.get("resolv-conf")
    return str(explicit) if explicit else None
