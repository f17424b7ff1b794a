# SPDX-License-Identifier: Apache-2.0
"""The client's memory cgroup of --mlperf: MLPerf Storage runs a client with
less memory than the data set (the data set at least 5 x the client's memory),
so that the page cache cannot serve an epoch. ClientCgroup makes a child
cgroup with a memory limit, wraps a command so that it runs inside it, moves
a running process (the daemon) into it, reads its peak and OOM kills, and
removes it. The page cache that its processes' reads fill (the readers' own,
the daemon's readahead of its cache files) is charged to it and reclaimed
within the limit.

cgroup v2 (memory in /sys/fs/cgroup/cgroup.controllers): a child of the root,
memory.max. cgroup v1 (a memory hierarchy at /sys/fs/cgroup/memory): a child
of the bench's own memory cgroup, memory.limit_in_bytes. Does not touch any
other cgroup. Threading: the main thread.
"""

import os

from .common import BenchError, log

V2_ROOT = "/sys/fs/cgroup"
V1_ROOT = "/sys/fs/cgroup/memory"


def own_v1_memory_path():
    """The bench's own cgroup in the v1 memory hierarchy ("/" at its root)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if "memory" in ctrls.split(","):
                return path
    return None


def read_int(path):
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def keyed(path, key):
    """The value of key in a flat keyed file (memory.events, memory.oom_control)."""
    try:
        with open(path) as f:
            for line in f:
                k, _, v = line.partition(" ")
                if k == key:
                    return int(v)
    except (OSError, ValueError):
        pass
    return None


class ClientCgroup:
    """A child cgroup named name with memory limited to limit_bytes."""

    def __init__(self, name, limit_bytes):
        self.limit = limit_bytes
        try:
            with open(os.path.join(V2_ROOT, "cgroup.controllers")) as f:
                v2 = "memory" in f.read().split()
        except OSError:
            v2 = False
        if v2:
            self.version, self.path = 2, os.path.join(V2_ROOT, name)
        elif os.path.isdir(V1_ROOT) and own_v1_memory_path() is not None:
            own = own_v1_memory_path().lstrip("/")
            self.version, self.path = 1, os.path.join(V1_ROOT, own, name)
        else:
            raise BenchError("no memory cgroup here (neither cgroup v2 with the memory "
                             "controller nor a v1 memory hierarchy)")

    def create(self):
        try:
            if self.version == 2:
                self.enable_v2_memory()
            os.makedirs(self.path, exist_ok=True)
            if self.version == 2:
                self.write("memory.max", self.limit)
                if os.path.exists(os.path.join(self.path, "memory.swap.max")):
                    self.write("memory.swap.max", 0)
            else:
                self.write("memory.limit_in_bytes", self.limit)
        except OSError as e:
            raise BenchError(f"cannot set up the client's cgroup {self.path}: {e}")
        log(f"client's cgroup {self.path} (v{self.version}), memory limit "
            f"{self.limit >> 20} MiB")
        return self

    def enable_v2_memory(self):
        ctl = os.path.join(V2_ROOT, "cgroup.subtree_control")
        with open(ctl) as f:
            if "memory" in f.read().split():
                return
        with open(ctl, "w") as f:
            f.write("+memory\n")

    def write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write(f"{value}\n")

    def wrap(self, argv):
        """argv run inside the cgroup: a shell joins it, then execs argv
        (wrap inside a namespace's exec, so that the join happens there)."""
        return ["sh", "-c", 'echo $$ >"$0" && exec "$@"',
                os.path.join(self.path, "cgroup.procs")] + argv

    def adopt(self, pids):
        """Move the processes pids (a running daemon) into it: what they
        charge from now on is charged here (what they hold stays where it
        was charged)."""
        for pid in pids:
            try:
                self.write("cgroup.procs", pid)
            except OSError as e:
                raise BenchError(f"cannot move process {pid} into {self.path}: {e}")

    def peak_bytes(self):
        """The most memory it was charged so far (memory.peak; v1:
        max_usage_in_bytes), or None where the kernel keeps none."""
        return read_int(os.path.join(self.path, "memory.peak" if self.version == 2
                                     else "memory.max_usage_in_bytes"))

    def reset_peak(self):
        """Start a new peak (v1; v2 keeps one per cgroup's life, reset
        only on kernels that take a write to memory.peak)."""
        try:
            self.write("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes", 0)
        except OSError:
            pass

    def oom_kills(self):
        if self.version == 2:
            return keyed(os.path.join(self.path, "memory.events"), "oom_kill")
        return keyed(os.path.join(self.path, "memory.oom_control"), "oom_kill")

    def remove(self):
        """rmdir; harmless when it is gone or a process is still in it."""
        try:
            os.rmdir(self.path)
        except OSError:
            pass
