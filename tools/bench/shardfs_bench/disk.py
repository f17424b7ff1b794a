# SPDX-License-Identifier: Apache-2.0
"""The cache disk's own limits: its O_DIRECT write rate, the same made durable at
the cache writer's pace, the limit of a cold epoch that fills the cache
(limit_note: the slower of raw and that write), and the CPU time its writes
and reads bill to whatever runs (measured with a spinner pinned on every CPU).

Does not touch a mount; writes and removes one scratch file in the directory
it is given. Threading: the main thread; spin() runs one child process per CPU.
"""

import mmap
import os
import random
import subprocess
import sys
import time

from .common import MiB


def disk_write_mbps(directory, nbytes, sync_bytes=0):
    """The cache disk's own limit for a cold epoch that fills the cache:
    nbytes written with O_DIRECT in 1 MiB blocks to a file in directory (the
    cache's filesystem), then fdatasync, as MB/s; the file is removed. With
    sync_bytes, an fdatasync after every sync_bytes as well: the pace of the
    cache's writer, which makes each batch of chunks durable before they
    count as cached (on a VM a flush can make the host write its own cache
    out, so this rate can be well under the other)."""
    path = os.path.join(directory, f".disk-write-{os.getpid()}")
    buf = mmap.mmap(-1, MiB)  # page-aligned, as O_DIRECT wants
    buf.write(os.urandom(MiB))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    blocks = max(1, nbytes // MiB)
    every = max(1, sync_bytes // MiB) if sync_bytes else 0
    try:
        t0 = time.monotonic()
        for i in range(blocks):
            os.write(fd, buf)
            if every and (i + 1) % every == 0:
                os.fdatasync(fd)
        os.fdatasync(fd)
        secs = time.monotonic() - t0
    finally:
        os.close(fd)
        os.unlink(path)
        buf.close()
    return blocks * MiB / 1e6 / max(secs, 1e-6)


# One per CPU, pinned: counts blocks of a fixed loop until a line arrives on
# stdin, then prints the count and its own CPU seconds (utime + stime).
SPIN_CODE = r"""
import os, resource, select, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
n = 0
while not select.select([sys.stdin], [], [], 0)[0]:
    for _ in range(20000):
        pass
    n += 1
ru = resource.getrusage(resource.RUSAGE_SELF)
print(n, ru.ru_utime + ru.ru_stime)
"""


def spin(fn):
    """Run fn() with a spinner pinned on every CPU; returns (fn's result,
    [(blocks, CPU-s billed)] per CPU)."""
    cpus = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", SPIN_CODE, str(c)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for c in cpus]
    try:
        result = fn()
    finally:
        outs = [p.communicate("stop\n")[0].split() for p in procs]
    return result, [(int(n), float(cpu)) for n, cpu in outs]


def billed_beside(fn, quiet_secs=2.0):
    """(fn's result, CPU-s billed to the spinners beyond the work they did
    while fn ran): each spinner's CPU-s less its blocks at its quiet rate,
    measured first for quiet_secs."""
    _, quiet = spin(lambda: time.sleep(quiet_secs))
    result, busy = spin(fn)
    lost = sum(cpu - n * qcpu / max(qn, 1) for (n, cpu), (qn, qcpu) in zip(busy, quiet))
    return result, max(lost, 0.0)


def disk_billing(directory, nbytes):
    """CPU-s per GiB written that the machine bills to tasks other than the
    writer while the cache disk takes O_DIRECT writes: spinners pinned on
    every CPU are billed more CPU time per block of work than on a quiet
    machine. On a VM that reports no steal time (steal_note prints what it
    reported) the host's work for the virtual disk and the guest's disk interrupts land there: a daemon
    billed for them did not run its code in that time, and perf, whose
    samples stop while the vCPU is away, does not see it."""
    _, lost = billed_beside(lambda: disk_write_mbps(directory, nbytes))
    return lost / (nbytes / (1 << 30))


def disk_read_billing(directory, read_bytes, file_bytes=512 * MiB, secs=2.0):
    """(reads/s, CPU-s billed per read) for one reader's O_DIRECT reads of
    read_bytes at random 4 KiB-aligned offsets of a file_bytes file in
    directory, as a warm small file's read from the cache does it; billed as
    in disk_billing (to the spinners, not to the reader)."""
    path = os.path.join(directory, f".disk-read-{os.getpid()}")
    block = os.urandom(MiB)
    with open(path, "wb") as f:
        for _ in range(file_bytes // MiB):
            f.write(block)
        os.fsync(f.fileno())
    size = (read_bytes + 4095) // 4096 * 4096
    buf = mmap.mmap(-1, size)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    rnd = random.Random(1)

    def reads():
        n, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < secs:
            os.preadv(fd, [buf], rnd.randrange(0, (file_bytes - size) // 4096) * 4096)
            n += 1
        return n, time.monotonic() - t0
    try:
        (n, took), lost = billed_beside(reads, secs)
    finally:
        os.close(fd)
        os.unlink(path)
        buf.close()
    return n / took, lost / max(n, 1)


WRITER_SYNC_BYTES = 32 * MiB  # about the cache writer's batch (see benchmarks.md)


def disk_limits(directory, nbytes):
    """(O_DIRECT write, the same made durable at the writer's pace) MB/s."""
    return (disk_write_mbps(directory, nbytes),
            disk_write_mbps(directory, nbytes, WRITER_SYNC_BYTES))


def limit_note(mbps, raw_mbps, dwrite, what):
    """The cold-with-cache pass against issue 9's limit, and against the
    durable write rate beside it."""
    fast, durable = dwrite
    limit = min(raw_mbps, fast)
    return (f"{mbps / limit:.2f} x limit: the slower of raw and the cache disk's O_DIRECT "
            f"write of {what}, {fast:.0f} MB/s ({mbps / min(raw_mbps, durable):.2f} x with the "
            f"write made durable every {WRITER_SYNC_BYTES // MiB} MiB as the cache does it, "
            f"{durable:.0f} MB/s)")
