# SPDX-License-Identifier: Apache-2.0
"""--fleet K: K client nodes (fleet_clients.py), each with its own daemon and
empty cache, read the same dataset (--fleet-files x --fleet-file-mib) against
--nodes nodes capped at --rate, cold at once (epoch 1, then 2 from the caches)
for K = 1, 2, 4, ... up to K, then the largest K started --fleet-stagger apart.

Baselines: the caps, and the raw libnfs reader alone from one client. Does
not warm (--fleet-warm). Threading: see fleet_clients.fleet_epoch.
"""

import contextlib
import os
import shutil
import statistics

from ..common import ARGS, GiB, MiB, log, rate_mb_s
from ..data import make_dataset
from ..fleet_clients import (FLEET_DIR, FleetClient, fleet_client_lines, fleet_epoch,
                             fleet_load_lines)
from ..mode import Mode
from ..passes import drop_caches, raw_pass
from ..report import daemon_log_lines, fmt_mib

MODE = Mode("--fleet", group="fleet", header="rows", cache_base=True)


def add_arguments(ap):
    ap.add_argument("--fleet", metavar="K", default=None,
                    help="run the fleet benchmark: K client nodes (network namespaces, each "
                    "with its own daemon and cache) against --nodes nodes each capped at --rate, "
                    "cold at once (epoch 1, then 2 from the caches), for K = 1, 2, 4, ... up to "
                    "K (or the comma list given), then the largest K started --fleet-stagger "
                    "apart; beside the raw libnfs reader from one client")
    ap.add_argument("--fleet-stagger", metavar="S", type=float, default=5.0,
                    help="--fleet: seconds between the staggered clients' starts")


def check(args):
    if args.fleet is None:
        return None
    if fleet_ks(args.fleet) is None:
        return "bad --fleet (want K, 1..64, or a comma list of them)"
    if (args.fleet_files < 1 or args.fleet_file_mib < 1 or args.fleet_stagger < 0
            or rate_mb_s(args.rate) is None):
        return "bad --fleet-* value or --rate"
    return None


def clients(args):
    """The fleet client namespaces: one per client of the largest K."""
    return fleet_ks(args.fleet)[-1]


def fleet_ks(spec):
    """--fleet: 'K' -> 1, 2, 4, ... below K, and K; 'A,B,...' -> those.
    Returns the sorted list, or None when spec is bad."""
    try:
        if "," in spec:
            ks = sorted({int(x) for x in spec.split(",")})
        else:
            k = int(spec)
            ks = sorted({1 << i for i in range(k.bit_length()) if 1 << i < k} | {k})
    except ValueError:
        return None
    return ks if ks and ks[0] >= 1 and ks[-1] <= 64 else None


def fleet_raw(cluster, names, total):
    """The raw striped libnfs reader alone from fleet client 1, the same
    files and parallelism as one client's mount: MB/s."""
    paths = [f"/{FLEET_DIR}/{n}" for n in names]
    drop_caches()
    nbytes, secs = raw_pass(cluster, cluster.addrs, paths, ARGS.nconnect, ARGS.readers,
                            client=1)()
    return nbytes / 1e6 / secs


def fleet_row(k, how, epoch, r, cap_mbps, raw_mbps, dataset):
    rates = [row["mbps"] for row in r.rows]
    nfs = [row["nfs"] / dataset for row in r.rows]
    cpu = sum(row["cpu"] for row in r.rows) / (r.nbytes / GiB)
    hwm = max((row["hwm"] or 0) for row in r.rows)
    per = (f"{statistics.mean(rates):6.1f} ({min(rates):.1f}..{max(rates):.1f})"
           if len(rates) > 1 else f"{rates[0]:6.1f}")
    nfs_s = (f"{min(nfs):.2f}..{max(nfs):.2f}" if len(nfs) > 1 and max(nfs) - min(nfs) >= 0.005
             else f"{nfs[0]:.2f}")
    return (f"  {k:>2}  {how:<16}{epoch:>5}{r.mbps:11.1f}{r.mbps / cap_mbps:8.2f}"
            f"{r.mbps / raw_mbps:7.2f}  {per:<28}{r.fairness():7.2f}  {nfs_s:<11}"
            f"{cpu:9.2f}{fmt_mib(hwm):>10}")


FLEET_HEAD = (f"  {'K':>2}  {'start':<16}{'epoch':>5}{'aggregate':>11}{'x caps':>8}{'x raw':>7}  "
              f"{'per client MB/s (min..max)':<28}{'max/min':>7}  {'NFS/data':<11}"
              f"{'CPU-s/GiB':>9}{'peak RSS':>10}")


