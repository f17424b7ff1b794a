# SPDX-License-Identifier: Apache-2.0
"""--memory: the daemon's peak RSS (VmHWM, reset after mounting) against mem_max
in five workloads (a walk of --sf-rss-files files of 1 KiB, the FIO job,
shuffled records in one file, a cold epoch into a cache disk slower than the
network, several jobs at once), at the default mem_max and at --mem-small.

Baseline: the budget the daemon reports (shardfs_memory_budget_bytes). Does
not measure speed. The slow cache disk is a loop device whose writes a cgroup
v1 blkio throttle holds; without that controller the mode fails. Threading:
the several-jobs workload runs each job in a thread.
"""

import os
import random
import shutil
import threading

from ..accounting import proc_status, reset_hwm
from ..common import ARGS, BenchError, KB, MiB, log, run
from ..data import imagenet_specs, make_files, make_tree
from ..mode import Mode
from ..mount import Mount
from ..passes import drop_caches, mount_pass
from ..report import fmt_mib, stat_delta

MODE = Mode("--memory", raw_line=True, cache_base=True, tools=("shardfs", "smallread"))


def add_arguments(ap):
    ap.add_argument("--memory", action="store_true",
                    help="run the memory benchmark: the daemon's peak RSS in five workloads "
                    "against mem_max, at its default and at --mem-small")
    ap.add_argument("--mem-small", metavar="SIZE", default="128M",
                    help="--memory: the small mem_max")


class SlowDisk:
    """A cache filesystem on a loop device whose writes a cgroup v1 blkio
    throttle holds to rate bytes/s (the cache disk slower than the network);
    the daemon's threads are moved into the cgroup with add()."""

    def __init__(self, work, rate):
        self.work, self.rate = work, rate
        self.loop = self.cg = None
        self.mnt = os.path.join(work, "slow")

    def __enter__(self):
        blkio = "/sys/fs/cgroup/blkio"
        if not os.access(os.path.join(blkio, "cgroup.procs"), os.W_OK):
            raise BenchError("no cgroup v1 blkio controller to throttle the cache disk")
        os.makedirs(self.mnt, exist_ok=True)
        img = os.path.join(self.work, "slow.img")
        run(["truncate", "-s", "3G", img])
        self.loop = run(["losetup", "-f", "--show", img]).stdout.strip()
        run(["mkfs.ext4", "-q", self.loop])
        run(["mount", self.loop, self.mnt])
        self.cg = os.path.join(blkio, f"shardfs-bench-{os.getpid()}")
        os.makedirs(self.cg, exist_ok=True)
        dev = run(["lsblk", "-no", "MAJ:MIN", self.loop]).stdout.strip()
        with open(os.path.join(self.cg, "blkio.throttle.write_bps_device"), "w") as f:
            f.write(f"{dev} {self.rate}\n")
        return self

    def add(self, pid):
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(os.path.join(self.cg, "tasks"), "w") as f:
                f.write(t)

    def __exit__(self, *exc):
        run(["umount", self.mnt], check=False)
        if self.loop:
            run(["losetup", "-d", self.loop], check=False)
        if self.cg:
            try:
                os.rmdir(self.cg)
            except OSError:
                pass


class Inputs:
    """The workloads' data in the export and their readers' lists in work."""

    def __init__(self, export, work):
        self.n_walk = ARGS.sf_rss_files
        walk_name = f"tiny-{self.n_walk}f-1000pd-s{ARGS.seed}"
        walk_specs = [(f"d{i // 1000:05d}/f{i:07d}", 1024) for i in range(self.n_walk)]
        make_tree(export, walk_name, walk_specs, f"tiny-{ARGS.seed}")
        self.walk_list = os.path.join(work, "walk.list")
        with open(self.walk_list, "w") as f:
            f.write("".join(f"{walk_name}/{r}\n" for r, _ in walk_specs))
        self.fio = make_files(export, "fio", 16, 64)
        self.rec_file = make_files(export, "records", 1, 1024)[0]
        rng = random.Random(ARGS.seed)
        self.rec_list = os.path.join(work, "records.list")
        with open(self.rec_list, "w") as f:
            for _ in range(20000):
                ln = rng.randint(100 * KB, 120 * KB)
                f.write(f"{rng.randrange(0, 1024 * MiB - ln)} {ln}\n")
        img_name = f"imagenet-2000f-20d-s{ARGS.seed}"
        img_specs = imagenet_specs(2000, 20, ARGS.seed)
        make_tree(export, img_name, img_specs, ARGS.seed)
        self.img_list = os.path.join(work, "images.list")
        with open(self.img_list, "w") as f:
            f.write("".join(f"{img_name}/{r}\n" for r, _ in img_specs))


def smallread(argv_tail):
    p = run([ARGS.smallread, "-q"] + argv_tail, check=False)
    if p.returncode != 0:
        raise BenchError(f"shardfs-smallread: {p.stderr.strip() or p.returncode}")


