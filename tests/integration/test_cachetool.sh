#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# shardfs-cache against a real 4-node cluster: the per-dataset listing (two
# datasets and the export's root files, right byte counts, JSON and text),
# evicting one dataset on a live mount while a reader reads it (bytes equal,
# the other dataset stays cached and is served from the cache), evicting by
# a path of the mount, a directory and a file inside a dataset (their files
# only), names inside a dataset refused, purge; the Python module's cache
# calls on the live mount beside the tool's listing (cache_check.py); then
# on the unmounted cache_dir: list, evict, purge, and the refusal while a
# daemon holds it; bad arguments.
. "$(dirname "$0")/lib.sh"
sfs_require

TOOL=${SFS_CACHE_TOOL:-$SRC_ROOT/build/tools/shardfs-cache}
[ -x "$TOOL" ] || skip "shardfs-cache not built: $TOOL"
CACHE=$WORK/cache
MB=$((1 << 20))
mkdir -p "$EXPORT/shards" "$EXPORT/images"
for i in 0 1 2 3; do head -c $((64 * MB)) /dev/urandom >"$EXPORT/shards/s$i"; done
for i in $(seq 1 200); do head -c $((100000 + i)) /dev/urandom >"$EXPORT/images/img$i.jpg"; done
mkdir -p "$EXPORT/images/sub"
for i in $(seq 1 20); do head -c $((50000 + i)) /dev/urandom >"$EXPORT/images/sub/s$i.jpg"; done
head -c 5000 /dev/urandom >"$EXPORT/rootfile"
SHARD_BYTES=$((4 * 64 * MB))
SUB_BYTES=$(( (50000 * 20) + (20 * 21 / 2) ))
IMAGE_BYTES=$(( (100000 * 200) + (200 * 201 / 2) + SUB_BYTES ))
sfs_cluster_up 4

WARM=$SRC_ROOT/tools/cmd/shardfs-warm
# read_all: read every file through the mount, then warm them: a cold read
# caches what the cache disk keeps up with (chunks fetched ahead are not
# offered while the writes waiting hold half of prefetch_mem), and
# shardfs-warm completes the rest, so the listings below see every byte.
read_all() {
	find "$MNT/shards" "$MNT/images" "$MNT/rootfile" -type f -exec cat {} + >/dev/null
	"$WARM" -q "$MNT/shards" "$MNT/images" "$MNT/rootfile" >/dev/null
}
# images_exact [SUBDIR]: every file of images/ (or images/SUBDIR) byte-exact
images_exact() {
	local f
	for f in $(cd "$EXPORT" && find "images/${1:-}" -type f); do
		cmp -s "$EXPORT/$f" "$MNT/$f" || return 1
	done
}
# field DATASET KEY: one value of the JSON listing of TARGET ($LIST_TARGET)
LIST_TARGET=$MNT
field() {
	"$TOOL" --json list "$LIST_TARGET" | python3 -c '
import json, sys
d = {x["name"]: x for x in json.load(sys.stdin)["datasets"]}
v = d.get(sys.argv[1], {}).get(sys.argv[2], 0)
print(0 if v is None else v)' "$1" "$2"
}

# --- list on a live mount ----------------------------------------------------
# allow_other: another user reaches the mount, and is refused the cache.
sfs_mount "cache_dir=$CACHE,cache_size=2G,allow_other"
read_all
wait_idle
t0=$(date +%s%N)
"$TOOL" --json list "$MNT" >"$WORK/list.json"
rc=$?
diag "live list: $(( ($(date +%s%N) - t0) / 1000000 )) ms (tool start included)"
check "list --json on the mount exits 0 and parses" \
	bash -c "[ $rc = 0 ] && python3 -c 'import json,sys; json.load(open(sys.argv[1]))' '$WORK/list.json'"
check "/ifs/shards: $SHARD_BYTES bytes in 4 files ($(field /ifs/shards bytes) in $(field /ifs/shards files))" \
	[ "$(field /ifs/shards bytes)" = "$SHARD_BYTES" -a "$(field /ifs/shards files)" = 4 ]
check "/ifs/images: $IMAGE_BYTES bytes in 220 packed files ($(field /ifs/images bytes), $(field /ifs/images packed_files))" \
	[ "$(field /ifs/images bytes)" = "$IMAGE_BYTES" -a "$(field /ifs/images packed_files)" = 220 ]
