# SPDX-License-Identifier: Apache-2.0
"""The command line: the options (those several modes read; each mode adds
its own), the choice of the modes and the checks, the locks that keep one run
per --id and per --cache-base, the cluster's start and the header lines, the
modes' runs, and the cleanup on every exit (dd readers, fleet mounts, the
mount, the cluster, the export).

Does not measure: the modes (modes/) do. Threading: the main thread; SIGTERM
and SIGHUP become KeyboardInterrupt, and the cleanup stops the readers that
other threads started.
"""

import argparse
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time

from .cluster import Cluster
from .common import ARGS, BenchError, PROG, ROOT, log
from .fleet_clients import FLEET_MOUNTS
from .hint_child import HINT_CHILD, hint_child_main
from .modes import DEFAULT, MODES, dest, hook
from .mount import Mount, find_daemon, is_mounted
from .passes import RUNNING, RUNNING_LOCK, STOP


HELD_LOCKS = []


def hold_lock(path, what):
    """Hold an exclusive flock on path until exit, or exit with a message:
    two runs on one cluster id (cluster, mount, export) or one --cache-base
    (local-disk copies, cache dirs, the disk itself) would break each other
    or each other's figures."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"{PROG}: another {PROG} is running with this {what} (lock {path}); "
                 f"wait for it or pass another --id / --cache-base")
    HELD_LOCKS.append(fd)


def parser():
    """The options: those that several modes read, then each mode's own
    (DEFAULT's, then MODES' in their order), then the programs' paths."""
    ap = argparse.ArgumentParser(
        prog=PROG, description="Compare the shardfs mount with a raw striped libnfs "
        "reader on a local nfs-ganesha cluster (needs root).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--id", metavar="ID", default="bench",
                    help="cluster id (one run per id, and per --cache-base, at a time)")
    ap.add_argument("--nodes", metavar="N", type=int, default=None,
                    help="cluster nodes (default 4; 8 for --slow-node; --hints: --hint-nodes)")
    ap.add_argument("--files", metavar="N", type=int, default=8, help="files in the data set")
    ap.add_argument("--file-mib", metavar="M", type=int, default=256, help="size of each file (uncapped runs)")
    ap.add_argument("--readers", metavar="T", type=int, default=4,
                    help="parallel readers through the mount (= files in flight for the raw reader)")
    ap.add_argument("--nconnect", metavar="N", type=int, default=2, help="connections per node, both readers")
    ap.add_argument("--raw-depth", metavar="D", type=int, default=4, help="raw reader: reads in flight per connection")
    ap.add_argument("--rate", metavar="RATE", default="200mbit", help="per-node cap for the capped runs")
    ap.add_argument("--reps", metavar="N", type=int, default=3, help="uncapped passes per reader (median reported)")
    ap.add_argument("--keep", action="store_true", help="leave the cluster and the data")
    ap.add_argument("--data-dir", metavar="DIR", default=None,
                    help="export directory (default /dev/shm/shardfs-bench-ID, tmpfs; "
                    "files of the right size are reused)")
    ap.add_argument("--no-prewarm", action="store_true",
                    help="do not touch and free memory before each pass (see prewarm())")
    ap.add_argument("--mount-opts", metavar="OPTS", default="", help="extra -o options for the daemon")
    ap.add_argument("--shardfs", metavar="PATH", default=os.path.join(ROOT, "build", "fs", "shardfs"))
    ap.add_argument("--rawread", metavar="PATH", default=os.path.join(ROOT, "build", "tools", "shardfs-rawread"))
    ap.add_argument("-q", "--quiet-progress", action="store_true", help="no progress on stderr")
    ap.add_argument("--cache-base", metavar="DIR", default="/var/tmp/shardfs-bench",
                    help="--cache, --small-files, --random-records, --sf-rss, --hints, --fleet, "
                    "--fleet-warm: where the cache_dir and the local-disk copy live (a real disk)")
    ap.add_argument("--sf-dirs", metavar="D", type=int, default=200,
                    help="--small-files, --hints: folders (for --hints, the classes)")
    ap.add_argument("--sf-threads", metavar="T", type=int, default=16,
                    help="--small-files, --sf-rss: reader threads")
    ap.add_argument("--sf-rss-files", metavar="N", type=int, default=200000,
                    help="--sf-rss: files (read: the first half, then all)")
    ap.add_argument("--rr-gib", metavar="S", type=float, default=3.0,
                    help="--random-records: size of the record file in GiB")
    ap.add_argument("--rr-record-kb", metavar="K", type=int, default=110,
                    help="--random-records: mean record size in KB (sizes K-10..K+10)")
    ap.add_argument("--rr-threads", metavar="R", type=int, default=8,
                    help="--random-records: reader threads")
    ap.add_argument("--seed", metavar="N", type=int, default=1,
                    help="--small-files, --random-records, --sf-rss, --hints: seed of the data "
                    "and the order")
    ap.add_argument("--fleet-files", metavar="N", type=int, default=16,
                    help="--fleet, --fleet-warm: files in the training data set")
    ap.add_argument("--fleet-file-mib", metavar="M", type=int, default=64,
                    help="--fleet, --fleet-warm: size of each training file")
    for mode in [DEFAULT] + MODES:
        mode.add_arguments(ap)
    ap.add_argument("--perf", metavar="DIR", default=None,
                    help="record each mount pass that measures the daemon (--small-files, "
                         "--random-records, --cache epochs, the striping mount passes) with "
                         "`perf record -a -g` into DIR/passN.data, numbered in the order run "
                         "(the passes' figures then include perf's own cost)")
    ap.add_argument("--smallread", metavar="PATH", default=None,
                    help="the reader of --small-files, --random-records and --sf-rss (default: "
                    "build/tools/shardfs-smallread, else next to --rawread)")
    return ap


