# SPDX-License-Identifier: Apache-2.0
"""What a pass costs, read from /proc: a process's CPU seconds (utime+stime of all
its threads; the daemon's CPU-s per GiB or per item is this over the pass's
bytes or items), its context switches and page faults, its VmHWM and VmRSS
and the reset of its peak, the whole machine's busy time, and the CPU time of
the bench's own children (the dd readers).

Does not divide or print (report.py) or sample stacks (perf.py). Threading:
reads /proc only; any thread.
"""

import os
import resource

from .common import CLK_TCK, log


def proc_cpu_s(pid):
    """utime+stime of a process (all its threads) in seconds, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def proc_switches_faults(pid):
    """(context switches of all its live threads, minor + major page faults
    of the process), or None. Counts, not times: on a shared, noisy VM they
    tell two daemons apart where their CPU seconds do not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        faults = int(fields[7]) + int(fields[9])
        switches = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/status") as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches:",
                                            "nonvoluntary_ctxt_switches:")):
                            switches += int(line.split()[1])
            except (OSError, ValueError, IndexError):
                pass  # a thread that exited meanwhile
        return switches, faults
    except (OSError, IndexError, ValueError):
        return None


def thread_times(pid):
    """{tid: (name, CPU s, s waited for a CPU)} of pid's live threads (the
    name from comm; CPU and wait from schedstat, in nanoseconds, else CPU
    from stat's clock ticks); {} when pid is gone. A thread that exits
    during a pass takes its time with it."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)
            fields = tail.split()
            cpu, wait = (int(fields[11]) + int(fields[12])) / CLK_TCK, 0.0
            try:  # nanoseconds on a CPU and runnable, where the kernel keeps them
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    on_cpu, waited = f.read().split()[:2]
                cpu, wait = int(on_cpu) / 1e9, int(waited) / 1e9
            except (OSError, ValueError):
                pass  # no schedstats in this kernel: clock ticks, no wait
            out[tid] = (head.split("(", 1)[1], cpu, wait)
        except (OSError, IndexError, ValueError):
            pass  # a thread that exited meanwhile
    return out


def thread_split(before, after, secs):
    """The daemon's threads over a pass of secs seconds, from two
    thread_times: [(name, threads, CPU s, busiest thread's share of the
    pass, s waited for a CPU)], by CPU, largest first. Threads with the same
    name (the FUSE workers carry the daemon's) form one row; a thread that
    started during the pass counts from zero."""
    rows = {}
    for tid, (name, cpu, wait) in after.items():
        _, cpu0, wait0 = before.get(tid, (name, 0.0, 0.0))
        r = rows.setdefault(name, [0, 0.0, 0.0, 0.0])
        r[0] += 1
        r[1] += cpu - cpu0
        r[2] = max(r[2], (cpu - cpu0) / secs if secs > 0 else 0.0)
        r[3] += wait - wait0
    return sorted(((n, r[0], r[1], r[2], r[3]) for n, r in rows.items()),
                  key=lambda x: -x[2])


def fmt_thread_split(split, top=5):
    """One line of thread_split's rows (the top ones)."""
    return "; ".join(f"{name} x{n}: {cpu:.2f} CPU-s (busiest {share:.0%} of the pass), "
                     f"{wait:.2f} s waiting for a CPU"
                     for name, n, cpu, share, wait in split[:top] if cpu >= 0.005 or wait >= 0.005)


def machine_ticks():
    """The columns of /proc/stat's "cpu" line: the whole machine's clock
    ticks since boot (user, nice, system, idle, iowait, irq, softirq,
    steal, ...)."""
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def machine_busy_s():
    """(busy, total) CPU seconds of the whole machine since boot."""
    v = machine_ticks()
    idle = v[3] + v[4]
    total = sum(v[:8])
    return (total - idle) / CLK_TCK, total / CLK_TCK


def machine_steal_s():
    """CPU seconds the hypervisor took from this machine since boot (the
    steal column; 0 where none is reported)."""
    v = machine_ticks()
    return (v[7] if len(v) > 7 else 0) / CLK_TCK


STEAL_AT_START = machine_steal_s()


def steal_note():
    """The steal time this machine reported since the bench started, as a
    phrase for the disk billing lines (the billing figures assume none)."""
    return f"steal time reported since the bench started: {machine_steal_s() - STEAL_AT_START:.1f} s"


def children_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def proc_status(pid, key):
    """A field of /proc/PID/status in bytes (VmHWM, VmRSS), or None."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_hwm(pid):
    """Reset the peak RSS (VmHWM) of pid to its current RSS (clear_refs 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5\n")
    except OSError as e:
        log(f"warning: cannot reset VmHWM of {pid}: {e}")
