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

from ..common import ARGS, GiB, ROOT, log
from ..data import write_list
from ..floor import FloorMount
from ..mount import Mount
from ..passes import measure, mount_pass, raw_pass
from ..report import fmt_pass_list, median_mbps, mount_detail


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
