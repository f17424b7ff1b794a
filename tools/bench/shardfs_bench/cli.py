# SPDX-License-Identifier: Apache-2.0
"""The command line: the options, the checks of how they mix, the locks that keep
one run per --id and per --cache-base, the cluster's start, the header lines,
the mode's run, and the cleanup on every exit (dd readers, fleet mounts, the
mount, the cluster, the export).

Threading: the main thread; SIGTERM and SIGHUP become KeyboardInterrupt.
"""

import argparse
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from .cluster import Cluster
from .common import ARGS, BenchError, MiB, PROG, ROOT, log, rate_mb_s, run
from .data import make_files
from .fleet_clients import FLEET_MOUNTS
from .hint_child import HINT_CHILD, hint_child_main
from .modes.cache import cache_bench
from .modes.fleet import fleet_bench, fleet_ks
from .modes.fleet_warm import fleet_warm_bench
from .modes.hints import hints_bench
from .modes.memory import memory_bench
from .modes.passthrough import passthrough_bench
from .modes.policy import policy_bench
from .modes.random_records import random_records_bench
from .modes.sf_rss import sf_rss_bench
from .modes.slow_node import slow_node_bench
from .modes.small_files import small_files_bench
from .modes.stall import stall_bench
from .modes.striping import config_uncapped, striping_floor_lines
from .mount import Mount, find_daemon, is_mounted
from .passes import RUNNING, RUNNING_LOCK, STOP, measure, mount_pass, raw_pass
from .report import cpu_note, fmt_pass_list, median_mbps, mount_detail, row


HELD_LOCKS = []


