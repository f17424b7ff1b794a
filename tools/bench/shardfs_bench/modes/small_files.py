# SPDX-License-Identifier: Apache-2.0
"""--small-files: an ImageNet-like tree (--sf-files files of 100-130 KB in
--sf-dirs folders) read by --sf-threads threads of shardfs-smallread, each
opening, reading whole and closing the next file of one shuffled order: the
mount cold without and with an empty cache_dir, warm on the same mount and
remounted.

Baselines: raw libnfs (one synchronous context per thread, round-robin over
the nodes) for the cold rows, with the cache disk's write rate as the limit
of the cold pass that fills the cache; a local-disk copy for the warm rows;
beside them the FUSE floor and the whole machine's CPU per file. Does not
hint (--hints). Threading: the main thread.
"""

import os
import random
import shutil

from ..accounting import steal_note
from ..common import ARGS, MiB, log
from ..data import copy_tree_once, imagenet_specs, make_tree, write_list
from ..disk import disk_limits, disk_read_billing, limit_note
from ..floor import fuse_floor_pass
from ..mode import item_mode
from ..mount import Mount
from ..passes import item_pass, smallread_argv
from ..perf import fmt_split
from ..report import (counts_per_item, family_sum, fmt_mib, fuse_calls, machine_cpu_lines,
                      nfs_calls, per_item)

MODE = item_mode("--small-files")


def add_arguments(ap):
    ap.add_argument("--small-files", action="store_true",
                    help="run the small-file benchmark (PyTorch ImageFolder: open, read whole, close)")
    ap.add_argument("--sf-files", metavar="N", type=int, default=20000, help="--small-files: files")


def check(args):
    return "bad --sf-*/--rr-* value" if args.sf_files < 1 else None


class Tree:
    """The ImageNet-like tree in the export, its local-disk copy, and the
    readers' lists of one shuffled order (the same every pass)."""

    def __init__(self, export):
        N, D = ARGS.sf_files, ARGS.sf_dirs
        self.name = name = f"imagenet-{N}f-{D}d-s{ARGS.seed}"
        self.specs = imagenet_specs(N, D, ARGS.seed)
        make_tree(export, name, self.specs, f"imagenet-{ARGS.seed}")
        self.total = sum(s for _, s in self.specs)
        rels = [r for r, _ in self.specs]
        self.local = os.path.join(ARGS.cache_base, "local-sf", name)
        self.cache_dir = os.path.join(ARGS.cache_base, f"cache-{ARGS.id}")
        log(f"local-disk copy in {self.local}")
        copy_tree_once(os.path.join(export, name), self.local, rels)
        order = list(rels)
        random.Random(ARGS.seed).shuffle(order)
        work = os.path.dirname(ARGS.mnt)
        self.work = work
        self.lst_mnt = os.path.join(work, "sf-list")       # relative to the mount / local copy
        self.lst_nfs = os.path.join(work, "sf-list-nfs")   # relative to the export
        self.lst_local = os.path.join(work, "sf-list-local")
        write_list(self.lst_mnt, [f"{name}/{r}" for r in order])
        write_list(self.lst_nfs, [f"/{name}/{r}" for r in order])
        write_list(self.lst_local, order)
        self.cache_opts = (f"cache_dir={self.cache_dir},"
                           f"cache_size={max(2 * self.total, 1 << 30) // MiB}M")


def mount_rows(cluster, t, raw, disk):
    """The mount's passes: cold without a cache, cold into an empty
    cache_dir, warm on the same mount and remounted. Returns ([(label,
    ItemPass, its baseline)], files in cache_dir after the cold pass, the
    cache disk's write limits)."""
    N, T = ARGS.sf_files, ARGS.sf_threads

    def one(m, label, drain=False):
        log(f"small files: {label}")
        return item_pass(cluster, smallread_argv(ARGS.mnt, t.lst_mnt, T), N, t.total, mount=m,
                         prewarm_bytes=t.total, drain=drain)

    rows = []
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect) as m:
        rows.append(("mount cold, no cache", one(m, "mount cold, no cache"), raw))
    shutil.rmtree(t.cache_dir, ignore_errors=True)
    log("small files: the cache disk's O_DIRECT write rate")
    os.makedirs(ARGS.cache_base, exist_ok=True)
    dwrite = disk_limits(ARGS.cache_base, t.total)
    cache_files = None
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, t.cache_opts) as m:
        rows.append(("mount cold, empty cache_dir",
                     one(m, "mount cold, empty cache_dir", drain=True), raw))
        cache_files = sum(len(fs) for _, _, fs in os.walk(t.cache_dir))
        rows.append(("mount warm, same mount", one(m, "mount warm, same mount"), disk))
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, t.cache_opts) as m:
        rows.append(("mount warm, remounted", one(m, "mount warm, remounted"), disk))
    shutil.rmtree(t.cache_dir, ignore_errors=True)
    return rows, cache_files, dwrite


def rate_lines(raw, disk, rows, dwrite, N):
    """The table: files/s and MB/s of each pass, against its baseline."""
    out = [f"  {'':<30}{'files/s':>9}{'MB/s':>8}  {'ratio':<18}reader CPU",
           f"  {'raw libnfs':<30}{raw.rate:9.0f}{raw.mbps:8.0f}  {'(cold baseline)':<18}"
           f"{1e6 * raw.reader_cpu / N:.0f} us/file"]
    for label, p, ref in rows:
        refname = "raw" if ref is raw else "local disk"
        out.append(f"  {label:<30}{p.rate:9.0f}{p.mbps:8.0f}  "
                   f"{f'{p.rate / ref.rate:.2f} x {refname}':<18}{1e6 * p.reader_cpu / N:.0f} us/file")
        if label == "mount cold, empty cache_dir":
            out.append(f"  {'':<47}{limit_note(p.mbps, raw.mbps, dwrite, 'the same bytes')}")
    out.append(f"  {'local disk':<30}{disk.rate:9.0f}{disk.mbps:8.0f}  {'(warm baseline)':<18}"
               f"{1e6 * disk.reader_cpu / N:.0f} us/file")
    return out


