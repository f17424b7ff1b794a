# SPDX-License-Identifier: Apache-2.0
"""--fleet-warm: client 1 runs shardfs-warm on a larger dataset (--fleet-warm-files
x --fleet-warm-mib, its mount with --fleet-opts) while clients 2..4 train as in
--fleet, against the three training alone: their pace with and without.

Baseline: the three training alone, on fresh daemons and caches. Does not
measure the warm-up's own speed beyond what its link received. Threading: see
fleet_clients.fleet_epoch; shardfs-warm is a child process.
"""

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time

from ..common import ARGS, BenchError, GiB, MiB, log, rate_mb_s, tool
from ..data import make_dataset
from ..fleet_clients import (FLEET_DIR, FLEET_WARM_DIR, FleetClient, fleet_client_lines,
                             fleet_epoch, fleet_load_lines)
from ..mode import Mode
from ..passes import drop_caches
from ..report import daemon_log_lines

MODE = Mode("--fleet-warm", group="fleet", header="rows", cache_base=True,
            tools=("shardfs",))


def add_arguments(ap):
    ap.add_argument("--fleet-warm", action="store_true",
                    help="run the warm-up scenario: client 1 runs shardfs-warm on a large data "
                    "set while clients 2..4 train, against the three training alone")
    ap.add_argument("--fleet-opts", metavar="OPTS", default="",
                    help="--fleet-warm: extra -o options for the warming client's daemon "
                    "(e.g. warm_rate=50M)")
    ap.add_argument("--fleet-warm-files", metavar="N", type=int, default=16,
                    help="--fleet-warm: files in the warmed data set")
    ap.add_argument("--fleet-warm-mib", metavar="M", type=int, default=256,
                    help="--fleet-warm: size of each warmed file")
    ap.add_argument("--fleet-warm-lead", metavar="S", type=float, default=2.0,
                    help="--fleet-warm: seconds the warm-up runs before the training starts")


def check(args):
    if not args.fleet_warm:
        return None
    if (args.fleet_files < 1 or args.fleet_file_mib < 1 or args.fleet_warm_files < 1
            or args.fleet_warm_mib < 1 or args.fleet_warm_lead < 0
            or rate_mb_s(args.rate) is None):
        return "bad --fleet-* value or --rate"
    return None


def clients(args):
    """Client 1 warms, clients 2..4 train."""
    return 4


