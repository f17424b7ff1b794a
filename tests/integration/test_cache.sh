#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The local cache against a real 4-node cluster: epochs from cache, restart
# after SIGKILL, corrupted / truncated / deleted cache files, ENOSPC, the
# size limit (lru), pin with a dataset twice the cache, a file rewritten on
# the server, 32 readers, two daemons, shardfs-warm, a missing cache_dir.
. "$(dirname "$0")/lib.sh"
sfs_require

WARM=$SRC_ROOT/tools/cmd/shardfs-warm
CACHE=$WORK/cache
mkdir -p "$EXPORT/shards"
for i in 0 1 2 3 4 5 6 7; do head -c $((64 << 20)) /dev/urandom >"$EXPORT/shards/s$i"; done
head -c $((300 << 20 | 4321)) /dev/urandom >"$EXPORT/big"
head -c 5000 /dev/urandom >"$EXPORT/small"
mkdir -p "$EXPORT/many"
for i in $(seq 1 40); do head -c $((100000 + i)) /dev/urandom >"$EXPORT/many/img$i.jpg"; done
sfs_cluster_up 4

all_exact() {
	local f
	for f in "$EXPORT"/shards/s*; do cmp -s "$f" "$MNT/shards/$(basename "$f")" || return 1; done
}
objects() { find "$CACHE/objects" -type f ! -name '*.sums' | sort; }
MB=$((1 << 20))

# --- epochs: the second comes from the cache -------------------------------
# prefetch_mem=1G: a data set that fits half the budget is cached whole by one
# cold read (chunks fetched ahead are offered to the cache only while the
# writes waiting hold half of it; with the default 256M a slow cache disk may
# leave a chunk to the second epoch, by design).
sfs_mount "cache_dir=$CACHE,cache_size=2G,timeo=20,prefetch_mem=1G"
check "cache_dir is created 0700" [ "$(stat -c %a "$CACHE")" = 700 ]
drop_caches
check "epoch 1: every shard byte-exact" all_exact
wait_idle
f1=$(fetched)
check "epoch 1: whole shards are in the cache" [ "$(stat_value shardfs_cache_used_bytes)" -ge $((8 * 64 * MB)) ]
drop_caches
check "epoch 2: every shard byte-exact" all_exact
f2=$(fetched)
check "epoch 2: nothing fetched from NFS ($f1 -> $f2)" [ "$f1" = "$f2" ]
# Under passthrough the kernel reads each shard from its cache file: one
# open each, counted whole as bytes from the cache, and no read reaches the
# daemon; otherwise the daemon's reads hit.
if pt_on; then
	check "epoch 2, passthrough: every shard opened from its cache file ($(counter shardfs_passthrough_opens_total) opens, $(counter shardfs_passthrough_open_bytes_total) bytes)" \
		[ "$(counter shardfs_passthrough_open_bytes_total)" -ge $((8 * 64 * MB)) ]
else
	check "epoch 2: hits counted" [ "$(stat_value shardfs_cache_hit_bytes_total)" -ge $((8 * 64 * MB)) ]
fi
check "xattr user.shardfs.cached = size" \
	[ "$(python3 -c "import os,sys; print(os.getxattr(sys.argv[1],'user.shardfs.cached').decode())" "$MNT/shards/s3")" = $((64 * MB)) ]

# --- 32 readers on 8 shards -------------------------------------------------
drop_caches
pids=()
for r in $(seq 0 31); do
	( cmp "$MNT/shards/s$((r % 8))" "$EXPORT/shards/s$((r % 8))" >"$WORK/cmp.$r" 2>&1 ) &
	pids+=($!)
done
bad=0
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
[ "$bad" = 0 ] || diag "$(cat "$WORK"/cmp.* | head -5)"
check "32 readers on 8 shards: all byte-exact" [ "$bad" = 0 ]

# --- two daemons on one cache_dir -------------------------------------------
mkdir -p "$WORK/mnt2"
out=$(in_ns "$SHARDFS" "$ADDRS:/ifs" "$WORK/mnt2" -o "cache_dir=$CACHE" 2>&1)
rc=$?
check "second daemon on the same cache_dir refuses: $out" \
	bash -c "[ $rc != 0 ] && grep -q 'in use by another shardfs' <<<'$out' && ! mountpoint -q '$WORK/mnt2'"