def hold_lock(path, what):
    """Hold an exclusive flock on path until exit, or exit with a message:
    two runs on one cluster id (cluster, mount, export) or one --cache-base
    (local-disk copies, cache dirs, the disk itself) would break each other
    or each other's figures."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"{PROG}: another {PROG} is running with this {what} (lock {path}); "
                 f"wait for it or pass another --id / --cache-base")
    HELD_LOCKS.append(fd)


def main():
    ap = argparse.ArgumentParser(
        prog=PROG, description="Compare the shardfs mount with a raw striped libnfs "
        "reader on a local nfs-ganesha cluster (needs root).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--id", metavar="ID", default="bench",
                    help="cluster id (one run per id, and per --cache-base, at a time)")
    ap.add_argument("--nodes", metavar="N", type=int, default=None,
                    help="cluster nodes (default 4; 8 for --slow-node; --hints: --hint-nodes)")
    ap.add_argument("--files", metavar="N", type=int, default=8, help="files in the data set")
    ap.add_argument("--file-mib", metavar="M", type=int, default=256, help="size of each file (uncapped runs)")
    ap.add_argument("--readers", metavar="T", type=int, default=4,
                    help="parallel readers through the mount (= files in flight for the raw reader)")
    ap.add_argument("--nconnect", metavar="N", type=int, default=2, help="connections per node, both readers")
    ap.add_argument("--raw-depth", metavar="D", type=int, default=4, help="raw reader: reads in flight per connection")
    ap.add_argument("--rate", metavar="RATE", default="200mbit", help="per-node cap for the capped runs")
    ap.add_argument("--capped-file-mib", metavar="M", type=int, default=64, help="size of each file (capped runs)")
    ap.add_argument("--reps", metavar="N", type=int, default=3, help="uncapped passes per reader (median reported)")
    ap.add_argument("--capped-reps", metavar="N", type=int, default=1, help="capped passes per reader")
    ap.add_argument("--skip-capped", action="store_true", help="no capped runs")
    ap.add_argument("--keep", action="store_true", help="leave the cluster and the data")
    ap.add_argument("--data-dir", metavar="DIR", default=None,
                    help="export directory (default /dev/shm/shardfs-bench-ID, tmpfs; "
                    "files of the right size are reused)")
    ap.add_argument("--no-prewarm", action="store_true",
                    help="do not touch and free memory before each pass (see prewarm())")
    ap.add_argument("--mount-opts", metavar="OPTS", default="", help="extra -o options for the daemon")
    ap.add_argument("--shardfs", metavar="PATH", default=os.path.join(ROOT, "build", "fs", "shardfs"))
    ap.add_argument("--rawread", metavar="PATH", default=os.path.join(ROOT, "build", "tools", "shardfs-rawread"))
    ap.add_argument("-q", "--quiet-progress", action="store_true", help="no progress on stderr")
    ap.add_argument("--cache", action="store_true",
                    help="run the cache benchmark (epochs; lru and pin) instead of the striping one")
    ap.add_argument("--epochs", metavar="E", type=int, default=3, help="--cache: epochs with lru")
    ap.add_argument("--policy", action="store_true",
                    help="run the cache-policy benchmark: five workloads (a dataset larger than "
                    "the cache, one dataset after another, a scan between epochs, two jobs at "
                    "once, a dataset that fits) under auto, lru and pin")
    ap.add_argument("--memory", action="store_true",
                    help="run the memory benchmark: the daemon's peak RSS in five workloads "
                    "against mem_max, at its default and at --mem-small")
    ap.add_argument("--mem-small", metavar="SIZE", default="128M",
                    help="--memory: the small mem_max")
    ap.add_argument("--pol-cache-mib", metavar="M", type=int, default=256,
                    help="--policy: cache_size in MiB")
    ap.add_argument("--pol-shard-mib", metavar="M", type=int, default=8,
                    help="--policy: size of each file in MiB")
    ap.add_argument("--cache-base", metavar="DIR", default="/var/tmp/shardfs-bench",
                    help="--cache, --small-files, --random-records, --sf-rss, --hints, --fleet, "
                    "--fleet-warm: where the cache_dir and the local-disk copy live (a real disk)")
    ap.add_argument("--small-files", action="store_true",
                    help="run the small-file benchmark (PyTorch ImageFolder: open, read whole, close)")
    ap.add_argument("--sf-files", metavar="N", type=int, default=20000, help="--small-files: files")
    ap.add_argument("--sf-dirs", metavar="D", type=int, default=200,
                    help="--small-files, --hints: folders (for --hints, the classes)")
    ap.add_argument("--sf-threads", metavar="T", type=int, default=16,
                    help="--small-files, --sf-rss: reader threads")
    ap.add_argument("--sf-rss", action="store_true",
                    help="measure the daemon's memory per file (1 KiB files, first half then all)")
    ap.add_argument("--sf-rss-files", metavar="N", type=int, default=200000,
                    help="--sf-rss: files (read: the first half, then all)")
    ap.add_argument("--sf-rss-per-dir", metavar="N", type=int, default=1000,
                    help="--sf-rss: files per folder")
    ap.add_argument("--sf-rss-inode-max", metavar="N", type=int, default=0,
                    help="--sf-rss: then the same on a fresh mount with -o inode_max=N "
                         "(0: not)")
    ap.add_argument("--stall", action="store_true",
                    help="run the stall benchmark (one node stopped 300 ms of every second vs healthy)")
    ap.add_argument("--stall-mib", metavar="M", type=int, default=1024,
                    help="--stall: size of the file read")
    ap.add_argument("--slow-node", action="store_true",
                    help="every link capped at --rate, the last node's at half: one file read by "
                         "the raw striped reader and one dd through a default mount (--nodes 8 "
                         "unless given)")
    ap.add_argument("--slow-mib", metavar="M", type=int, default=512,
                    help="--slow-node: size of the file in MiB")
    ap.add_argument("--passthrough", action="store_true",
                    help="run the passthrough benchmark: warm shards (--files x --file-mib, "
                         "--readers and 1) and records (--rr-*) with passthrough, against local "
                         "disk and the daemon's own path")
    ap.add_argument("--random-records", action="store_true",
                    help="run the random-record benchmark (MXNet .rec: shuffled preads in one file)")
    ap.add_argument("--rr-gib", metavar="S", type=float, default=3.0,
                    help="--random-records: size of the record file in GiB")
    ap.add_argument("--rr-record-kb", metavar="K", type=int, default=110,
                    help="--random-records: mean record size in KB (sizes K-10..K+10)")
    ap.add_argument("--rr-threads", metavar="R", type=int, default=8,
                    help="--random-records: reader threads")
    ap.add_argument("--hints", action="store_true",
                    help="run the epoch-hint benchmark: a torchvision ImageFolder DataLoader and "
                    "shuffled records of one file, read with and without epoch hints, every "
                    "node's link capped at --hint-rate")
    ap.add_argument("--hint-files", metavar="N", type=int, default=20000,
                    help="--hints: image files (100-130 KB, in --sf-dirs class folders)")
    ap.add_argument("--hint-rec-gib", metavar="S", type=float, default=3.0,
                    help="--hints: size of the record file in GiB (records of --rr-record-kb)")
    ap.add_argument("--hint-rate", metavar="RATE", default="200mbit",
                    help="--hints: per-node link cap (tc tbf)")
    ap.add_argument("--hint-nodes", metavar="N", type=int, default=4,
                    help="--hints: cluster nodes")
    ap.add_argument("--hint-uncapped", action="store_true",
                    help="--hints: then every case again without a cap")
    ap.add_argument("--hint-python", metavar="PATH", default="/usr/bin/python3",
                    help="--hints: the Python with torch and torchvision that runs the "
                    "DataLoader and sends the hints")
    ap.add_argument("--seed", metavar="N", type=int, default=1,
                    help="--small-files, --random-records, --sf-rss, --hints: seed of the data "
                    "and the order")
    ap.add_argument("--fleet", metavar="K", default=None,
                    help="run the fleet benchmark: K client nodes (network namespaces, each "
                    "with its own daemon and cache) against --nodes nodes each capped at --rate, "
                    "cold at once (epoch 1, then 2 from the caches), for K = 1, 2, 4, ... up to "
                    "K (or the comma list given), then the largest K started --fleet-stagger "
                    "apart; beside the raw libnfs reader from one client")
    ap.add_argument("--fleet-warm", action="store_true",
                    help="run the warm-up scenario: client 1 runs shardfs-warm on a large data "
                    "set while clients 2..4 train, against the three training alone")
    ap.add_argument("--fleet-opts", metavar="OPTS", default="",
                    help="--fleet-warm: extra -o options for the warming client's daemon "
                    "(e.g. warm_rate=50M)")
    ap.add_argument("--fleet-files", metavar="N", type=int, default=16,
                    help="--fleet, --fleet-warm: files in the training data set")
    ap.add_argument("--fleet-file-mib", metavar="M", type=int, default=64,
                    help="--fleet, --fleet-warm: size of each training file")
    ap.add_argument("--fleet-stagger", metavar="S", type=float, default=5.0,
                    help="--fleet: seconds between the staggered clients' starts")
    ap.add_argument("--fleet-warm-files", metavar="N", type=int, default=16,
                    help="--fleet-warm: files in the warmed data set")
    ap.add_argument("--fleet-warm-mib", metavar="M", type=int, default=256,
                    help="--fleet-warm: size of each warmed file")
    ap.add_argument("--fleet-warm-lead", metavar="S", type=float, default=2.0,
                    help="--fleet-warm: seconds the warm-up runs before the training starts")
    ap.add_argument("--perf", metavar="DIR", default=None,
                    help="record each mount pass that measures the daemon (--small-files, "
                         "--random-records, --cache epochs, the striping mount passes) with "
                         "`perf record -a -g` into DIR/passN.data, numbered in the order run "
                         "(the passes' figures then include perf's own cost)")
    ap.add_argument("--smallread", metavar="PATH", default=None,
                    help="the reader of --small-files, --random-records and --sf-rss (default: "
                    "build/tools/shardfs-smallread, else next to --rawread)")
    ap.parse_args(namespace=ARGS)
    if ARGS.nodes is None:
        ARGS.nodes = 8 if ARGS.slow_node else 4
    if ARGS.hints:
        ARGS.nodes = ARGS.hint_nodes
    fleet_mode = ARGS.fleet is not None or ARGS.fleet_warm
    item_modes = (ARGS.small_files or ARGS.random_records or ARGS.sf_rss or ARGS.hints
                  or ARGS.passthrough)
    if ARGS.smallread is None:
        ARGS.smallread = os.path.join(ROOT, "build", "tools", "shardfs-smallread")
        if not os.access(ARGS.smallread, os.X_OK):
            ARGS.smallread = os.path.join(os.path.dirname(ARGS.rawread), "shardfs-smallread")

    if os.geteuid() != 0:
        sys.exit(f"{PROG}: must run as root")
    if not re.fullmatch(r"[a-z0-9]{1,6}", ARGS.id):
        sys.exit(f"{PROG}: bad --id (want [a-z0-9]{{1,6}})")
    if ARGS.nodes < 2 or ARGS.files < 1 or ARGS.readers < 1 or ARGS.reps < 1 or ARGS.capped_reps < 1:
        sys.exit(f"{PROG}: --nodes >= 2, --files, --readers, --reps >= 1")
    if (item_modes and ARGS.cache) or (ARGS.stall and (ARGS.cache or item_modes)):
        sys.exit(f"{PROG}: --cache, --stall and --small-files/--random-records/--sf-rss "
                 f"do not mix")
    if ARGS.hints and (ARGS.cache or ARGS.policy or ARGS.memory or ARGS.stall or ARGS.slow_node
                       or ARGS.small_files or ARGS.random_records or ARGS.sf_rss):
        sys.exit(f"{PROG}: --hints does not mix with the other modes")
    if ARGS.hints and (ARGS.hint_files < 1 or ARGS.hint_rec_gib <= 0 or
                       rate_mb_s(ARGS.hint_rate) is None):
        sys.exit(f"{PROG}: bad --hint-files, --hint-rec-gib or --hint-rate")
    if ARGS.hints and run([ARGS.hint_python, "-c", "import torch, torchvision"],
                          check=False).returncode != 0:
        sys.exit(f"{PROG}: --hints needs torch and torchvision in {ARGS.hint_python} "
                 f"(--hint-python)")
    if fleet_mode and (ARGS.cache or ARGS.policy or ARGS.memory or ARGS.stall or ARGS.slow_node
                       or item_modes):
        sys.exit(f"{PROG}: --fleet and --fleet-warm do not mix with the other modes")
    if ARGS.fleet is not None and fleet_ks(ARGS.fleet) is None:
        sys.exit(f"{PROG}: bad --fleet (want K, 1..64, or a comma list of them)")
    if fleet_mode and (ARGS.fleet_files < 1 or ARGS.fleet_file_mib < 1 or ARGS.fleet_stagger < 0
                       or ARGS.fleet_warm_files < 1 or ARGS.fleet_warm_mib < 1
                       or ARGS.fleet_warm_lead < 0 or rate_mb_s(ARGS.rate) is None):
        sys.exit(f"{PROG}: bad --fleet-* value or --rate")
    if ARGS.stall_mib < 1:
        sys.exit(f"{PROG}: bad --stall-mib")
    if (ARGS.sf_files < 1 or ARGS.sf_dirs < 1 or ARGS.sf_threads < 1 or ARGS.rr_threads < 1 or
            ARGS.sf_rss_files < 2 or ARGS.sf_rss_per_dir < 1 or ARGS.sf_rss_inode_max < 0 or ARGS.rr_record_kb < 11 or
            ARGS.rr_record_kb > 1000 or ARGS.rr_gib <= 0):
        sys.exit(f"{PROG}: bad --sf-*/--rr-* value")
    for exe in ((ARGS.shardfs, ARGS.smallread) if item_modes else (ARGS.shardfs, ARGS.rawread)):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{PROG}: {exe} not found; build first: ninja -C build")
    export = ARGS.data_dir or f"/dev/shm/shardfs-bench-{ARGS.id}"
    made_export = not os.path.exists(export)
    ARGS.mnt = f"/tmp/shardfs-bench-{ARGS.id}/mnt"
    hold_lock(os.path.join(os.path.dirname(ARGS.mnt), "lock"), f"--id ({ARGS.id})")
    if ARGS.cache or ARGS.policy or ARGS.memory or item_modes or fleet_mode:
        hold_lock(os.path.join(ARGS.cache_base, ".lock"), f"--cache-base ({ARGS.cache_base})")

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    fleet_clients = 0
    if fleet_mode:
        fleet_clients = max(fleet_ks(ARGS.fleet)[-1] if ARGS.fleet else 0,
                            4 if ARGS.fleet_warm else 0)
    cluster = Cluster(ARGS.id, ARGS.nodes, export, fleet_clients)
    out = []
    t_start = time.monotonic()
    rc = 0
    try:
        log(f"writing data to {export}")
        os.makedirs(export, exist_ok=True)
        if (not ARGS.cache and not ARGS.policy and not ARGS.memory and not ARGS.stall and
                not ARGS.slow_node and not item_modes and not fleet_mode):
            names = make_files(export, "train", ARGS.files, ARGS.file_mib)
            sizes = [ARGS.file_mib * MiB] * ARGS.files
        if (not ARGS.skip_capped and not ARGS.cache and not ARGS.policy and not ARGS.memory and
                not ARGS.stall and
                not ARGS.slow_node
                and not item_modes and not fleet_mode):
            cnames = make_files(export, "capped", ARGS.files, ARGS.capped_file_mib)
            csizes = [ARGS.capped_file_mib * MiB] * ARGS.files
        cluster.start()
        all_h = cluster.addrs
        one_h = all_h[:1]
        ncpu = os.cpu_count()
        load = os.getloadavg()[0]
        out.append(f"shardfs-bench: {ncpu} CPUs (load {load:.2f} at start), data on "
                   f"{'tmpfs' if export.startswith('/dev/shm') else export}, page caches dropped "
                   f"before every pass{'' if ARGS.no_prewarm else ' (then memory prewarmed)'}, uncapped MB/s = median of {ARGS.reps} (MB = 1e6 bytes)")
        if item_modes:
            out[-1] = (f"shardfs-bench: {ncpu} CPUs (load {load:.2f} at start), {len(all_h)} nodes, "
                       f"data on {'tmpfs' if export.startswith('/dev/shm') else export}, "
                       f"MB = 1e6 bytes, one run per row")
            if ARGS.small_files:
                small_files_bench(cluster, out)
            if ARGS.random_records:
                random_records_bench(cluster, out)
            if ARGS.passthrough:
                passthrough_bench(cluster, out)
            if ARGS.sf_rss:
                sf_rss_bench(cluster, out)
            if ARGS.hints:
                hints_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        if fleet_mode:
            out[-1] = (f"shardfs-bench: {ncpu} CPUs (load {load:.2f} at start), {len(all_h)} nodes, "
                       f"data on {'tmpfs' if export.startswith('/dev/shm') else export}, "
                       f"MB = 1e6 bytes, one run per row")
            if ARGS.fleet:
                fleet_bench(cluster, out)
            if ARGS.fleet_warm:
                fleet_warm_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        if ARGS.slow_node:
            slow_node_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        if ARGS.stall:
            stall_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        raw_thr = lambda h: max(1, min(ncpu or 1, len(h) * ARGS.nconnect))
        out.append(f"raw reader: -c {ARGS.nconnect} -d {ARGS.raw_depth} -b 1M -j {ARGS.readers} "
                   f"-t {raw_thr(all_h)}; mount: -o nconnect={ARGS.nconnect}"
                   f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''}, {ARGS.readers} x dd bs=1M")

        if ARGS.memory:
            memory_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        if ARGS.policy:
            policy_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0
        if ARGS.cache:
            cache_bench(cluster, out)
            out.append(f"total time {time.monotonic() - t_start:.0f} s")
            print("\n".join(out), flush=True)
            return 0

        # Uncapped, all nodes and one node.
        res = {}
        for key, hosts in (("all", all_h), ("one", one_h)):
            res[key] = config_uncapped(cluster, hosts, names, sizes,
                                       f"uncapped {len(hosts)} node(s)")
        for key, hosts in (("all", all_h), ("one", one_h)):
            raw, mps, detail, always = res[key]
            nn = len(hosts)
            out.append(f"uncapped, {nn} node{'s' if nn > 1 else ''} x {ARGS.nconnect} conns, "
                       f"{ARGS.files} files x {ARGS.file_mib} MiB, {ARGS.readers} readers")
            out.append(row("raw libnfs reader", raw, f"{fmt_pass_list(raw):<20} {cpu_note(raw)}"))
            ratio = median_mbps(mps) / median_mbps(raw)
            goal = " (goal >= 0.80)" if key == "all" else ""
            out.append(row("shardfs mount", mps, f"ratio {ratio:.2f}{goal}"))
            out.append(f"  {'':<28}{'':7}        {fmt_pass_list(mps):<20} {cpu_note(mps)}")
            if always:
                r = median_mbps(always) / median_mbps(raw)
                out.append(row("mount, page_cache=always", always,
                               f"ratio {r:.2f} (every open through the kernel page cache)"))
                out.append(f"  {'':<28}{'':7}        {fmt_pass_list(always):<20} {cpu_note(always)}")
            for d in detail:
                out.append(f"    {d}")
            if key == "all":
                out.extend(striping_floor_lines(names, sizes, raw, mps))

        if not ARGS.skip_capped:
            cpaths = ["/shards/" + n for n in cnames]
            cluster.cap(ARGS.rate)
            cres = {}
            for key, hosts in (("all", all_h), ("one", one_h)):
                nn = len(hosts)
                raw, mps = [], []
                with Mount(cluster, hosts, ARGS.mnt, ARGS.nconnect) as m:
                    for rep in range(ARGS.capped_reps):
                        log(f"capped {nn} node(s): pass {rep + 1}/{ARGS.capped_reps}: mount")
                        s0 = m.stats()
                        mps.append(measure(cluster, mount_pass(ARGS.mnt, cnames, ARGS.readers, csizes),
                                           sum(csizes), m.pid))
                        s1 = m.stats()
                        detail = mount_detail(s0, s1, hosts)
                        log(f"capped {nn} node(s): pass {rep + 1}/{ARGS.capped_reps}: raw reader")
                        raw.append(measure(cluster, raw_pass(cluster, hosts, cpaths, ARGS.nconnect, ARGS.readers),
                                           sum(csizes)))
                cres[key] = (raw, mps, detail)
            cluster.cap("off")
            out.append(f"capped {ARGS.rate} per node, {ARGS.files} files x {ARGS.capped_file_mib} MiB, "
                       f"{ARGS.readers} readers")
            m4, m1 = median_mbps(cres["all"][1]), median_mbps(cres["one"][1])
            r4, r1 = median_mbps(cres["all"][0]), median_mbps(cres["one"][0])
            nn = len(all_h)
            out.append(row(f"shardfs mount, {nn} nodes", cres["all"][1]))
            out.append(row("shardfs mount, 1 node", cres["one"][1],
                           f"ratio {m4 / m1:.1f}x (goal >= {0.9 * nn:.1f}x)"))
            out.append(row(f"raw libnfs reader, {nn} nodes", cres["all"][0]))
            out.append(row("raw libnfs reader, 1 node", cres["one"][0], f"ratio {r4 / r1:.1f}x"))
            out.append(f"  mount / raw: {nn} nodes {m4 / r4:.2f}, 1 node {m1 / r1:.2f}")
            for d in cres["all"][2]:
                out.append(f"    {nn}-node mount: {d}")
        out.append(f"total time {time.monotonic() - t_start:.0f} s")
        print("\n".join(out), flush=True)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        rc = 130
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        if out:
            print("\n".join(out), flush=True)
        print(f"{PROG}: {e}", file=sys.stderr)
        rc = 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        STOP.set()
        with RUNNING_LOCK:
            for pid in list(RUNNING):
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass
        for fm in list(FLEET_MOUNTS):
            fm.unmount()
        if is_mounted(ARGS.mnt):
            m = Mount(cluster, [], ARGS.mnt, 0)
            m.mounted, m.pid = True, find_daemon(ARGS.mnt)
            m.unmount()
        cluster.stop()
        if not ARGS.keep:
            if made_export:
                shutil.rmtree(export, ignore_errors=True)
            if not is_mounted(ARGS.mnt):
                shutil.rmtree(os.path.dirname(ARGS.mnt), ignore_errors=True)
    return rc


def entry(argv):
    """The entry point's work: the --hints child with HINT_CHILD first, else
    the bench. Returns the exit status."""
    if argv[:1] == [HINT_CHILD]:
        return hint_child_main(argv[1:])
    return main()
