# SPDX-License-Identifier: Apache-2.0
"""The DLIO emulation of --mlperf: one trial of N simulated accelerators over
a data set, run as a process of its own (the bench starts it inside the
readers' memory cgroup) that prints its ranks' step records as JSON.

Each accelerator is a process (one DLIO MPI rank) with its workload's reader
threads and its training loop: wait for the next batch, sleep the compute time
per batch, then a barrier with every other rank (DLIO's stand-in for the
all-reduce), for the trial's steps or until its wall-clock limit. The readers
do the I/O of DLIO's readers and keep none of the data:

  pytorch (unet3d)  DLIO's torch DataLoader: read_threads workers (processes
                    there, threads here), worker w builds batches w, w + R, ...
                    whole, one file after the other, and at most R x
                    ceil(prefetch_size / R) batches are handed out and not yet
                    consumed. A file is read as np.load reads an .npz: the
                    magic, the zip's end record and central directory, the
                    member's headers, then the array in 256 KiB reads. Each
                    rank has its block of the data set (DLIO's index sampler),
                    in a seeded order per epoch.
  tensorflow        tf.data.TFRecordDataset(num_parallel_reads = R): R files
  (resnet50,        read at once, each front to back in 256 KiB reads, its
   cosmoflow)       records handed on as they complete; the records read and
                    not yet consumed are bounded by the shuffle buffer (when
                    the workload shuffles samples), the batch being built and
                    prefetch_size batches. Files are sharded over the ranks
                    (rank r takes r, r + N, ...), the list shuffled per epoch
                    when the workload shuffles files.

Owns the trial: its processes, threads and their records. Does not know the
mount, the cgroup or the cluster, and computes no figure
(mlperf_metrics.py does). Threading: in a rank, reader threads share the
loader's state under its condition variable (Loader.cond); the training loop
is the rank's main thread. Ranks share only the two barriers and the stop
flag, set by the step barrier's action when the wall-clock limit passed.
Imports nothing of the bench but mlperf_workloads, so that it starts fast.
"""

import collections
import ctypes
import json
import math
import multiprocessing
import os
import queue
import random
import signal
import sys
import threading
import time

from .mlperf_workloads import (READ_BYTES, Workload, record_on_disk, steps_per_epoch,
                               tf_ahead_records, torch_window_batches, warmup_steps)

# The bytes in front of an .npz's array: the zip local header of x.npy (30 +
# its name) and the .npy header (128); and behind it, the y.npy member's
# central directory entry and the end record, read first.
NPZ_HEAD = 30 + 5 + 128
NPZ_TAIL = 2 * (46 + 5) + 22


