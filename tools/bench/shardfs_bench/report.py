# SPDX-License-Identifier: Apache-2.0
"""Passes into rows: medians and pass lists, CPU per GiB and per item, the
per-node balance and the stats deltas (FUSE and NFS calls per item), the whole
machine's CPU per item and the best ratio to raw a FUSE mount can reach, and
what the daemons logged.

Does not measure. Threading: pure functions.
"""

import re
import statistics

from .common import MiB


def fmt_pass_list(ps):
    return "[" + " ".join(f"{p.mbps:.0f}" for p in ps) + "]" if len(ps) > 1 else ""


def median_mbps(ps):
    return statistics.median(p.mbps for p in ps)


def cpu_note(ps):
    gib = sum(p.nbytes for p in ps) / (1 << 30)
    cl = sum(p.client_cpu for p in ps) / gib
    sv = sum(p.server_cpu for p in ps) / gib
    dm = sum(p.daemon_cpu for p in ps) / gib
    busy = sum(p.busy for p in ps)
    avail = sum(p.avail for p in ps)
    other = (busy - sum(p.client_cpu + p.server_cpu for p in ps)) / gib
    split = f" (daemon {dm:.2f}s + dd {cl - dm:.2f}s)" if dm else ""
    return (f"cpu/GiB: client {cl:.2f}s{split}, ganesha {sv:.2f}s, unattributed {other:.2f}s; "
            f"machine {100 * busy / avail:.0f}% busy")


def stat_delta(s0, s1, key):
    return s1.get(key, 0.0) - s0.get(key, 0.0)


def mount_detail(s0, s1, hosts):
    lines = []
    node_bytes = [stat_delta(s0, s1, f'shardfs_node_read_bytes_total{{node="{h}"}}') for h in hosts]
    node_reqs = [stat_delta(s0, s1, f'shardfs_node_read_requests_total{{node="{h}"}}') for h in hosts]
    tot = sum(node_bytes)
    if len(hosts) > 1:
        parts = []
        for h, b in zip(hosts, node_bytes):
            parts.append(f"{h} {b / MiB:.0f} MiB ({100 * b / tot if tot else 0:.1f}%)")
        lines.append("per-node bytes: " + ", ".join(parts))
        if tot:
            mx = max(node_bytes) / (tot / len(hosts))
            mn = min(node_bytes) / (tot / len(hosts))
            lines.append(f"node balance: max {mx:.2f}x / min {mn:.2f}x of the mean")
    freq = stat_delta(s0, s1, 'shardfs_fuse_requests_total{op="read"}')
    fbytes = stat_delta(s0, s1, "shardfs_fuse_read_bytes_total")
    nreq = sum(node_reqs)
    fetched = stat_delta(s0, s1, "shardfs_prefetch_fetched_bytes_total")
    wasted = stat_delta(s0, s1, "shardfs_prefetch_wasted_chunks_total")
    undelivered = sum(stat_delta(s0, s1, f'shardfs_prefetch_undelivered_bytes_total{{cause="{c}"}}')
                      for c in ("readahead_unread", "chunk_rest"))
    s = []
    if freq:
        s.append(f"FUSE reads {freq:.0f} x avg {fbytes / freq / 1024:.0f} KiB")
    if nreq:
        s.append(f"NFS reads {nreq:.0f} x avg {tot / nreq / 1024:.0f} KiB")
    if fbytes and fetched:
        s.append(f"fetched/delivered {fetched / fbytes:.2f}")
    if wasted:
        s.append(f"wasted chunks {wasted:.0f}")
    if undelivered:
        s.append(f"fetched and not delivered {undelivered / MiB:.1f} MiB")
    if s:
        lines.append(", ".join(s))
    errs = sum(stat_delta(s0, s1, f'shardfs_node_errors_total{{node="{h}"}}') for h in hosts)
    reiss = sum(stat_delta(s0, s1, f'shardfs_node_reissued_total{{node="{h}"}}') for h in hosts)
    if errs or reiss:
        lines.append(f"NFS errors {errs:.0f}, reissued {reiss:.0f}")
    return lines


def row(label, ps, tail=""):
    return f"  {label:<28}{median_mbps(ps):7.0f} MB/s   {tail}"


def counts_per_item(p, n, what):
    """The daemon's context switches and page faults per item, or ''."""
    if not p.counts:
        return ""
    return (f"{p.counts[0] / n:.1f} context switches and {p.counts[1] / n:.1f} page faults "
            f"per {what}")


