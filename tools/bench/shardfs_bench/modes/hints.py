# SPDX-License-Identifier: Apache-2.0
"""--hints: a trainer that tells the mount its order (shardfs.torch.HintSampler,
shardfs.hint) against the same trainer without, every node's link capped at
--hint-rate (the nodes are local: a cap is what makes the reads I/O-bound): a
torchvision ImageFolder DataLoader (2 and 8 workers; and a cache of half the
dataset, epoch 2), and shuffled records of one file read by 2 threads; torch
runs in a child (hint_child.py) under --hint-python.

Baselines: the same case without hints; for the records also the raw libnfs
reader with 16 in flight. Does not decode images (the loader returns a file's
length). Threading: the main thread; each child is a process.
"""

import json
import os
import shutil
import subprocess
import time

from ..accounting import proc_cpu_s, proc_switches_faults, reset_hwm
from ..common import ARGS, BenchError, ENTRY, GiB, MiB, ROOT, log, rate_mb_s, run
from ..data import imagenet_specs, make_record_file, make_tree, publish, record_table, write_list
from ..hint_child import HINT_BATCH, HINT_CHILD
from ..mode import Mode
from ..mount import Mount, find_daemon, fresh_cache, prefetch_max, settle
from ..passes import (RUNNING, RUNNING_LOCK, drop_caches, item_pass, mount_item_pass, prewarm,
                      smallread_argv)
from ..report import counts_per_item, daemon_log_lines, family_sum, fmt_mib

MODE = Mode("--hints", header="rows", cache_base=True, tools=("shardfs", "smallread"))


def add_arguments(ap):
    ap.add_argument("--hints", action="store_true",
                    help="run the epoch-hint benchmark: a torchvision ImageFolder DataLoader and "
                    "shuffled records of one file, read with and without epoch hints, every "
                    "node's link capped at --hint-rate")
    ap.add_argument("--hint-files", metavar="N", type=int, default=20000,
                    help="--hints: image files (100-130 KB, in --sf-dirs class folders)")
    ap.add_argument("--hint-rec-gib", metavar="S", type=float, default=3.0,
                    help="--hints: size of the record file in GiB (records of --rr-record-kb)")
    ap.add_argument("--hint-rate", metavar="RATE", default="200mbit",
                    help="--hints: per-node link cap (tc tbf)")
    ap.add_argument("--hint-nodes", metavar="N", type=int, default=4,
                    help="--hints: cluster nodes")
    ap.add_argument("--hint-uncapped", action="store_true",
                    help="--hints: then every case again without a cap")
    ap.add_argument("--hint-python", metavar="PATH", default="/usr/bin/python3",
                    help="--hints: the Python with torch and torchvision that runs the "
                    "DataLoader and sends the hints")


def configure(args):
    if args.hints:
        args.nodes = args.hint_nodes


def check(args):
    if not args.hints:
        return None
    if args.hint_files < 1 or args.hint_rec_gib <= 0 or rate_mb_s(args.hint_rate) is None:
        return "bad --hint-files, --hint-rec-gib or --hint-rate"
    if run([args.hint_python, "-c", "import torch, torchvision"], check=False).returncode != 0:
        return f"--hints needs torch and torchvision in {args.hint_python} (--hint-python)"
    return None


HINT_WORKERS = (2, 8)     # DataLoader num_workers of the image cases

HINT_SMALL_WORKERS = 2    # ... of the dataset = 2 x cache case

HINT_REC_THREADS = 2      # record readers through the mount

HINT_RAW_THREADS = 16     # the raw libnfs reader's records in flight

HINT_GOALS = {2: 2.0, 8: 1.2, "2x": 1.5, "rec": 0.8, "waste": 0.05}


