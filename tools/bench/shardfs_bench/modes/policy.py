# SPDX-License-Identifier: Apache-2.0
"""--policy: the cache policy's five workloads (a dataset of twice the cache, one
dataset after another, a scan between epochs, two jobs at once, a dataset that
fits) under auto (the default), lru and pin, each on a fresh cache_dir; per
epoch the share of a dataset's bytes read from the cache and the bytes
admitted, as a share of the dataset.

Baseline: what a perfect policy reaches (the cache:dataset ratio, nothing
written again). Does not measure speed. Threading: the datasets of one epoch
are read by one thread each.
"""

import os
import shutil
import threading
import time

from ..common import ARGS, BenchError, MiB, log
from ..data import make_dataset
from ..mode import Mode
from ..mount import Mount, settle
from ..passes import drop_caches, mount_pass
from ..report import stat_delta

MODE = Mode("--policy", raw_line=True, cache_base=True, tools=("shardfs",))


def add_arguments(ap):
    ap.add_argument("--policy", action="store_true",
                    help="run the cache-policy benchmark: five workloads (a dataset larger than "
                    "the cache, one dataset after another, a scan between epochs, two jobs at "
                    "once, a dataset that fits) under auto, lru and pin")
    ap.add_argument("--pol-cache-mib", metavar="M", type=int, default=256,
                    help="--policy: cache_size in MiB")
    ap.add_argument("--pol-shard-mib", metavar="M", type=int, default=8,
                    help="--policy: size of each file in MiB")


POLICIES = ("auto", "lru", "pin")


def datasets(export):
    """The workloads' datasets, written once, each sized as a share of the
    cache: {key: (name, [file names])}."""
    C, S = ARGS.pol_cache_mib, ARGS.pol_shard_mib

    def ds(name, ratio):
        n = max(1, round(ratio * C / S))
        return name, make_dataset(export, name, n, S)
    return {"big": ds("polbig", 2.0), "a": ds("pola", 0.75), "b": ds("polb", 0.75),
            "j": ds("polj", 0.6), "p": ds("polp", 0.75), "q": ds("polq", 0.75),
            "fit": ds("polfit", 0.5)}


def size(d):
    return len(d[1]) * ARGS.pol_shard_mib * MiB


def read_at_once(passes):
    """Run the mount_pass functions passes, one thread each; raises the
    first one's BenchError."""
    errs = []

    def go(fn):
        try:
            fn()
        except BenchError as e:
            errs.append(str(e))
    ts = [threading.Thread(target=go, args=(fn,)) for fn in passes]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errs:
        raise BenchError(errs[0])


def epochs_of(m, sets, seed, readers=None, shuffle=True):
    """One epoch of each dataset in sets, all at once (page caches
    dropped first), by readers readers each (--readers when None). Returns
    {name: (hit share, admitted / size)}."""
    S = ARGS.pol_shard_mib
    s0 = m.stats()
    drop_caches()
    read_at_once([mount_pass(ARGS.mnt, names, readers or ARGS.readers, [S * MiB] * len(names),
                             shuffle_seed=seed if shuffle else None, subdir=name)
                  for name, names in sets])
    settle(m)
    s1 = m.stats()
    res = {}
    for name, names in sets:
        lab = f'{{dataset="/ifs/{name}"}}'
        hit = stat_delta(s0, s1, "shardfs_cache_dataset_hit_bytes_total" + lab)
        miss = stat_delta(s0, s1, "shardfs_cache_dataset_miss_bytes_total" + lab)
        adm = stat_delta(s0, s1, "shardfs_cache_dataset_admitted_bytes_total" + lab)
        res[name] = (hit / (hit + miss) if hit + miss else 0.0,
                     adm / (len(names) * S * MiB))
    return res


def reading_window(m):
    """Seconds after which a dataset no longer counts as being read (auto)."""
    return m.stats().get("shardfs_cache_idle_seconds", 600) / 20


def scenario(cluster, policy, fn, D):
    """fn(m, D) on a fresh mount and cache_dir under policy; its result."""
    base = os.path.join(ARGS.cache_base, "policy")
    cache_dir = os.path.join(base, policy)
    shutil.rmtree(cache_dir, ignore_errors=True)
    os.makedirs(base, exist_ok=True)
    opts = f"cache_dir={cache_dir},cache_size={ARGS.pol_cache_mib}M"
    if policy != "auto":
        opts += f",cache_policy={policy}"
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, opts) as m:
        r = fn(m, D)
    shutil.rmtree(cache_dir, ignore_errors=True)
    return r


def s1(m, D):  # a dataset of 2 x the cache, three epochs
    big = D["big"]
    e = [epochs_of(m, [big], 10 + k)[big[0]] for k in range(3)]
    return [e[1][0], e[2][0], max(e[1][1], e[2][1])]