def die_with_parent():
    """Ask the kernel to SIGTERM this process when its parent dies
    (PR_SET_PDEATHSIG), so that no rank outlives a killed trial."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def read_npz(path, size, buf):
    """Read one .npz file as np.load(path)['x'] does. Returns the bytes read."""
    fd = os.open(path, os.O_RDONLY)
    try:
        n = len(os.pread(fd, 6, 0))
        n += len(os.pread(fd, min(size, 22), max(0, size - 22)))
        n += len(os.pread(fd, min(size, NPZ_TAIL), max(0, size - NPZ_TAIL)))
        n += len(os.pread(fd, min(size, NPZ_HEAD), 0))
        off = min(size, NPZ_HEAD)
        while off < size:
            k = os.preadv(fd, [buf[:min(len(buf), size - off)]], off)
            if k <= 0:
                raise OSError(f"{path}: short file at {off} of {size}")
            n += k
            off += k
        return n
    finally:
        os.close(fd)


class Loader:
    """What the two loaders share: the reader threads, the condition that
    guards their state, the first error, the stop."""

    def __init__(self, threads):
        self.cond = threading.Condition()
        self.error = None      # protected by cond
        self.stopped = False   # protected by cond
        self.bytes_read = 0    # protected by cond
        self.threads = [threading.Thread(target=self.guarded, args=(i,), daemon=True)
                        for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()

    def guarded(self, i):
        buf = memoryview(bytearray(READ_BYTES))
        try:
            self.reader(i, buf)
        except Exception as e:  # handed to the training loop, which raises it
            with self.cond:
                self.error = self.error or f"reader {i}: {type(e).__name__}: {e}"
                self.cond.notify_all()

    def stop(self):
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=30)

    def check(self):
        """Raise the first reader error (the caller holds cond)."""
        if self.error:
            raise RuntimeError(self.error)


class TorchLoader(Loader):
    """DLIO's PyTorch loader (see the module's docstring). batches[b] is the
    list of (path, size) of batch b."""

    def __init__(self, w, batches):
        super().__init__(w.read_threads)
        self.batches = batches
        self.window = torch_window_batches(w)
        self.consumed = 0   # protected by cond
        self.ready = {}     # batch -> (samples, bytes); protected by cond

    def reader(self, i, buf):
        R = len(self.threads)
        for b in range(i, len(self.batches), R):
            with self.cond:
                while not self.stopped and b >= self.consumed + self.window:
                    self.cond.wait()
                if self.stopped:
                    return
            got = 0
            for path, size in self.batches[b]:
                got += read_npz(path, size, buf)
                if self.stopped:
                    return
            with self.cond:
                self.bytes_read += got
                self.ready[b] = (len(self.batches[b]), sum(s for _, s in self.batches[b]))
                self.cond.notify_all()

    def next_batch(self):
        """(samples, bytes) of the next batch, once read; raises a reader's
        error."""
        with self.cond:
            while self.consumed not in self.ready:
                self.check()
                self.cond.wait()
            got = self.ready.pop(self.consumed)
            self.consumed += 1
            self.cond.notify_all()
            return got


class TFLoader(Loader):
    """DLIO's tf.data TFRecord loader (see the module's docstring). files is
    the rank's sequence of (path, size, record bytes on disk)."""

    def __init__(self, w, files):
        super().__init__(w.read_threads)
        self.w = w
        self.files = files
        self.next_file = 0  # protected by cond
        self.done = 0       # reader threads that ran out of files; protected by cond
        self.records = collections.deque()  # on-disk sizes of records read; protected by cond
        self.ahead = tf_ahead_records(w)

    def reader(self, i, buf):
        try:
            while True:
                with self.cond:
                    if self.stopped or self.next_file >= len(self.files):
                        return
                    path, size, rec = self.files[self.next_file]
                    self.next_file += 1
                if not self.read_file(path, size, rec, buf):
                    return
        finally:
            with self.cond:
                self.done += 1
                self.cond.notify_all()

    def read_file(self, path, size, rec, buf):
        """Read one TFRecord file front to back, handing on its records as
        they complete. Returns False when the loader stopped."""
        fd = os.open(path, os.O_RDONLY)
        try:
            off = 0
            while off < size:
                with self.cond:
                    while not self.stopped and len(self.records) >= self.ahead:
                        self.cond.wait()
                    if self.stopped:
                        return False
                k = os.preadv(fd, [buf[:min(len(buf), size - off)]], off)
                if k <= 0:
                    raise OSError(f"{path}: short file at {off} of {size}")
                whole = (off + k) // rec - off // rec
                off += k
                with self.cond:
                    self.bytes_read += k
                    self.records.extend([rec] * whole)
                    self.cond.notify_all()
            return True
        finally:
            os.close(fd)

    def next_batch(self):
        """(samples, bytes) of the next batch, once its records are read;
        None when the files ran out first."""
        B = self.w.batch
        with self.cond:
            while len(self.records) < B:
                self.check()
                if self.done == len(self.threads):
                    return None
                self.cond.wait()
            got = [self.records.popleft() for _ in range(B)]
            self.cond.notify_all()
            return B, sum(got)


def epoch_order(items, seed, epoch, shuffle):
    """items in epoch's order: shuffled with seed + epoch (DLIO reseeds per
    epoch) when shuffle, else as given."""
    items = list(items)
    if shuffle:
        random.Random(seed + epoch).shuffle(items)
    return items


def torch_batches(w, files, rank, n, steps, seed):
    """The batches of rank (of n) for steps steps: its block of the data set
    (equal blocks, +-1), in each epoch's order, batch by batch. files is
    [(path, size)] in list order, one sample per file."""
    lo, hi = rank * len(files) // n, (rank + 1) * len(files) // n
    block = files[lo:hi]
    spe = steps_per_epoch(w, len(files), n)
    out = []
    epoch = 0
    while len(out) < steps:
        order = epoch_order(block, seed, epoch, w.sample_shuffle)
        for i in range(spe):
            if len(out) == steps:
                break
            out.append(order[i * w.batch:(i + 1) * w.batch])
        epoch += 1
    return out


def tf_files(w, files, rank, n, epochs, seed):
    """The files rank (of n) reads over epochs epochs: the list (shuffled per
    epoch when the workload shuffles files), every n-th from rank. files is
    [(path, size, record bytes on disk)]."""
    out = []
    for epoch in range(epochs):
        out.extend(epoch_order(files, seed, epoch, w.file_shuffle)[rank::n])
    return out


def trial_steps(w, spec):
    """The steps every rank takes: enough for spec's compute seconds after
    the warm-up steps, within epochs_max epochs when set."""
    steps = math.ceil(spec["compute_target_s"] / w.compute_s) + warmup_steps(w)
    if spec.get("epochs_max"):
        steps = min(steps, steps_per_epoch(w, len(spec["files"]), spec["n"]) * spec["epochs_max"])
    return steps


