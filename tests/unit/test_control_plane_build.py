"""The real control plane's build recipe, without building: what is stamped, where it is
cached, and what a user is told when it is missing."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.sim.control_plane import build, cluster, versions


def test_kubernetes_binaries_carry_their_release_version_in_both_version_packages() -> None:
    (flags,) = [f for f in build._build_flags(versions.KUBERNETES_TOOLS) if f.startswith("-ld")]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {package}.gitVersion={versions.KUBERNETES}" in flags
        assert f"-X {package}.gitMinor=37" in flags


def test_the_cache_is_keyed_by_every_version_and_the_recipe(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(versions.CACHE_ENV, str(tmp_path))
    before = versions.bin_dir()
    assert before.parent.parent == tmp_path
    monkeypatch.setattr(versions, "RECIPE", versions.RECIPE + 1)
    assert versions.bin_dir() != before


def test_a_missing_build_names_the_tools_and_the_command_that_builds_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(versions.CACHE_ENV, str(tmp_path))
    (versions.bin_dir()).mkdir(parents=True)
    (versions.bin_dir() / "etcd").write_text("")
    with pytest.raises(cluster.ControlPlaneError) as refused:
        cluster.require_built()
    message = str(refused.value)
    assert "kube-apiserver" in message
    assert "scripts/control-plane build" in message
    assert "etcd," not in message  # what is there is not named
    assert build.missing_tools()[:1] == ["kube-apiserver"]
