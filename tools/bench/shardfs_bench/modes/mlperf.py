# SPDX-License-Identifier: Apache-2.0
"""--mlperf WORKLOAD[,...]: MLPerf Storage's training workloads (unet3d,
resnet50, cosmoflow; their H100 configurations, mlperf_workloads.py) read as
DLIO reads them (mlperf_loader.py), with the readers in a memory cgroup whose
limit the data set exceeds --mlperf-dataset-x times. For each source it gives
N, the simulated accelerators kept at the workload's AU threshold, in the
field's unit.

Sources: the raw libnfs reader (shardfs-smallread on the nodes), the local
copy, the mount cold (an empty cache_dir), the mount warm (remounted on the
cache the cold pass filled and shardfs-warm completed; defaults, so
passthrough=auto), and a data set twice the cache (epoch 2). Each is read
once unpaced (capacity: whole files, the workload's reader threads per
accelerator x the largest N), and the local copy and the mount cold and warm
also by the DLIO emulation at each N of --mlperf-n (AU, samples/s, MB/s per
N). Baselines: the raw reader for the cold rows, the local copy for the warm
ones. Does not run DLIO itself, TensorFlow or PyTorch, or use a GPU.
Threading: the main thread; the loader's processes are its own.
"""

import argparse
import contextlib
import math
import os
import re
import shutil

from ..common import ARGS, BenchError, GiB, MiB, log, run, tool
from ..mlperf_cgroup import ClientCgroup
from ..mlperf_data import DataSet
from ..mlperf_metrics import demand_bytes_s, mean_trials, n_at_threshold
from ..mlperf_passes import capacity_pass, paced_pass
from ..mlperf_report import Rows, workload_lines, write_json
from ..mlperf_workloads import (dataset_specs, mean_sample_bytes, parse_workloads, scaled,
                                steps_per_epoch, warmup_steps)
from ..mode import Mode
from ..mount import Mount, fresh_cache, settle

MODE = Mode("--mlperf", header="rows", cache_base=True, tools=("shardfs", "smallread"))

# The run without --mlperf-smoke, and the smoke's (explicit options win over both).
DEFAULTS = {"mlperf_n": "1,2,4", "mlperf_mem_mib": 512, "mlperf_dataset_x": 5.0,
            "mlperf_compute_s": 60.0, "mlperf_trial_s": 30.0, "mlperf_trials": 1}
SMOKE = {"mlperf_n": "1,2", "mlperf_mem_mib": 384, "mlperf_dataset_x": 0.25,
         "mlperf_compute_s": 0.5, "mlperf_trial_s": 1.5, "mlperf_trials": 1}
# --mlperf-smoke's scale per workload: files of a few MB at most, enough of
# them for a cold trial of 2 accelerators twice as long as its warm-up.
SMOKE_SCALE = {"unet3d": 1 / 256, "resnet50": 1 / 64, "cosmoflow": 1.0}


def add_arguments(ap):
    ap.add_argument("--mlperf", metavar="WORKLOADS", default=None,
                    help="run MLPerf Storage's training workloads (unet3d, resnet50, cosmoflow, "
                    "a comma list, or all; H100 configurations) as DLIO reads them: N "
                    "simulated accelerators at the AU threshold through the mount cold and "
                    "warm, a local copy, raw libnfs, and a data set twice the cache")
    opt = preset_option
    opt(ap, "--mlperf-n", "LIST", str, "simulated accelerators per paced trial, a comma list")
    opt(ap, "--mlperf-mem-mib", "M", int, "the client's memory in MiB: the limit of the cgroup of "
        "the readers and the daemon (whose mem_max is then its default on a machine of M)")
    opt(ap, "--mlperf-dataset-x", "X", float, "the data set is at least X times the memory limit "
        "(MLPerf: 5)")
    opt(ap, "--mlperf-compute-s", "S", float, "compute seconds per accelerator a paced trial "
        "aims at (MLPerf: at least 60)")
    opt(ap, "--mlperf-trial-s", "S", float, "wall seconds after which a paced trial stops anyway")
    opt(ap, "--mlperf-trials", "T", int, "paced trials per source and N, their mean reported, "
        "1 to 5 (MLPerf: 5)")
    ap.add_argument("--mlperf-scale", metavar="F", type=float, default=1.0,
                    help="--mlperf: samples and compute time per batch multiplied by F (the "
                    "demand unchanged), for a machine too small for the real sizes")
    ap.add_argument("--mlperf-smoke", action="store_true",
                    help="--mlperf: the smallest configuration of each workload, for a few "
                    "seconds per trial (a check of the mode, not a result)")
    ap.add_argument("--mlperf-json", metavar="PATH", default=None,
                    help="--mlperf: also write every pass's figures and the ranks' step "
                    "records to PATH (JSON)")


