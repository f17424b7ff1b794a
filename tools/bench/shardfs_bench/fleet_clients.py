# SPDX-License-Identifier: Apache-2.0
"""Fleet client nodes (the network namespaces of `shardfs-cluster start
--clients`), each with its own daemon, empty cache_dir and mount: FleetClient;
one epoch read by several clients at once or staggered, with the nodes' links
sampled (fleet_epoch, a FleetRun); and the lines of a run. Used by
modes/fleet.py and modes/fleet_warm.py.

Threading: fleet_epoch runs one reader thread per client and a sampler thread,
each writing only its own slot; FLEET_MOUNTS (the mounts up, for cli's
cleanup) is touched by the main thread only.
"""

import os
import shutil
import statistics
import threading
import time

from .accounting import machine_busy_s, proc_cpu_s, proc_status, reset_hwm
from .common import ARGS, BenchError, GiB, MiB
from .mount import Mount, fresh_cache, quiet_stats, settle
from .passes import drop_caches, mount_pass
from .report import fmt_mib


FLEET_DIR = "fleet"             # the training data set: a top-level directory

FLEET_WARM_DIR = "fleetwarm"    # the data set the warm-up fetches

FLEET_SAMPLE_S = 1.0            # the cluster's load is sampled this often

FLEET_MOUNTS = []               # fleet mounts up now, for the cleanup on exit


def link_bytes(pids, field):
    """Bytes the interfaces but lo of each pid's network namespace have sent
    (field 8) or received (field 0) so far, headers and retransmissions
    included, from /proc/PID/net/dev."""
    out = []
    for pid in pids:
        tot = 0
        try:
            with open(f"/proc/{pid}/net/dev") as f:
                for line in f.readlines()[2:]:
                    name, _, rest = line.partition(":")
                    if name.strip() != "lo":
                        tot += int(rest.split()[field])
        except (OSError, ValueError, IndexError, TypeError):
            pass
        out.append(tot)
    return out


def link_tx_bytes(pids):
    """What each node has sent on its link (what its tbf caps), seen from a
    process in the node's network namespace (its nfs-ganesha)."""
    return link_bytes(pids, 8)


def node_bytes(st, hosts):
    """Bytes read from each node so far, from one stats snapshot."""
    return [st.get(f'shardfs_node_read_bytes_total{{node="{h}"}}', 0.0) if st else 0.0
            for h in hosts]


class FleetClient:
    """Fleet client c: a daemon in the netns sfsf-ID-c with its own empty
    cache_dir, mountpoint and log; mounted by __enter__, unmounted (and its
    cache removed) by __exit__."""

    def __init__(self, cluster, c, work, tag, cache_bytes, extra=""):
        self.c = c
        self.cluster = cluster
        self.mnt = os.path.join(work, f"fleet-c{c}")
        self.cache_dir = os.path.join(ARGS.cache_base, f"fleet-{ARGS.id}", f"c{c}")
        os.makedirs(os.path.dirname(self.cache_dir), exist_ok=True)
        opts = fresh_cache(self.cache_dir, cache_bytes) + ("," + extra if extra else "")
        self.opts = opts
        self.label = f"{tag}, client {c}"
        self.m = Mount(cluster, cluster.addrs, self.mnt, ARGS.nconnect, opts,
                       log_path=os.path.join(work, f"daemon-{tag}-c{c}.log"), client=c)

    def __enter__(self):
        self.m.__enter__()
        FLEET_MOUNTS.append(self.m)
        self.pid = self.serving_pid()
        return self

    def serving_pid(self):
        """The daemon's serving process (the stats say; else the one found)."""
        st = quiet_stats(self.mnt) or {}
        pid = int(st.get("shardfs_serving_pid", 0))
        return pid if pid and os.path.exists(f"/proc/{pid}") else self.m.pid

    def __exit__(self, *exc):
        self.m.unmount()
        if self.m in FLEET_MOUNTS:
            FLEET_MOUNTS.remove(self.m)
        shutil.rmtree(self.cache_dir, ignore_errors=True)


