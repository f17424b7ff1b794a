# SPDX-License-Identifier: Apache-2.0
"""The output of --mlperf: a workload's passes kept as rows (Rows), its lines
(the configuration, the capacity table, the paced table with N per source,
the goals, the daemons' logs) and the JSON of every pass.

Does not measure. Threading: the main thread.
"""

import json

from .common import GiB
from .mlperf_metrics import fmt_n, n_from_trials
from .mlperf_workloads import warmup_steps
from .report import daemon_log_lines, family_sum

# The goals of issue 53, as ratios of N (the same demand: ratios of MB/s).
GOALS = {"mount warm, remounted": ("local copy", 0.95),
         "mount cold, empty cache_dir": ("raw libnfs", 0.90),
         "data set = 2 x cache, epoch 2": ("raw libnfs", 1.00)}


class Rows:
    """A workload's passes, in the order run: capacity (label -> ItemPass)
    and paced ((label, N) -> (mean TrialFigures, [PacedPass])), and the
    paced points skipped (with why)."""

    def __init__(self, plan):
        self.plan = plan
        self.cap = {}
        self.pace = {}
        self.skips = []

    def capacity(self, label, p):
        self.cap[label] = p

    def paced(self, label, n, fig, trials):
        self.pace[(label, n)] = (fig, trials)

    def skipped(self, label, n, why):
        self.skips.append((label, n, why))

    def sources(self):
        """The paced sources in the order run."""
        return list(dict.fromkeys(label for label, _ in self.pace))

    def estimate(self, label):
        """N of a paced source (mlperf_metrics.n_from_trials)."""
        figs = [fig for (lb, _), (fig, _) in self.pace.items() if lb == label]
        return n_from_trials(figs, self.plan.w.au, self.plan.demand)

    def records(self):
        """Every pass as JSON-ready dicts."""
        p = self.plan
        head = {"workload": p.w.name, "scale": p.scale, "au_threshold": p.w.au,
                "mem_limit_bytes": p.mem,
                "demand_bytes_s": p.demand, "batch": p.w.batch, "compute_s": p.w.compute_s,
                "sample_bytes": p.sample_bytes, "files": len(p.ds.specs), "bytes": p.ds.total}
        out = []
        for label, c in self.cap.items():
            d = c.delta
            out.append(dict(head, kind="capacity", source=label, items=c.items, nbytes=c.nbytes,
                            seconds=c.secs, n=p.n_cap(c), daemon_cpu_s=c.daemon_cpu,
                            nfs_bytes=family_sum(d, "shardfs_node_read_bytes_total"),
                            cache_hit_bytes=d.get("shardfs_cache_hit_bytes_total", 0.0),
                            passthrough_opens=d.get("shardfs_passthrough_opens_total", 0.0),
                            unverified_opens=d.get("shardfs_passthrough_unverified_opens_total",
                                                   0.0)))
        for (label, n), (fig, trials) in self.pace.items():
            out.append(dict(head, kind="paced", source=label, n=n, mean=fig._asdict(), trials=[
                {"figures": t.fig._asdict(), "ranks": t.ranks, "exclude": t.exclude,
                 "bytes_read": t.bytes_read,
                 "daemon_cpu_s": t.daemon_cpu, "steps_planned": t.steps_planned,
                 "stopped_by_wall": t.by_wall, "cgroup_peak_bytes": t.peak} for t in trials]))
        for label in self.sources():
            e = self.estimate(label)
            out.append(dict(head, kind="estimate", source=label, **e._asdict()))
        return out


def cpu_gib(cpu, nbytes):
    return "" if cpu is None or not nbytes else f"{cpu / (nbytes / GiB):.3f}"


def config_lines(plan, cg):
    w0, w, ds = plan.w0, plan.w, plan.ds
    sd = f" +- {w0.record_stdev:,.0f}" if w0.record_stdev else ""
    out = [f"mlperf {w0.name}: MLPerf Storage v1.0 H100 configuration (mlcommons/storage "
           f"configs/dlio/workload/{w0.name}_h100.yaml): {w0.fmt}, {w0.samples_per_file:,} "
           f"sample(s) per file of {w0.record_bytes:,.0f}{sd} B, batch {w0.batch}, "
           f"{w0.read_threads} reader threads ({w0.framework}), {w0.compute_s:g} s of compute "
           f"per batch, AU >= {w0.au:.2f}"]
    if plan.scale != 1:
        out.append(f"  scaled x {plan.scale:.6g}: samples of {w.record_bytes:,.0f}"
                   f"{f' +- {w.record_stdev:,.0f}' if w.record_stdev else ''} B, "
                   f"{w.compute_s * 1e3:.3g} ms of compute per batch (the demand unchanged)")
    out.append(f"  data set: {len(ds.specs)} files, {ds.total / 1e9:.2f} GB "
               f"({ds.total / cg.limit:.1f} x the client's memory, a cgroup v{cg.version} of "
               f"{cg.limit >> 20} MiB for the readers and the daemon), "
               f"{plan.sample_bytes / 1e6:.3f} MB "
               f"per sample on disk; one accelerator's demand {plan.demand / 1e6:,.0f} MB/s "
               f"(at AU {w.au:.2f}: {w.au * plan.demand / 1e6:,.0f} MB/s); N = MB/s / "
               f"({w.au:.2f} x demand)")
    return out