def fio_job(mnt, files):
    """One dd per file, O_DIRECT 1 MiB reads, four at a time."""
    mount_pass(mnt, files, 4, [64 * MiB] * len(files))()


def workloads(inp):
    """[(label, fn(mountpoint), whether the cache disk is the slow one)]."""
    def walk(mnt):
        smallread(["-t", "16", "-l", inp.walk_list, mnt])

    def records(mnt):
        smallread(["-t", "8", "-r", f"shards/{inp.rec_file}", "-l", inp.rec_list, mnt])

    def many(mnt):
        jobs = [lambda: fio_job(mnt, inp.fio[:8]),
                lambda: smallread(["-t", "8", "-l", inp.img_list, mnt]),
                lambda: records(mnt), lambda: fio_job(mnt, inp.fio[8:])]
        ts = [threading.Thread(target=j) for j in jobs]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    return [
        (f"walk: {inp.n_walk} files of 1 KiB, 16 threads", walk, False),
        ("FIO job: 16 x 64 MiB, 4 dd bs=1M at once", lambda m: fio_job(m, inp.fio), False),
        ("shuffled records: 20,000 of ~110 KB in 1 GiB, 8 threads", records, False),
        ("cold epoch, cache disk at 50 MB/s: the FIO job", lambda m: fio_job(m, inp.fio), True),
        ("several jobs at once: 2 FIO jobs, 2,000 images, records", many, False),
    ]


def one_run(cluster, work, fn, slow, opt):
    """fn on a fresh mount with a cache_dir (on the slow disk where slow)
    and the options opt. Returns (VmHWM, the budget, and where slow the
    chunks fetched ahead and on demand, else None)."""
    cache_dir = os.path.join(ARGS.cache_base, "memory-cache")
    disk = SlowDisk(work, 50 * 1000 * 1000) if slow else None
    counts = None
    try:
        if disk:
            disk.__enter__()
            cache_dir = os.path.join(disk.mnt, "cache")
        shutil.rmtree(cache_dir, ignore_errors=True)
        opts = f"cache_dir={cache_dir},cache_size=2G" + (f",{opt}" if opt else "")
        with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, opts) as m:
            if disk:
                disk.add(m.pid)
            budget = m.stats().get("shardfs_memory_budget_bytes", 0)
            drop_caches()
            reset_hwm(m.pid)
            s0 = m.stats()
            fn(ARGS.mnt)
            hwm = proc_status(m.pid, "VmHWM")
            if disk:
                s1 = m.stats()
                counts = (stat_delta(s0, s1, "shardfs_prefetch_readahead_chunks_total"),
                          stat_delta(s0, s1, "shardfs_prefetch_direct_fetches_total"))
            # unmounting waits for the writes to the slow disk
        shutil.rmtree(cache_dir, ignore_errors=True)
    finally:
        if disk:
            disk.__exit__()
    return hwm, budget, counts


def bench(cluster, out):
    """The daemon's peak RSS (VmHWM) in each workload against mem_max, at
    its default and at --mem-small: a walk of 200,000 small files, the
    reference FIO job, shuffled records in one big file, a cold epoch into
    a cache disk slower than the network, and several jobs at once."""
    work = os.path.dirname(ARGS.mnt)
    loads = workloads(Inputs(cluster.export, work))
    budgets = [("default", ""), (ARGS.mem_small, f"mem_max={ARGS.mem_small}")]
    res, ahead, demand = {}, {}, {}
    for label, fn, slow in loads:
        for bname, opt in budgets:
            log(f"memory: {label} at mem_max {bname}")
            hwm, budget, counts = one_run(cluster, work, fn, slow, opt)
            res[(label, bname)] = (hwm, budget)
            if counts:
                ahead[bname], demand[bname] = counts
    out.append(f"memory: the daemon's peak RSS (VmHWM, reset after mount) in each workload, "
               f"with cache_dir (cache_size 2G) and mem_max at its default and at "
               f"{ARGS.mem_small}; page caches dropped first")
    out.append(f"  {'':<58}" + "".join(f"{'mem_max ' + b:>26}" for b, _ in budgets))
    for label, _, _ in loads:
        cells = []
        for bname, _ in budgets:
            hwm, budget = res[(label, bname)]
            cells.append(f"{fmt_mib(hwm)} of {fmt_mib(budget)} = "
                         f"{(hwm or 0) / max(budget, 1):.2f}")
        out.append(f"  {label:<58}" + "".join(f"{c:>26}" for c in cells))
    # With the cache disk slower than the network, the writes waiting must
    # not hold the half of the budget that keeps the whole-file fetch ahead
    # of the readers (else the readers fetch their own chunks one by one).
    out.append("  slow cache disk: chunks fetched ahead of the readers / fetched on a reader's demand: " +
               ", ".join(f"mem_max {b} {ahead.get(b, 0):.0f} / {demand.get(b, 0):.0f}"
                         for b, _ in budgets))