class FleetRun:
    """One read of the data set by every reading client (an epoch), started
    together or stagger_s apart, with the cluster's load sampled meanwhile."""

    def __init__(self, label, readers, rows, secs, nbytes, samples, node_tot, hosts,
                 ganesha_cpu, busy, extra):
        self.label = label
        self.readers = readers    # the FleetClients that read
        self.rows = rows          # per reader: dict (mbps, secs, start, nfs, cpu, hwm)
        self.secs = secs          # the first start to the last end
        self.nbytes = nbytes      # bytes read by all readers
        self.mbps = nbytes / 1e6 / secs
        self.samples = samples    # [(t from the first start, link MB/s over the interval)]
        self.node_tot = node_tot  # NFS bytes per cluster node, every watched client
        self.link_tot = None      # bytes each node's link sent over the run
        self.hosts = hosts
        self.ganesha_cpu = ganesha_cpu
        self.busy = busy          # (busy, total) CPU-s of the machine over the run
        self.extra = extra        # per watched non-reader: (client, bytes its link received)

    def fairness(self):
        r = [row["mbps"] for row in self.rows]
        return max(r) / min(r) if min(r) > 0 else float("inf")


def read_at_once(cluster, label, readers, watched, names, sizes, stagger_s, seed):
    """The epoch itself: one thread per client of readers, started
    together (client i after i * stagger_s), and the nodes' links sampled
    every FLEET_SAMPLE_S from a thread of its own. Returns (per reader
    {start, secs, nbytes, mbps}, seconds from the start to the last end,
    [(t, link MB/s)], the bytes each watched client's link received, the
    bytes each node's link sent, {id(client): stats} of the watched clients
    that do not read, taken at the readers' end); raises the first reader's
    failure."""
    rows = [None] * len(readers)
    errors = []
    go = threading.Event()
    done = threading.Event()
    samples = []
    npids = cluster.node_pids()

    def reader(i, cl):
        go.wait()
        if i and stagger_s:
            time.sleep(i * stagger_s)
        fn = mount_pass(cl.mnt, names, ARGS.readers, sizes, shuffle_seed=seed + cl.c,
                        subdir=FLEET_DIR)
        t0 = time.monotonic()
        try:
            nbytes, secs = fn()
        except BenchError as e:
            said = cl.m.log_lines()
            errors.append(f"client {cl.c}: {e}" + (f"; its daemon logged {len(said)} warnings and "
                                                   f"errors, the last: {said[-1]}" if said else ""))
            return
        rows[i] = {"start": t0 - t_go[0], "secs": secs, "nbytes": nbytes,
                   "mbps": nbytes / 1e6 / secs}

    def sampler():
        last_t, last = 0.0, sum(link0)
        while not done.wait(FLEET_SAMPLE_S):
            t = time.monotonic() - t_go[0]
            tot = sum(link_tx_bytes(npids))
            samples.append((t, (tot - last) / 1e6 / (t - last_t)))
            last_t, last = t, tot

    t_go = [0.0]
    ts = [threading.Thread(target=reader, args=(i, cl)) for i, cl in enumerate(readers)]
    smp = threading.Thread(target=sampler)
    for t in ts:
        t.start()
    dpids = [cl.pid for cl in watched]
    rx0 = link_bytes(dpids, 0)
    link0 = link_tx_bytes(npids)
    t_go[0] = time.monotonic()
    go.set()
    smp.start()
    for t in ts:
        t.join()
    secs = time.monotonic() - t_go[0]
    link1 = link_tx_bytes(npids)
    rx1 = link_bytes(dpids, 0)
    done.set()
    # The non-readers' bytes over the readers' time, not their drain.
    s1_extra = {id(cl): cl.m.stats() for cl in watched[len(readers):]}
    smp.join()
    if errors:
        raise BenchError(f"{label}: {errors[0]}")
    return (rows, secs, samples, [b - a for a, b in zip(rx0, rx1)],
            [b - a for a, b in zip(link0, link1)], s1_extra)


