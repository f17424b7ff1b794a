#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""node-table.py: node-bench.sh's runs as one table (markdown, on stdout).

    node-table.py RUNS OUTDIR [DROPPED]

RUNS: node-bench.sh's node-runs.tsv (workload, where, daemon, log file in
OUTDIR, exit status, seconds; one line per run); DROPPED: its list of the
options each daemon's shim dropped. Reads each run's shardfs-bench output and
takes the rows below from it, one table row per workload row and cache place,
with the new daemon's figure (daemon "shardfs") beside the old one's (any
other daemon): workload, baseline, new, old, ratio (each daemon's rate over
the baseline measured in its own run), daemon CPU (CPU-s/GiB, or us per file).

Owns only the parsing of shardfs-bench's text output: a row it cannot find
(a run that failed or ran out of time, or output it no longer recognises)
is an empty cell, and the runs that did not finish are listed under the
table. Threading: one thread.
"""

import csv
import os
import re
import sys

NEW = "shardfs"


class Row:
    """One workload row of one run: label, baseline (name, value), the
    daemon's value and unit, its CPU (value, unit)."""

    def __init__(self, label, base_name, base, val, unit, cpu=None, cpu_unit="CPU-s/GiB"):
        self.label, self.base_name, self.base = label, base_name, base
        self.val, self.unit, self.cpu, self.cpu_unit = val, unit, cpu, cpu_unit


def num(m, i=1):
    return float(m.group(i)) if m else None


def find(text, pattern):
    return re.search(pattern, text, re.M)


def section(text, start, stop=None):
    """text from the first line starting with start to the next line
    starting with stop (or the end); '' when start is not there."""
    i = text.find("\n" + start)
    if i < 0:
        return ""
    rest = text[i + 1:]
    if stop:
        j = rest.find("\n" + stop, 1)
        if j >= 0:
            rest = rest[:j]
    return rest


def rows_default(text):
    """Cold shards (all nodes, page_cache=always, one node) and the FUSE floor."""
    out = []
    for sec, what in ((section(text, "uncapped, ", "uncapped, 1 node "), "all"),
                      (section(text, "uncapped, 1 node "), "one")):
        if not sec:
            continue
        head = sec.splitlines()[0]
        nodes = find(head, r"^uncapped, (\d+ nodes?) x (\d+) conns, (.*)$")
        desc = f"{nodes.group(1)} x {nodes.group(2)} conns, {nodes.group(3)}" if nodes else head
        raw = num(find(sec, r"^  raw libnfs reader\s+(\d+) MB/s"))
        mount = find(sec, r"^  shardfs mount\s+(\d+) MB/s.*\n.*\(daemon ([\d.]+)s \+ dd")
        label = f"cold shards, {desc}" if what == "all" else f"cold shards, {desc}"
        out.append(Row(label, "raw libnfs", raw, num(mount), "MB/s", num(mount, 2)))
        always = find(sec, r"^  mount, page_cache=always\s+(\d+) MB/s.*\n.*\(daemon ([\d.]+)s \+ dd")
        if always and what == "all":
            out.append(Row("  same, page_cache=always", "raw libnfs", raw, num(always), "MB/s",
                           num(always, 2)))
        floor = find(sec, r"^  FUSE floor\s+(\d+) MB/s.*machine ([\d.]+) CPU-s/GiB")
        if floor:
            out.append(Row("  FUSE floor (the same files from memory; the machine's CPU)", "", None,
                           num(floor), "MB/s", num(floor, 2)))
    return out


