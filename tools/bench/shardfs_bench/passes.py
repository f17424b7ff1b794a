# SPDX-License-Identifier: Apache-2.0
"""One measured pass: drop the page caches, prewarm, take the readings around the
reader, and return a Pass (the raw libnfs reader, or dd readers through a
mount: MB/s and CPU per GiB) or an ItemPass (shardfs-smallread: files or
records per second, the daemon's CPU, peak RSS, counts and stats deltas).

Does not print or mount. Threading: mount_pass's readers are threads of their
own; RUNNING (the dd pids, for cli's cleanup) is protected by RUNNING_LOCK;
STOP is set once, on exit, and readers then start no more dd.
"""

import mmap
import os
import random
import re
import subprocess
import threading
import time

from .accounting import (children_cpu_s, machine_busy_s, proc_cpu_s, proc_status,
                         proc_switches_faults, reset_hwm, thread_split, thread_times)
from .common import ARGS, BenchError, run
from .mount import settle
from .perf import perf_start, perf_stop


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def prewarm(nbytes):
    """Touch and free nbytes of anonymous memory.

    On a VM with free page reporting (virtio-balloon: the guest hands free
    blocks back to the host soon after they are freed), a page the guest has
    not touched since it was reported costs a host fault on first use
    (benchmarks.md has the figures). A FUSE read fills fresh page-cache
    pages and the raw reader reuses its buffers, so without this the mount
    pays that VM artefact and the raw reader does not. The kernel hands out
    unreported (just freed) pages first, so touching and freeing the memory
    right before a pass makes the pass's allocations warm.
    """
    nbytes = min(nbytes, max(0, mem_available() - (1 << 30)))
    if nbytes <= 0:
        return
    m = mmap.mmap(-1, nbytes)
    try:
        for off in range(0, nbytes, mmap.PAGESIZE):
            m[off] = 1
    finally:
        m.close()


class Pass:
    """One measured read of all files: MB/s and CPU accounting."""

    def __init__(self, nbytes, secs, client_cpu, server_cpu, busy, avail, daemon_cpu=0.0,
                 counts=None):
        self.counts = counts  # the daemon's (context switches, page faults) over the pass
        self.nbytes = nbytes
        self.secs = secs
        self.mbps = nbytes / 1e6 / secs
        self.client_cpu = client_cpu
        self.server_cpu = server_cpu
        self.busy = busy
        self.avail = avail
        self.daemon_cpu = daemon_cpu
        self.daemon_cpu_sampled = None  # with --perf: the daemon's CPU-s in perf's samples
        self.threads = []  # the daemon's threads over the pass (accounting.thread_split)


def measure(cluster, fn, nbytes, daemon_pid=None):
    gpids = cluster.ganesha_pids() if cluster else []
    drop_caches()
    if not ARGS.no_prewarm:
        # The pass's page cache, the daemon's buffers (prefetch_mem), slack.
        prewarm(nbytes + (512 << 20))
    g0 = sum(proc_cpu_s(p) or 0 for p in gpids)
    d0 = proc_cpu_s(daemon_pid) if daemon_pid else 0
    k0 = proc_switches_faults(daemon_pid) if daemon_pid else None
    th0 = thread_times(daemon_pid) if daemon_pid else {}
    c0 = children_cpu_s()
    prof = perf_start() if daemon_pid else None
    b0, t0 = machine_busy_s()
    nbytes, secs = fn()
    b1, t1 = machine_busy_s()
    sampled = perf_stop(prof, daemon_pid)
    c1 = children_cpu_s()
    k1 = proc_switches_faults(daemon_pid) if daemon_pid else None
    th1 = thread_times(daemon_pid) if daemon_pid else {}
    d1 = proc_cpu_s(daemon_pid) if daemon_pid else 0
    g1 = sum(proc_cpu_s(p) or 0 for p in gpids)
    daemon = (d1 or 0) - (d0 or 0)
    counts = (k1[0] - k0[0], k1[1] - k0[1]) if k0 and k1 else None
    p = Pass(nbytes, secs, (c1 - c0) + daemon, g1 - g0, b1 - b0, t1 - t0, daemon, counts)
    p.daemon_cpu_sampled = sampled
    p.threads = thread_split(th0, th1, secs) if th1 else []
    return p


def raw_pass(cluster, hosts, paths, nconnect, readers, client=None):
    nctx = len(hosts) * nconnect
    threads = max(1, min(os.cpu_count() or 1, nctx))
    argv = [ARGS.rawread, "-q", "-c", str(nconnect), "-d", str(ARGS.raw_depth),
            "-j", str(readers), "-t", str(threads),
            ",".join(hosts) + ":/ifs"] + paths

    def go():
        p = run(cluster.exec_argv(argv, client), check=False)
        if p.returncode != 0:
            raise BenchError("raw reader failed: " + (p.stderr.strip() or f"exit {p.returncode}"))
        m = re.search(r"bytes=(\d+) seconds=([\d.]+)", p.stdout)
        if not m:
            raise BenchError(f"raw reader printed {p.stdout!r}")
        return int(m.group(1)), float(m.group(2))
    return go


RUNNING = set()            # dd pids, for cleanup

RUNNING_LOCK = threading.Lock()

STOP = threading.Event()   # set on exit: readers start no more dd


