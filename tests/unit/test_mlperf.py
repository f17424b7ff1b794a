#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""shardfs-bench --mlperf's arithmetic and its DLIO emulation, without a mount:

  * mlperf_metrics from known sleeps and read times: a rank's AU, samples/s
    and bytes/s as DLIO computes them (the first step excluded), a trial's
    over its ranks, the mean of trials, one accelerator's demand, N at the AU
    threshold and when it is only a lower bound;
  * mlperf_workloads: the H100 table, DLIO's sample sizes, the data set's
    length, scaling (the demand unchanged), the steps of an epoch;
  * mlperf_loader: each workload's smallest configuration run for about a
    second on local files, at 1 and 2 accelerators, epoch-limited and not:
    every rank takes the planned steps, each batch holds the workload's
    samples and their bytes on disk, the readers read at least what was
    consumed, the sleeps last the compute time, proc = wait + sleep, and the
    figures follow from the records.

Run by meson (tests/unit/meson.build) with PYTHONPATH at tools/bench and
tests/integration (tapcheck). TAP.
"""
import math
import os
import shutil
import sys
import tempfile

import tapcheck as T  # tests/integration: the TAP lines of the Python checks
from shardfs_bench import mlperf_loader as L
from shardfs_bench import mlperf_metrics as M
from shardfs_bench import mlperf_workloads as W

ok = T.ok


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def rank_record(loads, compute, batch, sample_bytes, barrier_s=0.0, sleep_over=1.0):
    """A rank's record from known read waits (loads) and a known compute
    time per batch; its sleeps took sleep_over x the compute time, and each
    step's barrier barrier_s."""
    sleeps = [compute * sleep_over] * len(loads)
    proc = [ld + sl for ld, sl in zip(loads, sleeps)]
    return {"sleep": sleeps, "proc": proc, "load": loads, "samples": [batch] * len(loads),
            "bytes": [batch * sample_bytes] * len(loads),
            "wall_s": sum(proc) + barrier_s * len(loads)}


def test_metrics():
    # 10 steps of 0.3 s of compute; the first waits 1.0 s for its batch (the
    # loader starting), the others 0.2 s: window 5.8 - 1.3 = 4.5 s, 9 steps
    # of compute measured = 2.7 s.
    r = rank_record([1.0] + [0.2] * 9, 0.3, 7, 1000)
    f = M.rank_figures(r, 0.3)
    ok(close(M.window_s(r["proc"], r["wall_s"]), 4.5), "window = wall - the first step's proc")
    ok(close(f.au, 0.6), f"AU = 2.7 s of compute / 4.5 s = 0.6 (got {f.au})")
    ok(f.steps == 9 and close(f.compute_s, 2.7), "9 measured steps, 2.7 s of compute")
    ok(close(f.samples_s, 63 / 4.5) and close(f.bytes_s, 63000 / 4.5),
       "samples/s and bytes/s over the measured window")
    ok(close(f.au, f.samples_s * 0.3 / 7), "AU = samples/s x compute per batch / batch")
    # Sleeps that overran (a busy CPU) lengthen the steps but not the compute.
    r2 = rank_record([1.0] + [0.2] * 9, 0.3, 7, 1000, sleep_over=1.5)
    f2 = M.rank_figures(r2, 0.3)
    ok(close(f2.au, 2.7 / (r2["wall_s"] - r2["proc"][0])) and close(f2.sleep_ratio, 1.5),
       "an overrun sleep: compute stays steps x 0.3 s, sleep_ratio 1.5")
    # Barrier waits are in the wall time, outside every step's proc.
    r3 = rank_record([0.0] * 5, 0.1, 1, 10, barrier_s=0.1)
    ok(close(M.rank_figures(r3, 0.1).au, 0.4 / (1.0 - 0.1)),
       "barrier waits count against AU (DLIO: the block's wall time)")
    ok(M.rank_figures(rank_record([0.5], 0.3, 7, 1), 0.3).au == 0.0,
       "one step only: nothing measured, AU 0")
    ok(close(M.rank_figures(r, 0.3, exclude=0).au, 3.0 / 5.8), "exclude=0: every step counts")
    # A warm-up of 4 steps: the first waited 1.0 s, the 3 read meanwhile 0.0.
    r4 = rank_record([1.0, 0.0, 0.0, 0.0] + [0.2] * 6, 0.3, 7, 1000)
    ok(close(M.rank_figures(r4, 0.3, exclude=4).au, 1.8 / 3.0)
       and close(M.rank_figures(r4, 0.3).au, 2.7 / (r4["wall_s"] - 1.3)),
       "excluding the warm-up: 6 steps of 0.5 s, AU 0.6 (DLIO's one step: higher)")

    # A trial: the mean AU, the sums of the rates.
    slow = rank_record([1.0] + [0.7] * 9, 0.3, 7, 1000)   # window 9 s, AU 0.3
    t = M.trial_figures([r, slow], 0.3)
    ok(t.n == 2 and close(t.au, 0.45) and close(t.au_min, 0.3),
       f"a trial's AU is its ranks' mean (0.45), au_min the lowest (got {t.au}, {t.au_min})")
    ok(close(t.samples_s, 63 / 4.5 + 63 / 9.0) and close(t.bytes_s, 63000 / 4.5 + 63000 / 9.0),
       "a trial's samples/s and bytes/s are its ranks' sums")
    m = M.mean_trials([t, M.trial_figures([r, r], 0.3)])
    ok(close(m.au, (0.45 + 0.6) / 2) and m.au_min == 0.3 and m.steps == 9,
       "mean of trials: mean AU, lowest au_min and steps")

    # Demand and N: unet3d's H100 accelerator.
    d = M.demand_bytes_s(146_600_628, 7, 0.323)
    ok(close(d, 146_600_628 * 7 / 0.323), f"unet3d demand {d / 1e6:.0f} MB/s")
    ok(close(M.n_at_threshold(0.9 * d, 0.9, d), 1.0), "demand x AU threshold sustained: N = 1")
    ok(close(M.n_at_threshold(4.5 * d, 0.9, d), 5.0), "4.5 x demand at AU 0.9: N = 5")
    Tf = M.TrialFigures
    a = Tf(1, 0.95, 0.95, 0, 0.95 * d, 0, 0, 10, 1.0)
    b = Tf(2, 0.60, 0.55, 0, 1.2 * d, 0, 0, 10, 1.0)
    e = M.n_from_trials([a, b], 0.9, d)
    ok(close(e.n, 1.2 / 0.9) and e.from_n == 2 and not e.lower_bound,
       "N from the highest bytes/s (N=2 failed the threshold: the source saturated)")
    e1 = M.n_from_trials([a], 0.9, d)
    ok(e1.lower_bound and M.fmt_n(e1).startswith(">= "),
       "every trial held the threshold: a lower bound")


