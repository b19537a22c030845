"""rke2-unit and rke2-version: the right service for the role, the control plane's version."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import hostfs, rke2, rke2_release
from gpuguard.agent.checks.settings import NodeRole
from gpuguard.errors import InputError
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree


@pytest.mark.parametrize(
    ("role", "enabled", "expected"),
    [
        pytest.param(NodeRole.WORKER, ["rke2-agent"], CheckStatus.PASS, id="worker-agent"),
        pytest.param(
            NodeRole.WORKER,
            ["rke2-agent", "rke2-server"],
            CheckStatus.FAIL,
            id="aug7-worker-with-server-left-enabled",
        ),
        pytest.param(NodeRole.WORKER, ["rke2-server"], CheckStatus.FAIL, id="worker-only-server"),
        pytest.param(NodeRole.WORKER, [], CheckStatus.FAIL, id="worker-nothing-enabled"),
        pytest.param(NodeRole.SERVER, ["rke2-server"], CheckStatus.PASS, id="server-server"),
        pytest.param(NodeRole.SERVER, ["rke2-agent"], CheckStatus.FAIL, id="wrong-role-given"),
    ],
)
def test_unit_matches_the_role(
    tmp_path: Path, role: NodeRole, enabled: list[str], expected: CheckStatus
) -> None:
    hosttree.with_units(HostTree(tmp_path), *enabled)
    outcome = rke2.check_unit(tmp_path, role)
    assert outcome.status is expected
    if expected is CheckStatus.FAIL:
        assert outcome.fix is not None
        assert "systemctl" in outcome.fix


def test_masked_server_unit_is_not_enabled(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_units(tree, "rke2-agent", "rke2-server")
    tree.link("etc/systemd/system/rke2-server.service", "/dev/null")
    assert rke2.check_unit(tmp_path, NodeRole.WORKER).status is CheckStatus.PASS


def test_unit_without_systemd_dirs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(hostfs.HostReadError, match=r"multi-user\.target\.wants"):
        rke2.check_unit(tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("v1.31.4+rke2r1", rke2_release.Rke2Release(1, 31, 4, 1), id="release"),
        pytest.param("v1.31.4-rke2r2", rke2_release.Rke2Release(1, 31, 4, 2), id="image-tag"),
        pytest.param("1.31.4", rke2_release.Rke2Release(1, 31, 4), id="bare"),
    ],
)
def test_release_spellings(text: str, expected: rke2_release.Rke2Release) -> None:
    assert rke2_release.parse(text) == expected


@pytest.mark.parametrize("text", ["v1.31", "latest", "v1.31.4+k3s1", ""])
def test_bad_release_is_an_input_error_naming_it(text: str) -> None:
    with pytest.raises(InputError, match="not an RKE2 version"):
        rke2_release.parse(text)


CONTROL_PLANE = rke2_release.parse("v1.31.4+rke2r1")


@pytest.mark.parametrize(
    ("node_dir", "expected"),
    [
        pytest.param("v1.31.4-rke2r1-3f1c2d4e5a6b", CheckStatus.PASS, id="same"),
        pytest.param("v1.31.5-rke2r1-0a1b2c3d4e5f", CheckStatus.WARN, id="oct14-patch-ahead"),
        pytest.param("v1.31.4-rke2r2-0a1b2c3d4e5f", CheckStatus.WARN, id="rke2-build-differs"),
        pytest.param("v1.32.0-rke2r1-0a1b2c3d4e5f", CheckStatus.FAIL, id="aug7-minor-ahead"),
        pytest.param("v1.30.9-rke2r1-0a1b2c3d4e5f", CheckStatus.FAIL, id="minor-behind"),
    ],
)
def test_version_skew_against_the_control_plane(
    tmp_path: Path, node_dir: str, expected: CheckStatus
) -> None:
    hosttree.with_rke2_runtime(HostTree(tmp_path), node_dir, current=node_dir)
    outcome = rke2.check_version(tmp_path, CONTROL_PLANE)
    assert outcome.status is expected
    assert "v1.31.4+rke2r1" in outcome.evidence


def test_the_bin_link_picks_the_running_release_among_old_ones(tmp_path: Path) -> None:
    old, new = "v1.30.9-rke2r1-0a1b2c3d4e5f", "v1.31.4-rke2r1-3f1c2d4e5a6b"
    hosttree.with_rke2_runtime(HostTree(tmp_path), old, new, current=new)
    assert rke2.check_version(tmp_path, CONTROL_PLANE).status is CheckStatus.PASS


def test_a_single_data_dir_is_used_without_the_link(tmp_path: Path) -> None:
    hosttree.with_rke2_runtime(HostTree(tmp_path), "v1.31.4-rke2r1-3f1c2d4e5a6b")
    assert rke2.check_version(tmp_path, CONTROL_PLANE).status is CheckStatus.PASS


def test_configured_data_dir_is_followed(tmp_path: Path) -> None:
    tree = HostTree(tmp_path).write("etc/rancher/rke2/config.yaml", "data-dir: /data/rke2\n")
    tree.write("data/rke2/data/v1.32.1-rke2r1-0a1b2c3d4e5f/bin/kubelet")
    assert rke2.check_version(tmp_path, CONTROL_PLANE).status is CheckStatus.FAIL


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(lambda t: None, id="rke2-not-installed"),
        pytest.param(
            lambda t: hosttree.with_rke2_runtime(
                t, "v1.30.9-rke2r1-0a1b2c3d4e5f", "v1.31.4-rke2r1-3f1c2d4e5a6b"
            ),
            id="several-releases-no-link",
        ),
        pytest.param(
            lambda t: t.write("etc/rancher/rke2/config.yaml", "data-dir: [unclosed\n"),
            id="malformed-config",
        ),
    ],
)
def test_unknowable_node_version_is_an_error(tmp_path: Path, setup: object) -> None:
    setup(HostTree(tmp_path))  # type: ignore[operator]
    with pytest.raises(hostfs.HostReadError):
        rke2.check_version(tmp_path, CONTROL_PLANE)


def test_no_control_plane_version_is_unknown_and_says_so(tmp_path: Path) -> None:
    hosttree.with_rke2_runtime(HostTree(tmp_path))
    outcome = rke2.check_version(tmp_path, None)
    assert outcome.status is CheckStatus.UNKNOWN
    assert "v1.31.4+rke2r1" in outcome.evidence
    assert "--control-plane-version" in outcome.evidence
