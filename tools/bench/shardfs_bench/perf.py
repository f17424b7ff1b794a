# SPDX-License-Identifier: Apache-2.0
"""--perf DIR: `perf record -a -g` over each mount pass that measures the daemon,
and the split of one process's samples by leaf (Sampled).

Does nothing without --perf. A split counts samples only: time the vCPU spent
away (the host's work, billed to the task that ran) has none. Threading: the
main thread (the pass numbering is not locked).
"""

import os
import signal
import subprocess
import time

from .common import ARGS, log, run


PERF_PASSES = [0]


def perf_start():
    """With --perf DIR: `perf record -a -g` over the whole machine for one
    mount pass (the daemon, the readers, the NFS servers and the kernel
    share the CPUs), written to DIR/passN.data. Returns the process or None."""
    if not ARGS.perf:
        return None
    os.makedirs(ARGS.perf, exist_ok=True)
    PERF_PASSES[0] += 1
    out = os.path.join(ARGS.perf, f"pass{PERF_PASSES[0]}.data")
    prof = subprocess.Popen(["perf", "record", "-q", "-a", "-g", "-o", out],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)  # perf has its events open before the pass starts
    log(f"perf: {out}")
    prof.data_path = out
    return prof


# Where a process's samples land (perf_stop's split), by leaf: three kernel
# functions where a (PVM) guest pays its host, then the rest of the kernel, then
# user space by library. pvm_irq_enable: a PVM guest re-enabling interrupts
# takes the interrupts and IPIs (wake-ups) that waited, so samples of the
# host's event delivery land there; iowrite16: a virtio queue's notify, a
# VM exit per request the guest submits to the virtual disk;
# clear_page_erms: zeroing memory on its first touch (the prefetch pool's
# huge pages, once per daemon and after an idle trim), where every fresh
# guest page is also a host fault (benchmarks.md has the figures). On bare
# metal the first two are near zero.
SAMPLE_PARTS = [("event delivery", "pvm_irq_enable"), ("virtio kicks", "iowrite16"),
                ("first touch", "clear_page_erms")]


KERNEL_PARTS = [name for name, _ in SAMPLE_PARTS] + ["other kernel"]


class Sampled(float):
    """CPU seconds in perf's samples of one process (a float), with .split:
    [(part, seconds)] in SAMPLE_PARTS' order, then 'other kernel', then
    user space by object (shardfs, libc, ...), largest first."""
    split = ()

    def part(self, name):
        """Seconds of the split's part name (0 if none)."""
        return dict(self.split).get(name, 0.0)


def perf_stop(prof, pid=None):
    """Stop perf; with pid, returns the CPU seconds its samples put on that
    process over the recording (the sum of their periods; a Sampled, with
    where they landed), else None. Beside utime+stime: time the vCPU spent
    away (the host's work billed to the task that ran, on a VM that reports
    no steal time) has no samples."""
    if not prof:
        return None
    prof.send_signal(signal.SIGINT)
    prof.wait()
    if not pid:
        return None
    p = run(["perf", "script", "-i", prof.data_path, "-G", "-F", "pid,period,ip,sym,dso"],
            check=False)
    if p.returncode != 0:
        return None
    fixed = {sym: name for name, sym in SAMPLE_PARTS}
    parts = {}
    total = 0
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) < 4 or f[0] != str(pid):
            continue
        period = int(f[1])
        dso = f[-1].strip("()")
        sym = f[3] if len(f) >= 5 else ""
        # [kernel.kallsyms] and modules ([virtio_blk], ...); [vdso] and
        # [unknown] are user space.
        if dso.startswith("[") and dso not in ("[vdso]", "[unknown]"):
            part = fixed.get(sym, "other kernel")
        else:
            part = os.path.basename(dso).split(".so")[0] or "unknown"
        parts[part] = parts.get(part, 0) + period
        total += period
    out = Sampled(total / 1e9)
    user = sorted((k for k in parts if k not in KERNEL_PARTS), key=lambda k: -parts[k])
    out.split = [(k, parts.get(k, 0) / 1e9) for k in KERNEL_PARTS + user]
    return out


def fmt_split(sampled, n, unit, scale=1e6, digits=0):
    """'event delivery 79, virtio kicks 31, ... us/file': sampled's split
    per item (times scale: 1e6 for us, 1 for seconds), the user-space
    objects under 1% of the total left out."""
    if not sampled or not sampled.split:
        return ""
    kept = [(k, v) for k, v in sampled.split if k in KERNEL_PARTS or v >= 0.01 * sampled]
    return ", ".join(f"{k} {scale * v / n:.{digits}f}" for k, v in kept) + f" {unit}"
