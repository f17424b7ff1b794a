#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The cache's default policy (cache_policy=auto) against a real 4-node
# cluster, from its counters (no timings): a dataset twice the cache keeps a
# stable half and writes nothing in epoch 2; a dataset read after another
# takes its space once read again; a scan between two epochs of a dataset
# that fits evicts nothing of it; two datasets read at once share the cache
# without churn; a dataset that fits is cached whole; a warm-up is no
# scan; a cache filled under auto serves under lru. Datasets are top-level
# folders; page caches are dropped before every epoch.
. "$(dirname "$0")/lib.sh"
sfs_require

MB=$((1 << 20))
CAP_MB=64 FILE_MB=2
CACHE=$WORK/cache
WARM=$SRC_ROOT/tools/cmd/shardfs-warm
# dataset NAME FILES: FILES files of FILE_MB MiB in EXPORT/NAME
dataset() {
	mkdir -p "$EXPORT/$1"
	for i in $(seq -w 1 "$2"); do head -c $((FILE_MB * MB)) /dev/urandom >"$EXPORT/$1/f$i"; done
}
dataset big 64  # 2 x the cache
dataset a 24    # 0.75
dataset b 24
dataset j 19    # 0.6
dataset p 24
dataset q 24
dataset fit 16  # 0.5
dataset w 8
sfs_cluster_up 4

# A dataset's counter: ds_val METRIC DATASET
ds_val() { local v; v=$(stat_value "$1{dataset=\"/ifs/$2\"}"); echo "${v:-0}"; }
# epoch DATASET...: each dataset read whole in a shuffled order, 4 readers
# each, all at once, byte-exact; page caches dropped first.
epoch() {
	drop_caches
	local d pids=() bad=0
	for d in "$@"; do
		(cd "$EXPORT/$d" && ls | shuf) | xargs -P 4 -I{} cmp -s "$MNT/$d/{}" "$EXPORT/$d/{}" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || bad=1; done
	wait_idle
	return $bad
}
# snap DATASET: remember its hit, miss and admitted bytes; then
# hit_share DATASET (in millionths) and admitted DATASET (bytes) since.
declare -A H0 M0 W0
snap() { H0[$1]=$(ds_val shardfs_cache_dataset_hit_bytes_total "$1"); M0[$1]=$(ds_val shardfs_cache_dataset_miss_bytes_total "$1"); W0[$1]=$(ds_val shardfs_cache_dataset_admitted_bytes_total "$1"); }
hit_ppm() {
	local h=$(($(ds_val shardfs_cache_dataset_hit_bytes_total "$1") - ${H0[$1]}))
	local m=$(($(ds_val shardfs_cache_dataset_miss_bytes_total "$1") - ${M0[$1]}))
	echo $((h + m ? h * 1000000 / (h + m) : 0))
}
admitted() { echo $(($(ds_val shardfs_cache_dataset_admitted_bytes_total "$1") - ${W0[$1]})); }
# not_reading DATASET: it is out of the window in which it counts for the
# shares (the daemon's own clock decides, so a slow machine cannot race it).
not_reading() { [ "$(ds_val shardfs_cache_dataset_reading "$1")" = 0 ]; }
size_of() { echo $(($(ls "$EXPORT/$1" | wc -l) * FILE_MB * MB)); }
# The readers' window (datasets read within it count for the shares) is
# cache_idle / 20: 6 s, so that readers of datasets read at once that a
# busy machine holds up for a second or two still count as reading.
IDLE=120
mount_auto() { rm -rf "$CACHE"; sfs_mount "cache_dir=$CACHE,cache_size=${CAP_MB}M,cache_idle=$IDLE${1:+,$1}"; }

