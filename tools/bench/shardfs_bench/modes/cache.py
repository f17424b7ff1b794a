# SPDX-License-Identifier: Apache-2.0
"""--cache: the training read pattern (each reader takes the next shard of a
shuffled epoch and reads it whole) over --epochs epochs through a mount with a
cache_dir the dataset fits in (lru), then two epochs with pin and a cache of
half the dataset.

Baselines: the raw libnfs reader for the cold epoch, with the cache disk's
write rate as its limit, and the same epoch without a cache for the daemon's
CPU; local disk (the same files) for the warm epochs. Does not mix datasets
or policies in one mount (--policy). Threading: the main thread.
"""

import os
import shutil

from ..accounting import steal_note
from ..common import ARGS, MiB, log
from ..data import local_shards, make_files
from ..disk import disk_billing, disk_limits, limit_note
from ..mode import Mode
from ..mount import DAEMON_PATH, Mount, settle
from ..passes import measure, mount_pass, raw_pass
from ..perf import fmt_split
from ..report import counts_per_item, stat_delta

MODE = Mode("--cache", raw_line=True, cache_base=True)


def add_arguments(ap):
    ap.add_argument("--cache", action="store_true",
                    help="run the cache benchmark (epochs; lru and pin) instead of the striping one")
    ap.add_argument("--epochs", metavar="E", type=int, default=3, help="--cache: epochs with lru")


class Baselines:
    """What the epochs are set against: raw libnfs (the cold epoch), local
    disk (the warm ones), the mount without a cache (the cold epoch's daemon
    CPU), the cache disk's write limits (disk_limits) and the CPU-s per GiB
    its writes bill to whatever runs (disk_billing)."""

    def __init__(self, raw, disk, nocache, dwrite, billed):
        self.raw, self.disk, self.nocache = raw, disk, nocache
        self.dwrite, self.billed = dwrite, billed


def cpu_gib(p):
    return p.daemon_cpu / (p.nbytes / (1 << 30))


def counts_mib(p):
    """'; ' and the daemon's context switches and page faults per MiB read, or ''."""
    c = counts_per_item(p, p.nbytes / MiB, "MiB")
    return "; " + c if c else ""


def epochs(cluster, names, sizes, opts, n_epochs, label):
    """n_epochs epochs of the shuffled shards through one mount with opts,
    each after the last one's write-behind drained. Returns per epoch (Pass,
    hit ratio, bytes from NFS, bytes written to the cache, cache used, bytes
    hit)."""
    rows = []
    if "cache_dir=" in opts:  # the daemon's path, also for warm epochs
        opts = f"{opts},{DAEMON_PATH}"
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, opts) as m:
        for e in range(n_epochs):
            log(f"{label}: epoch {e + 1}/{n_epochs}")
            s0 = m.stats()
            p = measure(cluster, mount_pass(ARGS.mnt, names, ARGS.readers, sizes,
                                            shuffle_seed=100 + e), sum(sizes), m.pid)
            # Let write-behind settle so the next epoch sees it all.
            settle(m, warn=False)
            s1 = m.stats()
            hit = stat_delta(s0, s1, "shardfs_cache_hit_bytes_total")
            miss = stat_delta(s0, s1, "shardfs_cache_miss_bytes_total")
            rows.append((p, hit / (hit + miss) if hit + miss else 0.0,
                         stat_delta(s0, s1, "shardfs_prefetch_fetched_bytes_total"),
                         stat_delta(s0, s1, "shardfs_cache_write_bytes_total"),
                         s1.get("shardfs_cache_used_bytes", 0), hit))
    return rows


def sampled_lines(p, nocache):
    """With --perf: the cold epoch's daemon in perf's samples, against the
    same epoch without a cache."""
    if not (p.daemon_cpu_sampled and nocache.daemon_cpu_sampled):
        return []
    out = [f"           in perf's samples of the daemon: "
           f"{p.daemon_cpu_sampled:.2f} against "
           f"{nocache.daemon_cpu_sampled:.2f} CPU-s = "
           f"{p.daemon_cpu_sampled / nocache.daemon_cpu_sampled:.2f} x"]
    for what, q in (("with the cache", p), ("without", nocache)):
        out.append(f"             by leaf, {what}: "
                   f"{fmt_split(q.daemon_cpu_sampled, q.nbytes / (1 << 30), 'CPU-s/GiB', 1, 2)}")
    # A fresh daemon's first touch of its pool is paid once
    # (SAMPLE_PARTS), not per GiB of a longer epoch.
    net = [q.daemon_cpu_sampled - q.daemon_cpu_sampled.part("first touch")
           for q in (p, nocache)]
    if net[1] > 0:
        out.append(f"             net of the first touch: {net[0]:.2f} against "
                   f"{net[1]:.2f} CPU-s = {net[0] / net[1]:.2f} x")
    return out