class HintChild:
    """The bench's end of one child (--hint-python)."""

    def __init__(self, spec, log_path):
        env = dict(os.environ)
        tree = os.path.join(ROOT, "tools", "client", "python")  # in a source tree
        if os.path.isdir(os.path.join(tree, "shardfs")):
            env["PYTHONPATH"] = tree + (os.pathsep + env["PYTHONPATH"]
                                        if env.get("PYTHONPATH") else "")
        self.log_path = log_path
        with open(log_path, "w") as err:
            self.p = subprocess.Popen([ARGS.hint_python, ENTRY, HINT_CHILD,
                                       json.dumps(spec)], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=err, text=True, env=env)
        with RUNNING_LOCK:
            RUNNING.add(self.p.pid)

    def recv(self, key):
        """The child's next message, which must have key."""
        line = self.p.stdout.readline()
        msg = json.loads(line) if line.startswith("{") else {}
        if key not in msg:
            raise BenchError(f"hint child: expected '{key}', got {line.strip()!r}; "
                             f"its stderr: {self.said()}")
        return msg

    def send(self, word):
        self.p.stdin.write(word + "\n")
        self.p.stdin.flush()

    def said(self):
        try:
            with open(self.log_path, errors="replace") as f:
                lines = [ln.strip() for ln in f if ln.strip()]
        except OSError:
            lines = []
        return " | ".join(lines[-3:]) or "nothing"

    def close(self):
        """Wait for the child to exit (its hint list goes with it)."""
        self.p.stdin.close()
        try:
            rc = self.p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        with RUNNING_LOCK:
            RUNNING.discard(self.p.pid)
        if rc != 0:
            raise BenchError(f"hint child: exit {rc}; its stderr: {self.said()}")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        with RUNNING_LOCK:
            RUNNING.discard(self.p.pid)


def settle_hints(m):
    """Wait (up to 30 s) until the mount holds no hint list and no hinted
    bytes (a closed list's unread bytes are counted as waste then), then for
    its fetches and cache writes (settle)."""
    for _ in range(300):
        st = m.stats()
        if st.get("shardfs_hint_lists", 0) == 0 and st.get("shardfs_hint_held_bytes", 0) == 0:
            break
        time.sleep(0.1)
    else:
        log("warning: hint lists still held 30 s after their reader closed them")
    settle(m)


def hint_counts(delta):
    """The hint counters of a stats delta, summed over jobs."""
    c = {k: family_sum(delta, f"shardfs_hint_{k}_total")
         for k in ("fetched_bytes", "wasted_bytes", "fetched_items", "read_items")}
    for reason in ("cached", "unknown", "denied"):
        c[reason] = sum(v for k, v in delta.items()
                        if k.startswith("shardfs_hint_skipped_items_total{")
                        and f'reason="{reason}"' in k)
    return c


def loader_pass(m, spec, files, total, work):
    """Run spec's epochs in a child against mount m; every epoch after page
    caches are dropped, the last one measured. Returns an ItemPass of the
    last epoch (the daemon's CPU and stats from its start until its hint list
    is gone and the cache writes drained) with .hints (hint_counts) and
    .status (the child's hint_status after the epoch)."""
    last = spec["epochs"] - 1
    with HintChild(spec, os.path.join(work, "hint-child.log")) as child:
        for e in range(spec["epochs"]):
            child.recv("ready")
            drop_caches()
            if not ARGS.no_prewarm:
                prewarm(total + (512 << 20))
            if e == 0:
                first = m.stats()
            if e == last:
                s0 = m.stats()
                reset_hwm(m.pid)
                d0 = proc_cpu_s(m.pid)
                c0 = proc_switches_faults(m.pid)
            child.send("go")
            res = child.recv("epoch")
            if res["files"] != files or res["bytes"] != total:
                raise BenchError(f"DataLoader epoch read {res['files']} files, {res['bytes']} "
                                 f"bytes; want {files}, {total}")
            if e != last:
                settle(m)  # epoch 1's write-behind stays out of epoch 2
        child.close()
    settle_hints(m)
    p = mount_item_pass(m, files, total, res["secs"], None, s0, c0, d0, False)
    p.hints = hint_counts({k: v - first.get(k, 0.0) for k, v in m.stats().items()})
    p.nfs_bytes = p.delta.get("shardfs_prefetch_fetched_bytes_total", 0.0)
    p.status = res.get("status")
    p.disabled = res.get("disabled")
    return p