# --- restart: the cache is reused --------------------------------------------
sfs_umount
sfs_mount "cache_dir=$CACHE,cache_size=2G"
drop_caches
check "after restart: bytes exact" all_exact
check "after restart: nothing fetched from NFS" [ "$(fetched)" = 0 ]
check "after restart: no checksum failures" [ "$(stat_value shardfs_cache_checksum_failures_total)" = 0 ]

# --- SIGKILL in the middle of a fill, then remount ---------------------------
sfs_umount
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,cache_size=2G"
# The links capped (4 x 32 Mbit/s: the fill takes about 20 s) so that the
# kill below lands mid-fill however late a loaded machine sees the first
# chunks written; uncapped, the whole file could be cached first.
"$CLUSTER" cap "$CID" all 32mbit >/dev/null
( "$WARM" -q "$MNT/big" >/dev/null 2>&1 ) &
# Killed once some chunks are durable (write_bytes), not once used_bytes,
# which counts a batch's bytes when admitted (up to 64 MiB before its
# fdatasync), reached 60 MiB: killed between the two, nothing was reusable
# and the check below failed. Waited for as long as a loaded machine takes.
durable() { [ "$(counter shardfs_cache_write_bytes_total)" -ge $((8 * MB)) ]; }
wait_for 60 durable
daemon_kill
umount -l "$MNT" 2>/dev/null
wait
"$CLUSTER" cap "$CID" all off >/dev/null
kept=$(find "$CACHE/objects" -type f ! -name '*.sums' -exec stat -c %s {} + | head -1)
sfs_mount "cache_dir=$CACHE,cache_size=2G"
drop_caches
cmp "$MNT/big" "$EXPORT/big" >"$WORK/cmp.out" 2>&1 || diag "$(cat "$WORK/cmp.out"; grep -E "^shardfs_(cache|prefetch|fuse_read|read_stale)" "$MNT/.shardfs/stats")"
check "after SIGKILL mid-fill: bytes exact" cmp -s "$MNT/big" "$EXPORT/big"
f=$(fetched)
check "after SIGKILL mid-fill: completed chunks were reused, the rest fetched ($((f / MB)) of 300 MiB)" \
	[ "$f" -gt 0 -a "$f" -lt $((300 * MB)) ]
diag "object file was $((kept / MB)) MiB when killed"
wait_idle
check "after SIGKILL mid-fill: shards still exact" all_exact
wait_idle
sfs_umount

# --- corrupted, truncated and deleted cache files (passthrough=off) -------------
# s0: flip bytes inside its first chunk; s1: truncate its file; s2: delete it;
# s3: zero the header of its .sums (the index of its chunks). A chunk record is 520 bytes
# (64 XXH3-64s, one per 16 KiB sub-block, length, valid mark; cache/store/store_int.h).
mapfile -t objs < <(find "$CACHE/objects" -type f -size +60M | sort)
check "one cache object per shard file" [ "${#objs[@]}" -ge 8 ]
# Find which object holds which shard by comparing a chunk's bytes.
declare -A obj_for
for o in "${objs[@]}"; do
	# A data file holds byte x of its version at x (its checksums are in o.sums).
	h=$(head -c 65536 "$o" | md5sum | cut -c1-32)
	for i in 0 1 2 3; do
		[ "$(head -c 65536 "$EXPORT/shards/s$i" | md5sum | cut -c1-32)" = "$h" ] && obj_for[$i]=$o
	done
done
check "found the cache objects of s0..s3" [ "${#obj_for[@]}" = 4 ]
python3 - "${obj_for[0]}" <<'PY'
import sys
p = sys.argv[1]
with open(p, "r+b") as f:
    for off in (100, 500000):
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))
PY
truncate -s $((20 * MB)) "${obj_for[1]}"
rm -f "${obj_for[2]}"
dd if=/dev/zero of="${obj_for[3]}.sums" bs=64 count=1 conv=notrunc status=none
# passthrough=off: the flipped bytes are to be found by the read that meets
# them, and only their chunk fetched again (the scrubber that runs beside
# passthrough would evict all of s0).
sfs_mount "cache_dir=$CACHE,cache_size=2G,passthrough=off"
drop_caches
check "flipped bytes: detected, refetched, bytes exact" cmp -s "$MNT/shards/s0" "$EXPORT/shards/s0"
check "flipped bytes: counted as a checksum failure" [ "$(stat_value shardfs_cache_checksum_failures_total)" -ge 1 ]
check "truncated cache file: bytes exact" cmp -s "$MNT/shards/s1" "$EXPORT/shards/s1"
check "deleted cache file: bytes exact" cmp -s "$MNT/shards/s2" "$EXPORT/shards/s2"
check "zeroed header: bytes exact" cmp -s "$MNT/shards/s3" "$EXPORT/shards/s3"
f=$(fetched)
check "the damaged files were refetched, the others not ($((f / MB)) MiB fetched)" \
	test "$f" -gt 0 -a "$f" -le $(( (2 + 45 + 64 + 64) * MB ))