def fleet_epoch(cluster, label, readers, names, sizes, stagger_s=0.0, seed=0, watch=()):
    """Every client of readers reads names (mount_pass: ARGS.readers dd, its
    own shuffled order, seed + client) once; client i (from 0) starts
    i * stagger_s after the first. The clients of watch (not reading) are
    sampled too. Page caches dropped first; the daemons' cache writes drain
    before their CPU time and stats are taken. Returns a FleetRun."""
    hosts = cluster.addrs
    watched = list(readers) + [w for w in watch if w not in readers]
    drop_caches()
    for cl in readers:
        reset_hwm(cl.pid)
    s0 = [cl.m.stats() for cl in watched]
    cpu0 = [proc_cpu_s(cl.pid) or 0.0 for cl in readers]
    gpids = cluster.ganesha_pids()
    g0 = sum(proc_cpu_s(p) or 0 for p in gpids)
    b0, t0m = machine_busy_s()
    rows, secs, samples, rx, link_tot, s1_extra = read_at_once(
        cluster, label, readers, watched, names, sizes, stagger_s, seed)
    b1, t1m = machine_busy_s()
    g1 = sum(proc_cpu_s(p) or 0 for p in gpids)
    for cl in readers:
        settle(cl.m)
    s1 = [s1_extra.get(id(cl)) or cl.m.stats() for cl in watched]
    node_tot = [0.0] * len(hosts)
    extra = []
    for j, cl in enumerate(watched):
        nb = [b - a for a, b in zip(node_bytes(s0[j], hosts), node_bytes(s1[j], hosts))]
        node_tot = [x + y for x, y in zip(node_tot, nb)]
        if j < len(readers):
            row = rows[j]
            row["nfs"] = sum(nb)
            row["rx"] = rx[j]
            row["cpu"] = (proc_cpu_s(cl.pid) or 0.0) - cpu0[j]
            row["hwm"] = proc_status(cl.pid, "VmHWM")
            row["restarted"] = cl.serving_pid() != cl.pid
        else:
            extra.append((cl, rx[j]))
    r = FleetRun(label, readers, rows, secs, sum(r["nbytes"] for r in rows), samples,
                 node_tot, hosts, g1 - g0, (b1 - b0, t1m - t0m), extra)
    r.link_tot = link_tot
    return r


def fmt_timeline(samples, step_s):
    """The sampled cluster MB/s, averaged over step_s buckets: 'a b c ...'."""
    if not samples:
        return "-"
    out, i, t_end = [], 0, step_s
    while i < len(samples):
        vals = []
        while i < len(samples) and samples[i][0] <= t_end + 1e-6:
            vals.append(samples[i][1])
            i += 1
        out.append(f"{statistics.mean(vals):.0f}" if vals else "-")
        t_end += step_s
    return " ".join(out)


def fleet_load_lines(r, cap_mbps):
    """The cluster's side of one run: its links' load over time, and the
    NFS bytes per node."""
    peak = max((v for _, v in r.samples), default=0.0)
    near = sum(FLEET_SAMPLE_S for _, v in r.samples if v >= 0.9 * cap_mbps)
    links = sum(r.link_tot) / 1e6 / r.secs
    tot = sum(r.node_tot)
    per = ", ".join(f"{h} {b / MiB:.0f} MiB" for h, b in zip(r.hosts, r.node_tot))
    bal = (f"max/min {max(r.node_tot) / min(r.node_tot):.2f}" if min(r.node_tot) > 0
           else "a node served nothing")
    busy = 100 * r.busy[0] / max(r.busy[1], 1e-9)
    return [f"      cluster links, MB/s per {2 * FLEET_SAMPLE_S:.0f} s: "
            f"{fmt_timeline(r.samples, 2 * FLEET_SAMPLE_S)}",
            f"      cluster links: mean {links:.1f} MB/s = {links / cap_mbps:.2f} x the caps, peak "
            f"({FLEET_SAMPLE_S:.0f} s) {peak:.1f}, >= 90% of the caps for {near:.0f} of "
            f"{r.secs:.0f} s; NFS bytes per node: {per} ({bal}); nfs-ganesha "
            f"{r.ganesha_cpu / max(tot / GiB, 1e-9):.2f} CPU-s/GiB; machine {busy:.0f}% busy"]


def fleet_client_lines(r, dataset):
    out = []
    for cl, row in zip(r.readers, r.rows):
        gib = row["nbytes"] / GiB
        out.append(f"      client {cl.c}: {row['mbps']:6.1f} MB/s, started at {row['start']:4.1f} s, "
                   f"{row['secs']:5.1f} s; NFS {row['nfs'] / MiB:5.0f} MiB = "
                   f"{row['nfs'] / dataset:.2f} x the data set, link {row['rx'] / MiB:5.0f} MiB; daemon "
                   f"{row['cpu'] / gib:.2f} CPU-s/GiB, peak RSS {fmt_mib(row['hwm'])}"
                   + ("; THE SERVING PROCESS CHANGED (restarted by its keeper)"
                      if row["restarted"] else ""))
    return out