def selected_modes():
    """The modes the options select, in MODES' order ([DEFAULT] when none);
    exits when two of them do not mix (they share no group)."""
    modes = [m for m in MODES if getattr(ARGS, dest(m)) not in (None, False)]
    for m in modes[1:]:
        if m.MODE.group is None or m.MODE.group != modes[0].MODE.group:
            sys.exit(f"{PROG}: {modes[0].MODE.option} and {m.MODE.option} do not mix")
    return modes or [DEFAULT]


def configure(modes):
    """The defaults that follow from the modes: --nodes, --smallread."""
    for m in modes:
        if hook(m, "configure"):
            m.configure(ARGS)
    if ARGS.nodes is None:
        ARGS.nodes = 4
    if ARGS.smallread is None:
        ARGS.smallread = os.path.join(ROOT, "build", "tools", "shardfs-smallread")
        if not os.access(ARGS.smallread, os.X_OK):
            ARGS.smallread = os.path.join(os.path.dirname(ARGS.rawread), "shardfs-smallread")


def check(modes):
    """Exit with a message when the options or the machine will not do."""
    if os.geteuid() != 0:
        sys.exit(f"{PROG}: must run as root")
    if not re.fullmatch(r"[a-z0-9]{1,6}", ARGS.id):
        sys.exit(f"{PROG}: bad --id (want [a-z0-9]{{1,6}})")
    if ARGS.nodes < 2 or ARGS.files < 1 or ARGS.readers < 1 or ARGS.reps < 1:
        sys.exit(f"{PROG}: --nodes >= 2, --files, --readers, --reps >= 1")
    if (ARGS.sf_dirs < 1 or ARGS.sf_threads < 1 or ARGS.rr_threads < 1 or
            ARGS.sf_rss_files < 2 or ARGS.rr_record_kb < 11 or ARGS.rr_record_kb > 1000 or
            ARGS.rr_gib <= 0):
        sys.exit(f"{PROG}: bad --sf-*/--rr-* value")
    for m in [DEFAULT] + MODES:
        said = m.check(ARGS) if hook(m, "check") else None
        if said:
            sys.exit(f"{PROG}: {said}")
    for attr in sorted({t for m in modes for t in m.MODE.tools}):
        exe = getattr(ARGS, attr)
        if not os.access(exe, os.X_OK):
            sys.exit(f"{PROG}: {exe} not found; build first: ninja -C build")


