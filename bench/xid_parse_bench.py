"""Benchmark: ``gpuguard xid parse --json`` on a large journal, against ``grep -c 'NVRM: Xid'``.

The evidence collector and the CLI scan whole journals, gigabytes on a busy node, so parsing
them must cost about what grep costs (target: within 2.5x, issue 28). This writes a
journald-style kernel log of the requested size (mostly ordinary kernel lines, with Xid lines of
several shapes, PCI → UUID lines and fall-off messages sprinkled in), warms the page cache, then
times both commands end to end and prints lines/s and the ratio. It is a measurement, not a
test: it asserts nothing about time.

    .venv/bin/python bench/xid_parse_bench.py --size 100MB
    .venv/bin/python bench/xid_parse_bench.py --size 1GB --path /tmp/journal.log --keep
"""

from __future__ import annotations

import argparse
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

BLOCK_COUNT = 64
BLOCK_BYTES = 1024 * 1024
NVRM_LINE_EVERY = 800  # one driver line per ~800 ordinary lines: a node with a sick GPU
_SIZE = re.compile(r"^(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[kmg]?)i?b?$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}

ORDINARY_MESSAGES = (
    "IPv6: ADDRCONF(NETDEV_CHANGE): cali{n:x}: link becomes ready",
    'audit: type=1400 audit({t}:{n}): apparmor="DENIED" operation="open" profile="cri-'
    'containerd.apparmor.d" name="/proc/{n}/mounts" pid={n} comm="nvidia-smi"',
    "EXT4-fs (nvme0n1p2): re-mounted {n:x}. Quota mode: none.",
    "cni0: port {n}(veth{n:x}) entered forwarding state",
    "eth0: renamed from tmp{n:x}",
    "device veth{n:x} entered promiscuous mode",
    "nvidia-peermem: loading out-of-tree module taints kernel.",
    "mlx5_core 0000:{bus:02x}:00.0: mlx5_fw_tracer_handle_traces:741:(pid {n}): FW trace",
    "xfs filesystem being remounted at /var/lib/kubelet/pods/{n:x}/volumes supports timestamps",
    "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset={n:x},task=python3,pid={n}",
)
DRIVER_MESSAGES = (
    ("NVRM: GPU at PCI:0000:{bus:02x}:00: GPU-{uuid}",),
    (
        "NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
    ),
    (
        "NVRM: Xid (PCI:0000:{bus:02x}:00): 31, pid={n}, name=python3, channel 0x0000000c, "
        "intr 00000000. MMU Fault: ENGINE GRAPHICS GPC2 GPCCLIENT_PROP_0 faulted @ 0x0_00000000.",
    ),
    (
        "NVRM: Xid (PCI:0000:{bus:02x}:00): 94, pid={n}, name=pt_main_thread, "
        "Contained: SM (0x1). RST: No, D-RST: No",
    ),
    (
        "NVRM: Xid (PCI:0000:{bus:02x}:00): 154, GPU recovery action changed from 0x0 (None) to "
        "0x1 (GPU Reset Required)",
    ),
    (
        "NVRM: Xid (PCI:0000:{bus:02x}:00): 119, pid={n}, name=nvidia-smi, Timeout after 6s of "
        "waiting for RPC response from GPU4 GSP! Expected function 76 (GSP_RM_CONTROL)",
    ),
    ("NVRM: Xid (PCI:0000:{bus:02x}:00): 45, pid={n}, Ch 00000001 caused by previous Xid 149",),
    (
        "NVRM: The NVIDIA GPU 0000:{bus:02x}:00.0",
        "NVRM: (PCI ID: 10de:2330) installed in this system has",
        "NVRM: fallen off the bus and is not responding to commands.",
    ),
    ("NVRM: GPU Board Serial Number: 1650124014249",),
)


@dataclass(frozen=True, slots=True)
class Timing:
    seconds: float
    output_lines: int | None = None


def parse_size(text: str) -> int:
    match = _SIZE.match(text.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 100MB, 1GB)")
    return int(float(match["number"]) * _UNITS[match["unit"].lower()])


def journal_lines(rng: random.Random) -> Iterator[str]:
    """Endless journald lines (``Mon DD HH:MM:SS host kernel: [uptime] text``)."""
    uptime = rng.uniform(100, 100_000)
    while True:
        uptime += rng.expovariate(50)
        n = rng.randrange(1, 10_000_000)
        fields = {
            "n": n,
            "t": int(uptime),
            "bus": rng.choice((0x18, 0x3B, 0x86, 0xDB)),
            "uuid": f"{n:08x}-b600-ac93-3616-d754b23d636d",
        }
        if rng.randrange(NVRM_LINE_EVERY) == 0:
            texts = rng.choice(DRIVER_MESSAGES)
        else:
            texts = (rng.choice(ORDINARY_MESSAGES),)
        clock = time.strftime("%b %e %H:%M:%S", time.gmtime(1_730_000_000 + uptime))
        for text in texts:
            yield f"{clock} gpu-node-17 kernel: [{uptime:12.6f}] {text.format(**fields)}\n"


def make_blocks(seed: int) -> list[bytes]:
    """Distinct ~1 MiB blocks of whole lines; the journal is these in random order."""
    lines = journal_lines(random.Random(seed))
    blocks = []
    for _ in range(BLOCK_COUNT):
        block: list[str] = []
        size = 0
        while size < BLOCK_BYTES:
            line = next(lines)
            block.append(line)
            size += len(line)
        blocks.append("".join(block).encode())
    return blocks


def write_journal(path: Path, size: int, seed: int) -> None:
    blocks = make_blocks(seed)
    rng = random.Random(seed)
    written = 0
    with path.open("wb") as out:
        while written < size:
            block = rng.choice(blocks)
            out.write(block)
            written += len(block)


def timed(command: list[str], *, capture: bool = False) -> Timing:
    """Run ``command``; its stdout goes to /dev/null, or to a pipe whose lines are counted.

    grep must get the pipe: GNU grep stops at its first match when stdout is /dev/null.
    """
    started = time.perf_counter()
    if capture:
        result = subprocess.run(command, check=True, capture_output=True)
        return Timing(time.perf_counter() - started, result.stdout.count(b"\n"))
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return Timing(time.perf_counter() - started)


def best_of(repeats: int, command: list[str], *, capture: bool = False) -> float:
    return min(timed(command, capture=capture).seconds for _ in range(repeats))


def gpuguard_command() -> list[str]:
    script = Path(sys.executable).with_name("gpuguard")
    return [str(script)] if script.exists() else [sys.executable, "-m", "gpuguard.cli.main"]


def count_lines(path: Path) -> int:
    with path.open("rb") as stream:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: stream.read(1 << 24), b""))


