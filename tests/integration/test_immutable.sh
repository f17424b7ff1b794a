#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# -o immutable against a real 2-node cluster: a second epoch without NFS
# metadata calls, a SIGKILL and a remount with every node down (listing,
# cached bytes, EIO for what is not cached, nodes back), a remount with nodes
# up, a corrupted and a truncated namespace log, another cluster's export.
. "$(dirname "$0")/lib.sh"
sfs_require

CACHE=$WORK/cache
TIMEO_DS=10 RETRANS=2
OPTS="immutable,cache_dir=$CACHE,timeo=$TIMEO_DS,retrans=$RETRANS"
N_DIRS=30 N_FILES=100
gen() { # gen DIR SEED: N_DIRS x N_FILES small files, plus cold/never-read
	python3 - "$1" "$2" "$N_DIRS" "$N_FILES" <<'PY'
import os, random, sys
root, seed, nd, nf = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
r = random.Random(seed)
for d in range(nd):
    os.makedirs(f"{root}/d{d:02}", exist_ok=True)
    for f in range(nf):
        with open(f"{root}/d{d:02}/img{f:04}.jpg", "wb") as fh:
            fh.write(r.randbytes(r.randint(2, 6000)))  # 1-byte files: EIO, a bug outside this test
os.makedirs(f"{root}/cold", exist_ok=True)
with open(f"{root}/cold/never-read.bin", "wb") as fh:
    fh.write(r.randbytes(3 << 20))
PY
}
gen "$EXPORT" 1
sfs_cluster_up 2

