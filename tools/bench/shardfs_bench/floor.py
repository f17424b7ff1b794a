# SPDX-License-Identifier: Apache-2.0
"""The FUSE floor: build/tools/shardfs-fusefloor answering the same tree from
memory with the daemon's worker pool (with --uring, FUSE over io_uring), and a
pass of the same reader against it: what a FUSE mount pays on this kernel
before the daemon does any work of its own.

Does not run from an installed bench (the floor is built, not installed) or
turn on the fuse module's enable_uring. Threading: the main thread.
"""

import os
import subprocess
import time

from .common import ARGS, BenchError, ROOT, log, run
from .data import write_list
from .mount import is_mounted
from .passes import item_pass


class FloorMount:
    """build/tools/shardfs-fusefloor serving the list's tree from memory at
    ARGS.mnt (no stats file: item_pass sees no counters)."""

    def __init__(self, exe, sizes_list, uring=False):
        self.exe, self.sizes_list, self.proc, self.pid = exe, sizes_list, None, None
        self.uring = uring

    def __enter__(self):
        os.makedirs(ARGS.mnt, exist_ok=True)
        # Its messages (the io_uring request count) go to a log beside the
        # mountpoint, quoted if it does not mount.
        self.log_path = os.path.join(os.path.dirname(ARGS.mnt), "floor.log")
        with open(self.log_path, "w") as log_file:
            self.proc = subprocess.Popen([self.exe] + (["--uring"] if self.uring else [])
                                         + [self.sizes_list, ARGS.mnt], stderr=log_file)
        self.pid = self.proc.pid
        for _ in range(200):
            if is_mounted(ARGS.mnt):
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self.__exit__()
        with open(self.log_path) as f:
            said = f.read().strip().splitlines()
        raise BenchError(f"{self.exe}: {ARGS.mnt} not mounted"
                         + (f" ({said[-1]})" if said else ""))

    def stats(self):
        return {}

    def __exit__(self, *exc):
        if is_mounted(ARGS.mnt):
            run(["umount", ARGS.mnt], check=False)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fuse_floor_pass(what, tree, work, argv, items, total, prewarm_bytes, uring=False):
    """The same reader against shardfs-fusefloor serving tree ("RELPATH SIZE"
    lines) from memory (the daemon's pool, configured as the daemon's; with
    uring, FUSE over io_uring), or None when it is not built (an installed
    shardfs-bench) or uring is asked where the kernel's fuse module has it
    off."""
    exe = os.path.join(ROOT, "build", "tools", "shardfs-fusefloor")
    if not os.access(exe, os.X_OK) or (uring and not fuse_uring_enabled()):
        return None
    sizes = os.path.join(work, "floor-tree")
    write_list(sizes, tree)
    log(f"{what}: FUSE floor{' over io_uring' if uring else ''}")
    with FloorMount(exe, sizes, uring) as m:
        return item_pass(None, argv, items, total, mount=m, prewarm_bytes=prewarm_bytes)


def fuse_uring_enabled():
    """Whether the fuse module offers FUSE over io_uring (its enable_uring
    parameter; off by default, and the bench does not turn it on)."""
    try:
        with open("/sys/module/fuse/parameters/enable_uring") as f:
            return f.read().strip() in ("Y", "1")
    except OSError:
        return False