def test_workloads():
    w = W.WORKLOADS
    ok((w["unet3d"].batch, w["unet3d"].read_threads, w["unet3d"].compute_s, w["unet3d"].au)
       == (7, 4, 0.323, 0.90), "unet3d: batch 7, 4 readers, 0.323 s, AU 0.90")
    ok((w["resnet50"].samples_per_file, w["resnet50"].batch, w["resnet50"].read_threads,
        w["resnet50"].compute_s) == (1251, 400, 8, 0.224), "resnet50: 1251/file, 400, 8, 0.224 s")
    ok((w["cosmoflow"].batch, w["cosmoflow"].compute_s, w["cosmoflow"].au,
        w["cosmoflow"].shuffle_size) == (1, 0.0035, 0.70, 2), "cosmoflow: 1, 0.0035 s, AU 0.70")
    ok([x.name for x in W.parse_workloads("cosmoflow,unet3d")] == ["unet3d", "cosmoflow"]
       and len(W.parse_workloads("all")) == 3 and W.parse_workloads("bert") is None,
       "parse_workloads: the table's order, all, unknown names refused")
    ok(W.file_record_bytes(w["resnet50"], 1, 0) == 338 * 338,
       "resnet50's record: int(sqrt(114660.07))^2 bytes, as DLIO's generator makes it")
    sizes = [W.file_record_bytes(w["unet3d"], 1, i) for i in range(400)]
    mean = sum(sizes) / len(sizes)
    ok(abs(mean - 146_600_628) < 0.1 * 146_600_628 and min(sizes) >= 1,
       f"unet3d's sizes drawn around the configuration's mean ({mean / 1e6:.0f} MB)")
    small = W.dataset_specs(w["unet3d"], 10 ** 9, 1, 1)
    ok(W.dataset_specs(w["unet3d"], 3 * 10 ** 9, 1, 1)[:len(small)] == small,
       "a longer data set begins with the shorter one's files")
    specs = W.dataset_specs(w["cosmoflow"], 50_000_000, 4, 1)
    total = sum(s for _, s, _ in specs)
    ok(total >= 50_000_000 and total - specs[-1][1] < 50_000_000 and len(specs) >= 4,
       "dataset_specs: the fewest files that reach the bytes asked")
    ok(all(s == r + W.TFRECORD_FRAMING for _, s, r in specs),
       "a TFRecord file is its record and the record's framing")
    ok(W.dataset_specs(w["cosmoflow"], 1, 7, 1)[6][0] == "train/img_000006.tfrecord",
       "at least min_files files, named as DLIO does")
    u = W.scaled(w["unet3d"], 1 / 64)
    ok(close(u.record_bytes / u.compute_s, w["unet3d"].record_bytes / w["unet3d"].compute_s),
       "scaled: the demand unchanged")
    ok((W.warmup_steps(w["unet3d"]), W.warmup_steps(w["resnet50"]),
        W.warmup_steps(w["cosmoflow"])) == (4, 3, 5),
       "warm-up: 4 batches handed to unet3d's workers, 3 of resnet50's records, 5 of cosmoflow's")
    ok(W.steps_per_epoch(w["unet3d"], 30, 2) == 2 and W.steps_per_epoch(w["resnet50"], 9, 2) == 12
       and W.steps_per_epoch(w["cosmoflow"], 9, 4) == 2,
       "steps per epoch: the batches of the rank with the fewest files")


