# SPDX-License-Identifier: Apache-2.0
"""The MLPerf Storage workloads that --mlperf emulates (their H100
configurations), scaled for a small machine, and their data sets as DLIO's
generators lay them out: file names, sample sizes, bytes on disk.

Owns the workload table (WORKLOADS) and the arithmetic of sizes. Does not
write files (modes/mlperf.py), read them (mlperf_loader.py) or compute AU
(mlperf_metrics.py). Threading: pure functions over immutable values.

The table's values are those of mlcommons/storage configs/dlio/workload/
{unet3d,resnet50,cosmoflow}_h100.yaml (MLPerf Storage v1.0); what the
configurations leave out takes DLIO's defaults (dlio_benchmark/utils/
config.py: prefetch_size 2, shuffle_size 1024, no shuffle unless asked).
"""

import math
import random
from typing import NamedTuple

KiB = 1 << 10

# What one TFRecord record adds on disk to its payload: the 8-byte length,
# its 4-byte masked CRC and the payload's 4-byte masked CRC.
TFRECORD_FRAMING = 16

# The reads of both readers: numpy's np.load reads an .npz member in
# BUFFER_SIZE = 256 KiB pieces; tf.data.TFRecordDataset reads through a
# buffered stream of 256 KiB (buffer_size = transfer_size, unset: TF's default).
READ_BYTES = 256 * KiB


class Workload(NamedTuple):
    """One MLPerf Storage workload: its format, its loader and its accelerator."""

    name: str
    framework: str         # "pytorch" (DLIO's torch loader) or "tensorflow" (tf.data)
    fmt: str               # "npz" or "tfrecord"
    samples_per_file: int  # dataset.num_samples_per_file
    record_bytes: float    # dataset.record_length_bytes
    record_stdev: float    # dataset.record_length_bytes_stdev
    batch: int             # reader.batch_size
    read_threads: int      # reader.read_threads
    compute_s: float       # train.computation_time: the accelerator's sleep per batch
    au: float              # metric.au: the AU a result must hold
    file_shuffle: bool     # reader.file_shuffle: seed
    sample_shuffle: bool   # reader.sample_shuffle: seed
    shuffle_size: int      # reader.shuffle_size: tf.data's sample shuffle buffer, records
    prefetch_size: int = 2  # reader.prefetch_size (DLIO's default): batches read ahead


WORKLOADS = {
    "unet3d": Workload("unet3d", "pytorch", "npz", 1, 146_600_628, 68_341_808, 7, 4, 0.323,
                       0.90, True, True, 1024),
    "resnet50": Workload("resnet50", "tensorflow", "tfrecord", 1251, 114_660.07, 0, 400, 8,
                         0.224, 0.90, False, False, 1024),
    "cosmoflow": Workload("cosmoflow", "tensorflow", "tfrecord", 1, 2_828_486, 71_311, 1, 4,
                          0.0035, 0.70, True, True, 2),
}


def parse_workloads(spec):
    """'unet3d,cosmoflow' or 'all' -> [Workload] in the table's order, or
    None when a name is unknown."""
    names = list(WORKLOADS) if spec == "all" else [s for s in spec.split(",") if s]
    if not names or any(n not in WORKLOADS for n in names):
        return None
    return [WORKLOADS[n] for n in WORKLOADS if n in names]


def scaled(w, factor):
    """w with its samples and its compute time per batch both multiplied by
    factor: each file is smaller and each step shorter, and one accelerator
    asks for the same bytes per second."""
    if factor == 1:
        return w
    return w._replace(record_bytes=w.record_bytes * factor, record_stdev=w.record_stdev * factor,
                      compute_s=w.compute_s * factor)


def record_on_disk(w, record):
    """Bytes one record of record bytes takes in a file of w's format."""
    return record + (TFRECORD_FRAMING if w.fmt == "tfrecord" else 0)


def file_record_bytes(w, seed, index):
    """The record size of file index, as DLIO's generators draw it: a 2-D
    sample of d1 x d2 bytes, each side drawn from a normal around
    sqrt(record_bytes) with record_stdev / 2 / sqrt(record_bytes), at least 1;
    every record of one file has that size. Seeded per file, so that a file
    keeps its size whatever the data set's length."""
    side = int(math.sqrt(w.record_bytes))
    if w.record_stdev <= 0:
        return side * side
    sd = w.record_stdev / 2.0 / math.sqrt(w.record_bytes)
    rng = random.Random(f"mlperf-{w.name}-{seed}-{index}")
    return max(int(rng.gauss(side, sd)), 1) * max(int(rng.gauss(side, sd)), 1)


def file_name(w, index):
    """DLIO's layout: train/img_INDEX.FORMAT."""
    return f"train/img_{index:06d}.{w.fmt}"


def dataset_specs(w, min_bytes, min_files, seed):
    """The data set: files of w until there are at least min_files and at
    least min_bytes. Returns [(relative path, file bytes, record bytes)] in
    DLIO's list order."""
    specs, total, i = [], 0, 0
    while len(specs) < min_files or total < min_bytes:
        rec = file_record_bytes(w, seed, i)
        size = w.samples_per_file * record_on_disk(w, rec)
        specs.append((file_name(w, i), size, rec))
        total += size
        i += 1
    return specs


def mean_sample_bytes(w, specs):
    """Bytes on disk per sample, over the data set specs."""
    return sum(s for _, s, _ in specs) / (len(specs) * w.samples_per_file)


def torch_window_batches(w):
    """PyTorch's DataLoader: the batches handed to its workers and not yet
    consumed, read_threads x prefetch_factor, where DLIO sets
    prefetch_factor = ceil(prefetch_size / read_threads)."""
    return w.read_threads * math.ceil(w.prefetch_size / w.read_threads)


def tf_ahead_records(w):
    """tf.data: the records read and not yet consumed, at most: the shuffle
    buffer (when the workload shuffles samples), the batch being built and
    prefetch_size batches."""
    return (w.shuffle_size if w.sample_shuffle else 0) + (w.prefetch_size + 1) * w.batch


def warmup_steps(w):
    """The steps a trial does not measure: the first (DLIO's
    metric_exclude_start_steps) and the batches its loader read ahead while
    that first one waited, which the next steps then find ready: the read-
    ahead in batches, at least 1."""
    if w.framework == "pytorch":
        return max(1, torch_window_batches(w))
    return max(1, math.ceil(tf_ahead_records(w) / w.batch))


def steps_per_epoch(w, n_files, ranks):
    """The steps of one epoch, the same for every rank: the batches of the
    rank with the fewest files (floor(files / ranks) of them: DLIO's index
    sampler and tf.data's shard both split within one file of even). DLIO
    runs floor(samples / batch / ranks), which can be one more than that
    rank has; it reads on into the next epoch, one-epoch trials cannot."""
    return (n_files // ranks) * w.samples_per_file // w.batch