def mount_pass(mnt, names, readers, sizes, shuffle_seed=None, subdir="shards"):
    files = [os.path.join(mnt, subdir, n) if subdir else os.path.join(mnt, n) for n in names]
    if shuffle_seed is not None:
        # The training pattern: every reader picks the next shard of a
        # shuffled epoch order and reads it whole.
        random.Random(shuffle_seed).shuffle(files)

    def go():
        queue = list(files)
        lock = threading.Lock()
        errors = []

        def reader():
            while True:
                with lock:
                    if not queue or errors or STOP.is_set():
                        return
                    f = queue.pop(0)
                p = subprocess.Popen(["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"],
                                     stderr=subprocess.PIPE, text=True)
                with RUNNING_LOCK:
                    RUNNING.add(p.pid)
                _, err = p.communicate()
                with RUNNING_LOCK:
                    RUNNING.discard(p.pid)
                if p.returncode != 0:
                    with lock:
                        errors.append(f"dd {f}: {err.strip() or 'exit %d' % p.returncode}")
                    return

        t0 = time.monotonic()
        ts = [threading.Thread(target=reader) for _ in range(readers)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        secs = time.monotonic() - t0
        if errors:
            raise BenchError(errors[0])
        return sum(sizes), secs
    return go


class ItemPass:
    """One measured run of shardfs-smallread (and, for a mount, the daemon)."""

    def __init__(self, items, nbytes, secs, reader_cpu, daemon_cpu=None, hwm=None, delta=None,
                 counts=None):
        self.items = items
        self.counts = counts  # the daemon's (context switches, page faults) over the run
        self.nbytes = nbytes
        self.secs = secs
        self.rate = items / secs
        self.mbps = nbytes / 1e6 / secs
        self.reader_cpu = reader_cpu
        self.daemon_cpu = daemon_cpu
        self.hwm = hwm
        self.delta = delta or {}
        self.busy = None  # (busy, total) CPU seconds of the whole machine over the run
        self.server_cpu = None  # the cluster's nfs-ganesha processes over the run
        self.daemon_cpu_sampled = None  # with --perf: the daemon's CPU-s in perf's samples


# The item modes read with build/tools/shardfs-smallread: T threads, each
# takes the next item of one shared list (a file: open, read whole, close; or
# a record: one pread). The same binary reads the mount, a local-disk copy,
# and the NFS nodes directly (libnfs, one synchronous context per thread,
# threads round-robin over the nodes), so that a row and its baseline differ
# only in the source.
def smallread_argv(source, list_path, threads, record_file=None):
    argv = [ARGS.smallread, "-q", "-t", str(threads), "-l", list_path]
    if record_file:
        argv += ["-r", record_file]
    return argv + [source]


def item_pass(cluster, argv, expect_items, expect_bytes, in_ns=False, mount=None,
              prewarm_bytes=0, drain=False, before=None):
    """Drop page caches, run one shardfs-smallread, check it read everything.

    With a mount: the daemon's CPU (utime+stime over the run, and with drain
    until its cache write queue is empty, so write-behind is counted), its
    peak RSS during the run (VmHWM, reset before), and the stats deltas.
    before: called right before the reader starts, after the readings.
    """
    drop_caches()
    if not ARGS.no_prewarm:
        prewarm(prewarm_bytes + (512 << 20))
    pid = mount.pid if mount else None
    if pid:
        s0 = mount.stats()
        reset_hwm(pid)
        d0 = proc_cpu_s(pid)
        c0 = proc_switches_faults(pid)
    gpids = cluster.ganesha_pids() if cluster else []
    g0 = sum(proc_cpu_s(g) or 0 for g in gpids)
    prof = perf_start() if pid else None
    if before:
        before()
    b0, t0 = machine_busy_s()
    p = run(cluster.exec_argv(argv) if in_ns else argv, check=False)
    b1, t1 = machine_busy_s()
    sampled = perf_stop(prof, pid)
    g1 = sum(proc_cpu_s(g) or 0 for g in gpids)
    if p.returncode != 0:
        raise BenchError(f"{' '.join(argv)}: " + (p.stderr.strip() or f"exit {p.returncode}"))
    m = re.search(r"(?:files|records)=(\d+) bytes=(\d+) seconds=([\d.]+) cpu_s=([\d.]+)", p.stdout)
    if not m:
        raise BenchError(f"shardfs-smallread printed {p.stdout!r}")
    items, nbytes = int(m.group(1)), int(m.group(2))
    secs, rcpu = max(float(m.group(3)), 1e-6), float(m.group(4))
    if items != expect_items or nbytes != expect_bytes:
        raise BenchError(f"{' '.join(argv)}: read {items} items, {nbytes} bytes; "
                         f"want {expect_items}, {expect_bytes}")
    if not pid:
        ip = ItemPass(items, nbytes, secs, rcpu)
    else:
        ip = mount_item_pass(mount, items, nbytes, secs, rcpu, s0, c0, d0, drain)
    ip.busy = (b1 - b0, t1 - t0)
    ip.server_cpu = g1 - g0 if gpids else None
    ip.daemon_cpu_sampled = sampled
    return ip


def mount_item_pass(mount, items, nbytes, secs, rcpu, s0, c0, d0, drain):
    """item_pass's ItemPass for a mount: the daemon's side of the run."""
    pid = mount.pid
    hwm = proc_status(pid, "VmHWM")
    if drain:
        settle(mount)
    d1 = proc_cpu_s(pid)
    c1 = proc_switches_faults(pid)
    s1 = mount.stats()
    delta = {k: v - s0.get(k, 0.0) for k, v in s1.items()}
    counts = (c1[0] - c0[0], c1[1] - c0[1]) if c0 and c1 else None
    return ItemPass(items, nbytes, secs, rcpu, (d1 or 0) - (d0 or 0), hwm, delta, counts)