check "all shards still exact" all_exact
wait_idle
sfs_umount

# --- a cold read of a long shard reads no byte back from the cache ------------
# The pump fetches the shard ahead of its one reader (here a slow one, as a
# training step between reads makes it) and writes it to the cache; what it
# wrote stays in memory until read, and the pump runs no further ahead than
# that, rather than drop chunks and have them read back from disk.
rm -rf "$CACHE"
head -c $((256 * MB)) /dev/urandom >"$EXPORT/long"
sfs_mount "cache_dir=$CACHE,cache_size=2G"
drop_caches
python3 - "$MNT/long" <<'PY'
import sys, time
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.read(1 << 20):
        time.sleep(0.005)
PY
h=$(counter shardfs_cache_hit_bytes_total)
diag "long shard: $(grep -E '^shardfs_(cache_write_skipped_bytes_total|cache_direct_reads_total|prefetch_write_pinned_bytes|prefetch_buffer_bytes) ' "$MNT/.shardfs/stats" | tr '\n' ' ')"
# Idle, nothing is read back; on a loaded machine (the full suite, TSan) a
# few reads were judged out of order and read 3-9 MiB back through the
# direct path. The bound catches what it is for: the pump dropping what it
# fetched (242 MiB read back before f6807f0).
check "long shard, slow cold reader: at most a few chunks read back from the cache ($((h / 1024)) KiB)" \
	[ "$h" -le $((16 * MB)) ]
check "long shard, cold: bytes exact" cmp -s "$MNT/long" "$EXPORT/long"
wait_idle
check "long shard, cold: all of it in the cache" \
	[ "$(stat_value shardfs_cache_used_bytes)" -ge $((256 * MB)) ]
sfs_umount
rm -f "$EXPORT/long"

# --- usage stays under cache_size (lru) --------------------------------------
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,cache_size=200M,cache_policy=lru"
drop_caches
check "lru 200M: bytes exact over 512 MiB" all_exact
wait_idle
used=$(stat_value shardfs_cache_used_bytes)
check "lru 200M: used $((used / MB)) MiB <= 200 MiB" [ "$used" -le $((200 * MB)) ]
check "lru 200M: on disk too" [ "$(du -sm "$CACHE" | cut -f1)" -le 205 ]
check "lru 200M: evictions counted" [ "$(stat_value shardfs_cache_evicted_bytes_total)" -gt 0 ]
sfs_umount

# --- pin with a dataset twice the cache ----------------------------------------
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,cache_size=256M,cache_policy=pin"
drop_caches
check "pin: epoch 1 bytes exact" all_exact
wait_idle
w1=$(stat_value shardfs_cache_write_bytes_total)
h1=$(from_cache)
m1=$(stat_value shardfs_cache_miss_bytes_total)
check "pin: used <= 256 MiB" [ "$(stat_value shardfs_cache_used_bytes)" -le $((256 * MB)) ]
drop_caches
# epoch 2 in a shuffled order (hits: the daemon's, and with passthrough
# the shards wholly cached, opened from their cache files)
for i in 5 2 7 0 3 6 1 4; do cmp -s "$MNT/shards/s$i" "$EXPORT/shards/s$i" || not_ok "pin: epoch 2 s$i differs"; done
w2=$(stat_value shardfs_cache_write_bytes_total)
h2=$(from_cache)
m2=$(stat_value shardfs_cache_miss_bytes_total)
diag "pin, epoch 2: $(counter shardfs_passthrough_opens_total) passthrough opens"
ratio=$(python3 -c "print(round(($h2 - $h1) / max(1, ($h2 - $h1) + ($m2 - $m1)), 3))")
check "pin: epoch-2 hit ratio $ratio >= 0.95 x cache/dataset (0.475)" python3 -c "import sys; sys.exit(not $ratio >= 0.475)"
check "pin: epoch-2 cache writes $(( (w2 - w1) / MB )) MiB <= 10% of the dataset" [ $((w2 - w1)) -le $((512 * MB / 10)) ]
sfs_umount

