# SPDX-License-Identifier: Apache-2.0
"""A shardfs daemon mounted for the passes: Mount starts it in the cluster's
client namespace (or a fleet client's), waits for the mountpoint, raises the
bdi readahead, reads the stats file, and unmounts and waits for the daemon to
go; find_daemon and is_mounted for the cleanup.

Does not measure (passes.py) or choose options beyond nconnect, --mount-opts
and the caller's extra ones. Threading: a Mount is entered and left by one
thread; stats() may be read from any.
"""

import os
import re
import shutil
import subprocess
import time

from .accounting import proc_cpu_s
from .common import ARGS, BenchError, GiB, MiB, log, run


def find_daemon(mnt):
    """pid of the process serving mnt: the stats file's shardfs_serving_pid
    (a keeper's child, or the daemon itself; whatever the binary is named),
    else a process named as --shardfs's binary with mnt on its command line
    (a daemon too old to report it). None when neither is found."""
    try:
        pid = int(read_stats(mnt).get("shardfs_serving_pid", 0))
        if pid and os.path.exists(f"/proc/{pid}"):
            return pid
    except OSError:
        pass
    name = os.path.basename(ARGS.shardfs or "shardfs")[:15]  # comm's length
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/comm") as f:
                if f.read().strip() not in (name, "shardfs"):
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if mnt.encode() in argv:
            return int(d)
    return None


def is_mounted(mnt):
    return subprocess.run(["mountpoint", "-q", mnt]).returncode == 0