def cold_epoch_lines(p, written, hit, ref):
    """The lines under the cold epoch that fills the cache (issue 9): its
    limit, the daemon's CPU against the same epoch without a cache, and the
    part of it the cache disk's writes may have billed."""
    nocache = ref.nocache
    out = [f"           {limit_note(p.mbps, ref.raw.mbps, ref.dwrite, 'the dataset')}",
           f"           read back from the cache during it: {hit / MiB:.0f} MiB; "
           f"daemon CPU {cpu_gib(p):.2f} against {cpu_gib(nocache):.2f} CPU-s/GiB "
           f"for the same epoch without a cache ({nocache.mbps:.0f} MB/s) = "
           f"{cpu_gib(p) / max(cpu_gib(nocache), 1e-9):.2f} x (goal <= 1.10)"]
    out.extend(sampled_lines(p, nocache))
    # What the disk's writes billed to the running tasks
    # (disk_billing), the daemon's part by its share of the
    # busy CPU time.
    share = p.daemon_cpu / max(p.busy, 1e-9)
    extra = ref.billed * written / (1 << 30) * share / (p.nbytes / (1 << 30))
    out.append(f"           the cache disk's writes bill {ref.billed:.2f} CPU-s per GiB "
               f"written to whatever runs (measured beside with a spinner per CPU; "
               f"{steal_note()}): up to {extra:.2f} CPU-s/GiB of the "
               f"daemon's figure, at its {share:.0%} of the busy time, is the disk's "
               f"work billed to it (an estimate: perf samples bound it from below)")
    return out


def epoch_lines(rows, ref):
    """One line per epoch against its baseline (the first: raw libnfs, the
    others: local disk), and the cold epoch's notes."""
    out = []
    for e, (p, ratio, fetched, written, used, hit) in enumerate(rows):
        base = ref.raw if e == 0 else ref.disk
        name = "raw libnfs" if e == 0 else "local disk"
        goal = "0.80" if e == 0 else "0.90"
        out.append(f"  epoch {e + 1}: {p.mbps:6.0f} MB/s = {p.mbps / base.mbps:.2f} x {name} "
                   f"(goal >= {goal}); hit ratio {ratio:.2f}; from NFS {fetched / MiB:.0f} MiB; "
                   f"cache writes {written / MiB:.0f} MiB; daemon {cpu_gib(p):.2f} "
                   f"CPU-s/GiB{counts_mib(p)}")
        if e == 0:
            out.extend(cold_epoch_lines(p, written, hit, ref))
    return out


def baselines(cluster, names, sizes, local, out):
    """Local disk, raw libnfs, the cache disk's limits and billing, and the
    mount without a cache; appends their lines to out."""
    total, T = sum(sizes), ARGS.readers
    log("local disk baseline")
    disk = measure(cluster, mount_pass(local, names, T, sizes, shuffle_seed=1, subdir=""), total)
    log("raw libnfs baseline")
    raw = measure(cluster, raw_pass(cluster, cluster.addrs, ["/shards/" + n for n in names],
                                    ARGS.nconnect, T), total)
    out.append(f"  {'local disk (same files)':<34}{disk.mbps:7.0f} MB/s")
    out.append(f"  {'raw libnfs reader':<34}{raw.mbps:7.0f} MB/s")
    log("cache disk write limit")
    dwrite = disk_limits(ARGS.cache_base, total)
    log("CPU time the cache disk's writes bill to other tasks")
    billed = disk_billing(ARGS.cache_base, total)
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect) as m:
        log("no cache: the first epoch's order")
        nocache = measure(cluster, mount_pass(ARGS.mnt, names, T, sizes, shuffle_seed=100),
                          total, m.pid)
    out.append(f"  {'mount without a cache, cold':<34}{nocache.mbps:7.0f} MB/s = "
               f"{nocache.mbps / raw.mbps:.2f} x raw libnfs; daemon {cpu_gib(nocache):.2f} CPU-s/GiB"
               f"{counts_mib(nocache)}")
    return Baselines(raw, disk, nocache, dwrite, billed)


def bench(cluster, out):
    """The training read pattern over E epochs with the local cache, next to
    local disk and the raw libnfs reader; then pin with a dataset twice the cache."""
    names = make_files(cluster.export, "epoch", ARGS.files, ARGS.file_mib)
    sizes = [ARGS.file_mib * MiB] * ARGS.files
    total = sum(sizes)
    base = ARGS.cache_base
    local = local_shards(cluster.export, names, ARGS.file_mib)
    cache_dir = os.path.join(base, "cache")
    shutil.rmtree(cache_dir, ignore_errors=True)
    out.append(f"cache epochs: {ARGS.files} shards x {ARGS.file_mib} MiB, {ARGS.readers} readers, "
               f"each reads the next shard of a shuffled epoch whole (dd bs=1M); cache and local "
               f"copy on {base}; page caches dropped before every epoch")
    ref = baselines(cluster, names, sizes, local, out)
    shutil.rmtree(cache_dir, ignore_errors=True)
    lru = epochs(cluster, names, sizes,
                 f"cache_dir={cache_dir},cache_size={2 * total // MiB}M,cache_policy=lru",
                 ARGS.epochs, "lru")
    out.append(f"cache_policy=lru, cache_size {2 * total // MiB} MiB (dataset fits):")
    out.extend(epoch_lines(lru, ref))
    shutil.rmtree(cache_dir, ignore_errors=True)
    half = total // 2
    pin = epochs(cluster, names, sizes,
                 f"cache_dir={cache_dir},cache_size={half // MiB}M,cache_policy=pin", 2, "pin")
    out.append(f"cache_policy=pin, cache_size {half // MiB} MiB = dataset / 2:")
    out.extend(epoch_lines(pin, ref))
    p2, ratio2, _, written2, _, _ = pin[1]
    out.append(f"  pin epoch 2: hit ratio {ratio2:.2f} vs cache/dataset 0.50 -> {ratio2 / 0.5:.2f} "
               f"(goal >= 0.95); cache writes {written2 / total:.1%} of the dataset (goal <= 10%)")
    shutil.rmtree(cache_dir, ignore_errors=True)