def records_hinted_pass(cluster, m, argv, n, total, spec, work):
    """The record readers (argv) through m, with the child's hint sent right
    before they start. Returns the ItemPass with .hints (hint_counts until
    the list is gone), .status and .send_s (seconds to send the list)."""
    with HintChild(spec, os.path.join(work, "hint-child.log")) as child:
        child.recv("ready")
        s0 = m.stats()
        sent = {}

        def send():
            child.send("go")
            sent.update(child.recv("sent"))
        p = item_pass(cluster, argv, n, total, mount=m, prewarm_bytes=total, before=send)
        child.send("done")
        p.status = child.recv("status")["status"]
        child.close()
    settle_hints(m)
    p.hints = hint_counts({k: v - s0.get(k, 0.0) for k, v in m.stats().items()})
    p.nfs_bytes = p.delta.get("shardfs_prefetch_fetched_bytes_total", 0.0)
    p.send_s = sent.get("secs")
    p.disabled = None
    return p


def hint_mount(cluster, extra, work, tag):
    """A fresh mount with a daemon log of its own (work/daemon-TAG.log)."""
    return Mount(cluster, cluster.addrs, ARGS.mnt, ARGS.nconnect, extra,
                 log_path=os.path.join(work, f"daemon-{tag}.log"))


def hint_case(cluster, label, hints, workers, epochs, cache_bytes, root, files, total, work,
              logs):
    """One image case on a fresh mount and empty cache: an ItemPass."""
    tag = f"{label.split()[0]}-{'hints' if hints else 'plain'}".replace("=", "")
    log(f"hints: {label}, {'with' if hints else 'without'} hints")
    opts = fresh_cache(os.path.join(ARGS.cache_base, f"cache-{ARGS.id}"), cache_bytes)
    spec = {"kind": "loader", "root": root, "workers": workers, "epochs": epochs,
            "seed": ARGS.seed, "hints": hints}
    with hint_mount(cluster, opts, work, tag) as m:
        p = loader_pass(m, spec, files, total, work)
        p.restarted = find_daemon(ARGS.mnt) != m.pid
    logs.append((f"{label}, {'hints' if hints else 'no hints'}", m.log_lines()))
    return p


def hint_image_cases(cluster, root, files, total, work, logs):
    """The image cases: [(label, without, with, goal)]."""
    rows = []
    for w in HINT_WORKERS:
        label = f"{w} workers"
        rows.append((label, hint_case(cluster, label, False, w, 1, max(2 * total, GiB), root,
                                      files, total, work, logs),
                     hint_case(cluster, label, True, w, 1, max(2 * total, GiB), root, files,
                               total, work, logs), HINT_GOALS[w]))
    label = f"2x cache, {HINT_SMALL_WORKERS} workers"
    rows.append((label, hint_case(cluster, label, False, HINT_SMALL_WORKERS, 2, total // 2, root,
                                  files, total, work, logs),
                 hint_case(cluster, label, True, HINT_SMALL_WORKERS, 2, total // 2, root, files,
                           total, work, logs), HINT_GOALS["2x"]))
    return rows


def record_index(export, name, size, recs):
    """Write NAME's .idx next to it ("key<TAB>offset", keys 0..n-1 in file
    order, as im2rec writes them), once. recs: the shuffled (offset, length)
    of record_table. Returns (idx name, the shuffled [(offset, length)] with
    the lengths the .idx gives: to the next offset, the last to the end)."""
    offs = sorted(o for o, _ in recs)
    ends = offs[1:] + [size]
    length = {o: e - o for o, e in zip(offs, ends)}
    idx = name[:-len(".rec")] + ".idx"
    path = os.path.join(export, idx)
    text = "".join(f"{k}\t{o}\n" for k, o in enumerate(offs))
    if not (os.path.exists(path) and open(path).read() == text):
        publish(path, lambda tmp: open(tmp, "w").write(text))
    return idx, [(o, length[o]) for o, _ in recs]