def report(path: Path, repeats: int) -> None:
    grep = ["grep", "-c", "NVRM: Xid", str(path)]
    parse = [*gpuguard_command(), "xid", "parse", "--json", str(path)]
    xid_lines = int(subprocess.run(grep, check=False, capture_output=True).stdout or 0)
    events = timed(parse, capture=True).output_lines  # also warms the page cache
    lines = count_lines(path)
    grep_s, parse_s = best_of(repeats, grep, capture=True), best_of(repeats, parse)
    startup_s = best_of(repeats, [*parse[:-1], "/dev/null"])
    size_mb = path.stat().st_size / 1024**2
    print(f"journal      {path} — {size_mb:,.0f} MiB, {lines:,} lines, {xid_lines:,} Xid lines")
    print(f"events       {events:,} JSON lines from xid parse (Xid + fallen-off-bus)")
    print(f"grep -c      {grep_s:7.3f} s  {lines / grep_s:14,.0f} lines/s")
    print(f"xid parse    {parse_s:7.3f} s  {lines / parse_s:14,.0f} lines/s  (--json > /dev/null)")
    print(f"  start-up   {startup_s:7.3f} s  (the same command on an empty file)")
    print(f"ratio        {parse_s / grep_s:7.2f}x grep (target: within 2.5x); best of {repeats}")


def main() -> None:
    cli = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    cli.add_argument("--size", type=parse_size, default=parse_size("1GB"), help="default 1GB")
    cli.add_argument("--path", type=Path, help="write the journal here (default: a temp dir)")
    cli.add_argument("--keep", action="store_true", help="keep the generated journal")
    cli.add_argument("--reuse", action="store_true", help="time --path as it is, no generation")
    cli.add_argument("--repeats", type=int, default=3, help="timed runs of each, best kept")
    cli.add_argument("--seed", type=int, default=1729)
    args = cli.parse_args()
    if shutil.which("grep") is None:
        sys.exit("grep is not on PATH")
    workdir = Path(tempfile.mkdtemp(prefix="xid-bench-"))
    path = args.path or workdir / "journal.log"
    try:
        if not args.reuse:
            started = time.perf_counter()
            write_journal(path, args.size, args.seed)
            print(f"generated    {time.perf_counter() - started:7.1f} s")
        report(path, args.repeats)
    finally:
        if not args.keep and not args.reuse:
            path.unlink(missing_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
