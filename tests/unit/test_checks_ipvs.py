"""ip_vs checks: module index, persistence across reboots, loaded now; --fix only for these."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuguard.agent.checks import hostfs, ipvs
from gpuguard.model.decisions import CheckStatus
from tests.unit import hosttree
from tests.unit.hosttree import HostTree


@pytest.mark.parametrize(
    ("module_file", "builtin", "expected"),
    [
        pytest.param("ip_vs.ko", False, CheckStatus.PASS, id="plain-ko"),
        pytest.param("ip_vs.ko.zst", False, CheckStatus.PASS, id="zstd-ubuntu-24"),
        pytest.param("ip_vs.ko.xz", False, CheckStatus.PASS, id="xz-compressed"),
        pytest.param(None, True, CheckStatus.PASS, id="built-into-kernel"),
        pytest.param(None, False, CheckStatus.FAIL, id="only-ip_vs_rr-not-ip_vs"),
    ],
)
def test_resolvable_reads_the_running_kernels_module_index(
    tmp_path: Path, module_file: str | None, builtin: bool, expected: CheckStatus
) -> None:
    hosttree.with_kernel(HostTree(tmp_path), ip_vs=module_file, builtin=builtin)
    outcome = ipvs.check_resolvable(tmp_path)
    assert outcome.status is expected
    assert hosttree.RELEASE in outcome.evidence


def test_resolvable_follows_merged_usr_lib_link_inside_the_root(tmp_path: Path) -> None:
    tree = HostTree(tmp_path).link("lib", "/usr/lib")  # absolute, as on merged-usr hosts
    hosttree.with_kernel(HostTree(tmp_path / "usr"))
    tree.write("proc/sys/kernel/osrelease", f"{hosttree.RELEASE}\n")
    assert ipvs.check_resolvable(tmp_path).status is CheckStatus.PASS


@pytest.mark.parametrize(
    "setup",
    [
        pytest.param(lambda t: None, id="no-osrelease"),
        pytest.param(lambda t: t.write("proc/sys/kernel/osrelease", "\n"), id="empty-osrelease"),
        pytest.param(
            lambda t: t.write("proc/sys/kernel/osrelease", "6.8.0-1\n"), id="no-module-index"
        ),
    ],
)
def test_resolvable_without_an_index_is_unknown_not_pass(tmp_path: Path, setup: object) -> None:
    setup(HostTree(tmp_path))  # type: ignore[operator]
    with pytest.raises(hostfs.HostReadError, match=r"osrelease|modules\.dep"):
        ipvs.check_resolvable(tmp_path)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param({"etc/modules-load.d/ipvs.conf": "ip_vs\n"}, CheckStatus.PASS, id="ipvs-conf"),
        pytest.param(
            {"etc/modules-load.d/k8s.conf": "br_netfilter\n  ip_vs  \n"},
            CheckStatus.PASS,
            id="any-conf-name-with-spaces",
        ),
        pytest.param(
            {"usr/lib/modules-load.d/ipvs.conf": "ip-vs\n"},
            CheckStatus.PASS,
            id="vendor-dir-dash-spelling",
        ),
        pytest.param(
            {"etc/modules-load.d/ipvs.conf": "# ip_vs\n; ip_vs\nip_vs_rr\n"},
            CheckStatus.FAIL,
            id="commented-out",
        ),
        pytest.param(
            {"etc/modules-load.d/ipvs.txt": "ip_vs\n"}, CheckStatus.FAIL, id="not-a-conf-file"
        ),
        pytest.param(
            {"run/modules-load.d/ipvs.conf": "ip_vs\n"},
            CheckStatus.FAIL,
            id="run-is-not-persistent",
        ),
        pytest.param({}, CheckStatus.FAIL, id="nothing-seed-nine-reboots"),
    ],
)
def test_persist_needs_a_modules_load_file_listing_ip_vs(
    tmp_path: Path, files: dict[str, str], expected: CheckStatus
) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_kernel(tree)
    for rel, text in files.items():
        tree.write(rel, text)
    assert ipvs.check_persist(tmp_path).status is expected


def test_persist_masked_vendor_file_does_not_count(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_kernel(tree)
    tree.write("usr/lib/modules-load.d/ipvs.conf", "ip_vs\n")
    tree.link("etc/modules-load.d/ipvs.conf", "/dev/null")
    assert ipvs.check_persist(tmp_path).status is CheckStatus.FAIL


def test_persist_builtin_ip_vs_needs_no_file(tmp_path: Path) -> None:
    hosttree.with_kernel(HostTree(tmp_path), builtin=True)
    assert ipvs.check_persist(tmp_path).status is CheckStatus.PASS


def test_fix_creates_only_the_missing_file_and_is_idempotent(tmp_path: Path) -> None:
    tree = HostTree(tmp_path).mkdir("etc")  # no modules-load.d yet: --fix creates it
    hosttree.with_kernel(tree)
    before = tree.snapshot()

    first = ipvs.check_persist(tmp_path, fix=True)
    after = tree.snapshot()
    second = ipvs.check_persist(tmp_path, fix=True)

    assert first.status is CheckStatus.FIXED
    assert first.fix is not None
    assert "/etc/modules-load.d/ipvs.conf" in first.fix
    assert set(after) - set(before) == {"etc/modules-load.d/ipvs.conf"}
    assert {k: v for k, v in after.items() if k in before} == before
    lines = after["etc/modules-load.d/ipvs.conf"][1].decode().splitlines()
    assert [line for line in lines if not line.startswith("#")] == list(ipvs.IPVS_MODULES)
    assert second.status is CheckStatus.PASS
    assert tree.snapshot() == after


def test_fix_never_edits_an_existing_file_without_ip_vs(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_kernel(tree)
    tree.write("etc/modules-load.d/ipvs.conf", "ip_vs_rr\n")
    before = tree.snapshot()
    outcome = ipvs.check_persist(tmp_path, fix=True)
    assert outcome.status is CheckStatus.FAIL
    assert "left untouched" in outcome.evidence
    assert tree.snapshot() == before


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        pytest.param(hosttree.with_loaded_modules, CheckStatus.PASS, id="in-proc"),
        pytest.param(
            lambda t: (hosttree.with_loaded_modules(t, ["ip_vs_rr"]), t.mkdir("sys/module/ip_vs")),
            CheckStatus.PASS,
            id="builtin-in-sysfs",
        ),
        pytest.param(
            lambda t: hosttree.with_loaded_modules(t, ["ip_vs_rr", "nf_conntrack"]),
            CheckStatus.FAIL,
            id="only-ip_vs_rr",
        ),
    ],
)
def test_loaded_reads_proc_modules(tmp_path: Path, setup: object, expected: CheckStatus) -> None:
    setup(HostTree(tmp_path))  # type: ignore[operator]
    assert ipvs.check_loaded(tmp_path).status is expected


def test_loaded_without_proc_modules_is_an_error_not_pass(tmp_path: Path) -> None:
    with pytest.raises(hostfs.HostReadError, match="/proc/modules: not found"):
        ipvs.check_loaded(tmp_path)


def test_loaded_does_not_run_modprobe_without_fix(tmp_path: Path) -> None:
    hosttree.with_loaded_modules(HostTree(tmp_path), ["nf_conntrack"])
    runner = hosttree.FakeRunner()
    outcome = ipvs.check_loaded(tmp_path, runner, fix=False)
    assert outcome.status is CheckStatus.FAIL
    assert outcome.fix == "modprobe -a ip_vs ip_vs_rr ip_vs_wrr ip_vs_sh nf_conntrack"
    assert runner.calls == []


def test_fix_loads_with_the_hosts_module_tree_and_reports_fixed(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    hosttree.with_loaded_modules(tree, ["nf_conntrack"])
    runner = hosttree.FakeRunner(on_success=lambda: hosttree.with_loaded_modules(tree))
    outcome = ipvs.check_loaded(tmp_path, runner, fix=True, timeout_s=3.0)
    assert outcome.status is CheckStatus.FIXED
    assert runner.calls == [(("modprobe", "-d", str(tmp_path), "-a", *ipvs.IPVS_MODULES), 3.0)]


def test_modprobe_on_the_real_root_uses_no_dirname() -> None:
    assert ipvs.modprobe_argv(Path("/")) == ["modprobe", "-a", *ipvs.IPVS_MODULES]


@pytest.mark.parametrize(
    ("runner", "expected"),
    [
        pytest.param(hosttree.FakeRunner(returncode=None), CheckStatus.UNKNOWN, id="timeout"),
        pytest.param(
            hosttree.FakeRunner(returncode=1, stderr="modprobe: FATAL: Module ip_vs not found"),
            CheckStatus.FAIL,
            id="module-missing",
        ),
        pytest.param(hosttree.FakeRunner(returncode=0), CheckStatus.FAIL, id="exit-0-not-loaded"),
    ],
)
def test_fix_that_does_not_load_is_not_fixed(
    tmp_path: Path, runner: hosttree.FakeRunner, expected: CheckStatus
) -> None:
    hosttree.with_loaded_modules(HostTree(tmp_path), ["nf_conntrack"])
    assert ipvs.check_loaded(tmp_path, runner, fix=True).status is expected
