# SPDX-License-Identifier: Apache-2.0
"""--stall: one file (--stall-mib) read by one dd through a default mount,
healthy and with one node stopped (SIGSTOP) for 300 ms of every second,
passes alternated; with the READs hedged and reissued meanwhile.

Baseline: the healthy passes on the same mount. Does not run the raw reader.
Threading: StallLoop freezes and thaws the node from a thread of its own.
"""

import threading

from ..common import ARGS, CLUSTER, MiB, log, run
from ..data import make_files
from ..mode import Mode
from ..mount import Mount
from ..passes import measure, mount_pass
from ..report import cpu_note, family_sum, fmt_pass_list, median_mbps, row

MODE = Mode("--stall", tools=("shardfs",))


def add_arguments(ap):
    ap.add_argument("--stall", action="store_true",
                    help="run the stall benchmark (one node stopped 300 ms of every second vs healthy)")
    ap.add_argument("--stall-mib", metavar="M", type=int, default=1024,
                    help="--stall: size of the file read")


def check(args):
    return "bad --stall-mib" if args.stall_mib < 1 else None


class StallLoop:
    """Stop node K's ganesha for `on` seconds of every `period` while active
    (a GC pause, a drive rebuild, a congested port)."""

    def __init__(self, cluster, node, on=0.3, period=1.0):
        self.cluster, self.node, self.on, self.period = cluster, str(node), on, period
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop)

    def loop(self):
        while not self.stop.is_set():
            run([CLUSTER, "freeze", self.cluster.id, self.node], check=False)
            self.stop.wait(self.on)
            run([CLUSTER, "thaw", self.cluster.id, self.node], check=False)
            self.stop.wait(self.period - self.on)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        run([CLUSTER, "thaw", self.cluster.id, self.node], check=False)


def bench(cluster, out):
    names = make_files(cluster.export, "stall", 1, ARGS.stall_mib)
    size = ARGS.stall_mib * MiB
    node = 2
    out.append(f"stall: one {ARGS.stall_mib} MiB file read by one dd bs=1M through a default mount "
               f"(nconnect={ARGS.nconnect}{',' + ARGS.mount_opts if ARGS.mount_opts else ''}), "
               f"healthy and with node {node} of {len(cluster.addrs)} stopped 300 ms of every "
               f"second; passes alternated, median of {ARGS.reps}")
    healthy, stalled, hedged, wins, reiss = [], [], 0.0, 0.0, 0.0
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect) as m:
        for rep in range(ARGS.reps):
            log(f"stall: pass {rep + 1}/{ARGS.reps}: healthy")
            healthy.append(measure(cluster, mount_pass(ARGS.mnt, names, 1, [size]),
                                   size, m.pid))
            log(f"stall: pass {rep + 1}/{ARGS.reps}: node {node} stalling")
            s0 = m.stats()
            with StallLoop(cluster, node):
                stalled.append(measure(cluster, mount_pass(ARGS.mnt, names, 1, [size]),
                                       size, m.pid))
            s1 = m.stats()
            hedged += family_sum({k: s1.get(k, 0) - s0.get(k, 0) for k in s1},
                                 "shardfs_node_hedged_total")
            wins += family_sum({k: s1.get(k, 0) - s0.get(k, 0) for k in s1},
                               "shardfs_node_hedge_wins_total")
            reiss += family_sum({k: s1.get(k, 0) - s0.get(k, 0) for k in s1},
                                "shardfs_node_reissued_total")
    out.append(row("healthy", healthy, f"{fmt_pass_list(healthy):<20} {cpu_note(healthy)}"))
    ratio = median_mbps(stalled) / median_mbps(healthy)
    out.append(row("one node stalling", stalled,
                   f"ratio {ratio:.2f} x healthy (goal >= 0.85)  {fmt_pass_list(stalled)}"))
    out.append(f"  {'':<28}{'':7}        {cpu_note(stalled)}")
    out.append(f"    stalled passes: {hedged:.0f} READs hedged ({wins:.0f} won by the other node), "
               f"{reiss:.0f} re-issued after timeo")