def workspace(modes):
    """The export and the mountpoint (ARGS.mnt), locked for this run.
    Returns (export, whether this run made it)."""
    export = ARGS.data_dir or f"/dev/shm/shardfs-bench-{ARGS.id}"
    made_export = not os.path.exists(export)
    ARGS.mnt = f"/tmp/shardfs-bench-{ARGS.id}/mnt"
    hold_lock(os.path.join(os.path.dirname(ARGS.mnt), "lock"), f"--id ({ARGS.id})")
    if any(m.MODE.cache_base for m in modes):
        hold_lock(os.path.join(ARGS.cache_base, ".lock"), f"--cache-base ({ARGS.cache_base})")
    return export, made_export


def header(modes, cluster):
    """The output's first lines, taken once the cluster is up."""
    ncpu = os.cpu_count()
    load = os.getloadavg()[0]
    data = "tmpfs" if cluster.export.startswith("/dev/shm") else cluster.export
    if modes[0].MODE.header == "rows":
        out = [f"shardfs-bench: {ncpu} CPUs (load {load:.2f} at start), {len(cluster.addrs)} "
               f"nodes, data on {data}, MB = 1e6 bytes, one run per row"]
    else:
        out = [f"shardfs-bench: {ncpu} CPUs (load {load:.2f} at start), data on {data}, page "
               f"caches dropped before every pass"
               f"{'' if ARGS.no_prewarm else ' (then memory prewarmed)'}, uncapped MB/s = "
               f"median of {ARGS.reps} (MB = 1e6 bytes)"]
    if modes[0].MODE.raw_line:
        threads = max(1, min(ncpu or 1, len(cluster.addrs) * ARGS.nconnect))
        out.append(f"raw reader: -c {ARGS.nconnect} -d {ARGS.raw_depth} -b 1M -j {ARGS.readers} "
                   f"-t {threads}; mount: -o nconnect={ARGS.nconnect}"
                   f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''}, {ARGS.readers} x dd bs=1M")
    return out


def run_modes(modes, cluster, out, t_start):
    """Write the data, start the cluster, run the modes; print out."""
    log(f"writing data to {cluster.export}")
    os.makedirs(cluster.export, exist_ok=True)
    for m in modes:
        if hook(m, "prepare"):
            m.prepare(cluster.export)
    cluster.start()
    out.extend(header(modes, cluster))
    for m in modes:
        m.bench(cluster, out)
    out.append(f"total time {time.monotonic() - t_start:.0f} s")
    print("\n".join(out), flush=True)


def cleanup(cluster, export, made_export):
    """Stop what the run started, whatever stopped the run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    STOP.set()
    with RUNNING_LOCK:
        for pid in list(RUNNING):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
    for fm in list(FLEET_MOUNTS):
        fm.unmount()
    if is_mounted(ARGS.mnt):
        m = Mount(cluster, [], ARGS.mnt, 0)
        m.mounted, m.pid = True, find_daemon(ARGS.mnt)
        m.unmount()
    cluster.stop()
    if not ARGS.keep:
        if made_export:
            shutil.rmtree(export, ignore_errors=True)
        if not is_mounted(ARGS.mnt):
            shutil.rmtree(os.path.dirname(ARGS.mnt), ignore_errors=True)


def main():
    """The bench: returns its exit status (0, 1 on a failed run, 130 when
    interrupted); exits with a message on a bad command line."""
    parser().parse_args(namespace=ARGS)
    modes = selected_modes()
    configure(modes)
    check(modes)
    export, made_export = workspace(modes)

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    clients = max((m.clients(ARGS) for m in modes if hook(m, "clients")), default=0)
    cluster = Cluster(ARGS.id, ARGS.nodes, export, clients)
    out = []
    t_start = time.monotonic()
    rc = 0
    try:
        run_modes(modes, cluster, out, t_start)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        rc = 130
    except (BenchError, OSError, subprocess.SubprocessError) as e:
        if out:
            print("\n".join(out), flush=True)
        print(f"{PROG}: {e}", file=sys.stderr)
        rc = 1
    finally:
        cleanup(cluster, export, made_export)
    return rc


def entry(argv):
    """The entry point's work: the --hints child with HINT_CHILD first, else
    the bench. Returns the exit status."""
    if argv[:1] == [HINT_CHILD]:
        return hint_child_main(argv[1:])
    return main()