def mount_detail_lines(rows, N):
    """Per mount pass: the daemon's CPU and peak RSS, bytes and calls per file."""
    out = ["  per mount pass (warm, same mount: epoch 2 on the mount that read epoch 1, "
           "page cache dropped; remounted: a new daemon on the same cache_dir):"]
    for label, p, _ in rows:
        d = p.delta
        node_bytes = family_sum(d, "shardfs_node_read_bytes_total")
        hit = d.get("shardfs_cache_read_bytes_total", 0.0)
        sampled = (f" ({1e6 * p.daemon_cpu_sampled / N:.0f} in perf's samples)"
                   if p.daemon_cpu_sampled is not None else "")
        s = (f"    {label}: daemon {1e6 * p.daemon_cpu / N:.0f} us CPU/file{sampled}, peak RSS "
             f"{fmt_mib(p.hwm)}; NFS bytes/byte read {node_bytes / p.nbytes:.2f}")
        if hit:
            s += f", cache bytes/byte read {hit / p.nbytes:.2f}"
        out.append(s)
        out.append(f"      NFS calls/file: {per_item(nfs_calls(d), N)}")
        out.append(f"      FUSE calls/file: {per_item(fuse_calls(d), N)}")
        if p.counts:
            out.append(f"      daemon: {counts_per_item(p, N, 'file')}")
        if p.daemon_cpu_sampled:
            out.append(f"      daemon's samples by leaf: {fmt_split(p.daemon_cpu_sampled, N, 'us/file')}")
    return out


def floor_lines(floor, N):
    if not floor:
        return ["  FUSE floor: not measured (build/tools/shardfs-fusefloor not built)"]
    out = [f"  FUSE floor (build/tools/shardfs-fusefloor: the same tree answered from "
           f"memory by the daemon's worker pool, as with -o active_threads=8): {floor.rate:.0f} "
           f"files/s, daemon {1e6 * floor.daemon_cpu / N:.0f} us CPU/file"
           + (f", {counts_per_item(floor, N, 'file')}" if floor.counts else "") +
           "; what the daemon's FUSE loop pays per file here before its own work"]
    if floor.daemon_cpu_sampled:
        out.append(f"    its samples by leaf: {fmt_split(floor.daemon_cpu_sampled, N, 'us/file')}")
    return out


def bench(cluster, out):
    """Raw libnfs and local disk, the mount's four passes, the FUSE floor;
    the table, then per pass what the daemon did and the machine's CPU."""
    hosts = cluster.addrs
    N, D, T = ARGS.sf_files, ARGS.sf_dirs, ARGS.sf_threads
    t = Tree(cluster.export)
    total = t.total
    out.append(f"small files: {N} files of 100-130 KB ({total / 1e9:.2f} GB) in {D} folders, "
               f"{T} threads; each thread opens, reads whole and closes the next file of one "
               f"shuffled order (the same every pass); page caches dropped before every pass")
    out.append(f"  raw libnfs: one synchronous libnfs context per thread, round-robin over "
               f"{len(hosts)} nodes; mount: -o nconnect={ARGS.nconnect}"
               f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''}, the cache passes add "
               f"{t.cache_opts}; local-disk copy on the cache's filesystem")
    log("small files: raw libnfs")
    raw = item_pass(cluster, smallread_argv(",".join(hosts) + ":/ifs", t.lst_nfs, T), N, total,
                    in_ns=True, prewarm_bytes=total)
    log("small files: local disk")
    disk = item_pass(cluster, smallread_argv(t.local, t.lst_local, T), N, total,
                     prewarm_bytes=total)
    rows, cache_files, dwrite = mount_rows(cluster, t, raw, disk)
    floor = fuse_floor_pass("small files", [f"{t.name}/{r} {n}" for r, n in t.specs], t.work,
                            smallread_argv(ARGS.mnt, t.lst_mnt, ARGS.sf_threads), len(t.specs),
                            total, total)
    out.extend(rate_lines(raw, disk, rows, dwrite, N))
    out.extend(mount_detail_lines(rows, N))
    if cache_files is not None:
        out.append(f"  cache_dir after the cold pass: {cache_files} files = "
                   f"{cache_files / N:.3f} per image")
    out.extend(floor_lines(floor, N))
    out.extend(machine_cpu_lines([("raw libnfs", raw)] + [(label, p) for label, p, _ in rows]
                                 + [("local disk", disk), ("FUSE floor", floor)], N, "file",
                                 "file"))
    log("CPU time the cache disk's reads bill to other tasks")
    rate, billed = disk_read_billing(ARGS.cache_base, total // N)
    out.append(f"  the cache disk's O_DIRECT reads of {total // N // 1000} KB (one per warm file) "
               f"bill {1e6 * billed:.0f} us of CPU per read to whatever runs ({rate:.0f} reads/s "
               f"from one thread; a spinner per CPU, quiet and during the reads; {steal_note()}): "
               f"the warm passes' CPU per file above includes up to that much of the "
               f"host's disk work")
    # No ceiling line here: raw's opens cost the servers more than the
    # mount's (the mount answers LOOKUPs from its listings), so raw's CPU
    # per file is no floor under a mount's.