check "/ifs (the files at the export's root): 5000 bytes" [ "$(field /ifs bytes)" = 5000 ]
"$TOOL" list "$MNT" >"$WORK/list.txt"
check "text list names both datasets and the capacity" \
	bash -c "grep -q '^/ifs/shards ' '$WORK/list.txt' && grep -q '^/ifs/images ' '$WORK/list.txt' && grep -q 'used of 2.0 GiB' '$WORK/list.txt'"
refused_user() {
	local out rc
	out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$TOOL" list "$MNT" 2>&1)
	rc=$?
	diag "$out"
	[ "$rc" = 1 ] && grep -q 'only root or the user running the mount' <<<"$out"
}
if command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$TOOL"; then
	check "another user is refused the cache of the mount (EPERM), in one line" refused_user
else
	diag "setpriv missing or $TOOL not reachable as uid 65534: user refusal not checked"
fi
drop_caches
find "$MNT/images" -type f -exec cat {} + >/dev/null
check "hit bytes per dataset: /ifs/images read from the cache ($(field /ifs/images hit_bytes))" \
	[ "$(field /ifs/images hit_bytes)" -ge "$IMAGE_BYTES" ]

# --- evict one dataset while a reader reads it ---------------------------------
# The reader signals once it has read 4 MiB and reads on, slowly; it holds at
# half the file until the eviction is done, so that however long a loaded
# machine takes to run the tool, the eviction happens mid-file and the rest
# is read after it.
drop_caches
rm -f "$WORK/started" "$WORK/evicted"
p0=$(counter shardfs_passthrough_opens_total)
python3 - "$MNT/shards/s0" "$EXPORT/shards/s0" "$WORK/started" "$WORK/evicted" >"$WORK/reader.out" 2>&1 <<'EOF' &
import os, sys, time
a, b = open(sys.argv[1], "rb", buffering=0), open(sys.argv[2], "rb")
n = 0
while True:
    x, y = a.read(1 << 20), b.read(1 << 20)
    if x != y:
        print("bytes differ in MiB", n >> 20)
        sys.exit(1)
    if not x:
        break
    n += len(x)
    if n == 4 << 20:
        open(sys.argv[3], "w").close()
    if n == 32 << 20:
        t = time.monotonic()
        while not os.path.exists(sys.argv[4]) and time.monotonic() - t < 120:
            time.sleep(0.05)
    time.sleep(0.02)
print("read", n)
EOF
reader=$!
wait_for 60 test -e "$WORK/started"
f0=$(fetched)
out=$("$TOOL" evict "$MNT" /ifs/shards 2>&1)
rc=$?
diag "$out"
check "evict /ifs/shards on the live mount exits 0, while a reader reads s0" \
	bash -c "[ $rc = 0 ] && [ -e '$WORK/started' ] && kill -0 $reader"
touch "$WORK/evicted"
check "the evict reports 4 files, $SHARD_BYTES bytes" grep -q "4 files, 256.0 MiB evicted" <<<"$out"
wait "$reader"
rc=$?
check "the reader got every byte right ($(cat "$WORK/reader.out"))" [ "$rc" = 0 ]
# Through the daemon, the reader's next reads miss the evicted version and
# are fetched; under passthrough the kernel reads the cache file it holds
# (the version stays whole until the last release), and nothing is fetched.
if pt_on; then
	check "s0's reader was a passthrough open ($p0 -> $(counter shardfs_passthrough_opens_total)) and read the version the kernel holds: nothing fetched ($f0 -> $(fetched))" \
		[ "$(counter shardfs_passthrough_opens_total)" = $((p0 + 1)) -a "$(fetched)" = "$f0" ]
else
	check "the rest of s0 came from NFS after the eviction ($f0 -> $(fetched))" [ "$(fetched)" -gt "$f0" ]
fi
check "/ifs/shards lists 0 bytes, /ifs/images all of its bytes" \
	[ "$(field /ifs/shards bytes)" = 0 -a "$(field /ifs/images bytes)" = "$IMAGE_BYTES" ]
drop_caches
f0=$(fetched)
h0=$(counter shardfs_cache_hit_bytes_total)
check "after the eviction /ifs/images reads byte-exact" images_exact
check "... served from the cache: nothing fetched ($f0 -> $(fetched)), hits grew" \
	[ "$(fetched)" = "$f0" -a "$(counter shardfs_cache_hit_bytes_total)" -gt "$h0" ]