# --- ENOSPC: a cache filesystem smaller than cache_size -----------------------
mkdir -p "$WORK/tiny"
mount -t tmpfs -o size=48m tmpfs "$WORK/tiny"
sfs_mount "cache_dir=$WORK/tiny/cache,cache_size=1G"
drop_caches
check "ENOSPC: reads succeed, bytes exact" all_exact
wait_idle
check "ENOSPC: the filesystem is not filled" [ "$(df --output=avail -B1 "$WORK/tiny" | tail -1)" -gt 0 ]
check "ENOSPC: cache used stays within the filesystem" [ "$(stat_value shardfs_cache_used_bytes)" -le $((48 * MB)) ]
check "ENOSPC: cache still serves (hits after the fill)" [ "$(stat_value shardfs_cache_used_bytes)" -gt 0 ]
sfs_umount
umount "$WORK/tiny"

# --- cache_dir unusable at mount, then usable ---------------------------------
sfs_mount "cache_dir=$WORK/later/cache,cache_size=1G"
check "missing cache_dir parent: mount works, reads exact" cmp -s "$MNT/shards/s4" "$EXPORT/shards/s4"
check "missing cache_dir parent: error counted" [ "$(stat_value shardfs_cache_errors_total)" -ge 1 ]
check "missing cache_dir parent: logged once" [ "$(grep -c "later/cache" "$WORK/daemon.log")" = 1 ]
mkdir -p "$WORK/later"
# The daemon retries an offline cache every few seconds (later on a loaded
# machine): wait for it.
cache_on() { [ "$(stat_value shardfs_cache_enabled)" = 1 ]; }
check "cache_dir appears: the cache resumes" wait_for 60 cache_on
drop_caches
cat "$MNT/shards/s5" >/dev/null
wait_idle
check "cache_dir appears: new reads are cached" [ "$(stat_value shardfs_cache_used_bytes)" -ge $((64 * MB)) ]
sfs_umount

# --- a file rewritten on the server ---------------------------------------------
rm -rf "$CACHE"
cp "$EXPORT/shards/s6" "$WORK/s6.old"
sfs_mount "cache_dir=$CACHE,actimeo=1"
check "rewrite: first version cached and exact" cmp -s "$MNT/shards/s6" "$WORK/s6.old"
wait_idle
exec 7<"$MNT/shards/s6"
head -c $((32 * MB)) <&7 >"$WORK/part1"
head -c $((64 << 20)) /dev/urandom >"$EXPORT/shards/s6.new" && mv "$EXPORT/shards/s6.new" "$EXPORT/shards/s6"
cat <&7 >"$WORK/part2" 2>/dev/null
exec 7<&-
check "rewrite: an open file sees only its own version" \
	bash -c "cat '$WORK/part1' '$WORK/part2' | cmp -s - '$WORK/s6.old'"
sleep 1.5
drop_caches
check "rewrite: after actimeo a new open reads the new bytes" cmp -s "$MNT/shards/s6" "$EXPORT/shards/s6"
check "rewrite: still new on a second read" cmp -s "$MNT/shards/s6" "$EXPORT/shards/s6"
sfs_umount
# Without a cache the old bytes are gone from the server: a reader that
# keeps an old open must get an error, never a mix of versions.
sfs_mount "prefetch=off,actimeo=1"
cp "$EXPORT/shards/s7" "$WORK/s7.old"
exec 7<"$MNT/shards/s7"
head -c $((8 * MB)) <&7 >"$WORK/p1"
head -c $((64 << 20)) /dev/urandom >"$EXPORT/shards/s7.new" && mv "$EXPORT/shards/s7.new" "$EXPORT/shards/s7"
sleep 1.2
cat <&7 >"$WORK/p2" 2>"$WORK/p2.err"
rc=$?
exec 7<&-
check "no cache, rewritten under an open: old bytes only, then an error (rc=$rc: $(head -c 80 "$WORK/p2.err"))" \
	bash -c "cat '$WORK/p1' '$WORK/p2' | cmp -s - <(head -c \$(cat '$WORK/p1' '$WORK/p2' | wc -c) '$WORK/s7.old')"
