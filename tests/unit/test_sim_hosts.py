"""Host trees: the files the agent's checks read, in real layout, following the world's state."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from gpuguard.sim import clock, hosts, scenario, state, store, world


def node(**overrides: object) -> state.SimNode:
    gpus = [state.SimGpu(index=i, uuid=state.new_uuid(f"n/{i}"), pci=f"0000:{0x18 + i:02x}:00.0",
                         model="NVIDIA GeForce RTX 5090") for i in range(2)]
    base = state.SimNode(name="gpu-node-a", boot_id="b", driver_module="580.126.09",
                         driver_library="580.126.09", gpus=gpus)
    for key, value in overrides.items():
        setattr(base, key, value)
    return base


def read(tree: Path, rel: str) -> str:
    return (tree / rel).read_text()


def test_config_space_starts_with_nvidia_vendor_id_and_reads_all_ff_off_the_bus(
        tmp_path: Path) -> None:
    sim = node()
    sim.gpus[1].on_bus = False
    tree = hosts.write_host_tree(sim, tmp_path)
    healthy = (tree / "sys/bus/pci/devices/0000:18:00.0/config").read_bytes()
    gone = (tree / "sys/bus/pci/devices/0000:19:00.0/config").read_bytes()
    assert len(healthy) == len(gone) == 256
    assert healthy[:4] == bytes([0xDE, 0x10, 0x85, 0x2B])
    assert gone == b"\xff" * 256
    assert read(tree, "sys/bus/pci/devices/0000:18:00.0/current_link_speed") == "32.0 GT/s PCIe\n"
    assert read(tree, "sys/bus/pci/devices/0000:18:00.0/current_link_width") == "16\n"
    assert read(tree, "sys/bus/pci/devices/0000:19:00.0/current_link_speed") == "Unknown\n"


def test_stub_resolv_conf_points_at_systemd_resolved_with_real_upstreams(tmp_path: Path) -> None:
    tree = hosts.write_host_tree(node(dns_servers=("10.0.0.2", "8.8.8.8")), tmp_path)
    assert "nameserver 127.0.0.53" in read(tree, "etc/resolv.conf")
    upstream = read(tree, "run/systemd/resolve/resolv.conf")
    assert "nameserver 10.0.0.2\nnameserver 8.8.8.8\n" in upstream


def test_without_the_stub_resolv_conf_holds_the_upstreams(tmp_path: Path) -> None:
    hosts.write_host_tree(node(), tmp_path)
    tree = hosts.write_host_tree(node(resolv_stub=False, dns_servers=("1.1.1.1",)), tmp_path)
    assert read(tree, "etc/resolv.conf").startswith("nameserver 1.1.1.1\n")
    assert not (tree / "run/systemd/resolve/resolv.conf").exists()


def test_ipvs_files_follow_persistence_and_load_state(tmp_path: Path) -> None:
    tree = hosts.write_host_tree(node(), tmp_path)
    assert "ip_vs\n" in read(tree, "etc/modules-load.d/ipvs.conf")
    assert any(line.startswith("ip_vs ") for line in read(tree, "proc/modules").splitlines())
    dep = read(tree, "lib/modules/6.8.0-45-generic/modules.dep")
    assert "kernel/net/netfilter/ipvs/ip_vs.ko:" in dep
    assert (tree / "lib/modules/6.8.0-45-generic/modules.builtin").exists()
    tree = hosts.write_host_tree(node(ipvs_persisted=False, ipvs_loaded=False), tmp_path)
    assert not (tree / "etc/modules-load.d/ipvs.conf").exists()
    assert not any(line.startswith("ip_vs ") for line in read(tree, "proc/modules").splitlines())


def test_driver_versions_module_and_nvml_library_rewrite_idempotently(tmp_path: Path) -> None:
    hosts.write_host_tree(node(), tmp_path)
    tree = hosts.write_host_tree(node(driver_library="580.159.03"), tmp_path)
    tree = hosts.write_host_tree(node(driver_library="580.159.03"), tmp_path)
    assert read(tree, "sys/module/nvidia/version") == "580.126.09\n"
    nvml = tree / "usr/lib/x86_64-linux-gnu"
    assert sorted(p.name for p in nvml.iterdir()) == [
        "libnvidia-ml.so.1", "libnvidia-ml.so.580.159.03"]
    assert os.readlink(nvml / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.159.03"
    assert read(tree, "proc/sys/kernel/osrelease") == "6.8.0-45-generic\n"


def test_rke2_units_apt_and_swap(tmp_path: Path) -> None:
    tree = hosts.write_host_tree(node(rke2_units=("rke2-agent", "rke2-server"),
                                      auto_upgrades=True), tmp_path)
    wants = tree / "etc/systemd/system/multi-user.target.wants"
    assert sorted(p.name for p in wants.iterdir()) == ["rke2-agent.service",
                                                      "rke2-server.service"]
    assert (wants / "rke2-server.service").resolve().is_file()
    assert 'APT::Periodic::Unattended-Upgrade "1";' in read(
        tree, "etc/apt/apt.conf.d/20auto-upgrades")
    assert "nvidia-" not in read(tree, "etc/apt/apt.conf.d/50unattended-upgrades")
    assert read(tree, "proc/swaps").count("\n") == 1
    tree = hosts.write_host_tree(node(nvidia_blacklisted=True), tmp_path)
    assert sorted(p.name for p in wants.iterdir()) == ["rke2-agent.service"]
    assert '"libnvidia-";' in read(tree, "etc/apt/apt.conf.d/50unattended-upgrades")


def test_the_world_keeps_host_trees_in_step(tmp_path: Path) -> None:
    spec = scenario.loads("""\