check "an evicted shard reads byte-exact (refetched)" cmp -s "$MNT/shards/s1" "$EXPORT/shards/s1"

# --- evict by a path of the mount; paths inside a dataset; purge --------------
out=$("$TOOL" evict "$MNT" "$MNT/images/" 2>&1)
rc=$?
check "evict by the mount path $MNT/images: exit 0 ($out)" [ "$rc" = 0 ]
check "/ifs/images lists 0 bytes" [ "$(field /ifs/images bytes)" = 0 ]
# refused_inside ARG...: exit 1 and one line naming the dataset /ifs/shards
refused_inside() {
	local out rc
	out=$("$TOOL" evict "$MNT" "$@" 2>&1)
	rc=$?
	diag "$out"
	[ "$rc" = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "inside dataset '/ifs/shards'" <<<"$out"
}
check "a name inside a dataset is refused, one line naming the dataset" refused_inside /ifs/shards/sub
out=$("$TOOL" evict "$MNT" /ifs/nothing 2>&1)
rc=$?
check "a dataset nobody cached: exit 1 ($out)" \
	[ "$rc" = 1 -a "$out" = "shardfs-cache: '/ifs/nothing': no cached dataset is or is under it (see shardfs-cache list)" ]
drop_caches
read_all
wait_idle
check "re-read: cached again ($(field /ifs/shards bytes) B of shards, $(field /ifs/images bytes) of images)" \
	[ "$(field /ifs/shards bytes)" = "$SHARD_BYTES" -a "$(field /ifs/images bytes)" = "$IMAGE_BYTES" ]
check "xattr user.shardfs.key: 32 hex digits for a file" \
	bash -c "getfattr --only-values -n user.shardfs.key '$MNT/images/img1.jpg' 2>/dev/null | grep -qxE '[0-9a-f]{32}'"
out=$("$TOOL" evict "$MNT" "$MNT/images/sub" 2>&1)
rc=$?
# out_ok RC PATTERN OUT: exit 0 and OUT matches PATTERN
out_ok() { [ "$1" = 0 ] && grep -q -- "$2" <<<"$3"; }
check "evict a directory inside a dataset: its 20 files ($out)" out_ok "$rc" "(20 files under it): 20 files" "$out"
check "... /ifs/images lists $((IMAGE_BYTES - SUB_BYTES)) bytes ($(field /ifs/images bytes))" \
	[ "$(field /ifs/images bytes)" = $((IMAGE_BYTES - SUB_BYTES)) ]
out=$("$TOOL" evict "$MNT" "$MNT/shards/s2" 2>&1)
rc=$?
check "evict one file inside a dataset ($out)" out_ok "$rc" ": 1 files, 64.0 MiB" "$out"
check "... /ifs/shards lists 3 files" [ "$(field /ifs/shards files)" = 3 ]
drop_caches
f0=$(fetched)
top_images_exact() {
	local f
	for f in "$EXPORT"/images/*.jpg; do cmp -s "$f" "$MNT/images/${f##*/}" || return 1; done
}
check "the rest of /ifs/images reads byte-exact" top_images_exact
check "... from the cache ($f0 -> $(fetched))" [ "$(fetched)" = "$f0" ]
check "the evicted directory reads byte-exact" images_exact sub
check "... fetched again ($f0 -> $(fetched))" [ "$(fetched)" -ge $((f0 + SUB_BYTES)) ]
"$TOOL" purge "$MNT" >"$WORK/purge.out" 2>&1
rc=$?
check "purge on the live mount exits 0 ($(cat "$WORK/purge.out"))" [ "$rc" = 0 ]
check "after purge nothing is listed as cached, used 0" \
	bash -c "[ \"\$('$TOOL' --json list '$MNT' | python3 -c 'import json,sys; j=json.load(sys.stdin); print(sum(d[\"bytes\"] for d in j[\"datasets\"]), j[\"used_bytes\"])')\" = '0 0' ]"
drop_caches
check "after purge every file reads byte-exact" bash -c "cmp -s '$MNT/shards/s3' '$EXPORT/shards/s3' && cmp -s '$MNT/rootfile' '$EXPORT/rootfile'"