def rows_cache(text):
    """--cache: lru's cold epoch (against raw) and last epoch (local disk),
    pin's second epoch."""
    out = []
    disk = num(find(text, r"^  local disk \(same files\)\s+(\d+) MB/s"))
    raw = num(find(text, r"^  raw libnfs reader\s+(\d+) MB/s"))
    epoch_re = r"^  epoch (\d+):\s+(\d+) MB/s = .*?hit ratio ([\d.]+);.*?daemon ([\d.]+) CPU-s/GiB"
    lru = [m for m in re.finditer(epoch_re, section(text, "cache_policy=lru", "cache_policy=pin"), re.M)]
    pin = [m for m in re.finditer(epoch_re, section(text, "cache_policy=pin"), re.M)]
    if lru:
        m = lru[0]
        out.append(Row("--cache epoch 1, lru (cold, fills the cache)", "raw libnfs", raw,
                       float(m.group(2)), "MB/s", float(m.group(4))))
    if len(lru) > 1:
        m = lru[-1]
        out.append(Row(f"--cache epoch {m.group(1)}, lru, hit {m.group(3)}", "local disk", disk,
                       float(m.group(2)), "MB/s", float(m.group(4))))
    if len(pin) > 1:
        m = pin[-1]
        out.append(Row(f"--cache pin epoch {m.group(1)}, hit {m.group(3)} (cache = data / 2)",
                       "local disk", disk, float(m.group(2)), "MB/s", float(m.group(4))))
    if not out:
        out.append(Row("--cache", "", None, None, "MB/s"))
    return out


def rows_small_files(text):
    """--small-files: cold into an empty cache (against raw), warm on the
    same mount and remounted (local disk), the FUSE floor."""
    def rate(label):
        return find(text, r"^  " + re.escape(label) + r"\s+(\d+)\s+(\d+)  ")

    def cpu(label):
        return num(find(text, r"^    " + re.escape(label) + r": daemon (\d+) us CPU/file"))
    raw, disk = num(rate("raw libnfs")), num(rate("local disk"))
    head = find(text, r"^small files: (\d+) files")
    n = f" ({head.group(1)} files)" if head else ""
    out = []
    for label, base_name, base, what in (
            ("mount cold, empty cache_dir", "raw libnfs", raw, f"small files{n}, cold into an empty cache"),
            ("mount warm, same mount", "local disk", disk, "small files, warm, same mount"),
            ("mount warm, remounted", "local disk", disk, "small files, warm, remounted")):
        out.append(Row(what, base_name, base, num(rate(label)), "files/s", cpu(label), "us/file"))
    floor = find(text, r"^  FUSE floor \(.*?\): (\d+) files/s, daemon (\d+) us CPU/file")
    out.append(Row("  FUSE floor (the same tree from memory; its CPU)", "", None, num(floor),
                   "files/s", num(floor, 2), "us/file"))
    return out


def rows_passthrough(text):
    """--passthrough: warm shards (T readers) and records, the daemon's path
    and the kernel's, against local disk. A row: its label, MB/s, two
    spaces, its ratio or "(baseline)", the daemon's CPU-s/GiB."""
    rows = {}
    for line in text.splitlines():
        m = re.match(r"^  (\S.*?)\s+(\d+)  (?:\(baseline\)|\d+\.\d+)(.*)$", line)
        if not m:
            continue
        cpu = re.search(r"([\d.]+) CPU-s/GiB", m.group(3))
        rows[m.group(1)] = (float(m.group(2)), float(cpu.group(1)) if cpu else None)
    out = []
    shards = next((k.split(", ", 1)[1] for k in rows
                   if k.startswith("local disk, shards, ") and "reader (cat)" not in k), None)
    records = next((k.split(", ", 1)[1] for k in rows if k.startswith("local disk, records")), None)
    for what, key in ((f"warm {shards}", shards), (f"warm {records}", records)):
        if key is None:
            continue
        base = rows.get(f"local disk, {key}", (None, None))[0]
        short = "records" if key.startswith("records") else key
        for who, label in (("daemon path (passthrough=off)", "daemon (no passthrough)"),
                           ("passthrough", "passthrough")):
            v, c = rows.get(f"{label}, {short}", (None, None))
            out.append(Row(f"{what}, {who}", "local disk", base, v, "MB/s", c))
    if not out:
        out.append(Row("--passthrough", "", None, None, "MB/s"))
    return out


PARSERS = {"default": rows_default, "cache": rows_cache, "small-files": rows_small_files,
           "passthrough": rows_passthrough}


