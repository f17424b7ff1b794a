# SPDX-License-Identifier: Apache-2.0
"""The default mode: cold shards (--files x --file-mib) read whole by --readers
`dd bs=1M` through a default mount, uncapped at every node and at one node,
with a page_cache=always mount beside it and the FUSE floor under it; then,
unless --skip-capped, every node's link capped at --rate, all nodes against
one (--capped-file-mib, --capped-reps).

Baseline: the raw striped libnfs reader (shardfs-rawread) on the same files
with the same files in flight and connections per node. Does not use a
cache_dir (--cache) or small files (--small-files). Threading: the main thread.
"""

import contextlib
import os
import re

from ..accounting import fmt_thread_split
from ..common import ARGS, GiB, MiB, ROOT, log
from ..data import make_files, write_list
from ..floor import FloorMount
from ..mode import Mode
from ..mount import Mount
from ..passes import measure, mount_pass, raw_pass
from ..report import cpu_note, fmt_pass_list, median_mbps, mount_detail, row

MODE = Mode(None, raw_line=True)


def add_arguments(ap):
    ap.add_argument("--capped-file-mib", metavar="M", type=int, default=64, help="size of each file (capped runs)")
    ap.add_argument("--capped-reps", metavar="N", type=int, default=1, help="capped passes per reader")
    ap.add_argument("--skip-capped", action="store_true", help="no capped runs")


def check(args):
    return "--capped-reps >= 1" if args.capped_reps < 1 else None


def prepare(export):
    """The shards, written before the cluster starts (bench finds them there)."""
    make_files(export, "train", ARGS.files, ARGS.file_mib)
    if not ARGS.skip_capped:
        make_files(export, "capped", ARGS.files, ARGS.capped_file_mib)


def config_uncapped(cluster, hosts, names, sizes, label_nodes):
    """Raw, mount and page_cache=always mount passes interleaved (the last
    unless --mount-opts chooses page_cache= or direct_io); returns (raw
    passes, mount passes, detail, page_cache=always passes or None)."""
    paths = ["/shards/" + n for n in names]
    mnt = ARGS.mnt
    raw, mnt_ps, detail = [], [], []
    always = None if re.search(r"(?:^|,)(page_cache=|direct_io)", ARGS.mount_opts) else []
    with contextlib.ExitStack() as stack:
        m = stack.enter_context(Mount(cluster, hosts, mnt, ARGS.nconnect))
        if always is not None:
            ma = stack.enter_context(Mount(cluster, hosts, mnt + "-always", ARGS.nconnect,
                                           "page_cache=always"))
        for rep in range(ARGS.reps):
            log(f"{label_nodes}: pass {rep + 1}/{ARGS.reps}: raw reader")
            raw.append(measure(cluster, raw_pass(cluster, hosts, paths, ARGS.nconnect, ARGS.readers),
                               sum(sizes)))
            log(f"{label_nodes}: pass {rep + 1}/{ARGS.reps}: mount")
            s0 = m.stats()
            mnt_ps.append(measure(cluster, mount_pass(mnt, names, ARGS.readers, sizes), sum(sizes), m.pid))
            s1 = m.stats()
            detail = mount_detail(s0, s1, hosts)
            if always is not None:
                log(f"{label_nodes}: pass {rep + 1}/{ARGS.reps}: mount, page_cache=always")
                always.append(measure(cluster, mount_pass(ma.mnt, names, ARGS.readers, sizes),
                                      sum(sizes), ma.pid))
    return raw, mnt_ps, detail, always


def striping_floor_lines(names, sizes, raw, mps):
    """The FUSE floor under the uncapped mount passes: shardfs-fusefloor
    serving the same files from memory (direct_io, as the mount's first
    epoch of a file over one chunk) to the same dd readers, and the best
    ratio to raw a FUSE mount can reach on this machine (see ceiling_line)."""
    exe = os.path.join(ROOT, "build", "tools", "shardfs-fusefloor")
    if not os.access(exe, os.X_OK):
        return ["  FUSE floor: not measured (build/tools/shardfs-fusefloor not built)"]
    tree = os.path.join(os.path.dirname(ARGS.mnt), "floor-tree")
    write_list(tree, [f"shards/{n} {sz}" for n, sz in zip(names, sizes)])
    floor = []
    with FloorMount(exe, tree):
        for rep in range(ARGS.reps):
            log(f"FUSE floor: pass {rep + 1}/{ARGS.reps}")
            floor.append(measure(None, mount_pass(ARGS.mnt, names, ARGS.readers, sizes),
                                 sum(sizes)))
    gib = lambda ps: sum(p.nbytes for p in ps) / GiB
    per_gib = lambda ps: sum(p.busy for p in ps) / gib(ps)
    raw_m, floor_m = per_gib(raw), per_gib(floor)
    why_not = ""
    if sum(p.busy for p in raw) < 0.9 * sum(p.avail for p in raw):
        why_not = "raw was not CPU-bound"
    elif sum(p.server_cpu for p in mps) / gib(mps) < sum(p.server_cpu for p in raw) / gib(raw):
        why_not = "the mount's reads cost the NFS servers less than raw's"
    return [f"  {'FUSE floor':<28}{median_mbps(floor):7.0f} MB/s   {fmt_pass_list(floor):<20} "
            f"machine {floor_m:.2f} CPU-s/GiB (build/tools/shardfs-fusefloor: the same files "
            f"from memory, direct_io, the daemon's worker pool)",
            f"    a FUSE mount's best here, with every CPU busy: raw's {raw_m:.2f} machine "
            f"CPU-s/GiB (its NFS client work moves into the daemon; the servers' work stays) "
            f"plus the floor's {floor_m:.2f} = {raw_m / (raw_m + floor_m):.2f} x raw"
            + (f" (but {why_not}, so this is no bound)" if why_not else "")]