class Mount:
    """A shardfs daemon mounted at mnt. With log_path, it runs in the
    foreground (-f) with its log (stderr) written to log_path; otherwise it
    daemonizes and logs to syslog. With client, the daemon runs in that
    fleet client's network namespace instead of the cluster's client one."""

    def __init__(self, cluster, hosts, mnt, nconnect, extra_opts="", log_path=None, client=None):
        self.extra_opts = extra_opts
        self.client = client
        self.cluster = cluster
        self.hosts = hosts
        self.mnt = mnt
        self.nconnect = nconnect
        self.log_path = log_path
        self.proc = None
        self.pid = None
        self.mounted = False

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        if is_mounted(self.mnt):
            raise BenchError(f"{self.mnt} is already a mount point")
        opts = f"nconnect={self.nconnect}"
        if ARGS.mount_opts:
            opts += "," + ARGS.mount_opts
        if self.extra_opts:
            opts += "," + self.extra_opts
        opts = for_daemon(opts)
        src = ",".join(self.hosts) + ":/ifs"
        argv = self.cluster.exec_argv([ARGS.shardfs, src, self.mnt, "-o", opts], self.client)
        if self.log_path:
            with open(self.log_path, "w") as log_file:
                self.proc = subprocess.Popen(argv[:-4] + ["-f"] + argv[-4:],
                                             stdin=subprocess.DEVNULL,
                                             stdout=subprocess.DEVNULL, stderr=log_file,
                                             start_new_session=True)
        else:
            run(argv)
        self.mounted = True
        for _ in range(200):
            if is_mounted(self.mnt):
                break
            if self.proc and self.proc.poll() is not None:
                said = self.log_lines(None)
                raise BenchError(f"{self.mnt}: the daemon exited"
                                 + (f": {said[-1]}" if said else ""))
            time.sleep(0.05)
        else:
            raise BenchError(f"{self.mnt}: not mounted 10 s after starting the daemon")
        self.pid = find_daemon(self.mnt)
        # FUSE's bdi readahead defaults to 128 KiB; the daemon may already
        # raise it, this is harmless then.
        dev = run(["mountpoint", "-d", self.mnt]).stdout.strip()
        try:
            with open(f"/sys/class/bdi/{dev}/read_ahead_kb", "w") as f:
                f.write("8192\n")
        except OSError as e:
            log(f"warning: cannot set read_ahead_kb of bdi {dev}: {e}")
        return self

    def stats(self):
        """The stats file as {name: value}; {} (and a warning) when it
        cannot be read."""
        try:
            return read_stats(self.mnt)
        except OSError as e:
            log(f"warning: cannot read stats: {e}")
            return {}

    def unmount(self):
        if not self.mounted:
            return
        self.mounted = False
        r = run(["umount", self.mnt], check=False)
        if r.returncode != 0:
            log(f"warning: umount {self.mnt}: {r.stderr.strip()}; lazy unmount")
            run(["umount", "-l", self.mnt], check=False)
        if self.pid:
            for _ in range(200):
                if proc_cpu_s(self.pid) is None or not os.path.exists(f"/proc/{self.pid}"):
                    break
                try:
                    with open(f"/proc/{self.pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                            break
                except OSError:
                    break
                time.sleep(0.05)
            else:
                log(f"warning: daemon {self.pid} still running 10 s after umount")
        if self.proc:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                log(f"warning: daemon {self.proc.pid} still running 10 s after umount")

    def log_lines(self, levels=("error", "warning")):
        """The lines of its log (log_path) at these levels (None: all)."""
        if not self.log_path:
            return []
        try:
            with open(self.log_path, errors="replace") as f:
                return [ln.rstrip("\n") for ln in f
                        if levels is None or any(f"shardfs: {lv}: " in ln for lv in levels)]
        except OSError:
            return []

    def __exit__(self, *exc):
        self.unmount()


def read_stats(mnt):
    """The stats file of the mount at mnt (MNT/.shardfs/stats) as {name:
    value}: one entry per sample line, labels part of the name. Raises
    OSError when it cannot be read."""
    out = {}
    with open(os.path.join(mnt, ".shardfs", "stats")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, _, val = line.rpartition(" ")
            try:
                out[name] = float(val)
            except ValueError:
                pass
    return out


def quiet_stats(mnt):
    """The stats file of mnt as {name: value}, or None (a mount going away)."""
    try:
        return read_stats(mnt)
    except OSError:
        return None


def settle(m, warn=True):
    """Wait (up to 60 s) until the daemon's fetches and cache writes drained;
    with warn, say so on stderr when they did not."""
    for _ in range(600):
        st = m.stats()
        if (st.get("shardfs_prefetch_inflight_bytes", 0) == 0 and
                st.get("shardfs_cache_write_queue_bytes", 0) == 0):
            return
        time.sleep(0.1)
    if warn:
        log("warning: cache write queue not empty 60 s after the pass")


# The daemon's read path as the defaults run it, without the kernel's
# passthrough: the mount options of a row that measures the daemon on a
# cache (verified chunks read unchecked, the scrubber checks them; with
# passthrough=off alone every read would be checked, which no default mount
# does).
DAEMON_PATH = "passthrough=off,scrub_interval=86400"


def for_daemon(opts):
    """opts for the daemon --shardfs names: one from before passthrough=auto
    (an older build in an A/B) reads through itself with no option, and
    checks every read without a scrubber, so DAEMON_PATH is left out."""
    if DAEMON_PATH not in opts or passthrough_choices():
        return opts
    return ",".join(o for o in opts.split(",") if o not in DAEMON_PATH.split(","))


_choices = {}


def passthrough_choices():
    """Whether the daemon takes passthrough=auto|off (its --help says so)."""
    if ARGS.shardfs not in _choices:
        out = subprocess.run([ARGS.shardfs, "--help"], capture_output=True, text=True)
        _choices[ARGS.shardfs] = "passthrough=auto|off" in out.stdout + out.stderr
    return _choices[ARGS.shardfs]


def scrubbed(m):
    """Wait (up to 120 s) for the scrubber's first pass, the one at mount,
    so that a row measures reads, not the pass beside them."""
    for _ in range(1200):
        st = m.stats()
        if (not st.get("shardfs_cache_scrub_interval_seconds", 0) or
                st.get("shardfs_cache_scrub_passes_total", 0) >= 1):
            return  # no scrubber (an older daemon, or none asked for), or its pass ended
        time.sleep(0.1)
    log("warning: the scrubber's first pass did not end within 120 s")


def fresh_cache(cache_dir, size_bytes):
    """Empty cache_dir; the cache options for a mount on it."""
    shutil.rmtree(cache_dir, ignore_errors=True)
    return f"cache_dir={cache_dir},cache_size={max(size_bytes, 64 * MiB) // MiB}M"


def prefetch_max():
    """The mount's prefetch_max in bytes (--mount-opts, else its default)."""
    m = re.search(r"(?:^|,)prefetch_max=(\d+)([kKmMgG]?)", ARGS.mount_opts)
    if not m:
        return 2 * GiB
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]