def fmt(v, unit=""):
    if v is None:
        return ""
    s = f"{v:,.0f}" if v >= 100 else f"{v:.2f}" if v < 10 else f"{v:.1f}"
    return f"{s} {unit}".strip()


def fmt_cpu(v):
    """A CPU figure: three decimals under 0.1 (passthrough's are that small)."""
    return f"{v:.3f}" if v < 0.1 else fmt(v)


def ratio(r):
    if r is None or r.val is None or not r.base:
        return None
    return r.val / r.base


def table(runs, outdir):
    """The markdown lines of the table, and the runs that did not finish."""
    groups, failed = {}, []
    for wl, where, daemon, logf, rc, secs in runs:
        try:
            with open(os.path.join(outdir, logf), errors="replace") as f:
                text = "\n" + f.read()
        except OSError:
            text = "\n"
        if rc != "0":
            why = "timed out or out of time" if rc in ("124", "137") else f"exit {rc}"
            failed.append(f"{wl} ({where}), {daemon}: {why} after {secs} s ({logf})")
        parse = PARSERS.get(wl)
        groups.setdefault((wl, where), {})[daemon] = parse(text) if parse else []
    lines = ["| workload | baseline | new | old | ratio new (old) | daemon CPU new (old) |",
             "|---|---|---|---|---|---|"]
    for (wl, where), by in groups.items():
        new = by.get(NEW)
        olds = [d for d in by if d != NEW]
        old = by.get(olds[0]) if olds else None
        ref = new or old or []
        place = "" if where == "none" else f" [cache on {where}]"
        for i, r in enumerate(ref):
            rn = new[i] if new and i < len(new) else None
            ro = old[i] if old and i < len(old) else None
            base = rn if rn and rn.base else ro
            bcell = f"{base.base_name} {fmt(base.base, base.unit)}" if base and base.base else ""
            rat_n, rat_o = ratio(rn), ratio(ro)
            rcell = fmt(rat_n) + (f" ({fmt(rat_o)})" if rat_o is not None else "")
            cn = rn.cpu if rn else None
            co = ro.cpu if ro else None
            ccell = ""
            if cn is not None or co is not None:
                unit = (rn or ro).cpu_unit
                ccell = (fmt_cpu(cn) if cn is not None else "-") + (
                    f" ({fmt_cpu(co)})" if co is not None else "") + f" {unit}"
            lines.append(f"| {r.label}{place} | {bcell} | {fmt(rn.val, r.unit) if rn else ''} | "
                         f"{fmt(ro.val, r.unit) if ro else ''} | {rcell} | {ccell} |")
    return lines, failed


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[1], newline="") as f:
        runs = [r for r in csv.reader(f, delimiter="\t") if len(r) == 6]
    lines, failed = table(runs, argv[2])
    daemons = sorted({r[2] for r in runs})
    first = None
    for r in runs:
        try:
            with open(os.path.join(argv[2], r[3]), errors="replace") as f:
                first = next((ln.strip() for ln in f if re.match(r"shardfs-bench: \d+ CPUs", ln)), None)
        except OSError:
            pass
        if first:
            break
    print(f"node-bench: daemons {', '.join(daemons)} (new: {NEW}); one run each, "
          f"--reps 1; MB = 1e6 bytes")
    if first:
        print(first)
    print()
    print("\n".join(lines))
    print()
    print("ratio: each daemon's rate over the baseline of its own run (the baseline shown is "
          "the new daemon's run's); daemon CPU: the serving process's CPU over the pass "
          "(the shards' FUSE floor: the whole machine's), per GiB read or per file; the FUSE "
          "floor rows: what a FUSE mount costs on this kernel before the daemon's own work.")
    if len(argv) > 3 and os.path.exists(argv[3]):
        with open(argv[3]) as f:
            for ln in f:
                if ln.strip():
                    print(f"- {ln.strip()}")
    for ln in failed:
        print(f"- not finished: {ln}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
