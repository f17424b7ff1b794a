# SPDX-License-Identifier: Apache-2.0
"""--sf-rss: the daemon's memory per file: list (scandir) and read the first half,
then all, of --sf-rss-files files of 1 KiB through a mount with a cache_dir;
VmHWM after each step, VmRSS after the kernel forgets (drop_caches 2); with
--sf-rss-inode-max, again on a fresh mount with inode_max.

Baseline: the daemon's own memory right after mounting (the goal: the peak
after all within 1.10 x the peak after half). Does not measure speed.
Threading: the main thread.
"""

import os
import shutil
import time

from ..accounting import proc_status
from ..common import ARGS, BenchError, MiB, log, run
from ..data import make_tree, write_list
from ..mode import item_mode
from ..mount import Mount
from ..passes import smallread_argv
from ..report import fmt_mib

MODE = item_mode("--sf-rss")


def add_arguments(ap):
    ap.add_argument("--sf-rss", action="store_true",
                    help="measure the daemon's memory per file (1 KiB files, first half then all)")
    ap.add_argument("--sf-rss-per-dir", metavar="N", type=int, default=1000,
                    help="--sf-rss: files per folder")
    ap.add_argument("--sf-rss-inode-max", metavar="N", type=int, default=0,
                    help="--sf-rss: then the same on a fresh mount with -o inode_max=N "
                         "(0: not)")


def check(args):
    bad = args.sf_rss_per_dir < 1 or args.sf_rss_inode_max < 0
    return "bad --sf-*/--rr-* value" if bad else None


def vm(pid):
    return proc_status(pid, "VmHWM"), proc_status(pid, "VmRSS")


def accounted(st, files):
    """What the daemon accounts for by kind (shardfs_memory_bytes), so
    that per-file and per-thread memory are told apart."""
    def mib1(b):
        return f"{b / MiB:.1f} MiB"

    def kind(k):
        return st.get(f'shardfs_memory_bytes{{kind="{k}"}}', 0)
    ino = st.get("shardfs_inodes", 0)
    per_ino = f" = {kind('inodes') / ino:.0f} B each" if ino else ""
    per_file = f" = {kind('cache_index') / files:.0f} B per cached file" if files else ""
    return (f"    accounted: inodes {mib1(kind('inodes'))}{per_ino} (plus malloc's "
            f"header and rounding), cache index {mib1(kind('cache_index'))}{per_file}, "
            f"read scratch {mib1(kind('read_scratch'))} (huge pages in flight "
            f"and kept for reuse), chunk buffers "
            f"{mib1(kind('chunk_buffers'))}, listings {mib1(kind('listings'))} (names "
            f"of folders listed within actimeo, at most listing_max), namespace "
            f"{mib1(kind('namespace'))}")


def list_and_read(name, specs, upto):
    """List (scandir) the folders of the first upto files of the tree name
    through the mount and read every file listed (--sf-threads threads).
    Returns the seconds it took."""
    dirs = sorted({os.path.dirname(r) for r, _ in specs[:upto]})
    log(f"rss: listing and reading {upto} files")
    t0 = time.monotonic()
    rels = []
    for d in dirs:
        for e in os.scandir(os.path.join(ARGS.mnt, name, d)):
            rels.append(f"{name}/{d}/{e.name}")
    if len(rels) != upto:
        raise BenchError(f"listed {len(rels)} files under {name}, want {upto}")
    lst = os.path.join(os.path.dirname(ARGS.mnt), "rss-list")
    write_list(lst, rels)
    run(smallread_argv(ARGS.mnt, lst, ARGS.sf_threads))
    return time.monotonic() - t0


def one_mount(cluster, name, specs, cache_dir, extra, out):
    """The two steps and the forget on a fresh mount and cache (extra:
    more mount options); appends their lines to out. Returns VmHWM after
    the first step and the second."""
    n = len(specs)
    half = n // 2
    shutil.rmtree(cache_dir, ignore_errors=True)
    hwms = []
    with Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect,
               f"cache_dir={cache_dir},cache_size=1G{extra}") as m:
        st = m.stats()
        hwm0, rss0 = vm(m.pid)
        out.append(f"  after mount: VmHWM {fmt_mib(hwm0)}, VmRSS {fmt_mib(rss0)}, "
                   f"inodes {st.get('shardfs_inodes', 0):.0f}")
        prev = None
        for upto in (half, n):
            secs = list_and_read(name, specs, upto)
            st = m.stats()
            hwm, rss = vm(m.pid)
            marg = (f", {(hwm - prev) / (upto - half):.0f} bytes/file for the second "
                    f"{upto - half}" if prev is not None else "")
            out.append(f"  after {upto} files ({secs:.1f} s to list and read): VmHWM "
                       f"{fmt_mib(hwm)} = {(hwm - hwm0) / upto:.0f} bytes/file over the mount's"
                       f"{marg}; VmRSS {fmt_mib(rss)}, inodes {st.get('shardfs_inodes', 0):.0f}")
            out.append(accounted(st, upto))
            prev = hwm
            hwms.append(hwm)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("2\n")
        time.sleep(2)   # the kernel's FORGETs reach the daemon
        st = m.stats()
        hwm, rss = vm(m.pid)
        out.append(f"  after drop_caches 2: VmRSS {fmt_mib(rss)} "
                   f"({(rss - rss0) / n:.0f} bytes/file over the mount's), inodes "
                   f"{st.get('shardfs_inodes', 0):.0f}")
        out.append(accounted(st, n))
    return hwms


def bench(cluster, out):
    """Daemon memory per file: list and read the first half, then all, of
    --sf-rss-files 1 KB files through a mount with a cache; VmHWM after each,
    VmRSS after drop_caches 2 (dentries and inodes: the kernel forgets)."""
    n = ARGS.sf_rss_files
    half = n // 2
    per = ARGS.sf_rss_per_dir
    name = f"tiny-{n}f-{per}pd-s{ARGS.seed}"
    specs = [(f"d{i // per:05d}/f{i:07d}", 1024) for i in range(n)]
    make_tree(cluster.export, name, specs, f"tiny-{ARGS.seed}")
    cache_dir = os.path.join(ARGS.cache_base, f"cache-{ARGS.id}")
    shutil.rmtree(cache_dir, ignore_errors=True)
    out.append(f"daemon memory per file: {n} files of 1 KiB, {per} per folder, through a mount "
               f"with cache_dir; list (scandir of each folder) and read ({ARGS.sf_threads} "
               f"threads) the first {half}, then all {n}")
    variants = [("", "")]
    if ARGS.sf_rss_inode_max:
        variants.append((f",inode_max={ARGS.sf_rss_inode_max}",
                         f"with -o inode_max={ARGS.sf_rss_inode_max}"))
    for extra, label in variants:
        if label:
            out.append(f"  {label} (a fresh mount and cache):")
        hwms = one_mount(cluster, name, specs, cache_dir, extra, out)
        out.append(f"  peak RSS after {n} files / after {half}: {hwms[1] / hwms[0]:.2f} "
                   f"(the #8 goal: <= 1.10)")
    shutil.rmtree(cache_dir, ignore_errors=True)
