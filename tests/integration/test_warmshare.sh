#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Warm-ups yield (warm_share, warm_rate) against a real 4-node cluster: a
# rate-limited warm-up never fetches faster than its rate, a reader of
# another file is not held behind it, a reader of the file being warmed
# promotes what it waits for, and the share caps the warm-up's READs in
# flight. Bytes compared with the export throughout.
. "$(dirname "$0")/lib.sh"
sfs_require

WARM=$SRC_ROOT/tools/cmd/shardfs-warm
MB=$((1 << 20))
mkdir -p "$EXPORT"
head -c $((48 * MB)) /dev/urandom >"$EXPORT/big"
head -c $((16 * MB + 777)) /dev/urandom >"$EXPORT/other"
head -c $((40 * MB)) /dev/urandom >"$EXPORT/shared"
sfs_cluster_up 4

now_ms() { date +%s%3N; }
bg_bytes() { counter shardfs_background_fetch_bytes_total; }

# --- warm_rate: the rate is never exceeded; other readers go first --------------
# At 1 MiB/s the warm-up of big takes over 45 s: the reads below (16 MiB of
# another file, then all of big) finish well inside it even on a loaded
# 2-core machine, which the checks on "while the warm-up still runs" and
# "most of big came as the reader's" need.
RATE=$((1 * MB))
sfs_mount "cache_dir=$WORK/cache1,warm_rate=1M"
check "warm_share default: 8 background slots (25% of 4 nodes x 2 connections x 4)" \
	[ "$(stat_value shardfs_background_fetch_slots)" = 8 ]
check "warm_rate=1M is shown as $RATE bytes/s" \
	[ "$(stat_value shardfs_background_fetch_rate_limit_bytes)" = $RATE ]
t0=$(now_ms)
"$WARM" -q "$MNT/big" >"$WORK/warm.out" 2>&1 &
warm_pid=$!
wait_for 60 bash -c "[ \$(awk '/^shardfs_background_fetch_bytes_total /{print \$2}' '$MNT/.shardfs/stats') -gt 0 ]"
check "another file read during the warm-up: byte-exact" same_bytes "$MNT/other" "$EXPORT/other"
b1=$(bg_bytes)
t1=$(now_ms)
check "and done while the warm-up still runs (warm-up at $((b1 / MB)) of 48 MiB)" \
	bash -c "kill -0 $warm_pid 2>/dev/null && [ $b1 -lt $((48 * MB)) ]"
# The limiter hands out at most RATE per second plus its 100 ms burst (at
# least one 1 MiB READ) and one READ of debt: a slower machine only fetches less.
allowed=$(( RATE * (t1 - t0) / 1000 + 2 * MB ))
check "warm-up bytes within warm_rate: $b1 <= $allowed after $((t1 - t0)) ms" [ "$b1" -le "$allowed" ]
check "time spent waiting for the rate is counted" \
	awk '/^shardfs_background_fetch_rate_limited_seconds_total /{exit !($2 > 0)}' "$MNT/.shardfs/stats"

# --- a reader of the file being warmed promotes what it waits for -----------------
check "the file being warmed, read meanwhile: byte-exact" same_bytes "$MNT/big" "$EXPORT/big"
b2=$(bg_bytes)
p=$(counter shardfs_background_fetch_promoted_total)
check "the reader promoted warm-up READs it waited for ($p)" [ "$p" -gt 0 ]
check "most of the file came as the reader's, not at the warm-up's rate ($((b2 / MB)) MiB as warm-up)" \
	[ "$b2" -lt $((40 * MB)) ]
wait_for 120 bash -c "! kill -0 $warm_pid 2>/dev/null"
wait $warm_pid
rc=$?
check "shardfs-warm ends with the file cached (exit $rc: $(tail -1 "$WORK/warm.out"))" [ $rc = 0 ]
sfs_umount

# --- warm_share: the warm-up's READs in flight stay within the share --------------
sfs_mount "cache_dir=$WORK/cache2,warm_share=10"
slots=$(stat_value shardfs_background_fetch_slots)
check "warm_share=10: $slots background slots (10% of 32)" [ "$slots" = 3 ]
# The nodes capped at 40 Mbit/s: a 1 MiB READ then lasts a fifth of a
# second or more, so that the sampling below (a stats read every 20 ms, far
# slower on a loaded machine) cannot miss every READ in flight.
"$CLUSTER" cap "$CID" all 40mbit >/dev/null
"$WARM" -q -j 4 "$MNT/shared" >"$WORK/warm2.out" 2>&1 &
warm_pid=$!
max=0
while kill -0 $warm_pid 2>/dev/null; do
	v=$(stat_value shardfs_background_fetch_inflight)
	[ "${v:-0}" -gt "$max" ] && max=$v
	sleep 0.02
done
wait $warm_pid
rc=$?
"$CLUSTER" cap "$CID" all off >/dev/null
check "shardfs-warm with warm_share=10: exit $rc" [ $rc = 0 ]
check "warm-up READs in flight never above the share (max seen $max of $slots)" [ "$max" -le "$slots" ]
check "and some were seen in flight (max $max)" [ "$max" -ge 1 ]
b=$(bg_bytes)
check "the warm-up's bytes are counted as background ($((b / MB)) MiB)" [ "$b" -ge $((40 * MB)) ]
drop_caches
f0=$(fetched)
check "the warmed file reads back byte-exact" same_bytes "$MNT/shared" "$EXPORT/shared"
check "from the cache (nothing fetched)" [ "$(fetched)" = "$f0" ]
sfs_finish