def start_warm(warmer):
    """shardfs-warm on the warming client's mount, given --fleet-warm-lead
    seconds' start; its process. Raises when it is already gone then."""
    log("fleet warm-up: shardfs-warm on client 1")
    drop_caches()
    wp = subprocess.Popen([sys.executable, tool("shardfs-warm", "cmd"), "-q",
                           os.path.join(warmer.mnt, FLEET_WARM_DIR)],
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    time.sleep(ARGS.fleet_warm_lead)
    if wp.poll() is not None:
        raise BenchError(f"shardfs-warm exited early ({wp.returncode}): "
                         f"{wp.stderr.read().strip()}")
    return wp


def stop_warm(wp):
    """End shardfs-warm; whether it had finished by itself."""
    warm_done = wp.poll() is not None
    if not warm_done:
        wp.terminate()
    try:
        wp.wait(timeout=30)
    except subprocess.TimeoutExpired:
        wp.kill()
        wp.wait()
    return warm_done


def one_case(cluster, with_warm, names, sizes, wtotal, logs):
    """Clients 2..4 train once on fresh daemons, beside the warm-up on
    client 1 when with_warm. Returns (with_warm, FleetRun, whether the
    warm-up had finished, None without one); appends the daemons' logged
    warnings to logs."""
    work = os.path.dirname(ARGS.mnt)
    tag = "warm" if with_warm else "alone"
    with contextlib.ExitStack() as stack:
        warmer = None
        if with_warm:
            warmer = stack.enter_context(FleetClient(cluster, 1, work, tag, 2 * wtotal,
                                                     ARGS.fleet_opts))
        cls = [stack.enter_context(FleetClient(cluster, c, work, tag, 2 * sum(sizes)))
               for c in (2, 3, 4)]
        wp = start_warm(warmer) if warmer else None
        log(f"fleet warm-up: clients 2..4 train {'beside the warm-up' if warmer else 'alone'}")
        try:
            r = fleet_epoch(cluster, f"training, {tag}", cls, names, sizes, seed=300,
                            watch=[warmer] if warmer else [])
        finally:
            if wp:
                warm_done = stop_warm(wp)
        for cl in ([warmer] if warmer else []) + cls:
            logs.append((cl.label, cl.m.log_lines()))
    return with_warm, r, warm_done if wp else None


def case_lines(cases, dataset, cap):
    """The table of the two cases, then per case its clients and links."""
    out = ["  client MB/s = its data set / its own time; warm-up MB/s = what client 1's link "
           "received over the training's time, links MB/s = what the nodes' links sent (both "
           "with headers and retransmissions); CPU-s/GiB = the three daemons' over the epoch",
           f"  {'case':<22}{'client 2':>9}{'3':>7}{'4':>7}{'mean':>8}  {'max/min':>7}  "
           f"{'warm-up MB/s':>12}  {'links MB/s':>12}  {'CPU-s/GiB':>9}"]
    pace = {}
    for with_warm, r, warm_done in cases:
        rates = [row["mbps"] for row in r.rows]
        pace[with_warm] = statistics.mean(rates)
        wmb = (f"{r.extra[0][1] / 1e6 / r.secs:.1f}" if r.extra else "-")
        clus = sum(r.link_tot) / 1e6 / r.secs
        cpu = sum(row["cpu"] for row in r.rows) / (r.nbytes / GiB)
        out.append(f"  {'training + warm-up' if with_warm else 'training alone':<22}"
                   + "".join(f"{x:{9 if i == 0 else 7}.1f}" for i, x in enumerate(rates))
                   + f"{pace[with_warm]:8.1f}  {r.fairness():7.2f}  {wmb:>12}  {clus:12.1f}"
                   f"  {cpu:9.2f}")
    for with_warm, r, warm_done in cases:
        out.append(f"    {'training + warm-up' if with_warm else 'training alone'}:")
        out.extend(fleet_client_lines(r, dataset))
        if r.extra:
            out.append(f"      warm-up (client 1): its link received {r.extra[0][1] / MiB:.0f} MiB "
                       f"while the three trained ({r.secs:.1f} s); "
                       + ("it had finished by then" if warm_done else
                          "still running at the end (stopped)"))
        out.extend(fleet_load_lines(r, cap))
    out.append(f"  the three's pace with the warm-up / without: {pace[True] / pace[False]:.2f} "
               f"(goal >= 0.80)")
    return out


def bench(cluster, out):
    """--fleet-warm: client 1 runs shardfs-warm on a large data set while
    clients 2..4 train (cold, at once), against the three training alone."""
    names = make_dataset(cluster.export, FLEET_DIR, ARGS.fleet_files, ARGS.fleet_file_mib)
    sizes = [ARGS.fleet_file_mib * MiB] * len(names)
    dataset = sum(sizes)
    wnames = make_dataset(cluster.export, FLEET_WARM_DIR, ARGS.fleet_warm_files,
                          ARGS.fleet_warm_mib)
    wtotal = len(wnames) * ARGS.fleet_warm_mib * MiB
    nodes = len(cluster.addrs)
    per = rate_mb_s(ARGS.rate)
    cap = nodes * per
    cluster.cap(ARGS.rate)
    out.append(f"fleet warm-up against training: {nodes} nodes each capped at {ARGS.rate} "
               f"({cap:.0f} MB/s in all); clients 2..4 train: each reads the data set "
               f"({len(names)} x {ARGS.fleet_file_mib} MiB = {dataset / 1e9:.2f} GB) whole, cold, "
               f"at once, {ARGS.readers} dd readers in its own shuffled order; client 1 runs "
               f"shardfs-warm (default -j) on {FLEET_WARM_DIR}/ ({len(wnames)} x "
               f"{ARGS.fleet_warm_mib} MiB = {wtotal / 1e9:.2f} GB), started "
               f"{ARGS.fleet_warm_lead:g} s before the training; client 1's mount options: "
               f"{'defaults + ' + ARGS.fleet_opts if ARGS.fleet_opts else 'the defaults'}; "
               f"fresh daemons and empty caches for each case")
    logs = []
    cases = [one_case(cluster, with_warm, names, sizes, wtotal, logs)
             for with_warm in (False, True)]
    out.extend(case_lines(cases, dataset, cap))
    out.extend(daemon_log_lines(logs))
    cluster.cap("off")
    shutil.rmtree(os.path.join(ARGS.cache_base, f"fleet-{ARGS.id}"), ignore_errors=True)