def make_loader(w, spec, rank, steps):
    n, seed, root = spec["n"], spec["seed"], spec["root"]
    if w.framework == "pytorch":
        files = [(os.path.join(root, rel), size) for rel, size, _ in spec["files"]]
        return TorchLoader(w, torch_batches(w, files, rank, n, steps, seed))
    files = [(os.path.join(root, rel), size, record_on_disk(w, rec))
             for rel, size, rec in spec["files"]]
    spe = steps_per_epoch(w, len(files), n)
    epochs = spec.get("epochs_max") or (steps // max(spe, 1) + 2)
    return TFLoader(w, tf_files(w, files, rank, n, epochs, seed))


def training_loop(w, loader, steps, step_barrier, stop, timeout):
    """DLIO's loop for one rank: the step records and the block's wall time."""
    rec = {"sleep": [], "proc": [], "load": [], "samples": [], "bytes": []}
    t_start = time.monotonic()
    loader.start()
    while len(rec["proc"]) < steps:
        t0 = time.monotonic()
        got = loader.next_batch()
        if got is None:
            raise RuntimeError(f"the data ran out after {len(rec['proc'])} of {steps} steps")
        t1 = time.monotonic()
        time.sleep(w.compute_s)
        t2 = time.monotonic()
        rec["load"].append(t1 - t0)
        rec["sleep"].append(t2 - t1)
        rec["proc"].append(t2 - t0)
        rec["samples"].append(got[0])
        rec["bytes"].append(got[1])
        step_barrier.wait(timeout)
        if stop.value:
            break
    rec["wall_s"] = time.monotonic() - t_start
    return rec


def rank_main(rank, w, spec, steps, start_barrier, step_barrier, stop, out):
    """One simulated accelerator; puts its record (or its error) on out."""
    die_with_parent()
    loader = None
    try:
        loader = make_loader(w, spec, rank, steps)
        timeout = spec["max_wall_s"] + spec.get("stall_s", 600)
        start_barrier.wait(timeout)
        rec = training_loop(w, loader, steps, step_barrier, stop, timeout)
        loader.stop()
        rec["bytes_read"] = loader.bytes_read
        rec["rank"] = rank
        out.put(rec)
    except Exception as e:
        start_barrier.abort()
        step_barrier.abort()
        if loader:
            loader.stop()
        out.put({"rank": rank, "error": f"{type(e).__name__}: {e}"})


def collect(procs, out):
    """Every rank's record, or an error record for a rank that died
    without one (killed: by the cgroup's OOM killer, say)."""
    recs = {}
    while len(recs) < len(procs):
        try:
            r = out.get(timeout=1)
            recs[r["rank"]] = r
            continue
        except queue.Empty:
            pass
        for rank, p in enumerate(procs):
            if rank not in recs and p.exitcode is not None and out.empty():
                recs[rank] = {"rank": rank, "error": f"rank {rank} exited ({p.exitcode}) "
                              f"without a record"}
    return list(recs.values())


def run_trial(spec):
    """Run spec's trial; returns {"ranks": [records by rank], "steps":
    planned steps, "warmup_steps": those not to measure, "stopped_by_wall":
    bool} or raises RuntimeError with the first rank's error."""
    w = Workload(**spec["workload"])
    n = spec["n"]
    if steps_per_epoch(w, len(spec["files"]), n) < 1:
        raise RuntimeError(f"{len(spec['files'])} files make no batch of {w.batch} for each of "
                           f"{n} ranks")
    steps = trial_steps(w, spec)
    if steps <= warmup_steps(w):
        raise RuntimeError(f"the data set gives {n} ranks {steps} step(s) an epoch; more than "
                           f"{warmup_steps(w)} are needed (the warm-up is not measured)")
    ctx = multiprocessing.get_context("fork")
    stop = ctx.Value("i", 0)
    deadline = ctx.Value("d", 0.0)

    def started():
        deadline.value = time.monotonic() + spec["max_wall_s"]

    def stepped():
        if time.monotonic() >= deadline.value:
            stop.value = 1
    start_barrier = ctx.Barrier(n, action=started)
    step_barrier = ctx.Barrier(n, action=stepped)
    out = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, w, spec, steps, start_barrier, step_barrier,
                                                 stop, out), daemon=True) for r in range(n)]

    def on_term(signum, frame):
        for p in procs:
            if p.pid:
                p.terminate()
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    for p in procs:
        p.start()
    recs = collect(procs, out)
    for p in procs:
        p.join()
    # The first cause, not a rank that only saw the barrier broken by it.
    errors = sorted((r["error"] for r in recs if "error" in r),
                    key=lambda e: e.startswith("BrokenBarrierError"))
    if errors:
        raise RuntimeError(errors[0])
    return {"ranks": sorted(recs, key=lambda r: r["rank"]), "steps": steps,
            "warmup_steps": warmup_steps(w), "stopped_by_wall": bool(stop.value)}


def main(argv):
    """Entry: argv[0] is the trial's spec (JSON: workload, root, files as
    [path, size, record bytes], n, seed, compute_target_s, max_wall_s,
    epochs_max); prints the result as JSON. Returns the exit status."""
    with open(argv[0]) as f:
        spec = json.load(f)
    try:
        result = run_trial(spec)
    except RuntimeError as e:
        print(f"mlperf loader: {e}", file=sys.stderr)
        return 1
    json.dump(result, sys.stdout)
    return 0