def preset_option(ap, name, metavar, kind, what):
    """An option whose default is SMOKE's with --mlperf-smoke, else
    DEFAULTS' (configure sets it; argparse.SUPPRESS keeps it out of ARGS
    until then, so that a value given explicitly is told apart)."""
    key = name[2:].replace("-", "_")
    shown = [f"{p[key]:g}" if isinstance(p[key], float) else p[key] for p in (DEFAULTS, SMOKE)]
    ap.add_argument(name, metavar=metavar, type=kind, default=argparse.SUPPRESS,
                    help=f"--mlperf: {what} (default {shown[0]}; with --mlperf-smoke {shown[1]})")


def configure(args):
    """Resolve the options left unset: the smoke's values with
    --mlperf-smoke, else the defaults."""
    preset = SMOKE if args.mlperf_smoke else DEFAULTS
    for k, v in preset.items():
        if not hasattr(args, k):
            setattr(args, k, v)


def n_list(spec):
    """'1,2,4' -> [1, 2, 4], or None when bad."""
    try:
        ns = sorted({int(x) for x in spec.split(",")})
    except ValueError:
        return None
    return ns if ns and ns[0] >= 1 and ns[-1] <= 64 else None


def check(args):
    if args.mlperf is None:
        return None
    if parse_workloads(args.mlperf) is None:
        return "bad --mlperf (want unet3d, resnet50, cosmoflow, a comma list of them, or all)"
    if (n_list(args.mlperf_n) is None or args.mlperf_dataset_x <= 0
            or args.mlperf_compute_s <= 0 or args.mlperf_trial_s <= 0
            or not 1 <= args.mlperf_trials <= 5 or not 0 < args.mlperf_scale <= 1):
        return "bad --mlperf-* value"
    if args.mlperf_mem_mib * MiB < daemon_mem_max(args) + 128 * MiB:
        return (f"--mlperf-mem-mib {args.mlperf_mem_mib}: the client's memory must exceed the "
                f"daemon's mem_max ({daemon_mem_max(args) >> 20} MiB) by 128 MiB at least")
    return None