def capacity_lines(plan, rows):
    p = plan
    out = [f"  capacity: shardfs-smallread, {p.threads} threads ({p.w.read_threads} per "
           f"accelerator x {p.ns[-1]}), one shuffled epoch of whole files, unpaced, page "
           f"caches dropped",
           f"    {'source':<32}{'MB/s':>7}{'files/s':>9}{'N':>8}  {'ratio':<28}"
           f"{'daemon CPU-s/GiB':>17}  NFS bytes/byte, cache"]
    for label, c in rows.cap.items():
        ratio = ""
        if label in GOALS and GOALS[label][0] in rows.cap:
            base, goal = GOALS[label]
            r = c.mbps / rows.cap[base].mbps
            ratio = f"{r:.2f} x {base.split()[0]} (goal >= {goal:.2f})"
        elif label == "raw libnfs":
            ratio = "(cold baseline)"
        elif label == "local copy":
            ratio = "(warm baseline)"
        tail = ""
        if c.daemon_cpu is not None:
            d = c.delta
            nfs = family_sum(d, "shardfs_node_read_bytes_total") / c.nbytes
            hit = d.get("shardfs_cache_hit_bytes_total", 0.0)
            miss = d.get("shardfs_cache_miss_bytes_total", 0.0)
            pt = d.get("shardfs_passthrough_opens_total", 0.0)
            unv = d.get("shardfs_passthrough_unverified_opens_total", 0.0)
            tail = (f"{nfs:.2f}" + (f", hit ratio {hit / (hit + miss):.2f}" if hit + miss else "")
                    + (f", passthrough opens {pt:.0f}" if pt else "")
                    + (f", not yet verified {unv:.0f}" if unv else ""))
        out.append(f"    {label:<32}{c.mbps:7.0f}{c.rate:9.1f}{p.n_cap(c):8.2f}  {ratio:<28}"
                   f"{cpu_gib(c.daemon_cpu, c.nbytes):>17}  {tail}")
    return out


def paced_lines(plan, rows):
    w = plan.w
    out = [f"  DLIO emulation: N accelerators in lockstep (each {w.read_threads} reader threads, "
           f"{w.compute_s:.4g} s of sleep per batch of {w.batch}, a barrier per step); AU, "
           f"samples/s and MB/s over the steps after the warm-up (the first "
           f"{warmup_steps(w)}: the first and those it read ahead), mean of "
           f"{len(next(iter(rows.pace.values()))[1]) if rows.pace else 0} trial(s)",
           f"    {'source':<16}{'N':>3}{'AU (min)':>15}{'samples/s':>11}{'MB/s':>8}{'steps':>7}"
           f"{'compute-s':>10}{'wall-s':>8}{'sleep x':>8}{'daemon CPU-s/GiB':>18}"
           f"{'cgroup peak':>13}"]
    for label in rows.sources():
        first = True
        for (lb, n), (f, trials) in rows.pace.items():
            if lb != label:
                continue
            cpu = (None if any(t.daemon_cpu is None for t in trials)
                   else sum(t.daemon_cpu for t in trials))
            read = sum(t.bytes_read for t in trials)
            peak = max((t.peak or 0) for t in trials)
            cut = "*" if any(t.by_wall for t in trials) else " "
            out.append(f"    {label if first else '':<16}{n:>3}{f.au:>8.3f} ({f.au_min:.3f})"
                       f"{f.samples_s:>11.1f}{f.bytes_s / 1e6:>8.0f}{f.steps:>6}{cut}"
                       f"{f.compute_s:>10.1f}{f.window_s:>8.1f}{f.sleep_ratio:>8.2f}"
                       f"{cpu_gib(cpu, read):>18}"
                       f"{(str(peak >> 20) + ' MiB') if peak else '?':>13}")
            first = False
        e = rows.estimate(label)
        out.append(f"      N at AU {w.au:.2f}: {fmt_n(e)} ({e.bytes_s / 1e6:,.0f} MB/s at "
                   f"N={e.from_n}"
                   + (", which held the threshold: more were not tried" if e.lower_bound else "")
                   + ")")
    for label, n, why in rows.skips:
        out.append(f"    {label:<16}{n:>3}  not run: {why}")
    if any(t.by_wall for _, ts in rows.pace.values() for t in ts):
        out.append("    * stopped by --mlperf-trial-s before its compute target")
    out.append("    compute-s: measured steps x compute per batch; sleep x: how long the sleeps "
               "took over that (above 1: the CPUs were busy, the steps longer)")
    return out


def workload_lines(plan, rows, cg):
    out = config_lines(plan, cg) + capacity_lines(plan, rows) + paced_lines(plan, rows)
    out.extend(daemon_log_lines([(label, m.log_lines()) for label, m in plan.logs]))
    return out


def write_json(path, records):
    with open(path, "w") as f:
        json.dump(records, f, indent=1)