def uncapped_lines(key, hosts, res, names, sizes):
    """The table of one uncapped configuration (key "all" or "one")."""
    raw, mps, detail, always = res
    nn = len(hosts)
    out = [f"uncapped, {nn} node{'s' if nn > 1 else ''} x {ARGS.nconnect} conns, "
           f"{ARGS.files} files x {ARGS.file_mib} MiB, {ARGS.readers} readers"]
    out.append(row("raw libnfs reader", raw, f"{fmt_pass_list(raw):<20} {cpu_note(raw)}"))
    ratio = median_mbps(mps) / median_mbps(raw)
    goal = " (goal >= 0.80)" if key == "all" else ""
    out.append(row("shardfs mount", mps, f"ratio {ratio:.2f}{goal}"))
    out.append(f"  {'':<28}{'':7}        {fmt_pass_list(mps):<20} {cpu_note(mps)}")
    if mps and mps[-1].threads:
        out.append(f"    the daemon's threads, last pass: {fmt_thread_split(mps[-1].threads)}")
    if always:
        r = median_mbps(always) / median_mbps(raw)
        out.append(row("mount, page_cache=always", always,
                       f"ratio {r:.2f} (every open through the kernel page cache)"))
        out.append(f"  {'':<28}{'':7}        {fmt_pass_list(always):<20} {cpu_note(always)}")
    for d in detail:
        out.append(f"    {d}")
    if key == "all":
        out.extend(striping_floor_lines(names, sizes, raw, mps))
    return out


def config_capped(cluster, hosts, cnames, csizes):
    """Mount and raw passes, alternated, with every link capped: returns
    (raw passes, mount passes, the last mount pass's detail)."""
    cpaths = ["/shards/" + n for n in cnames]
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
            raw.append(measure(cluster, raw_pass(cluster, hosts, cpaths, ARGS.nconnect,
                                                 ARGS.readers), sum(csizes)))
    return raw, mps, detail


def capped_lines(cres, nn):
    """The capped table: all nodes against one, mount and raw."""
    out = [f"capped {ARGS.rate} per node, {ARGS.files} files x {ARGS.capped_file_mib} MiB, "
           f"{ARGS.readers} readers"]
    m4, m1 = median_mbps(cres["all"][1]), median_mbps(cres["one"][1])
    r4, r1 = median_mbps(cres["all"][0]), median_mbps(cres["one"][0])
    out.append(row(f"shardfs mount, {nn} nodes", cres["all"][1]))
    out.append(row("shardfs mount, 1 node", cres["one"][1],
                   f"ratio {m4 / m1:.1f}x (goal >= {0.9 * nn:.1f}x)"))
    out.append(row(f"raw libnfs reader, {nn} nodes", cres["all"][0]))
    out.append(row("raw libnfs reader, 1 node", cres["one"][0], f"ratio {r4 / r1:.1f}x"))
    out.append(f"  mount / raw: {nn} nodes {m4 / r4:.2f}, 1 node {m1 / r1:.2f}")
    for d in cres["all"][2]:
        out.append(f"    {nn}-node mount: {d}")
    return out


def bench(cluster, out):
    """Uncapped at every node and at one, then (unless --skip-capped) capped."""
    names = make_files(cluster.export, "train", ARGS.files, ARGS.file_mib)
    sizes = [ARGS.file_mib * MiB] * ARGS.files
    configs = (("all", cluster.addrs), ("one", cluster.addrs[:1]))
    res = {}
    for key, hosts in configs:
        res[key] = config_uncapped(cluster, hosts, names, sizes,
                                   f"uncapped {len(hosts)} node(s)")
    for key, hosts in configs:
        out.extend(uncapped_lines(key, hosts, res[key], names, sizes))
    if ARGS.skip_capped:
        return
    cnames = make_files(cluster.export, "capped", ARGS.files, ARGS.capped_file_mib)
    csizes = [ARGS.capped_file_mib * MiB] * ARGS.files
    cluster.cap(ARGS.rate)
    cres = {key: config_capped(cluster, hosts, cnames, csizes) for key, hosts in configs}
    cluster.cap("off")
    out.extend(capped_lines(cres, len(cluster.addrs)))