def s2(m, D):  # A (0.75) two epochs, then B (0.75) three
    a, b = D["a"], D["b"]
    for k in range(2):
        epochs_of(m, [a], 20 + k)
    e = [epochs_of(m, [b], 30)[b[0]]]
    time.sleep(reading_window(m) + 1)  # A is no longer being read
    e += [epochs_of(m, [b], 31 + k)[b[0]] for k in range(2)]
    return [e[2][0], max(e[1][1], e[2][1])]


def s3(m, D):  # J (0.6) twice, a scan of 2 x the cache, J again
    j, big = D["j"], D["big"]
    for k in range(2):
        epochs_of(m, [j], 40 + k)
    sc = epochs_of(m, [big], 0, readers=1, shuffle=False)[big[0]]
    e3 = epochs_of(m, [j], 42)[j[0]]
    return [e3[0], sc[1]]


def s4(m, D):  # P and Q (0.75 each) read together, three epochs
    p, q = D["p"], D["q"]
    e = [epochs_of(m, [p, q], 50 + k) for k in range(3)]
    share = (ARGS.pol_cache_mib / 2) / (size(p) / MiB)
    worst = min(min(e[k][p[0]][0], e[k][q[0]][0]) for k in (1, 2)) / share
    written = max(e[k][x[0]][1] for k in (1, 2) for x in (p, q))
    return [worst, written]


def s5(m, D):  # a dataset of half the cache
    fit = D["fit"]
    e = [epochs_of(m, [fit], 60 + k)[fit[0]] for k in range(2)]
    return [e[1][0], e[1][1]]


def table_rows(D):
    """(label, the scenario that fills it or None for the one above, the
    cell of its result)."""
    C = ARGS.pol_cache_mib
    big_ratio = C / (size(D["big"]) / MiB)
    return [
        ("1: dataset 2 x cache: epoch 2 hit / cache:dataset (goal >= 0.95)", s1,
         lambda r: f"{r[0] / big_ratio:.2f}"),
        ("   epoch 3 hit / cache:dataset", None, lambda r: f"{r[1] / big_ratio:.2f}"),
        ("   written per epoch 2-3, of the dataset (goal <= 10%)", None, lambda r: f"{r[2]:.0%}"),
        ("2: B after A (0.75 each): B's epoch 3 hit (goal >= 0.95)", s2, lambda r: f"{r[0]:.2f}"),
        ("   B written per epoch 2-3, of B", None, lambda r: f"{r[1]:.0%}"),
        ("3: J (0.6), a scan of 2 x cache, J: J's hit after (goal >= 0.95)", s3,
         lambda r: f"{r[0]:.2f}"),
        ("   the scan's bytes admitted, of the scan", None, lambda r: f"{r[1]:.0%}"),
        ("4: P and Q at once (0.75 each): worst epoch 2-3 hit / (cache/2:dataset) (>= 0.9)", s4,
         lambda r: f"{r[0]:.2f}"),
        ("   written per epoch 2-3, worst of P and Q (goal <= 10%)", None, lambda r: f"{r[1]:.0%}"),
        ("5: dataset 0.5 x cache: epoch 2 hit (goal >= 0.99)", s5, lambda r: f"{r[0]:.2f}"),
        ("   epoch 2 written, of the dataset", None, lambda r: f"{r[1]:.0%}"),
    ]


def bench(cluster, out):
    """The five workloads of the cache policy (issue 38) under auto (the
    default), lru and pin, each on a fresh cache_dir: per epoch, the share
    of a dataset's bytes read from the cache and the bytes admitted into the
    cache as a share of the dataset."""
    D = datasets(cluster.export)
    rows = table_rows(D)
    results = {}
    for label, fn, _ in rows:
        if fn is None:
            continue
        for pol in POLICIES:
            log(f"policy: {label.split(':')[0]} under {pol}")
            results[(fn, pol)] = scenario(cluster, pol, fn, D)
    out.append(f"cache policy: cache_size {ARGS.pol_cache_mib} MiB, shards of "
               f"{ARGS.pol_shard_mib} MiB, {ARGS.readers} readers per dataset "
               f"(dd bs=1M, a shuffled order per epoch), page caches dropped before every epoch; "
               f"auto is the default (no cache_policy given), lru and pin set by hand; hit = the "
               f"dataset's bytes from the cache / its bytes read; written = bytes admitted into "
               f"the cache / the dataset's size")
    out.append(f"  {'':<84}" + "".join(f"{pol:>8}" for pol in POLICIES))
    fn = None
    for label, f, fmt in rows:
        fn = f or fn
        out.append(f"  {label:<84}" + "".join(f"{fmt(results[(fn, pol)]):>8}" for pol in POLICIES))