def hint_record_cases(cluster, work, logs):
    """The record cases: (name, size, n, total, raw, [(label, ItemPass)])."""
    size = int(ARGS.hint_rec_gib * GiB) // MiB * MiB
    name = make_record_file(cluster.export, ARGS.hint_rec_gib, size)
    idx, recs = record_index(cluster.export, name, size,
                             record_table(size, ARGS.rr_record_kb, ARGS.seed))
    n, total = len(recs), sum(ln for _, ln in recs)
    lst = os.path.join(work, "hint-rec-list")
    write_list(lst, [f"{o} {ln}" for o, ln in recs])
    src = ",".join(cluster.addrs) + ":/ifs"
    log(f"hints: records, raw libnfs ({HINT_RAW_THREADS} threads)")
    raw = item_pass(cluster, smallread_argv(src, lst, HINT_RAW_THREADS, "/" + name), n, total,
                    in_ns=True, prewarm_bytes=total)
    cache_dir = os.path.join(ARGS.cache_base, f"cache-{ARGS.id}")
    argv = smallread_argv(ARGS.mnt, lst, HINT_REC_THREADS, name)
    rows = []
    for label, hints, hold_open in (("no hints", False, False),
                                    ("hints", True, True),
                                    ("hints, late open", True, False)):
        log(f"hints: records, mount, {label}")
        tag = "rec-" + label.split(",")[0].replace(" ", "-") + ("" if hold_open else "-late")
        with hint_mount(cluster, fresh_cache(cache_dir, max(2 * size, GiB)), work, tag) as m:
            if hints:
                spec = {"kind": "records", "root": ARGS.mnt, "idx": os.path.join(ARGS.mnt, idx),
                        "rec": os.path.join(ARGS.mnt, name), "list": lst,
                        "hold_open": hold_open}
                p = records_hinted_pass(cluster, m, argv, n, total, spec, work)
            else:
                p = item_pass(cluster, argv, n, total, mount=m, prewarm_bytes=total, drain=True)
                p.nfs_bytes = p.delta.get("shardfs_prefetch_fetched_bytes_total", 0.0)
            p.restarted = find_daemon(ARGS.mnt) != m.pid
        logs.append((f"records, {label}", m.log_lines()))
        rows.append((label, p))
    shutil.rmtree(cache_dir, ignore_errors=True)
    return name, size, n, total, raw, rows


def waste_cell(p):
    fb = p.hints["fetched_bytes"]
    return f"{100 * p.hints['wasted_bytes'] / fb:.1f}%" if fb else "-"


def hint_detail(label, p, n, what):
    """One line on a run's hint list and what its daemon did, from the stats
    (and the list's own status where the child reported one)."""
    h = p.hints
    s = (f"    {label}: {h['fetched_items']:.0f} {what}s fetched ahead ({h['fetched_bytes'] / 1e6:.0f} "
         f"MB), {h['read_items']:.0f} read from there, wasted {h['wasted_bytes'] / 1e6:.1f} MB; "
         f"skipped: cached {h['cached']:.0f}, unknown {h['unknown']:.0f}, denied "
         f"{h['denied']:.0f}")
    if getattr(p, "send_s", None) is not None:
        s += f"; list sent in {p.send_s:.2f} s"
    if p.status:
        s += f"; hint_status at the end: position {p.status['position']} of {p.status['n_items']}"
    if p.disabled:
        s += f"; HintSampler disabled: {p.disabled}"
    if p.counts:
        s += f"; {counts_per_item(p, n, what)}"
    if getattr(p, "restarted", False):
        s += "; THE SERVING PROCESS CHANGED during the run (restarted by its keeper)"
    return s