def write_files(root, specs):
    for rel, size, _ in specs:
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(os.urandom(size))


SMALLEST = {"unet3d": 1 / 256, "resnet50": 1 / 256, "cosmoflow": 1 / 16}


def check_trial(w, spec, res, what):
    ranks = res["ranks"]
    steps = res["steps"]
    counts = {len(r["proc"]) for r in ranks}
    ok(len(ranks) == spec["n"] and len(counts) == 1 and
       (counts == {steps} or res["stopped_by_wall"]),
       f"{what}: every rank took the same steps ({counts}, planned {steps})")
    eps = 1e-6
    ok(all(s >= w.compute_s - eps for r in ranks for s in r["sleep"]),
       f"{what}: every sleep lasted the compute time")
    ok(all(abs(p - (ld + s)) < eps
           for r in ranks for p, ld, s in zip(r["proc"], r["load"], r["sleep"])),
       f"{what}: proc = wait + sleep")
    ok(all(n == w.batch for r in ranks for n in r["samples"]), f"{what}: batches of {w.batch}")
    ok(all(r["bytes_read"] >= sum(r["bytes"]) for r in ranks),
       f"{what}: the readers read at least what the steps consumed")
    ok(all(r["wall_s"] >= sum(r["proc"]) - eps for r in ranks), f"{what}: wall >= the steps' procs")
    x = res["warmup_steps"]
    f = M.trial_figures(ranks, w.compute_s, x)
    want = sum((len(r["proc"]) - x) * w.compute_s / (r["wall_s"] - sum(r["proc"][:x]))
               for r in ranks) / len(ranks)
    ok(close(f.au, want) and 0 < f.au <= 1.0 + eps, f"{what}: AU {f.au:.3f} from the records")


def test_loader():
    tmp = tempfile.mkdtemp(prefix="test-mlperf-")
    try:
        for name, scale in SMALLEST.items():
            w = W.scaled(W.WORKLOADS[name], scale)
            # Two ranks, each an epoch of twice the warm-up at least.
            per_rank = math.ceil(2 * W.warmup_steps(w) * w.batch / w.samples_per_file)
            specs = W.dataset_specs(w, 2 << 20, 2 * per_rank, 1)
            root = os.path.join(tmp, name)
            write_files(root, specs)
            for n in (1, 2):
                spec = {"workload": w._asdict(), "root": root, "files": specs, "n": n, "seed": 1,
                        "compute_target_s": 0.2, "max_wall_s": 5.0, "epochs_max": 0}
                check_trial(w, spec, L.run_trial(spec), f"{name} N={n}")
            # One epoch: the files a rank consumed are those of its batches.
            spec = {"workload": w._asdict(), "root": root, "files": specs, "n": 2, "seed": 3,
                    "compute_target_s": 1e9, "max_wall_s": 30.0, "epochs_max": 1}
            res = L.run_trial(spec)
            check_trial(w, spec, res, f"{name} N=2, one epoch")
            spe = W.steps_per_epoch(w, len(specs), 2)
            ok(res["steps"] == spe and not res["stopped_by_wall"],
               f"{name}: one epoch is {spe} steps")
            if w.framework == "pytorch":
                files = [(os.path.join(root, r), s) for r, s, _ in specs]
                batches = L.torch_batches(w, files, 0, 2, spe, 3)
                ok(sum(res["ranks"][0]["bytes"]) == sum(s for b in batches for _, s in b),
                   f"{name}: rank 0 consumed the bytes of its epoch's batches")
            elif w.record_stdev == 0:
                rec = W.record_on_disk(w, specs[0][2])
                ok(all(b == w.batch * rec for r in res["ranks"] for b in r["bytes"]),
                   f"{name}: each batch is {w.batch} records of {rec} bytes on disk")
        too_few = {"workload": W.WORKLOADS["unet3d"]._asdict(), "root": tmp,
                   "files": [["x", 1, 1]] * 3, "n": 1, "seed": 1, "compute_target_s": 1,
                   "max_wall_s": 1, "epochs_max": 0}
        try:
            L.run_trial(too_few)
            ok(False, "3 files and batches of 7: refused")
        except RuntimeError as e:
            ok("no batch" in str(e), f"3 files and batches of 7: refused ({e})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    test_metrics()
    test_workloads()
    test_loader()
    print(f"1..{T._n}")
    return 1 if T.failed else 0


if __name__ == "__main__":
    sys.exit(main())