# --- the Python module: cache_list, cache_key, cache_evict_keys, cache_evict, purge --
# run_py PHASE: the TAP lines of tests/integration/cache_check.py as our own
run_py() {
	sfs_relay_tap env PYTHONPATH="$SRC_ROOT/tools/client/python" python3 \
		"$SRC_ROOT/tests/integration/cache_check.py" "$MNT" "$TOOL" "$1"
}
read_all
wait_idle
run_py list
run_py keys
run_py list
run_py evict
check "shardfs-cache lists neither /ifs/shards nor /ifs/images after the Python evictions" \
	bash -c "! '$TOOL' list '$MNT' | grep -qE '^/ifs/(shards|images) '"
run_py uid
run_py purge
drop_caches # the next reads reach the daemon (and fill its cache) again

# --- the cache_dir while mounted: refused ---------------------------------------
refused_busy() {
	local out rc
	out=$("$TOOL" list "$CACHE" 2>&1)
	rc=$?
	diag "$out"
	[ "$rc" = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q 'in use by another shardfs (pid [0-9]' <<<"$out"
}
check "offline list of a cache_dir a daemon holds: refused in one line, naming its pid" refused_busy
"$TOOL" purge "$CACHE" >/dev/null 2>&1
check "offline purge while mounted: refused (exit 1)" [ $? = 1 ]

# --- offline: list, evict, purge on the unmounted cache_dir -----------------------
read_all
wait_idle
sfs_umount
LIST_TARGET=$CACHE
check "offline list: /ifs/shards $SHARD_BYTES B, /ifs/images $IMAGE_BYTES B ($(field /ifs/shards bytes), $(field /ifs/images bytes))" \
	[ "$(field /ifs/shards bytes)" = "$SHARD_BYTES" -a "$(field /ifs/images bytes)" = "$IMAGE_BYTES" ]
check "offline list --json says mode offline" bash -c "'$TOOL' --json list '$CACHE' | grep -q '\"mode\": \"offline\"'"
out=$("$TOOL" evict "$CACHE" /ifs/images 2>&1)
check "offline evict /ifs/images: exit 0 ($out)" grep -q "220 files" <<<"$out"
check "offline list after it: images 0, shards kept" \
	[ "$(field /ifs/images bytes)" = 0 -a "$(field /ifs/shards bytes)" = "$SHARD_BYTES" ]
sfs_mount "cache_dir=$CACHE,cache_size=2G"
drop_caches
f0=$(fetched)
check "remounted: shards byte-exact" bash -c "cmp -s '$MNT/shards/s0' '$EXPORT/shards/s0' && cmp -s '$MNT/shards/s3' '$EXPORT/shards/s3'"
check "... from the cache ($f0 -> $(fetched))" [ "$(fetched)" = "$f0" ]
check "remounted: images byte-exact" images_exact
check "... fetched again: they were evicted ($f0 -> $(fetched))" [ "$(fetched)" -ge $((f0 + IMAGE_BYTES)) ]
wait_idle
sfs_umount
"$TOOL" purge "$CACHE" >"$WORK/purge.out" 2>&1
rc=$?
check "offline purge exits 0 ($(cat "$WORK/purge.out"))" [ "$rc" = 0 ]
check "offline list after purge: nothing cached" \
	[ "$(field /ifs/shards bytes)" = 0 -a "$(field /ifs/images bytes)" = 0 -a "$(field /ifs bytes)" = 0 ]
check "no object or segment file is left" \
	[ -z "$(find "$CACHE/objects" "$CACHE/segments" -type f)" ]

# --- bad arguments --------------------------------------------------------------
usage_err() {
	local out rc
	out=$("$TOOL" "$@" 2>&1)
	rc=$?
	[ "$rc" = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q '^shardfs-cache: ' <<<"$out"
}
check "no command: exit 2, one line" usage_err
check "unknown command: exit 2, one line" usage_err frobnicate "$CACHE"
check "unknown option: exit 2, one line" usage_err --bogus list "$CACHE"
check "list without TARGET: exit 2" usage_err list
check "evict without a dataset: exit 2" usage_err evict "$CACHE"
check "--json with purge: exit 2" usage_err --json purge "$CACHE"
check "a relative dataset name: exit 2" usage_err evict "$CACHE" shards
check "a missing TARGET: exit 2" usage_err list "$WORK/nope"
check "a TARGET that is neither a mount nor a cache: exit 2" usage_err list "$EXPORT"
check "--help exits 0" bash -c "'$TOOL' --help | grep -q '^usage: shardfs-cache'"

sfs_finish