# NFS metadata calls so far for names and attributes (lookup, getattr,
# readdir) over all nodes; statfs (find asks for it) is answered once a mount.
meta() { awk '/^shardfs_node_metadata_calls_total\{.*kind="(lookup|getattr|readdir)"/ { s += $2 } END { print s + 0 }' "$MNT/.shardfs/stats"; }
# the whole tree but cold/: names and bytes exact
warm_exact() {
	diff -rq -x cold "$EXPORT" "$MNT" >"$WORK/diff.out" 2>&1 && return 0
	diag "$(head -3 "$WORK/diff.out")"
	return 1
}
listing() { (cd "$1" && find . -printf '%P %y %s\n' | sort); }
same_listing() { diff <(listing "$EXPORT") <(listing "$MNT") >"$WORK/list.diff"; }
kill_daemon() {
	daemon_kill
	umount -l "$MNT" 2>/dev/null
	for _ in $(seq 50); do pgrep -f "shardfs .* $MNT( |\$)" >/dev/null || break; sleep 0.1; done
}
# the metadata calls made, by node and kind (non-zero ones)
kinds() { grep -E '^shardfs_node_metadata_calls_total' "$MNT/.shardfs/stats" | grep -v ' 0$' | sed 's/^/# /'; }
NS_LOG() { ls "$CACHE"/namespace/*.log; }
# ns_flushed: every name recorded so far is in the log file (the flusher
# writes about every second; its gauge counts what is written or pending).
ns_flushed() { [ "$(stat -c %s "$(NS_LOG)")" = "$(stat_value shardfs_namespace_disk_bytes)" ]; }

# --- epochs ---------------------------------------------------------------
sfs_mount "$OPTS"
check "immutable is on" [ "$(stat_value shardfs_immutable)" = 1 ]
drop_caches
check "epoch 1: every file byte-exact" warm_exact
check "epoch 1: the listing is exact" same_listing
m1=$(meta)
diag "epoch 1: $m1 NFS metadata calls for $((N_DIRS * N_FILES)) files"
wait_idle
drop_caches
check "epoch 2: every file byte-exact" warm_exact
check "epoch 2: the listing is exact" same_listing
m2=$(meta)
check "epoch 2 after drop_caches: 0 NFS metadata calls ($m1 -> $m2)" [ "$m1" = "$m2" ]
kinds
entries=$(stat_value shardfs_namespace_entries)
disk=$(stat_value shardfs_namespace_disk_bytes)
mem=$(stat_value shardfs_namespace_memory_bytes)
check "namespace holds every name ($entries)" [ "$entries" -ge $((N_DIRS * N_FILES + N_DIRS)) ]
diag "namespace: $((disk / entries)) bytes/name on disk, $((mem / entries)) bytes/name in memory"
check "namespace: < 200 bytes per name on disk" [ $((disk / entries)) -lt 200 ]
check "metadata calls by kind are counted" \
	[ "$(awk '/^shardfs_node_metadata_calls_total\{.*kind="readdir"/ { s += $2 } END { print s + 0 }' "$MNT/.shardfs/stats")" -gt 0 ]
# What the SIGKILL below leaves is what the daemon wrote: wait for the
# cache writes of the epochs and
# for the flusher to have written every name (about a second; longer on a
# loaded machine).
wait_idle || diag "cache writes still queued: $(stat_value shardfs_cache_write_queue_bytes) bytes"
check "the namespace log on disk holds every name recorded" wait_for 30 ns_flushed

# --- SIGKILL, then a remount with every node down -------------------------
kill_daemon
"$CLUSTER" kill "$CID" all >/dev/null
t0=$(date +%s.%N)
sfs_mount "$OPTS"
diag "mounted with no node in $(python3 -c "print(round($(date +%s.%N) - $t0, 2))")s"
check "no node: logged once that it serves from the cache" \
	[ "$(grep -c 'no node answers: serving' "$WORK/daemon.log")" = 1 ]
check "no node: serving-from-cache gauge is 1" [ "$(stat_value shardfs_serving_from_cache)" = 1 ]
check "no node: find lists every file seen before" same_listing
[ -s "$WORK/list.diff" ] && diag "$(head -5 "$WORK/list.diff")"
drop_caches
check "no node: every cached file reads byte-exact" warm_exact
# One read (direct: no kernel readahead in front of it), then a plain cat.
t0=$(date +%s.%N)
out=$(dd if="$MNT/cold/never-read.bin" of=/dev/null bs=1M count=1 iflag=direct 2>&1)
rc=$?
el=$(python3 -c "print(round($(date +%s.%N) - $t0, 2))")
check "no node: an uncached file fails with EIO ($(grep -o 'Input/output error' <<<"$out"))" \
	bash -c "[ $rc != 0 ] && grep -q 'Input/output error' <<<'$out'"
# The bound is the contract (timeo x retrans) plus $SLACK s for a loaded
# machine: still far below a read that waits for a node for good.
check "no node: ... after ${el}s (timeo x retrans = $((TIMEO_DS * RETRANS / 10))s, +${SLACK}s)" \
	python3 -c "import sys; sys.exit(not $el <= $TIMEO_DS * $RETRANS / 10 + $SLACK)"
t0=$(date +%s.%N)
cat "$MNT/cold/never-read.bin" >/dev/null 2>&1
rc=$?
diag "cat of it: rc $rc after $(python3 -c "print(round($(date +%s.%N) - $t0, 2))")s (the kernel may retry a failed buffered read once)"
"$CLUSTER" revive "$CID" all >/dev/null 2>&1
# The nodes reconnect after a back-off; a read is tried until it works.
check "nodes revived: reads resume, byte-exact" \
	retry_for 60 cmp -s "$MNT/cold/never-read.bin" "$EXPORT/cold/never-read.bin"
serving_nodes() { [ "$(stat_value shardfs_serving_from_cache)" = 0 ]; }
check "nodes revived: the gauge is 0" wait_for 30 serving_nodes
wait_idle
sfs_umount

# --- a remount with nodes up: listing and stat cost nothing ----------------
sfs_mount "$OPTS"
drop_caches
check "remount: the listing is exact" same_listing
check "remount: every file byte-exact" warm_exact
check "remount: listing and reading the seen files cost 0 NFS metadata calls ($(meta))" [ "$(meta)" = 0 ]
kinds
sfs_umount

# --- a corrupted namespace log: detected, rebuilt from NFS ----------------
size=$(stat -c %s "$(NS_LOG)")
python3 - "$(NS_LOG)" <<'PY'
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    data = f.read()
    at = data.find(b"img0050.jpg", len(data) // 3)  # a name: a flip would rename a file
    f.seek(at + 4); f.write(b"9")
PY
sfs_mount "$OPTS"
check "corrupted log: detected (dropped $(stat_value shardfs_namespace_discarded_bytes) of $size bytes)" \
	[ "$(stat_value shardfs_namespace_discarded_bytes)" -gt 0 ]
drop_caches
check "corrupted log: names and sizes exact (never a wrong one)" same_listing
check "corrupted log: bytes exact" warm_exact
check "corrupted log: rebuilt from NFS ($(meta) metadata calls)" [ "$(meta)" -gt 0 ]
sleep 1.5
sfs_umount
sfs_mount "$OPTS"
drop_caches
check "after the rebuild: listing exact" same_listing
check "after the rebuild: 0 metadata calls ($(meta))" [ "$(meta)" = 0 ]
kinds
sfs_umount

# --- a truncated log ----------------------------------------------------------
truncate -s $(( $(stat -c %s "$(NS_LOG)") / 2 + 7 )) "$(NS_LOG)"
sfs_mount "$OPTS"
drop_caches
check "truncated log: names and sizes exact" same_listing
check "truncated log: bytes exact" warm_exact
sfs_umount

# --- another cluster's export under the same path and addresses ---------------
"$CLUSTER" stop "$CID" >/dev/null 2>&1
EXPORT=$WORK/export2
gen "$EXPORT" 2
sfs_cluster_up 2
sfs_mount "$OPTS"
check "another export: the saved namespace is dropped" grep -q "saved for another export root" "$WORK/daemon.log"
drop_caches
check "another export: its own names and sizes" same_listing
check "another export: its own bytes" warm_exact
sfs_umount

# --- without immutable: revalidation as before ------------------------------------
sfs_mount "cache_dir=$CACHE,actimeo=1"
check "without immutable: not immutable" [ "$(stat_value shardfs_immutable)" = 0 ]
cat "$MNT/d00/img0000.jpg" >/dev/null
printf 'changed' >"$EXPORT/d00/img0000.jpg"
sleep 1.5
check "without immutable: a changed file is seen after actimeo" \
	bash -c "[ \"\$(cat '$MNT/d00/img0000.jpg')\" = changed ]"
check "unmount ends the daemon" sfs_umount
sfs_finish
