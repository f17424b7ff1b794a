# SPDX-License-Identifier: Apache-2.0
"""--random-records: one record file (--rr-gib, records of --rr-record-kb +- 10
KB, as an MXNet .rec) read in one shuffled order by --rr-threads threads of
shardfs-smallread, one pread per record: the mount cold without a cache, then
epoch 1 (cold) and epoch 2 (warm) with a cache_dir.

Baselines: raw libnfs for the cold rows, with the cache disk's write rate as
the limit of epoch 1; local disk for epoch 2; beside them the FUSE floor (and
over io_uring where the fuse module offers it), the best ratio a FUSE mount
can reach, and the whole machine's CPU per record. Does not hint (--hints).
Threading: the main thread.
"""

import os
import shutil

from ..common import ARGS, GiB, MiB, log
from ..data import record_setup
from ..disk import disk_limits, limit_note
from ..floor import fuse_floor_pass
from ..mode import item_mode
from ..mount import DAEMON_PATH, Mount, prefetch_max
from ..passes import item_pass, smallread_argv
from ..perf import fmt_split
from ..report import (ceiling_line, counts_per_item, family_sum, fmt_mib, fuse_calls,
                      machine_cpu_lines, nfs_calls, per_item)

MODE = item_mode("--random-records")


def add_arguments(ap):
    ap.add_argument("--random-records", action="store_true",
                    help="run the random-record benchmark (MXNet .rec: shuffled preads in one file)")


def cache_of(size):
    """The cache_dir of the cache passes and their mount options."""
    cache_dir = os.path.join(ARGS.cache_base, f"cache-{ARGS.id}")
    return cache_dir, f"cache_dir={cache_dir},cache_size={max(2 * size, 1 << 30) // MiB}M"


def run_passes(cluster, name, size, local_dir, lst, n, served):
    """raw libnfs, local disk, the mount cold without a cache, epochs 1
    and 2 with one, the FUSE floors. Returns {row key: ItemPass (a floor:
    None where not measured)} and "dwrite": the cache disk's write limits."""
    R = ARGS.rr_threads
    src = ",".join(cluster.addrs) + ":/ifs"
    cache_dir, cache_opts = cache_of(size)
    P = {}
    log("random records: raw libnfs")
    P["raw"] = item_pass(cluster, smallread_argv(src, lst, R, "/" + name), n, served, in_ns=True,
                         prewarm_bytes=size)
    log("random records: local disk")
    P["disk"] = item_pass(cluster, smallread_argv(local_dir, lst, R, name), n, served,
                          prewarm_bytes=size)
    log("random records: cold, no cache")
    argv = smallread_argv(ARGS.mnt, lst, R, name)
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect) as m:
        P["nc"] = item_pass(cluster, argv, n, served, mount=m, prewarm_bytes=size)
    shutil.rmtree(cache_dir, ignore_errors=True)
    log("random records: the cache disk's O_DIRECT write rate")
    os.makedirs(ARGS.cache_base, exist_ok=True)
    P["dwrite"] = disk_limits(ARGS.cache_base, size)
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect,
               f"{cache_opts},{DAEMON_PATH}") as m:
        log("random records: epoch 1 (cold)")
        P["e1"] = item_pass(cluster, argv, n, served, mount=m, prewarm_bytes=size, drain=True)
        log("random records: epoch 2 (warm)")
        P["e2"] = item_pass(cluster, argv, n, served, mount=m, prewarm_bytes=size)
    shutil.rmtree(cache_dir, ignore_errors=True)
    work = os.path.dirname(ARGS.mnt)
    P["floor"] = fuse_floor_pass("random records", [f"{name} {size}"], work, argv, n, served,
                                 size)
    P["floor_uring"] = fuse_floor_pass("random records", [f"{name} {size}"], work, argv, n,
                                       served, size, uring=True)
    return P


def table_lines(P, size, n, served):
    """The table: a row per pass, against its baseline."""
    raw, disk, e1 = P["raw"], P["disk"], P["e1"]
    gib = served / GiB

    def line(label, p, ratio):
        s = (f"  {label:<24}{p.mbps:7.0f}{p.rate:8.0f}  {ratio:<18}"
             f"{p.reader_cpu / gib:6.2f} CPU-s/GiB")
        if p.daemon_cpu is None:
            return s
        node_bytes = family_sum(p.delta, "shardfs_node_read_bytes_total")
        hit = p.delta.get("shardfs_cache_read_bytes_total", 0.0)
        return (s + f"  {p.daemon_cpu / gib:5.2f} CPU-s/GiB {1e6 * p.daemon_cpu / n:4.0f} us/rec"
                f"  {node_bytes / size:8.2f}  {hit / p.nbytes:12.2f}  {fmt_mib(p.hwm):>8}")
    return [f"  {'':<24}{'MB/s':>7}{'rec/s':>8}  {'ratio':<18}{'reader CPU':>16}{'daemon CPU':>29}"
            f"  NFS/file  cache/served  peak RSS",
            line("raw libnfs", raw, "(cold baseline)"),
            line("mount cold, no cache", P["nc"], f"{P['nc'].mbps / raw.mbps:.2f} x raw"),
            line("mount epoch 1, cold", e1, f"{e1.mbps / raw.mbps:.2f} x raw"),
            f"  {'':<24}{'':>15}  {limit_note(e1.mbps, raw.mbps, P['dwrite'], 'the file')}",
            line("mount epoch 2, warm", P["e2"], f"{P['e2'].mbps / disk.mbps:.2f} x local disk"),
            line("local disk", disk, "(warm baseline)"),
            "  cold, no cache: a mount without cache_dir; "
            "epoch 2 is the same mount as epoch 1 (page cache dropped); daemon CPU of "
            "epoch 1 includes write-behind until the cache write queue drained; NFS/file = "
            "bytes read from the nodes per byte of the file; cache/served = bytes read from "
            "the cache's files (whole verification blocks) per byte returned to read()"]