def hint_image_lines(rows, files, total, classes):
    out = [f"  images: torchvision ImageFolder over {files} files of 100-130 KB ({total / 1e9:.2f} GB) "
           f"in {classes} class folders; DataLoader(batch_size={HINT_BATCH}, "
           f"sampler=RandomSampler(generator seeded {ARGS.seed}), num_workers=W), loader= reads "
           f"each file whole and returns its length (no decode); hints: the same sampler in "
           f"HintSampler(..., items_from_samples(ds))",
           "  each run a fresh mount with an empty cache_dir (cache_size 2 x the data set, or "
           "half of it for '2x cache', where epoch 1 is read unmeasured and epoch 2 measured); "
           "ratio = with hints / without, same case",
           f"  {'case':<24}{'hints':<7}{'epoch s':>8}{'files/s':>9}{'MB/s':>7}  "
           f"{'ratio':<17}{'goal':<9}{'waste':>6}{'daemon CPU/file':>17}{'peak RSS':>10}"
           f"{'NFS/data':>10}"]
    for label, plain, hinted, goal in rows:
        for p, yes in ((plain, False), (hinted, True)):
            ratio = f"{hinted.rate / plain.rate:.2f} x no hints" if yes else "(baseline)"
            out.append(f"  {label if not yes else '':<24}{'yes' if yes else 'no':<7}"
                       f"{p.secs:8.1f}{p.rate:9.0f}{p.mbps:7.1f}  {ratio:<17}"
                       f"{f'>= {goal:.1f}x' if yes else '':<9}"
                       f"{waste_cell(p) if yes else '':>6}"
                       f"{f'{1e6 * p.daemon_cpu / files:.0f} us':>17}{fmt_mib(p.hwm):>10}"
                       f"{p.nfs_bytes / total:10.2f}")
    out.append(f"  waste = hint wasted / hint fetched bytes over the whole run, both epochs of "
               f"'2x cache' (goal <= {100 * HINT_GOALS['waste']:.0f}%); daemon CPU per file "
               f"(its serving process's utime+stime over the measured epoch, until its cache "
               f"writes drained) with hints: goal <= without; NFS/data = bytes the daemon "
               f"fetched from NFS in the epoch / bytes of the data set")
    cpu = [f"{label} {hinted.daemon_cpu / plain.daemon_cpu:.2f}"
           for label, plain, hinted, _ in rows if plain.daemon_cpu]
    out.append(f"  daemon CPU per file, with / without hints: {', '.join(cpu)}")
    for label, plain, hinted, _ in rows:
        out.append(hint_detail(f"{label}, hints", hinted, files, "file"))
    return out