name: t
fleet: {nodes: [gpu-node-a, gpu-node-b], ipvs_persisted: false}
events:
  - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
  - {at: 1h, power_cycle: {node: gpu-node-b}}
""")
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start),
                                  hosts_root=tmp_path)
    config = tmp_path / "gpu-node-b/sys/bus/pci/devices/0000:99:00.0/config"
    assert config.read_bytes()[:2] == b"\xde\x10"
    w.step_to(timedelta(minutes=20))
    assert config.read_bytes() == b"\xff" * 256
    assert "79, pid='<unknown>'" in (tmp_path / "gpu-node-b/var/log/kern.log").read_text()
    w.step_to(timedelta(hours=2))
    assert config.read_bytes()[:2] == b"\xde\x10"
    modules = (tmp_path / "gpu-node-b/proc/modules").read_text()
    assert "ip_vs " not in modules  # not persisted: gone after the power cycle


def test_pci_devices_link_relatively_into_a_real_topology_with_root_port_aer(
        tmp_path: Path) -> None:
    sim = node()
    sim.gpus[1].on_bus = False
    tree = hosts.write_host_tree(sim, tmp_path)
    link = tree / "sys/bus/pci/devices/0000:18:00.0"
    assert os.readlink(link) == "../../../devices/pci0000:17/0000:17:01.0/0000:18:00.0"
    assert link.resolve() == (tree / "sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0").resolve()
    assert read(tree, "sys/bus/pci/devices/0000:18:00.0/vendor") == "0x10de\n"
    healthy_port = tree / "sys/devices/pci0000:17/0000:17:01.0"
    dead_port = tree / "sys/devices/pci0000:18/0000:18:01.0"
    assert (healthy_port / "class").read_text() == "0x060400\n"
    fatal = (healthy_port / "aer_dev_fatal").read_text().splitlines()
    assert fatal[-1] == "TOTAL_ERR_FATAL 0"
    assert "SDES 0" in fatal
    assert (healthy_port / "aer_dev_correctable").read_text().endswith("TOTAL_ERR_COR 0\n")
    assert (healthy_port / "aer_rootport_total_err_fatal").read_text() == "0\n"
    assert "SDES 1" in (dead_port / "aer_dev_fatal").read_text().splitlines()
    assert (dead_port / "aer_dev_fatal").read_text().endswith("TOTAL_ERR_FATAL 1\n")
    assert (dead_port / "aer_rootport_total_err_fatal").read_text() == "1\n"
    assert read(tree, "proc/sys/kernel/random/boot_id") == "b\n"
    assert read(tree, "etc/hostname") == "gpu-node-a\n"


def test_a_tree_from_before_the_topology_is_rewritten_into_links(tmp_path: Path) -> None:
    old = tmp_path / "gpu-node-a/sys/bus/pci/devices/0000:18:00.0"
    old.mkdir(parents=True)
    (old / "config").write_bytes(b"\x00" * 256)
    for _ in range(2):  # the second write finds the link already in place
        hosts.write_host_tree(node(), tmp_path)
    assert old.is_symlink()
    assert (old / "config").read_bytes()[:2] == b"\xde\x10"


def test_the_world_sets_and_clears_root_port_aer_with_the_gpu(tmp_path: Path) -> None:
    spec = scenario.loads("""\
name: t
fleet: {nodes: [gpu-node-b]}
events:
  - {at: 10m, xid: {node: gpu-node-b, gpu: 4, xid: 79}}
  - {at: 1h, power_cycle: {node: gpu-node-b}}
""")
    w = world.World.from_scenario(spec, store.ObjectStore(), clock.SimClock(spec.start),
                                  hosts_root=tmp_path)
    fatal = tmp_path / "gpu-node-b/sys/devices/pci0000:98/0000:98:01.0/aer_rootport_total_err_fatal"
    boot_id = tmp_path / "gpu-node-b/proc/sys/kernel/random/boot_id"
    first_boot = boot_id.read_text()
    assert fatal.read_text() == "0\n"
    w.step_to(timedelta(minutes=20))
    assert fatal.read_text() == "1\n"
    w.step_to(timedelta(hours=2))
    assert fatal.read_text() == "0\n"
    assert boot_id.read_text() != first_boot
