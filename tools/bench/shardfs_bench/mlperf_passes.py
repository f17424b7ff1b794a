# SPDX-License-Identifier: Apache-2.0
"""The two passes of --mlperf, both with their readers inside the readers'
memory cgroup and the page caches dropped first:

  capacity  shardfs-smallread (passes.item_pass) reads one shuffled epoch of
            the data set's whole files, unpaced, from a source (the mount,
            the local copy, or the NFS nodes with libnfs): what the source
            gives the workload's reads when nothing else waits;
  paced     the DLIO emulation (mlperf_loader.py, a process of its own) runs
            one trial of N accelerators: AU, samples/s and bytes/s from its
            ranks' steps (mlperf_metrics.py), and the daemon's CPU over the
            bytes its readers read.

Does not mount, write data or print. Threading: the main thread.
"""

import json
import os
import sys

from .accounting import proc_cpu_s
from .common import ARGS, BenchError, HERE, log, run
from .mlperf_metrics import trial_figures
from .mount import settle
from .passes import drop_caches, item_pass, prewarm, smallread_argv

# The loader's entry: the bench's package from the folder that holds it
# (the source tree's tools/bench, or PKGLIBEXECDIR installed).
LOADER_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "from shardfs_bench.mlperf_loader import main; sys.exit(main(sys.argv[2:]))")


def capacity_pass(cluster, cg, ds, source, lst, threads, mount=None, in_ns=False, drain=False):
    """One epoch of the data set's files read whole by shardfs-smallread
    with threads threads, inside cg: an ItemPass (files/s, MB/s, and with a
    mount the daemon's CPU and stats deltas; with drain, until its cache
    writes drained)."""
    argv = cg.wrap(smallread_argv(source, lst, threads))
    return item_pass(cluster, argv, len(ds.specs), ds.total, in_ns=in_ns, mount=mount,
                     prewarm_bytes=cg.limit, drain=drain)


class PacedPass:
    """One trial of the DLIO emulation: fig (mlperf_metrics.TrialFigures, over
    the steps after the warm-up), the ranks' records, the warm-up steps
    (exclude), the bytes the readers read (read ahead included), the
    daemon's CPU seconds over them (None without a mount), the stats deltas,
    whether the wall-clock limit ended it, and the cgroup's peak."""

    def __init__(self, w, result, daemon_cpu, delta, peak):
        self.ranks = result["ranks"]
        self.exclude = result["warmup_steps"]
        self.fig = trial_figures(self.ranks, w.compute_s, self.exclude)
        self.steps_planned = result["steps"]
        self.by_wall = result["stopped_by_wall"]
        self.bytes_read = sum(r["bytes_read"] for r in self.ranks)
        self.daemon_cpu = daemon_cpu
        self.delta = delta
        self.peak = peak


def paced_pass(cg, w, ds, root, n, trial_s, compute_target_s, mount=None, epochs_max=0,
               drain=False):
    """One trial of n accelerators of workload w over the data set at root
    (the mount's or the local copy's directory of ds), inside cg: stops after
    compute_target_s of compute per rank, trial_s of wall time, or
    epochs_max epochs (0: no limit). Returns a PacedPass; raises BenchError
    when the loader fails."""
    spec = {"workload": w._asdict(), "root": root, "files": ds.specs, "n": n,
            "seed": ARGS.seed, "compute_target_s": compute_target_s, "max_wall_s": trial_s,
            "epochs_max": epochs_max}
    spec_path = os.path.join(os.path.dirname(ARGS.mnt), f"mlperf-trial-{w.name}-{n}.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    argv = cg.wrap([sys.executable, "-c", LOADER_BOOT, HERE, spec_path])
    drop_caches()
    if not ARGS.no_prewarm:
        prewarm(cg.limit + (512 << 20))
    pid = mount.pid if mount else None
    s0 = mount.stats() if mount else {}
    d0 = proc_cpu_s(pid) if pid else None
    cg.reset_peak()
    p = run(argv, check=False, timeout=trial_s + 900)
    if p.returncode != 0:
        raise BenchError(f"mlperf loader ({w.name}, N={n}): "
                         + (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1])
    try:
        result = json.loads(p.stdout)
    except ValueError:
        raise BenchError(f"mlperf loader printed {p.stdout[:200]!r}")
    if drain and mount:
        settle(mount)
    d1 = proc_cpu_s(pid) if pid else None
    s1 = mount.stats() if mount else {}
    delta = {k: v - s0.get(k, 0.0) for k, v in s1.items()}
    daemon = (d1 - d0) if d0 is not None and d1 is not None else None
    pp = PacedPass(w, result, daemon, delta, cg.peak_bytes())
    log(f"mlperf {w.name}: N={n}: AU {pp.fig.au:.3f}, {pp.fig.bytes_s / 1e6:.0f} MB/s, "
        f"{pp.fig.steps} steps measured")
    return pp