def daemon_mem_max(args):
    """The daemon's mem_max in bytes: --mount-opts', else its default on a
    machine whose memory is the client's (1/16, 256 MiB to 8 GiB: fs/options.c)."""
    m = re.search(r"(?:^|,)mem_max=(\d+)([kKmMgG]?)", args.mount_opts)
    if m:
        return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
    return min(max(args.mlperf_mem_mib * MiB // 16, 256 * MiB), 8 * GiB) // MiB * MiB


def scale_of(w):
    return SMOKE_SCALE[w.name] if ARGS.mlperf_smoke else ARGS.mlperf_scale


class Plan:
    """One workload's run: w (scaled), its data set, the demand, the Ns, the
    capacity readers' threads, the cache's place and the daemons' logs."""

    def __init__(self, cluster, w0):
        self.w0 = w0
        self.scale = scale_of(w0)
        self.w = w = scaled(w0, self.scale)
        self.ns = n_list(ARGS.mlperf_n)
        self.mem = ARGS.mlperf_mem_mib * MiB
        # Every N gets at least one step an epoch.
        min_files = self.ns[-1] * math.ceil(w.batch / w.samples_per_file)
        specs = dataset_specs(w, int(ARGS.mlperf_dataset_x * self.mem), min_files, ARGS.seed)
        tag = "x1" if self.scale == 1 else f"x{self.scale:.6g}"
        self.work = os.path.dirname(ARGS.mnt)
        self.ds = DataSet(cluster.export, ARGS.cache_base, self.work, w, tag, specs, ARGS.seed)
        self.sample_bytes = mean_sample_bytes(w, specs)
        self.demand = demand_bytes_s(self.sample_bytes, w.batch, w.compute_s)
        self.threads = w.read_threads * self.ns[-1]
        self.cache_dir = os.path.join(ARGS.cache_base, f"cache-mlperf-{ARGS.id}")
        self.logs = []

    def n_cap(self, p):
        """N of a capacity pass."""
        return n_at_threshold(p.nbytes / p.secs, self.w.au, self.demand)

    @contextlib.contextmanager
    def mount(self, cluster, cg, opts, label):
        """A daemon mounted at ARGS.mnt with opts (and mem_max as on a
        machine of the client's memory), moved into the client's cgroup
        cg: its cache files' readahead (passthrough's WILLNEED among it) is
        then charged to the client's memory, as the readers' page cache is."""
        if "mem_max=" not in ARGS.mount_opts:
            opts += f",mem_max={daemon_mem_max(ARGS) >> 20}M"
        log_path = os.path.join(self.work, f"daemon-{self.w.name}-{len(self.logs)}.log")
        m = Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, opts, log_path=log_path)
        self.logs.append((label, m))
        with m:
            pids = daemon_pids(m)
            # The serving process is the one whose CPU the passes count
            # (Mount's pid, found by its command line, can miss it).
            m.pid = pids[0]
            cg.adopt(pids)
            yield m

    def paced(self, cg, root, n, mount=None, epochs_max=0, drain=False):
        """--mlperf-trials trials of n accelerators: (their mean, the trials)."""
        trials = [paced_pass(cg, self.w, self.ds, root, n, ARGS.mlperf_trial_s,
                             ARGS.mlperf_compute_s, mount, epochs_max, drain)
                  for _ in range(ARGS.mlperf_trials)]
        return mean_trials([t.fig for t in trials]), trials


def daemon_pids(m):
    """The mount's serving process (the stats file names it; else Mount's
    pid) and its keeper (its parent, which starts a new one if it dies).
    Raises BenchError when there is neither."""
    serving = int(m.stats().get("shardfs_serving_pid", 0)) or m.pid
    if not serving:
        raise BenchError(f"{ARGS.mnt}: no daemon process found")
    pids = [serving]
    try:
        with open(f"/proc/{serving}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open(f"/proc/{ppid}/comm") as f:
            if f.read().strip() == "shardfs":
                pids.append(ppid)
    except (OSError, ValueError, IndexError):
        pass
    return pids


def cold_paced(cluster, cg, plan, rows):
    """The DLIO emulation through a mount with an empty cache, one epoch at
    most, a fresh daemon and cache per trial."""
    w, ds = plan.w, plan.ds
    for n in plan.ns:
        spe, warm = steps_per_epoch(w, len(ds.specs), n), warmup_steps(w)
        if spe < 2 * warm:
            rows.skipped("mount cold", n, f"one epoch is {spe} steps a rank, fewer than twice "
                         f"the {warm} of the warm-up")
            continue
        trials = []
        for t in range(ARGS.mlperf_trials):
            opts = fresh_cache(plan.cache_dir, 2 * ds.total)
            with plan.mount(cluster, cg, opts, f"cold N={n}") as m:
                log(f"mlperf {w.name}: mount cold, N={n}, trial {t + 1}")
                trials += [paced_pass(cg, w, ds, os.path.join(ARGS.mnt, ds.name), n,
                                      ARGS.mlperf_trial_s, ARGS.mlperf_compute_s, m,
                                      epochs_max=1, drain=True)]
        rows.paced("mount cold", n, mean_trials([x.fig for x in trials]), trials)


def warm_passes(cluster, cg, plan, rows, opts):
    """Warm on a remounted daemon (defaults: passthrough=auto) over the cache
    the cold pass filled: capacity, then the emulation at every N."""
    ds, w = plan.ds, plan.w
    with plan.mount(cluster, cg, opts, "warm") as m:
        log(f"mlperf {w.name}: mount warm, capacity")
        rows.capacity("mount warm, remounted",
                      capacity_pass(cluster, cg, ds, ARGS.mnt, ds.lst_mnt, plan.threads, m))
        for n in plan.ns:
            log(f"mlperf {w.name}: mount warm, N={n}")
            rows.paced("mount warm", n, *plan.paced(cg, os.path.join(ARGS.mnt, ds.name), n, m))


def cold_and_warm(cluster, cg, plan, rows):
    """The mount cold (capacity, into an empty cache_dir, then completed with
    shardfs-warm), then warm on the same cache remounted."""
    ds, w = plan.ds, plan.w
    opts = fresh_cache(plan.cache_dir, 2 * ds.total)
    with plan.mount(cluster, cg, opts, "cold") as m:
        log(f"mlperf {w.name}: mount cold, capacity")
        rows.capacity("mount cold, empty cache_dir",
                      capacity_pass(cluster, cg, ds, ARGS.mnt, ds.lst_mnt, plan.threads, m,
                                    drain=True))
        log(f"mlperf {w.name}: completing the cache (shardfs-warm)")
        run([warm_tool(), "-q", os.path.join(ARGS.mnt, ds.name)])
        settle(m)
    warm_passes(cluster, cg, plan, rows, opts)


def warm_tool():
    """shardfs-warm: the source tree's (tools/cmd), else the installed one
    on PATH (the packages put it in /usr/bin, not beside the bench)."""
    exe = tool("shardfs-warm", "cmd")
    if os.access(exe, os.X_OK):
        return exe
    return shutil.which("shardfs-warm") or exe


def twice_the_cache(cluster, cg, plan, rows):
    """The data set twice the cache: epoch 1 fills it, epoch 2 is measured."""
    ds, w = plan.ds, plan.w
    opts = fresh_cache(plan.cache_dir, ds.total // 2)
    with plan.mount(cluster, cg, opts, "2 x cache") as m:
        for e in (1, 2):
            log(f"mlperf {w.name}: data set = 2 x cache, epoch {e}")
            rows.capacity(f"data set = 2 x cache, epoch {e}",
                          capacity_pass(cluster, cg, ds, ARGS.mnt, ds.lst_mnt, plan.threads, m,
                                        drain=True))
    shutil.rmtree(plan.cache_dir, ignore_errors=True)


def run_workload(cluster, cg, w0, records):
    """One workload: every source's passes; returns its lines."""
    plan = Plan(cluster, w0)
    ds, w = plan.ds, plan.w
    rows = Rows(plan)
    hosts = ",".join(cluster.addrs) + ":/ifs"
    log(f"mlperf {w.name}: raw libnfs, capacity")
    rows.capacity("raw libnfs", capacity_pass(cluster, cg, ds, hosts, ds.lst_nfs, plan.threads,
                                              in_ns=True))
    log(f"mlperf {w.name}: local copy, capacity")
    rows.capacity("local copy", capacity_pass(cluster, cg, ds, ds.local, ds.lst_local,
                                              plan.threads))
    for n in plan.ns:
        log(f"mlperf {w.name}: local copy, N={n}")
        rows.paced("local copy", n, *plan.paced(cg, ds.local, n))
    cold_and_warm(cluster, cg, plan, rows)
    cold_paced(cluster, cg, plan, rows)
    twice_the_cache(cluster, cg, plan, rows)
    records.extend(rows.records())
    return workload_lines(plan, rows, cg)


def bench(cluster, out):
    """Each workload of --mlperf in turn, its readers in one memory cgroup."""
    cg = ClientCgroup(f"shardfs-bench-{ARGS.id}-mlperf", ARGS.mlperf_mem_mib * MiB).create()
    records = []
    try:
        for w0 in parse_workloads(ARGS.mlperf):
            out.extend(run_workload(cluster, cg, w0, records))
    finally:
        cg.remove()
        if ARGS.mlperf_json:
            write_json(ARGS.mlperf_json, records)
    out.append(f"  MLPerf Storage's rules here: {rules_note()}")


def rules_note():
    """Where this run differs from MLPerf Storage's rules."""
    d = []
    if ARGS.mlperf_compute_s < 60:
        d.append(f"trials aim at {ARGS.mlperf_compute_s:g} s of compute, not >= 60")
    d.append(f"a trial stops at {ARGS.mlperf_trial_s:g} s of wall time"
             " (the compute it reached is in its row)")
    if ARGS.mlperf_trials < 5:
        d.append(f"{ARGS.mlperf_trials} trial(s) per point, not 5")
    if ARGS.mlperf_smoke or ARGS.mlperf_scale != 1:
        d.append("samples and compute scaled (see each workload)")
    if ARGS.mlperf_dataset_x < 5:
        d.append(f"the data set is {ARGS.mlperf_dataset_x:g} x the client's memory, not >= 5")
    d.append(f"the client's memory is a cgroup of {ARGS.mlperf_mem_mib} MiB (the readers and "
             "the daemon), not the machine's; one epoch per cold trial; PyTorch's workers "
             "are threads of one process per accelerator")
    return "; ".join(d)

