# SPDX-License-Identifier: Apache-2.0
"""The arithmetic of --mlperf: one accelerator's demand, a rank's accelerator
utilization (AU) and rates as DLIO computes them from its steps, a trial's
figures over its ranks, and N, the accelerators a source keeps at the AU
threshold.

Owns no state and does no I/O. Threading: pure functions.

DLIO (dlio_benchmark/utils/statscounter.py) times each step of a rank: the
wait for the batch, then the compute (the sleep); "proc" is the two
together. Its block runs from before the first batch to after the last
step's barrier. AU = the compute of the measured steps over the block's
wall time less the proc of the excluded first steps
(metric_exclude_start_steps, 1 by default). A trial's AU is the mean over
its ranks; its samples/s and bytes/s the sum.

Two differences. The steps not measured are the warm-up
(mlperf_workloads.warmup_steps): DLIO's first step and the batches the
loader read ahead while it waited, which the next steps find ready; in a
trial of a few tens of steps they would weigh on AU, in DLIO's 60-second
trials they hardly do (the functions take the count; DLIO's is 1). And DLIO
adds up the sleeps as it measured them; here the compute of a step is the
workload's compute time per batch, and how long the sleeps took is kept
beside it (sleep_ratio). On a machine whose CPUs are busy a sleep overruns;
the overrun is the machine's delay, not the accelerator's work, and counting
it would raise AU above what the samples delivered can sustain (AU x batch /
compute time = samples/s per rank holds exactly this way).
"""

from typing import NamedTuple

# DLIO's metric_exclude_start_steps default: the first step (the loader's
# start) is not measured.
EXCLUDE_START = 1


def demand_bytes_s(sample_bytes, batch, compute_s):
    """One accelerator's demand: the bytes it consumes per second at AU 1
    (sample_bytes x batch every compute_s)."""
    return sample_bytes * batch / compute_s


def window_s(proc, wall_s, exclude=EXCLUDE_START):
    """The measured part of a rank's block: its wall time less the proc
    (wait + compute) of the excluded first steps."""
    return wall_s - sum(proc[:exclude])


def au(compute_s, window):
    """compute_s of compute over window seconds; 0.0 when nothing was measured."""
    if compute_s <= 0 or window <= 0:
        return 0.0
    return compute_s / window


class RankFigures(NamedTuple):
    au: float
    samples_s: float
    bytes_s: float
    compute_s: float    # measured compute seconds: measured steps x compute per batch
    window_s: float     # measured wall seconds
    steps: int          # measured steps
    sleep_ratio: float  # the measured steps' sleeps as they took, over their compute


def rank_figures(rank, compute_per_batch_s, exclude=EXCLUDE_START):
    """A rank's figures from its record (the loader's: per step lists
    "sleep", "proc", "samples", "bytes", and "wall_s"): AU, and the samples
    and bytes of its measured steps over its measured window."""
    steps = max(0, len(rank["proc"]) - exclude)
    window = window_s(rank["proc"], rank["wall_s"], exclude)
    compute = steps * compute_per_batch_s
    slept = sum(rank["sleep"][exclude:])
    ok = window > 0
    return RankFigures(au(compute, window),
                       sum(rank["samples"][exclude:]) / window if ok else 0.0,
                       sum(rank["bytes"][exclude:]) / window if ok else 0.0,
                       compute, window if ok else 0.0, steps,
                       slept / compute if compute else 0.0)


class TrialFigures(NamedTuple):
    n: int              # ranks: simulated accelerators
    au: float           # mean over the ranks
    au_min: float       # the lowest rank's
    samples_s: float    # sum over the ranks
    bytes_s: float      # sum over the ranks
    compute_s: float    # measured compute seconds, mean over the ranks
    window_s: float     # measured wall seconds, mean over the ranks
    steps: int          # measured steps per rank (the fewest)
    sleep_ratio: float  # mean over the ranks


def trial_figures(ranks, compute_per_batch_s, exclude=EXCLUDE_START):
    """A trial's figures from its ranks' records."""
    fs = [rank_figures(r, compute_per_batch_s, exclude) for r in ranks]
    n = len(fs)
    return TrialFigures(n, sum(f.au for f in fs) / n, min(f.au for f in fs),
                        sum(f.samples_s for f in fs), sum(f.bytes_s for f in fs),
                        sum(f.compute_s for f in fs) / n, sum(f.window_s for f in fs) / n,
                        min(f.steps for f in fs), sum(f.sleep_ratio for f in fs) / n)


def mean_trials(trials):
    """Several trials of one configuration as one: the mean of each figure
    (MLPerf reports the mean of its runs); au_min and steps the lowest."""
    k = len(trials)

    def mean(attr):
        return sum(getattr(t, attr) for t in trials) / k
    return TrialFigures(trials[0].n, mean("au"), min(t.au_min for t in trials),
                        mean("samples_s"), mean("bytes_s"), mean("compute_s"), mean("window_s"),
                        min(t.steps for t in trials), mean("sleep_ratio"))


def n_at_threshold(bytes_s, au_threshold, demand):
    """N as a real number: the accelerators bytes_s feeds at the threshold.
    An accelerator held at AU a consumes a x demand, so bytes_s sustained
    keeps bytes_s / (au_threshold x demand) of them at the threshold."""
    return bytes_s / (au_threshold * demand)


class NEstimate(NamedTuple):
    n: float           # accelerators at the threshold
    bytes_s: float     # what it is taken from: the highest bytes/s of the trials
    from_n: int        # the trial that gave it (its accelerators)
    lower_bound: bool  # that trial held the threshold: the source was not shown saturated


def n_from_trials(trials, au_threshold, demand):
    """N of a source from its trials at several accelerator counts: the
    highest bytes/s any of them sustained, over the threshold's demand. When
    every trial held the threshold, the source was never shown saturated and
    more accelerators might have been fed: N is then a lower bound."""
    best = max(trials, key=lambda t: t.bytes_s)
    return NEstimate(n_at_threshold(best.bytes_s, au_threshold, demand), best.bytes_s, best.n,
                     all(t.au >= au_threshold for t in trials))


def fmt_n(est):
    """'2.31' or '>= 2.31' (a lower bound)."""
    return (">= " if est.lower_bound else "") + f"{est.n:.2f}"
