# SPDX-License-Identifier: Apache-2.0
"""--passthrough: warm reads of a cached dataset through kernel passthrough:
shards (--files x --file-mib) read whole by --readers dd and then by one, and
shuffled records of one file (--rr-*) by --rr-threads threads.

Baselines: the same files on local disk, and the daemon's own path (the same
cache, mounted with mount.DAEMON_PATH: no passthrough, verified chunks read
unchecked as under the defaults; measured after the scrubber's pass at mount). Does not measure the cold epoch: it only
fills the cache (and shardfs-warm completes every file). Threading: the main
thread.
"""

import os
import shutil

from ..common import ARGS, GiB, MiB, log, run, tool
from ..data import local_shards, make_files, record_setup
from ..mode import item_mode
from ..mount import DAEMON_PATH, Mount, scrubbed, settle
from ..passes import item_pass, measure, mount_pass, smallread_argv
from ..report import stat_delta

MODE = item_mode("--passthrough")


def add_arguments(ap):
    ap.add_argument("--passthrough", action="store_true",
                    help="run the passthrough benchmark: warm shards (--files x --file-mib, "
                         "--readers and 1) and records (--rr-*) with passthrough, against local "
                         "disk and the daemon's own path")


def bench(cluster, out):
    """Warm reads of a cached data set through kernel passthrough (issue 42),
    next to the same files on local disk and the daemon's own path: shards
    (T readers and one, a single cat) and shuffled records in one file."""
    hosts = cluster.addrs
    T, R = ARGS.readers, ARGS.rr_threads
    names = make_files(cluster.export, "pt", ARGS.files, ARGS.file_mib)
    sizes = [ARGS.file_mib * MiB] * ARGS.files
    total = sum(sizes)
    local = local_shards(cluster.export, names, ARGS.file_mib)
    rname, rsize, rlocal, lst, n, served = record_setup(cluster)
    cache_dir = os.path.join(ARGS.cache_base, f"cache-pt-{ARGS.id}")
    shutil.rmtree(cache_dir, ignore_errors=True)
    copts = f"cache_dir={cache_dir},cache_size={(total + rsize) * 2 // MiB}M"
    out.append(f"passthrough: {ARGS.files} shards x {ARGS.file_mib} MiB read whole (dd bs=1M; "
               f"{T} readers, then 1: a single cat), and {n} shuffled records of "
               f"{ARGS.rr_record_kb}+-10 KB in one {rsize / GiB:.2f} GiB file ({R} threads); "
               f"warm (in the cache), page caches dropped before every pass; cache and local "
               f"copies on {ARGS.cache_base}; -o {copts}{',' + ARGS.mount_opts if ARGS.mount_opts else ''}"
               f" (+passthrough, or +{DAEMON_PATH} for the daemon's rows)")

    def passes(mnt, subdir, rdir, m=None):
        pid = m.pid if m else None
        s0 = m.stats() if m else {}
        many = measure(cluster, mount_pass(mnt, names, T, sizes, shuffle_seed=7, subdir=subdir),
                       total, pid)
        one = measure(cluster, mount_pass(mnt, names, 1, sizes, shuffle_seed=7, subdir=subdir),
                      total, pid)
        rec = item_pass(cluster, smallread_argv(rdir, lst, R, rname), n, served, mount=m,
                        prewarm_bytes=rsize)
        opens = stat_delta(s0, m.stats(), "shardfs_passthrough_opens_total") if m else 0
        return many, one, rec, opens

    log("passthrough: local disk")
    disk = passes(local, "", rlocal)
    with Mount(cluster, hosts, ARGS.mnt, ARGS.nconnect, copts + ",passthrough") as m:
        log("passthrough: filling the cache")
        # A cold epoch leaves out chunks its writes could not keep up with
        # (shardfs_cache_write_skipped_bytes_total); shardfs-warm completes
        # every file, so that every warm open below may be passthrough.
        measure(cluster, mount_pass(ARGS.mnt, names, T, sizes, shuffle_seed=1), total, m.pid)
        run([tool("shardfs-warm", "cmd"), "-q", os.path.join(ARGS.mnt, rname)]
            + [os.path.join(ARGS.mnt, "shards", x) for x in names])
        settle(m)
        log("passthrough: warm passes")
        pt = passes(ARGS.mnt, "shards", ARGS.mnt, m)
    with Mount(cluster, hosts, ARGS.mnt, ARGS.nconnect, f"{copts},{DAEMON_PATH}") as m:
        log("passthrough: the same cache without passthrough")
        scrubbed(m)
        today = passes(ARGS.mnt, "shards", ARGS.mnt, m)
    shutil.rmtree(cache_dir, ignore_errors=True)

    out.append(f"  {'':<34}{'MB/s':>7}  {'x local disk':<14}{'daemon CPU':>20}  passthrough opens")

    def line(label, p, ref, nbytes, opens=None):
        cpu = "" if opens is None else f"{p.daemon_cpu / (nbytes / GiB):6.3f} CPU-s/GiB"
        ratio = f"{p.mbps / ref.mbps:.2f}" if ref is not p else "(baseline)"
        return (f"  {label:<34}{p.mbps:7.0f}  {ratio:<14}{cpu:>20}"
                f"  {'' if opens is None else f'{opens:.0f}'}")
    for i, what in ((0, f"shards, {T} readers"), (1, "shards, 1 reader (cat)")):
        out.append(line(f"local disk, {what}", disk[i], disk[i], total))
        out.append(line(f"passthrough, {what}", pt[i], disk[i], total, pt[3] if i == 0 else 0))
        out.append(line(f"daemon (no passthrough), {what}", today[i], disk[i], total, 0))
    out.append(f"  single cat of local disk: {disk[1].mbps:.0f} MB/s; {T} readers of it "
               f"{disk[0].mbps / disk[1].mbps:.2f} x, of passthrough "
               f"{pt[0].mbps / disk[1].mbps:.2f} x, of the daemon "
               f"{today[0].mbps / disk[1].mbps:.2f} x")
    out.append(line(f"local disk, records ({R} threads)", disk[2], disk[2], served))
    out.append(line("passthrough, records", pt[2], disk[2], served, 0))
    out.append(line("daemon (no passthrough), records", today[2], disk[2], served, 0))
    out.append(f"  records: daemon CPU {1e6 * pt[2].daemon_cpu / n:.1f} us/record with "
               f"passthrough, {1e6 * today[2].daemon_cpu / n:.1f} without; passthrough opens "
               f"count all three passes of the passthrough mount ({pt[3]:.0f})")