def family_sum(delta, name):
    """Sum of a counter family's samples (all label sets)."""
    return sum(v for k, v in delta.items() if k == name or k.startswith(name + "{"))


def nfs_calls(delta):
    """NFS requests by kind from the stats deltas: per-op counters where the
    daemon has them (any shardfs_node_/origin_/nfs_ family with an op label),
    else the per-node kinds (shardfs_node_KIND_requests_total)."""
    per_op, per_kind = {}, {}
    for k, v in delta.items():
        m = re.match(r'shardfs_(?:node|origin|nfs)_\w*_total\{.*\bop="([^"]+)"', k)
        if m:
            per_op[m.group(1)] = per_op.get(m.group(1), 0.0) + v
            continue
        m = re.match(r"shardfs_node_(\w+)_requests_total\{", k)
        if m:
            per_kind[m.group(1)] = per_kind.get(m.group(1), 0.0) + v
    return per_op or per_kind


def fuse_calls(delta):
    out = {}
    for k, v in delta.items():
        m = re.match(r'shardfs_fuse_requests_total\{op="([^"]+)"\}', k)
        if m and v:
            out[m.group(1)] = v
    return out


def per_item(counts, n):
    return " ".join(f"{k} {v / n:.2f}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
                    if v / n >= 0.005) or "none"


def fmt_mib(b):
    return "?" if b is None else f"{b / MiB:.0f} MiB"


def ceiling_line(raw, floor, mount, n, what):
    """The best ratio to raw a FUSE mount can reach on this machine: a mount
    does raw's NFS client work (in the daemon) and makes the servers do at
    least raw's work (checked against the mount pass), plus at least the
    FUSE floor's, so where raw keeps every CPU busy, a mount's rate is at
    most raw's CPU per item over raw's plus the floor's."""
    raw_m, floor_m = raw.busy[0] / n, floor.busy[0] / n
    why_not = ""
    if raw.busy[0] < 0.9 * raw.busy[1]:
        why_not = (f"raw left {100 - 100 * raw.busy[0] / raw.busy[1]:.0f}% of the CPUs idle: "
                   f"it was not CPU-bound")
    elif (mount.server_cpu is None or raw.server_cpu is None
          or mount.server_cpu < raw.server_cpu):
        why_not = "the mount's reads cost the NFS servers less than raw's"
    return (f"    a FUSE mount's best here, with every CPU busy: raw's {1e6 * raw_m:.0f} us per "
            f"{what} (its NFS client work moves into the daemon; the servers' work stays) plus "
            f"the floor's {1e6 * floor_m:.0f} = {raw_m / (raw_m + floor_m):.2f} x raw"
            + (f" (but {why_not}, so this is no bound)" if why_not else ""))


def machine_cpu_lines(passes, n, what, unit):
    """CPU of the whole machine per item over each pass (all CPUs' busy time:
    readers, daemon, NFS servers, kernel), and whose it was. On a machine
    where the servers share the cores, this is what a pass's rate is made of
    once the CPUs are saturated."""
    out = [f"  CPU per {what}, whole machine (busy time of all CPUs over the pass / {what}s; "
           f"the NFS servers share these cores):"]
    for label, p in passes:
        if not p or not p.busy:
            continue
        parts = []
        if p.server_cpu is not None:
            parts.append(f"NFS servers {1e6 * p.server_cpu / n:.0f}")
        parts.append(f"reader {1e6 * p.reader_cpu / n:.0f}")
        if p.daemon_cpu is not None:
            parts.append(f"daemon {1e6 * p.daemon_cpu / n:.0f}")
        out.append(f"    {label:<28}{1e6 * p.busy[0] / n:5.0f} us/{unit} at "
                   f"{100 * p.busy[0] / max(p.busy[1], 1e-9):3.0f}% busy ({', '.join(parts)})")
    return out


def daemon_log_lines(logs):
    """What the daemons logged at warning or error level, per run."""
    bad = [(label, lines) for label, lines in logs if lines]
    if not bad:
        return ["  daemon logs (each run's daemon in the foreground, its stderr kept): "
                "no errors, no warnings"]
    out = ["  daemon logs, errors and warnings (each run's daemon in the foreground):"]
    for label, lines in bad:
        out.append(f"    {label}: {len(lines)} lines; the first: {lines[0]}")
        out.extend(f"      {ln}" for ln in lines[1:3])
    return out