# --- 1: a dataset of twice the cache ------------------------------------------
mount_auto
check "the default policy is auto" [ "$(stat_value 'shardfs_cache_policy_info{policy="auto"}')" = 1 ]
check "big, epoch 1: byte-exact" epoch big
used=$(counter shardfs_cache_used_bytes)
check "epoch 1 filled the cache ($((used / MB)) MiB of $CAP_MB)" [ "$used" -ge $(((CAP_MB - 2 * FILE_MB) * MB)) ]
w1=$(counter shardfs_cache_write_bytes_total) e1=$(counter shardfs_cache_evicted_bytes_total)
snap big
check "big, epoch 2: byte-exact" epoch big
ppm=$(hit_ppm big) adm=$(admitted big)
# cache/dataset = 0.5: at least 0.95 of it
check "epoch 2 served $((ppm / 10000))% from the cache (>= 47.5%)" [ "$ppm" -ge 475000 ]
check "epoch 2 admitted $((adm / MB)) MiB, wrote $((($(counter shardfs_cache_write_bytes_total) - w1) / MB)) MiB (<= 10% of the dataset), evicted nothing" \
	[ "$adm" -le $(($(size_of big) / 10)) -a "$(counter shardfs_cache_evicted_bytes_total)" = "$e1" ]
check "its refusals are counted as full" [ "$(stat_value 'shardfs_cache_dataset_refused_bytes_total{dataset="/ifs/big",reason="full"}')" -gt 0 ]
TOOL=${SFS_CACHE_TOOL:-$SRC_ROOT/build/tools/shardfs-cache}
check "shardfs-cache list shows big's bytes admitted and refused as full" \
	/usr/bin/python3 -c '
import json, subprocess, sys
j = json.loads(subprocess.run([sys.argv[1], "--json", "list", sys.argv[2]], capture_output=True, check=True).stdout)
d = [d for d in j["datasets"] if d["name"] == "/ifs/big"][0]
assert d["admitted_bytes"] >= 60 << 20 and d["refused_bytes"]["full"] > 0, d
' "$TOOL" "$MNT"
"$TOOL" list "$MNT" | while IFS= read -r line; do diag "$line"; done
# (hits: the daemon's, and the files wholly cached that passthrough opened)
check "the unlabelled totals: hits and misses of epoch 2 add up" \
	[ "$(from_cache)" -gt 0 -a "$(counter shardfs_cache_miss_bytes_total)" -gt 0 ]
sfs_umount

# --- 2: B after A (0.75 of the cache each) --------------------------------------
mount_auto
epoch a && epoch a
check "B, epoch 1: byte-exact" epoch b
check "B's first pass takes only free space (refused as a scan)" \
	[ "$(stat_value 'shardfs_cache_dataset_refused_bytes_total{dataset="/ifs/b",reason="scan"}')" -gt 0 ]
# A is no longer being read (out of the window in which it counts for the
# shares): the state the next epochs mean, waited for, not slept for.
check "A leaves the readers' window" wait_for 60 not_reading a
check "B, epoch 2: byte-exact" epoch b
check "B counts as read again" [ "$(ds_val shardfs_cache_dataset_reused b)" = 1 ]
snap b
check "B, epoch 3: byte-exact" epoch b
ppm=$(hit_ppm b)
check "B's epoch 3 served $((ppm / 10000))% from the cache (>= 95%)" [ "$ppm" -ge 950000 ]
sfs_umount