def bench(cluster, out):
    """--fleet: for each K, K clients cold at once (epoch 1, then epoch 2 from
    their caches); then the largest K again, started --fleet-stagger apart."""
    names = make_dataset(cluster.export, FLEET_DIR, ARGS.fleet_files, ARGS.fleet_file_mib)
    sizes = [ARGS.fleet_file_mib * MiB] * len(names)
    dataset = sum(sizes)
    work = os.path.dirname(ARGS.mnt)
    nodes = len(cluster.addrs)
    per = rate_mb_s(ARGS.rate)
    cap = nodes * per
    ks = fleet_ks(ARGS.fleet)
    cluster.cap(ARGS.rate)
    cache_bytes = 2 * dataset
    out.append(f"fleet: K client nodes (network namespaces sfsf-{cluster.id}-C, each with its own "
               f"daemon, empty cache_dir and mount) against {nodes} nodes, each capped at "
               f"{ARGS.rate} (tc tbf on the node's one link, which every client's traffic "
               f"crosses: {nodes} x {per:.0f} MB/s = {cap:.0f} MB/s, 'the caps')")
    out.append(f"  every client reads the same data set ({len(names)} files x "
               f"{ARGS.fleet_file_mib} MiB = {dataset / 1e9:.2f} GB) whole, {ARGS.readers} "
               f"readers (dd bs=1M, each takes the next file of the client's own shuffled "
               f"order); mount -o nconnect={ARGS.nconnect}"
               f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''},cache_dir,"
               f"cache_size={cache_bytes // MiB}M; fresh daemons for every K and start mode; "
               f"page caches dropped before every epoch")
    log("fleet: raw libnfs from client 1 alone")
    raw0 = fleet_raw(cluster, names, dataset)
    results = []
    logs = []
    for k in ks:
        for how, stagger in (("cold at once", 0.0),) + (
                (("staggered", ARGS.fleet_stagger),) if k == ks[-1] and k > 1 else ()):
            tag = f"k{k}-{'once' if not stagger else 'stag'}"
            with contextlib.ExitStack() as stack:
                cls = [stack.enter_context(FleetClient(cluster, c, work, tag, cache_bytes))
                       for c in range(1, k + 1)]
                log(f"fleet: K={k}, {how}: epoch 1")
                r1 = fleet_epoch(cluster, f"K={k} {how}", cls, names, sizes, stagger, seed=100)
                r2 = None
                if not stagger:
                    log(f"fleet: K={k}, {how}: epoch 2")
                    r2 = fleet_epoch(cluster, f"K={k} epoch 2", cls, names, sizes, seed=200)
                for cl in cls:
                    logs.append((cl.label, cl.m.log_lines()))
            results.append((k, how if not stagger else f"{how} {stagger:g} s", r1, r2))
    log("fleet: raw libnfs from client 1 alone, again")
    raw1 = fleet_raw(cluster, names, dataset)
    raw = max(raw0, raw1)
    out.append(f"  raw libnfs (shardfs-rawread -c {ARGS.nconnect} -d {ARGS.raw_depth} -j "
               f"{ARGS.readers}, the same files) from client 1 alone: {raw0:.1f} MB/s before the "
               f"runs, {raw1:.1f} after; 'raw' = the higher, {raw:.1f} MB/s = "
               f"{raw / cap:.2f} x the caps")
    out.append("  aggregate = bytes read by all clients / first start to last end; per client = "
               "its bytes / its own time; NFS/data = NFS bytes a client fetched in the epoch / "
               "the data set; CPU-s/GiB = the daemons' serving processes' utime+stime over the "
               "epoch (until their cache writes drained) / GiB read; peak RSS = the largest "
               "daemon's VmHWM over the epoch")
    out.append(FLEET_HEAD)
    for k, how, r1, r2 in results:
        out.append(fleet_row(k, how, 1, r1, cap, raw, dataset))
        if r2:
            out.append(fleet_row(k, "(from cache)", 2, r2, cap, raw, dataset))
    out.append("  per run:")
    for k, how, r1, r2 in results:
        out.append(f"    K={k}, {how}, epoch 1:")
        out.extend(fleet_client_lines(r1, dataset))
        out.extend(fleet_load_lines(r1, cap))
    top = [r1 for k, how, r1, _ in results if k == ks[-1] and how == "cold at once"][0]
    out.append(f"  goals, K={ks[-1]} cold at once: aggregate {top.mbps / raw:.2f} x raw (goal "
               f">= 0.90), max/min {top.fairness():.2f} (goal <= 1.25)")
    out.extend(daemon_log_lines(logs))
    cluster.cap("off")
    shutil.rmtree(os.path.join(ARGS.cache_base, f"fleet-{ARGS.id}"), ignore_errors=True)