def hint_record_lines(name, size, n, total, raw, rows):
    out = [f"  records: {name}, {size / GiB:.2f} GiB, {n} records of {ARGS.rr_record_kb}+-10 KB "
           f"(lengths from its .idx: key<TAB>offset, as im2rec writes), read in one shuffled "
           f"order with one pread each; raw: shardfs-smallread over libnfs, {HINT_RAW_THREADS} "
           f"threads (records in flight), in the cluster's namespace; mount: the same reader, "
           f"{HINT_REC_THREADS} threads, cold (fresh mount, empty cache_dir of 2 x the file); "
           f"hints: shardfs.hint(root, items_from_recordio_idx(idx, rec) in the readers' order) "
           f"sent right before the readers start by a process that holds the .rec open from "
           f"before (as a RecordIO dataset does), or not ('late open': the readers' opens are "
           f"the first, after the list); ratio = to raw",
           f"  {'reader':<44}{'MB/s':>7}{'rec/s':>8}  {'ratio':<13}{'goal':<9}{'waste':>6}"
           f"{'daemon CPU/rec':>16}{'peak RSS':>10}{'NFS/data':>10}",
           f"  {f'raw libnfs, {HINT_RAW_THREADS} threads':<44}{raw.mbps:7.1f}{raw.rate:8.0f}  "
           f"{'(baseline)':<13}"]
    for label, p in rows:
        hinted = hasattr(p, "hints")
        goal = f">= {HINT_GOALS['rec']:.1f}x" if label == "hints" else ""
        out.append(f"  {f'mount, {HINT_REC_THREADS} threads, {label}':<44}{p.mbps:7.1f}"
                   f"{p.rate:8.0f}  {f'{p.mbps / raw.mbps:.2f} x raw':<13}{goal:<9}"
                   f"{waste_cell(p) if hinted else '':>6}"
                   f"{f'{1e6 * p.daemon_cpu / n:.0f} us':>16}{fmt_mib(p.hwm):>10}"
                   f"{p.nfs_bytes / size:10.2f}")
    plain = rows[0][1]
    out.append("  with hints / without: " + ", ".join(
        f"{label} {p.mbps / plain.mbps:.2f} x (daemon CPU per record "
        f"{p.daemon_cpu / plain.daemon_cpu:.2f} x)" for label, p in rows[1:]))
    if size <= prefetch_max():
        out.append(f"  note: the file is not over prefetch_max ({prefetch_max() / GiB:g} GiB): "
                   f"without hints the mount fetches it whole on open")
    for label, p in rows[1:]:
        out.append(hint_detail(f"records, {label}", p, n, "record"))
    return out


def bench(cluster, out):
    """--hints: the image cases and the record cases, at --hint-rate per node
    (and, with --hint-uncapped, again without a cap)."""
    N, D = ARGS.hint_files, ARGS.sf_dirs
    name = f"imagenet-{N}f-{D}d-s{ARGS.seed}"
    specs = imagenet_specs(N, D, ARGS.seed)
    make_tree(cluster.export, name, specs, f"imagenet-{ARGS.seed}")
    total = sum(s for _, s in specs)
    work = os.path.dirname(ARGS.mnt)
    lst = os.path.join(work, "hint-warm-list")
    write_list(lst, [f"/{name}/{r}" for r, _ in specs])
    log("hints: the servers read the image tree once (raw libnfs, uncapped)")
    warm = item_pass(cluster, smallread_argv(",".join(cluster.addrs) + ":/ifs", lst,
                                             HINT_RAW_THREADS), N, total, in_ns=True)
    nodes = len(cluster.addrs)
    out.append(f"epoch hints: {nodes} nodes; mount -o nconnect={ARGS.nconnect}"
               f"{',' + ARGS.mount_opts if ARGS.mount_opts else ''} plus cache_dir, cache_size "
               f"(hint_window, hint_fetchers at their defaults unless given there); the export "
               f"on {'tmpfs' if cluster.export.startswith('/dev/shm') else cluster.export}, read "
               f"once before (raw libnfs, {HINT_RAW_THREADS} threads, uncapped: "
               f"{warm.rate:.0f} files/s); page caches dropped before every epoch and pass")
    for rate in [ARGS.hint_rate] + (["off"] if ARGS.hint_uncapped else []):
        cluster.cap(rate)
        per = rate_mb_s(rate) if rate != "off" else None
        out.append(f"{'uncapped' if rate == 'off' else f'every node capped at {rate}'}"
                   + (f" (tc tbf: {nodes} x {per:.0f} MB/s = {nodes * per:.0f} MB/s)"
                      if per else ""))
        logs = []
        rows = hint_image_cases(cluster, os.path.join(ARGS.mnt, name), N, total, work, logs)
        out.extend(hint_image_lines(rows, N, total, len({r.split('/')[0] for r, _ in specs})))
        rec = hint_record_cases(cluster, work, logs)
        out.extend(hint_record_lines(*rec))
        out.extend(daemon_log_lines(logs))
    cluster.cap("off")