# --- 3: a scan between two epochs of J (0.6) ------------------------------------
mount_auto
epoch j && epoch j
snap j
check "the scan (a cat of twice the cache): byte-exact" bash -c "cat '$MNT'/big/* | cmp -s - <(cat '$EXPORT'/big/*)"
wait_idle
check "the scan was refused as a scan" [ "$(stat_value 'shardfs_cache_dataset_refused_bytes_total{dataset="/ifs/big",reason="scan"}')" -gt 0 ]
check "J, after the scan: byte-exact" epoch j
ppm=$(hit_ppm j)
check "J after the scan served $((ppm / 10000))% from the cache (>= 95%)" [ "$ppm" -ge 950000 ]
# A warm-up is no scan: w is admitted though j was read within cache_idle,
# and takes the scan's space, not J's. The scan must be over first: while
# it is still in the readers' window (read within cache_idle/20), big, J
# and w each count for an equal share, and J, holding more than its share,
# rightly gives way to w. On a machine where J's epoch takes less than that
# window, the warm-up started inside it (so J lost a quarter of its bytes).
check "the scan leaves the readers' window" wait_for 60 not_reading big
jb=$(ds_val shardfs_cache_dataset_bytes j)
"$WARM" -q "$MNT/w" >/dev/null 2>&1
wait_idle
diag "after the warm-up: J $(($(ds_val shardfs_cache_dataset_bytes j) / MB)) MiB, the scan $(($(ds_val shardfs_cache_dataset_bytes big) / MB)) MiB, w $(($(ds_val shardfs_cache_dataset_bytes w) / MB)) MiB"
check "the warm-up took nothing of J" [ "$(ds_val shardfs_cache_dataset_bytes j)" = "$jb" ]
check "a warm-up of w is cached ($(($(ds_val shardfs_cache_dataset_bytes w) / MB)) MiB)" \
	[ "$(ds_val shardfs_cache_dataset_bytes w)" -ge $(($(size_of w) * 9 / 10)) ]
sfs_umount
# The same cache under lru: nothing lost, J still served from it.
sfs_mount "cache_dir=$CACHE,cache_size=${CAP_MB}M,cache_policy=lru"
check "remounted under lru: the policy is lru" [ "$(stat_value 'shardfs_cache_policy_info{policy="lru"}')" = 1 ]
snap j
check "J under lru: byte-exact" epoch j
ppm=$(hit_ppm j)
check "J under lru, all from the cache auto filled: $((ppm / 10000))%" [ "$ppm" = 1000000 ]
sfs_umount

# --- 4: P and Q at once (0.75 each) --------------------------------------------
mount_auto
epoch p q
worst=1000000 adm_max=0
for e in 2 3; do
	snap p; snap q
	check "P and Q, epoch $e: byte-exact" epoch p q
	for d in p q; do
		ppm=$(hit_ppm "$d") adm=$(admitted "$d")
		diag "epoch $e, $d: $((ppm / 10000))% from the cache, $((adm / MB)) MiB admitted"
		[ "$ppm" -lt "$worst" ] && worst=$ppm
		[ "$adm" -gt "$adm_max" ] && adm_max=$adm
	done
done
# each: at least 0.9 x (cache / 2) / its dataset = 0.9 x 32 / 48 = 60%
check "shared: every epoch of P and Q at least 60% from the cache (worst $((worst / 10000))%)" [ "$worst" -ge 600000 ]
check "shared: at most 10% of a dataset admitted per epoch (most $((adm_max / MB)) MiB)" \
	[ "$adm_max" -le $(($(size_of p) / 10)) ]
sfs_umount

# --- 5: a dataset that fits ------------------------------------------------------
mount_auto
epoch fit
snap fit
check "fit, epoch 2: byte-exact" epoch fit
ppm=$(hit_ppm fit)
check "fit, epoch 2: $((ppm / 10000))% from the cache (>= 99%)" [ "$ppm" -ge 990000 ]
check "prometheus_client parses the stats file, the dataset families included" \
	/usr/bin/python3 -c '
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
for n in ("shardfs_cache_dataset_bytes", "shardfs_cache_dataset_hit_bytes", "shardfs_cache_dataset_refused_bytes",
          "shardfs_cache_dataset_window_hit_ratio", "shardfs_cache_policy_info", "shardfs_memory_budget_bytes",
          "shardfs_cache_hit_bytes", "shardfs_cache_miss_bytes", "shardfs_cache_write_bytes"):
    assert n in fams, n
' "$MNT/.shardfs/stats"
sfs_umount
sfs_finish