sfs_umount

# --- shardfs-warm end to end -----------------------------------------------------
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,prefetch=off,hard"
"$WARM" -q "$MNT/shards/s[0-3]" "$MNT/big" >"$WORK/warm.out" 2>&1
check "shardfs-warm: exit 0 ($(tail -1 "$WORK/warm.out"))" [ $? = 0 ]
"$WARM" --check "$MNT/shards/s[0-3]" "$MNT/big" >"$WORK/check.out"
check "shardfs-warm --check: 5/5 files complete" grep -q "5/5 files complete" "$WORK/check.out"
f=$(fetched)
drop_caches
check "warmed files read from the cache, byte-exact" \
	bash -c "for i in 0 1 2 3; do cmp -s '$MNT/shards/s'\$i '$EXPORT/shards/s'\$i || exit 1; done; cmp -s '$MNT/big' '$EXPORT/big'"
check "warmed files: nothing more fetched" [ "$(fetched)" = "$f" ]
"$WARM" -q "$MNT/many" >"$WORK/warm.out" 2>&1
check "shardfs-warm, 40 small files: exit 0 ($(tail -1 "$WORK/warm.out"))" [ $? = 0 ]
"$WARM" --check "$MNT/many" >"$WORK/check.out"
check "shardfs-warm --check: 40/40 small files complete" grep -q "40/40 files complete" "$WORK/check.out"
# Every node hung mid-warm (SIGSTOP) under a hard mount: the daemon waits for
# the cluster, and shardfs-warm gives up after --stall-timeout instead of
# waiting with it. Links capped so that the freeze lands mid-file.
"$CLUSTER" cap "$CID" all 16mbit >/dev/null
t0=$(date +%s.%N)
"$WARM" -q -j 1 --stall-timeout 2 "$MNT/shards/s4" "$MNT/shards/s5" >"$WORK/warm.out" 2>"$WORK/warm.err" &
warm_pid=$!
wait_for 30 bash -c "[ \$(getfattr --only-values -n user.shardfs.cached '$MNT/shards/s4' 2>/dev/null || echo 0) -gt 0 ]"
"$CLUSTER" freeze "$CID" all >/dev/null
wait_for 60 bash -c "! kill -0 $warm_pid 2>/dev/null" || kill $warm_pid
wait $warm_pid
rc=$?
secs=$(python3 -c "import time; print(round(time.time() - $t0, 1))")
check "shardfs-warm, every node frozen: exit 1 after the stall timeout (rc=$rc, ${secs}s: $(head -c 160 "$WORK/warm.err" | tr "\n" " "))" \
	bash -c "[ $rc = 1 ] && grep -q 's4: no progress in 2 s' '$WORK/warm.err' && grep -q 's5: not started: no progress in 2 s' '$WORK/warm.err'"
"$CLUSTER" thaw "$CID" all >/dev/null
"$CLUSTER" cap "$CID" all off >/dev/null
"$WARM" -q "$MNT/shards/s4" >"$WORK/warm.out" 2>&1
check "shardfs-warm after the thaw: the stalled file completes ($(tail -1 "$WORK/warm.out"))" [ $? = 0 ]
check "the file warmed across the stall: byte-exact" cmp -s "$MNT/shards/s4" "$EXPORT/shards/s4"
"$WARM" "$MNT/no-such-file" >"$WORK/warm.err" 2>&1
check "shardfs-warm: a missing file fails with its name" bash -c "[ $? != 0 ] && grep -q 'no-such-file' '$WORK/warm.err'"
sfs_umount
sfs_mount ""
"$WARM" -q "$MNT/small" >"$WORK/warm.err" 2>&1
check "shardfs-warm on a mount without cache_dir: fails, says why" \
	bash -c "[ $? != 0 ] && grep -q 'no cache_dir' '$WORK/warm.err'"
"$WARM" -q "$MNT/many" >"$WORK/warm.err" 2>&1
n=$(grep -c '^shardfs-warm: ' "$WORK/warm.err")
check "shardfs-warm without cache_dir, 40 files: 5 named and one summary, not 40 lines ($n)" \
	bash -c "[ $n = 6 ] && grep -q '^shardfs-warm: ... and 35 more files: the mount has no cache_dir\$' '$WORK/warm.err'"
check "unmount ends the daemon" sfs_umount
sfs_finish
