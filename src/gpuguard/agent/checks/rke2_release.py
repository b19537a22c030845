"""RKE2 release strings (``v1.31.4+rke2r1``) and how far apart two of them are.

The seed's rule for ``rke2-version``: a different minor than the control plane is outside the
Kubernetes version-skew policy for kubelet and kube-proxy (FAIL); a different patch or RKE2
build is drift worth a WARN; identical is PASS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from gpuguard import errors

_RELEASE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:[+-]rke2r(\d+))?$")
# The runtime image tag in a data dir name: v1.31.4-rke2r1-<12 hex of the image reference>.
_DATA_DIR = re.compile(r"^(v\d+\.\d+\.\d+-rke2r\d+)-[0-9a-f]+$")


class Skew(StrEnum):
    SAME = "same"
    BUILD = "build"
    PATCH = "patch"
    MINOR = "minor"


@dataclass(frozen=True, slots=True, order=True)
class Rke2Release:
    major: int
    minor: int
    patch: int
    build: int | None = None

    def __str__(self) -> str:
        build = f"+rke2r{self.build}" if self.build is not None else ""
        return f"v{self.major}.{self.minor}.{self.patch}{build}"


def parse(text: str) -> Rke2Release:
    """``v1.31.4+rke2r1``, ``v1.31.4-rke2r1``, ``1.31.4`` → Rke2Release; InputError otherwise."""
    match = _RELEASE.match(text.strip())
    if match is None:
        raise errors.InputError(f"{text!r} is not an RKE2 version like v1.31.4+rke2r1")
    major, minor, patch, build = match.groups()
    return Rke2Release(int(major), int(minor), int(patch), int(build) if build else None)


def from_data_dir_name(name: str) -> Rke2Release | None:
    """The release of an RKE2 data dir (``v1.31.4-rke2r1-0123abcd4567``), None if not one."""
    match = _DATA_DIR.match(name)
    return parse(match.group(1)) if match else None


def skew(node: Rke2Release, control_plane: Rke2Release) -> Skew:
    """How far the node's release is from the control plane's."""
    if (node.major, node.minor) != (control_plane.major, control_plane.minor):
        return Skew.MINOR
    if node.patch != control_plane.patch:
        return Skew.PATCH
    if control_plane.build is not None and node.build != control_plane.build:
        return Skew.BUILD
    return Skew.SAME
