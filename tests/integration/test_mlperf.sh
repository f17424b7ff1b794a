#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# shardfs-bench --mlperf all --mlperf-smoke against its own 2-node cluster:
# each MLPerf Storage workload's smallest configuration (unet3d, resnet50,
# cosmoflow) read by the DLIO emulation for about a second per trial at 1
# and 2 accelerators, through real mounts (cold, warm, a data set twice the
# cache), a local copy and raw libnfs, the readers and the daemon in a memory
# cgroup. Checks the run and its arithmetic from the JSON it writes: every
# pass read the whole data set, the warm pass nothing from NFS and the cold
# one all of it, the epoch twice the cache some of each; each trial's AU,
# samples/s, bytes/s and N follow from its ranks' steps (known sleeps and
# read waits); every rank took the same steps of whole batches; the cgroup
# was charged and held its limit. Figures are not checked: no timing
# thresholds.
. "$(dirname "$0")/lib.sh"
sfs_require

BENCH=$SRC_ROOT/tools/bench/shardfs-bench
SMALLREAD=$(dirname "$(dirname "$SHARDFS")")/tools/shardfs-smallread
[ -x "$SMALLREAD" ] || skip "reader not built: $SMALLREAD"
[ -d /sys/fs/cgroup/memory ] || grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null ||
	skip "no memory cgroup"

mkdir -p "$WORK"
JSON=$WORK/mlperf.json
diag "shardfs-bench --mlperf all --mlperf-smoke (id $CID)"
python3 "$BENCH" --id "$CID" --nodes 2 --mlperf all --mlperf-smoke --no-prewarm \
	--mlperf-json "$JSON" --data-dir "$WORK/export" --cache-base "$WORK/base" \
	--shardfs "$SHARDFS" --smallread "$SMALLREAD" >"$WORK/out" 2>"$WORK/err"
rc=$?
check "the bench ran (exit $rc)" [ "$rc" = 0 ]
[ "$rc" = 0 ] || { sed 's/^/# /' "$WORK/err" | tail -20; }
sed 's/^/# /' "$WORK/out"
check "it printed N at the AU threshold for 3 sources of 3 workloads" \
	bash -c "[ \$(grep -c 'N at AU' '$WORK/out') = 9 ]"
check "no daemon logged an error or a warning" grep -q 'no errors, no warnings' "$WORK/out"

PYTHONPATH=$SRC_ROOT/tests/integration sfs_relay_tap python3 - "$JSON" <<'PY'
import json, math, sys
from tapcheck import ok, done

recs = json.load(open(sys.argv[1]))
close = lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
for wl in ("unet3d", "resnet50", "cosmoflow"):
    rs = [r for r in recs if r["workload"] == wl]
    cap = {r["source"]: r for r in rs if r["kind"] == "capacity"}
    ok(set(cap) == {"raw libnfs", "local copy", "mount cold, empty cache_dir",
                    "mount warm, remounted", "data set = 2 x cache, epoch 1",
                    "data set = 2 x cache, epoch 2"}, f"{wl}: the six capacity passes", cap.keys())
    ok(all(c["items"] == c["files"] and c["nbytes"] == c["bytes"] for c in cap.values()),
       f"{wl}: every capacity pass read the whole data set")
    cold, warm = cap["mount cold, empty cache_dir"], cap["mount warm, remounted"]
    ok(cold["nfs_bytes"] >= cold["bytes"],
       f"{wl}: cold, all of it from NFS ({cold['nfs_bytes']:.0f})")
    ok(warm["nfs_bytes"] == 0 and (warm["cache_hit_bytes"] > 0 or warm["passthrough_opens"] > 0),
       f"{wl}: warm, nothing from NFS, all from the cache "
       f"(hits {warm['cache_hit_bytes']:.0f}, passthrough opens {warm['passthrough_opens']:.0f})")
    e2 = cap["data set = 2 x cache, epoch 2"]
    ok(0 < e2["nfs_bytes"] < e2["bytes"]
       and (e2["cache_hit_bytes"] > 0 or e2["passthrough_opens"] > 0),
       f"{wl}: twice the cache, epoch 2 from both NFS ({e2['nfs_bytes']:.0f}) and the cache")
    for r in rs:
        if r["kind"] == "capacity":
            mbps = r["nbytes"] / r["seconds"]
            ok(close(r["n"], mbps / (r["au_threshold"] * r["demand_bytes_s"])),
               f"{wl}: {r['source']}: N = MB/s / (AU threshold x demand)")
    paced = [r for r in rs if r["kind"] == "paced"]
    ok({(r["source"], r["n"]) for r in paced} == {(s, n) for s in ("local copy", "mount warm",
                                                                 "mount cold") for n in (1, 2)},
       f"{wl}: paced trials of 3 sources at N = 1, 2")
    for r in paced:
        what = f"{wl}: {r['source']} N={r['n']}"
        c = r["compute_s"]
        for t in r["trials"]:
            ranks = t["ranks"]
            steps = {len(k["proc"]) for k in ranks}
            ok(len(ranks) == r["n"] and len(steps) == 1 and min(steps) > t["exclude"] >= 1,
               f"{what}: {r['n']} ranks, the same steps each ({steps})")
            ok(all(s >= c - 1e-6 for k in ranks for s in k["sleep"]) and
               all(abs(p - ld - s) < 1e-6 for k in ranks
                   for p, ld, s in zip(k["proc"], k["load"], k["sleep"])),
               f"{what}: each step waited, then slept the compute time")
            ok(all(n == r["batch"] for k in ranks for n in k["samples"]),
               f"{what}: whole batches of {r['batch']}")
            x = t["exclude"]
            win = [k["wall_s"] - sum(k["proc"][:x]) for k in ranks]
            au = sum((len(k["proc"]) - x) * c / w for k, w in zip(ranks, win)) / len(ranks)
            bs = sum(sum(k["bytes"][x:]) / w for k, w in zip(ranks, win))
            ss = sum(sum(k["samples"][x:]) / w for k, w in zip(ranks, win))
            f = t["figures"]
            ok(close(f["au"], au) and close(f["bytes_s"], bs) and close(f["samples_s"], ss),
               f"{what}: AU {au:.3f}, samples/s and bytes/s from the steps after the warm-up ({x})")
            ok(close(f["au"], f["samples_s"] * c / (r["batch"] * r["n"])),
               f"{what}: AU = samples/s x compute per batch / (batch x N)")
            ok(t["bytes_read"] >= sum(sum(k["bytes"]) for k in ranks),
               f"{what}: the readers read at least what the steps consumed")
            peak = t["cgroup_peak_bytes"]
            ok(peak is None or 0 < peak <= r["mem_limit_bytes"],
               f"{what}: the client's cgroup was charged {peak} bytes, within its limit")
    for e in (r for r in rs if r["kind"] == "estimate"):
        mine = [r for r in paced if r["source"] == e["source"]]
        best = max(mine, key=lambda r: r["mean"]["bytes_s"])
        ok(close(e["bytes_s"], best["mean"]["bytes_s"]) and
           close(e["n"], e["bytes_s"] / (e["au_threshold"] * e["demand_bytes_s"])) and
           e["lower_bound"] == all(r["mean"]["au"] >= r["au_threshold"] for r in mine),
           f"{wl}: {e['source']}: N {e['n']:.2f} from its highest bytes/s")
done()
PY
sfs_finish
