"""Reading a host mounted at a root: symlinks stay inside it, errors name host paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import hostfs
from tests.unit.hosttree import HostTree


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        pytest.param("/run/systemd/resolve/stub-resolv.conf", "host", id="absolute-link"),
        pytest.param("../run/systemd/resolve/stub-resolv.conf", "host", id="relative-link"),
        pytest.param(
            "../../../../../../run/systemd/resolve/stub-resolv.conf",
            "host",
            id="dotdot-clamped-at-root",
        ),
    ],
)
def test_links_resolve_inside_the_root(tmp_path: Path, target: str, expected: str) -> None:
    tree = HostTree(tmp_path).write("run/systemd/resolve/stub-resolv.conf", expected)
    tree.link("etc/resolv.conf", target)
    assert hostfs.read_text(tmp_path, "etc/resolv.conf") == expected


def test_link_loops_are_errors_not_hangs(tmp_path: Path) -> None:
    HostTree(tmp_path).link("etc/a", "/etc/b").link("etc/b", "/etc/a")
    with pytest.raises(hostfs.HostReadError, match="/etc/a: too many levels"):
        hostfs.read_text(tmp_path, "etc/a")


def test_missing_file_error_names_the_host_path_only(tmp_path: Path) -> None:
    with pytest.raises(hostfs.HostReadError) as caught:
        hostfs.read_text(tmp_path, "proc/swaps")
    assert str(caught.value) == "/proc/swaps: not found"


@pytest.mark.skipif(not Path("/proc/sys/kernel/osrelease").exists(), reason="needs a Linux /proc")
def test_reads_proc_style_files_in_small_chunks() -> None:
    # /proc/sys files answer ENOMEM to one huge read; the real host's osrelease must read.
    assert hostfs.read_text(Path("/"), "proc/sys/kernel/osrelease").strip()