def detail_lines(P, n):
    """Per mount pass: calls per record and what the daemon's path did."""
    out = []
    for label, p in (("cold, no cache", P["nc"]), ("epoch 1", P["e1"]), ("epoch 2", P["e2"])):
        d = p.delta
        extra = []
        for key, what in (("shardfs_prefetch_readahead_chunks_total", "readahead chunks"),
                          ("shardfs_prefetch_wasted_chunks_total", "wasted chunks"),
                          ("shardfs_cache_write_bytes_total", "cache writes"),
                          ("shardfs_prefetch_shard_files_total", "whole-file fetches")):
            v = d.get(key, 0.0)
            if v:
                extra.append(f"{what} {v / MiB:.0f} MiB" if key.endswith("bytes_total")
                             else f"{what} {v:.0f}")
        fr = d.get('shardfs_fuse_requests_total{op="read"}', 0.0)
        if fr:
            extra.insert(0, f"FUSE reads avg {d.get('shardfs_fuse_read_bytes_total', 0.0) / fr / 1024:.0f} KiB")
        out.append(f"    {label}: NFS calls/record: {per_item(nfs_calls(d), n)}; FUSE "
                   f"calls/record: {per_item(fuse_calls(d), n)}"
                   + (f"; {', '.join(extra)}" if extra else ""))
        if p.counts:
            out.append(f"      daemon: {counts_per_item(p, n, 'record')}")
        if p.daemon_cpu_sampled:
            out.append(f"      daemon's samples by leaf: "
                       f"{fmt_split(p.daemon_cpu_sampled, n, 'us/record')}")
    return out


def floor_lines(P, n):
    """The FUSE floors and the best ratio to raw a FUSE mount can reach."""
    raw, nc, floor, floor_uring = P["raw"], P["nc"], P["floor"], P["floor_uring"]
    if not floor:
        return ["    FUSE floor: not measured (build/tools/shardfs-fusefloor not built)"]
    out = ["    FUSE floor: build/tools/shardfs-fusefloor answering the same preads from "
           "memory (direct_io, as the mount's first epoch of a file over one chunk), "
           "run by the daemon's worker pool",
           ceiling_line(raw, floor, nc, n, "record")]
    if floor_uring:
        out.append("    FUSE floor, io_uring: the same, with FUSE over io_uring "
                   "(shardfs-fusefloor --uring; the fuse module's enable_uring is on)")
        out.append(ceiling_line(raw, floor_uring, nc, n, "record").replace(
            "the floor's", "the io_uring floor's"))
    return out


def bench(cluster, out):
    """The passes, then the table, the detail per mount pass, the machine's
    CPU per record and the FUSE floors."""
    R = ARGS.rr_threads
    name, size, local_dir, lst, n, served = record_setup(cluster)
    _, cache_opts = cache_of(size)
    out.append(f"random records: one {size / GiB:.2f} GiB file, {n} records of "
               f"{ARGS.rr_record_kb}+-10 KB in one shuffled order, {R} threads; each thread "
               f"preads the next record; page caches dropped before every pass")
    out.append(f"  raw libnfs: one synchronous libnfs context per thread, round-robin over "
               f"{len(cluster.addrs)} nodes; mount: -o nconnect={ARGS.nconnect},{cache_opts}"
               f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''} (other options default)")

    # Which path the mount takes: a file up to prefetch_max is fetched whole
    # on open (shard prefetch); a larger one goes through readahead.
    pmax = prefetch_max()
    if size <= pmax:
        out.append(f"  note: the file is not over prefetch_max ({pmax / GiB:g} GiB): the mount "
                   f"fetches it whole on open, not through readahead as a file over prefetch_max "
                   f"does (for that path here: --mount-opts prefetch_max=64M)")
    P = run_passes(cluster, name, size, local_dir, lst, n, served)
    out.extend(table_lines(P, size, n, served))
    out.extend(detail_lines(P, n))
    out.extend(machine_cpu_lines([("raw libnfs", P["raw"]), ("mount cold, no cache", P["nc"]),
                                  ("mount epoch 1, cold", P["e1"]),
                                  ("mount epoch 2, warm", P["e2"]), ("FUSE floor", P["floor"]),
                                  ("FUSE floor, io_uring", P["floor_uring"])], n, "record",
                                 "rec"))
    out.extend(floor_lines(P, n))
