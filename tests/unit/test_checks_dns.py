"""dns-upstream: the resolv.conf RKE2 hands the kubelet, and only allowed resolvers in it."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from gpuguard.agent.checks import dns, hostfs, settings
from gpuguard.errors import InputError
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree

STUB = ("127.0.0.53",)


@pytest.mark.parametrize(
    ("etc", "systemd", "chosen", "expected"),
    [
        pytest.param(
            STUB,
            ("10.20.0.2", "10.20.0.3"),
            "/run/systemd/resolve/resolv.conf",
            CheckStatus.PASS,
            id="stub-node-uses-systemd-upstreams",
        ),
        pytest.param(
            STUB,
            ("10.20.0.2", "10.20.0.3", "8.8.8.8"),
            "/run/systemd/resolve/resolv.conf",
            CheckStatus.FAIL,
            id="aug7-public-dns-third",
        ),
        pytest.param(
            ("10.20.0.2",),
            ("8.8.8.8",),
            "/etc/resolv.conf",
            CheckStatus.PASS,
            id="non-stub-node-uses-etc",
        ),
        pytest.param(
            ("10.20.0.2", "::1"),
            ("10.20.0.9",),
            "/run/systemd/resolve/resolv.conf",
            CheckStatus.PASS,
            id="ipv6-loopback-skips-etc",
        ),
        pytest.param(
            ("fe80::1",),
            ("10.20.0.9",),
            "/run/systemd/resolve/resolv.conf",
            CheckStatus.PASS,
            id="link-local-skips-etc",
        ),
        pytest.param(
            STUB,
            STUB,
            "/var/lib/rancher/rke2/agent/etc/resolv.conf",
            CheckStatus.FAIL,
            id="both-loopback-rke2-falls-back-to-8888",
        ),
    ],
)
def test_rke2s_choice_of_file_and_allowed_resolvers(
    tmp_path: Path,
    etc: tuple[str, ...],
    systemd: tuple[str, ...],
    chosen: str,
    expected: CheckStatus,
) -> None:
    hosttree.with_resolvers(HostTree(tmp_path), etc=etc, systemd=systemd)
    outcome = dns.check(tmp_path)
    assert outcome.status is expected
    assert chosen in outcome.evidence
    if expected is CheckStatus.FAIL:
        assert "8.8.8.8" in outcome.evidence.rsplit(":", 1)[1]


def test_explicit_allowed_list_narrows_the_default(tmp_path: Path) -> None:
    hosttree.with_resolvers(HostTree(tmp_path), systemd=("10.20.0.2", "192.168.1.1"))
    outcome = dns.check(tmp_path, settings.parse_allowed_dns("10.0.0.0/8"))
    assert outcome.status is CheckStatus.FAIL
    assert outcome.evidence.endswith("192.168.1.1")


def test_explicit_allowed_list_may_allow_a_public_resolver(tmp_path: Path) -> None:
    hosttree.with_resolvers(HostTree(tmp_path), etc=("1.1.1.1",))
    allowed = (ipaddress.ip_network("1.1.1.1/32"),)
    assert dns.check(tmp_path, allowed).status is CheckStatus.PASS


def test_rke2_config_resolv_conf_wins(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_resolvers(tree, etc=("10.20.0.2",))
    tree.write(
        "etc/rancher/rke2/config.yaml", "kubelet-arg:\n  - resolv-conf=/etc/k8s-resolv.conf\n"
    )
    tree.write("etc/k8s-resolv.conf", "nameserver 9.9.9.9\n")
    outcome = dns.check(tmp_path)
    assert outcome.status is CheckStatus.FAIL
    assert "/etc/k8s-resolv.conf" in outcome.evidence


def test_etc_resolv_conf_symlink_into_run_is_followed_inside_the_root(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("run/systemd/resolve/stub-resolv.conf", "nameserver 10.20.0.2\n")
    tree.link("etc/resolv.conf", "/run/systemd/resolve/stub-resolv.conf")
    outcome = dns.check(tmp_path)
    assert outcome.status is CheckStatus.PASS
    assert str(tmp_path) not in outcome.evidence


def test_no_resolv_conf_at_all_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(hostfs.HostReadError, match=r"neither /etc/resolv\.conf"):
        dns.check(tmp_path)


def test_configured_file_without_nameserver_is_unknown(tmp_path: Path) -> None:
    tree = HostTree(tmp_path).write("etc/rancher/rke2/config.yaml", "resolv-conf: /etc/empty\n")
    tree.write("etc/empty", "search corp.example\n")
    assert dns.check(tmp_path).status is CheckStatus.UNKNOWN


@pytest.mark.parametrize("text", ["10.0.0.0/33", "dns.corp", "", " , "])
def test_bad_allowed_dns_names_the_flag(text: str) -> None:
    with pytest.raises(InputError, match="--allowed-dns"):
        settings.parse_allowed_dns(text)
