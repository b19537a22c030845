"""Installed Debian packages and their holds, from dpkg's status database.

``apt-mark hold`` is recorded as the first word of ``Status:`` (``hold ok installed``); it
stops every apt upgrade, unattended or manual. Only ``Package`` and ``Status`` are read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuguard.agent.checks import hostfs

STATUS_FILE = "var/lib/dpkg/status"
_PRESENT_STATES = frozenset(
    {
        "installed",
        "unpacked",
        "half-installed",
        "half-configured",
        "triggers-awaited",
        "triggers-pending",
    }
)


@dataclass(frozen=True, slots=True)
class Package:
    name: str
    want: str
    state: str
    version: str = ""  # the package's Version field (upstream-revision)

    @property
    def installed(self) -> bool:
        return self.state in _PRESENT_STATES

    @property
    def held(self) -> bool:
        return self.want == "hold"


def _fields(stanza: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in stanza.splitlines():
        if line[:1] in (" ", "\t") or ":" not in line:
            continue  # continuation lines of multi-line fields
        key, _, value = line.partition(":")
        fields[key.strip().lower()] = value.strip()
    return fields


def parse_status(text: str) -> list[Package]:
    packages = []
    for stanza in text.split("\n\n"):
        fields = _fields(stanza)
        if "package" not in fields:
            continue
        words = fields.get("status", "").split()
        if len(words) != 3:
            raise hostfs.HostReadError(
                f"{hostfs.shown(STATUS_FILE)}: package {fields['package']} has a malformed "
                f"Status: {fields.get('status', '')!r}"
            )
        packages.append(Package(fields["package"], words[0], words[2], fields.get("version", "")))
    return packages


def installed_packages(root: Path) -> list[Package]:
    return [
        package
        for package in parse_status(hostfs.read_text(root, STATUS_FILE))
        if package.installed
    ]
