# SPDX-License-Identifier: Apache-2.0
"""--slow-node: every node's link capped at --rate, then the last one at half;
one file (--slow-mib) read by the raw striped reader and by one dd through a
default mount, passes alternated, with equal caps and with the slow node
(--nodes 8 unless given).

Baseline: the raw striped reader under the same caps. Does not use a cache.
Threading: the main thread.
"""

import re

from ..common import ARGS, BenchError, CLUSTER, MiB, log, run
from ..data import make_files
from ..mode import Mode
from ..mount import Mount
from ..passes import measure, mount_pass, raw_pass
from ..report import fmt_pass_list, median_mbps, row

MODE = Mode("--slow-node")


def add_arguments(ap):
    ap.add_argument("--slow-node", action="store_true",
                    help="every link capped at --rate, the last node's at half: one file read by "
                         "the raw striped reader and one dd through a default mount (--nodes 8 "
                         "unless given)")
    ap.add_argument("--slow-mib", metavar="M", type=int, default=512,
                    help="--slow-node: size of the file in MiB")


def configure(args):
    if args.slow_node and args.nodes is None:
        args.nodes = 8


def bench(cluster, out):
    """Issue 9's slow node: every node's link capped at --rate, then the last
    node at half of it; one file read by the raw striped reader and by one
    dd through a default mount, passes alternated, with equal caps and with
    the slow node."""
    names = make_files(cluster.export, "slow", 1, ARGS.slow_mib)
    size = ARGS.slow_mib * MiB
    paths = ["/shards/" + n for n in names]
    hosts = cluster.addrs
    slow = len(hosts)
    half = half_rate(ARGS.rate)
    out.append(f"slow node: {len(hosts)} nodes, every link capped at {ARGS.rate}, then node "
               f"{slow} at {half}; one {ARGS.slow_mib} MiB file read by the raw striped reader "
               f"(1 reader, {ARGS.nconnect} conns per node) and by one dd bs=1M through a default "
               f"mount (nconnect={ARGS.nconnect}{',' + ARGS.mount_opts if ARGS.mount_opts else ''}); "
               f"passes alternated, median of {ARGS.reps}")
    cluster.cap(ARGS.rate)
    res = {}
    with Mount(cluster, hosts, ARGS.mnt, ARGS.nconnect) as m:
        for label, node_rate in (("equal caps", ARGS.rate), ("one node at half", half)):
            run([CLUSTER, "cap", cluster.id, str(slow), node_rate])
            raw, mps = [], []
            for rep in range(ARGS.reps):
                log(f"slow node: {label}: pass {rep + 1}/{ARGS.reps}: raw")
                raw.append(measure(cluster, raw_pass(cluster, hosts, paths, ARGS.nconnect, 1),
                                   size))
                log(f"slow node: {label}: pass {rep + 1}/{ARGS.reps}: mount")
                mps.append(measure(cluster, mount_pass(ARGS.mnt, names, 1, [size]), size, m.pid))
            res[label] = (raw, mps)
    for label, (raw, mps) in res.items():
        ratio = median_mbps(mps) / median_mbps(raw)
        goal = " (goal >= 0.90)" if label != "equal caps" else ""
        out.append(f"  {label}")
        out.append(row("raw striped reader", raw, f"{fmt_pass_list(raw):<20}"))
        out.append(row("shardfs mount", mps, f"ratio {ratio:.2f}{goal}  {fmt_pass_list(mps)}"))


def half_rate(rate):
    """Half of a tc rate such as 200mbit (100mbit)."""
    m = re.fullmatch(r"(\d+)([a-z]*)", rate)
    if not m:
        raise BenchError(f"--rate {rate!r}: want a number and a tc unit, e.g. 200mbit")
    n, unit = int(m.group(1)), m.group(2)
    if n % 2:
        n, unit = n * 1000, {"gbit": "mbit", "mbit": "kbit"}.get(unit, unit)
    return f"{n // 2}{unit}"
