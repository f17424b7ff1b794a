#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# STAGE into GPU memory end to end, without a GPU: the daemon and the
# trainers load the fake CUDA runtime of tests/unit/fake_cudart.c (device
# memory is a shm object per cudaMalloc, IPC handles name it), the daemon
# with MOCK_CUDA_ASYNC_US so that its copies run on the fake's copy engine
# while its threads read the next pieces. The trainer is
# tests/integration/stage_cuda_check.c: batches of 1-16 MiB ranges at
# unaligned offsets, one crossing the end of the file, every byte of the
# allocation checked (placed bytes equal the file's, all others untouched).
# Cold (from NFS), 4 trainers at once on one GPU (cold, then warm), warm
# (from the cache, read straight into the pinned buffers), a byte flipped in
# the cache file (a miss: refetched, counted), the refusals of a region that
# claims more than its allocation, the staging stats, and shardfs-stage-bench's
# GPU rows (STAGE, N processes staging and N doing read()+cudaMemcpy, cuFile;
# the daemon's CPU per GiB found in cluster mode).
. "$(dirname "$0")/lib.sh"
sfs_require
CHECK=${SFS_STAGE_CUDA_CHECK:-$(dirname "$SHARDFS")/../tests/integration/stage_cuda_check}
FAKE=${SFS_FAKE_CUDART_DIR:-$(dirname "$SHARDFS")/../tests/unit}
BENCH=$(dirname "$SHARDFS")/../tools/shardfs-stage-bench
[ -x "$CHECK" ] || skip "trainer not built: $CHECK"
[ -e "$FAKE/libcudart.so.13" ] && [ -e "$FAKE/libcuda.so.1" ] ||
	skip "fake CUDA runtime not built in $FAKE"
FAKE=$(cd "$FAKE" && pwd)
CACHE=$WORK/cache
# One pool of pinned buffers per GPU staged to: 16 x (2 MiB + 64 KiB).
POOL=$((16 * (2 << 20 | 64 << 10)))
mkdir -p "$EXPORT"
head -c $((40 << 20 | 54321)) /dev/urandom >"$EXPORT/big"
head -c $((24 << 20 | 777)) /dev/urandom >"$EXPORT/shared"
head -c 700001 /dev/urandom >"$EXPORT/small" # one chunk: a packed record in the cache
sfs_cluster_up 4

# fake_mount OPTS: the daemon with the fake runtime (2 GPUs) first on its
# library path, copies asynchronous (300 us each on one copy engine).
fake_mount() { LD_LIBRARY_PATH=$FAKE MOCK_CUDA_ASYNC_US=300 sfs_mount "$1"; }
# trainer ARGS...: stage_cuda_check with the fake runtime; its TAP lines
# are this test's.
trainer() { sfs_relay_tap env LD_LIBRARY_PATH="$FAKE" "$CHECK" --stats "$MNT/.shardfs/stats" "$@"; }
pinned() { counter 'shardfs_memory_bytes{kind="staging_pinned"}'; }
# jobs_sum NAME: a per-job counter summed over the jobs
jobs_sum() { awk -v m="$1{" 'index($0, m) == 1 { s += $2 } END { print s + 0 }' "$MNT/.shardfs/stats"; }
cuda_bytes() { counter 'shardfs_stage_bytes_total{target="cuda"}'; }
SMALL_RANGES=(--range 0:$((1 << 20)) --range 12345:100000 --range 699000:5000 --range 300001:300000)

# --- cold: every byte from NFS first --------------------------------------------
fake_mount "cache_dir=$CACHE"
pid=$(daemon_pid)
check "the daemon has the fake runtime's environment" \
	grep -qz '^MOCK_CUDA_ASYNC_US=300$' "/proc/$pid/environ"
check "the daemon loaded the fake libcudart" grep -q "$FAKE/libcudart.so.13" "/proc/$pid/maps"
check "shardfs_gpus: the fake's 2 GPUs ($(counter shardfs_gpus))" [ "$(counter shardfs_gpus)" = 2 ]
check "no pinned buffers before the first stage ($(pinned))" [ "$(pinned)" = 0 ]
drop_caches
f0=$(fetched)
trainer --label cold --expect nfs --calls 4 --seed 11 --refusals "$MNT/big" "$EXPORT/big"
check "cold: bytes were fetched from NFS ($(($(fetched) - f0)))" [ "$(fetched)" -gt "$f0" ]
check "one GPU staged to: one pool pinned ($(pinned))" [ "$(pinned)" = "$POOL" ]
trainer --label "cold, small file" --expect nfs "${SMALL_RANGES[@]}" "$MNT/small" "$EXPORT/small"
trainer --label "cold, 4 at once" --procs 4 --calls 3 --seed 100 "$MNT/shared" "$EXPORT/shared"
check "still one pool: the 4 trainers shared GPU 0's ($(pinned))" [ "$(pinned)" = "$POOL" ]
"$SRC_ROOT/tools/cmd/shardfs-warm" -q "$MNT/big" "$MNT/shared" "$MNT/small" >/dev/null 2>&1
wait_idle
sfs_umount

# --- warm: from the cache, read and verified straight into pinned buffers -------
fake_mount "cache_dir=$CACHE"
drop_caches
f0=$(fetched)
d0=$(counter shardfs_cache_direct_reads_total)
h0=$(counter shardfs_cache_hit_bytes_total)
e0=$(($(counter shardfs_cache_errors_total) + $(counter shardfs_cache_checksum_failures_total)))
s0=$(cuda_bytes)
jb0=$(jobs_sum shardfs_job_read_bytes_total)
jc0=$(jobs_sum shardfs_job_read_cache_bytes_total)
pt0=$(counter shardfs_passthrough_open_bytes_total)
trainer --label warm --expect cache --gpu 1 --calls 6 --seed 22 "$MNT/big" "$EXPORT/big"
d1=$(counter shardfs_cache_direct_reads_total)
s1=$(cuda_bytes)
jb1=$(jobs_sum shardfs_job_read_bytes_total)
jc1=$(jobs_sum shardfs_job_read_cache_bytes_total)
# The trainer's open of the cached file is a passthrough open (the default):
# its job counts the file's size at open (shardfs(8)), besides what it stages.
pt=$(($(counter shardfs_passthrough_open_bytes_total) - pt0))
check "warm: the jobs' read bytes grew by the bytes staged and the passthrough opens' ($((jb1 - jb0)), staged $((s1 - s0)), opened $pt)" \
	[ $((jb1 - jb0)) = $((s1 - s0 + pt)) ]
check "warm: ... all of them from the cache ($((jc1 - jc0)))" [ $((jc1 - jc0)) = $((s1 - s0 + pt)) ]
check "warm: nothing fetched from NFS ($(($(fetched) - f0)) bytes)" [ "$(fetched)" = "$f0" ]
check "warm: pieces read straight from the cache files ($((d1 - d0)) direct reads)" \
	[ "$d1" -ge $((d0 + 6 * 2)) ]
check "warm: cache hit bytes counted ($(($(counter shardfs_cache_hit_bytes_total) - h0)))" \
	[ "$(counter shardfs_cache_hit_bytes_total)" -gt "$h0" ]
check "GPU 1 staged to: its own pool ($(pinned))" [ "$(pinned)" = "$POOL" ]
trainer --label "warm, small file" --expect cache --gpu 1 "${SMALL_RANGES[@]}" "$MNT/small" "$EXPORT/small"
trainer --label "warm, small file" --expect cache --gpu 1 --calls 3 --seed 44 "$MNT/small" "$EXPORT/small"
trainer --label "warm, 4 at once" --expect cache --procs 4 --calls 4 --seed 200 "$MNT/big" "$EXPORT/big"
trainer --label "warm, 4 at once, another file" --expect cache --gpu 0 --procs 4 --calls 2 --seed 300 "$MNT/shared" "$EXPORT/shared"
check "warm, 4 at once: nothing fetched from NFS" [ "$(fetched)" = "$f0" ]
e1=$(($(counter shardfs_cache_errors_total) + $(counter shardfs_cache_checksum_failures_total)))
check "warm: no cache read error or checksum failure ($e0 -> $e1)" [ "$e1" = "$e0" ]
check "GPUs 0 and 1 staged to: two pools ($(pinned))" [ "$(pinned)" = $((2 * POOL)) ]

# --- shardfs-stage-bench on the warm files: its GPU rows against the fake -------
# The daemon runs behind `shardfs-cluster exec` and forks its serving process:
# the bench finds that process in the stats file, so its CPU figures are
# numbers. The cuFile row runs where a libcufile loads, else says why not.
if [ -x "$BENCH" ]; then
	out=$(env LD_LIBRARY_PATH="$FAKE" "$BENCH" --procs 2 --cache-dir "$CACHE" \
		"$MNT/big" "$MNT/shared" 2>&1)
	rc=$?
	check "stage-bench: exit 0 ($rc)" [ "$rc" = 0 ]
	keys=$(tail -n 1 <<<"$out")
	key() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$keys"; }
	num() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?$ ]]; }
	spid=$(stat_value shardfs_serving_pid)
	check "stage-bench: the daemon is the serving process ($spid)" \
		grep -q "^daemon: pid $spid (shardfs_serving_pid of $MNT/.shardfs/stats)" <<<"$out"
	for k in gpu_stage_MBps daemon_cpu_s_per_GiB procs_stage_MBps procs_cpu_s_per_GiB \
		procs_read_MBps procs_read_cpu_s_per_GiB; do
		check "stage-bench: $k is a number ($(key "$k"))" num "$(key "$k")"
	done
	check "stage-bench: the procs row of read()+cudaMemcpy" \
		grep -Eq '^gpu   2 procs read\(\)\+cudaMemcpy +[0-9.]+ MB/s' <<<"$out"
	if grep -q '^gpu  cuFile compat, O_DIRECT  *skipped' <<<"$out"; then
		check "stage-bench: the cuFile row says why it is skipped" \
			grep -Eq '^gpu  cuFile compat, O_DIRECT +skipped \(.*(libcufile|cuFile).*\)$' <<<"$out"
		check "stage-bench: cufile_MBps=-1.0 when skipped ($(key cufile_MBps))" \
			[ "$(key cufile_MBps)" = -1.0 ]
	else
		check "stage-bench: cuFile rate a number ($(key cufile_MBps))" num "$(key cufile_MBps)"
	fi
	check "stage-bench: verify ok" grep -q '^gpu  verify  *ok' <<<"$out"
	grep -E '^(daemon:|GPU:|gpu )' <<<"$out" | while IFS= read -r l; do diag "$l"; done
	[ "$rc" = 0 ] || diag "$(tail -n 20 <<<"$out")"
else
	diag "shardfs-stage-bench not built ($BENCH): its rows not checked"
fi
sfs_umount

# --- a byte flipped in the cache file: a miss, refetched, counted ----------------
# The data file holds byte x of the version at x: find big's by its first 64 KiB.
want=$(head -c 65536 "$EXPORT/big" | md5sum | cut -c1-32)
obj=
for o in $(find "$CACHE/objects" -type f ! -name '*.sums'); do
	[ "$(head -c 65536 "$o" | md5sum | cut -c1-32)" = "$want" ] && obj=$o
done
check "big's cache file found" [ -n "$obj" ]
P=$((5 << 20 | 12345))
Q=$((30 << 20 | 4095))
python3 - "${obj:-/nonexistent}" "$P" "$Q" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    for off in map(int, sys.argv[2:]):
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x5A]))
PY
check "the cache file now differs from the file" bash -c "! cmp -s '${obj:-/nonexistent}' '$EXPORT/big'"
# Every read checked (passthrough=off, no scrubber): STAGE's own reads find
# the flips (with the defaults the scrubber's pass at mount finds them:
# integration_passthrough).
fake_mount "cache_dir=$CACHE,passthrough=off"
drop_caches
c0=$(counter shardfs_cache_checksum_failures_total)
f0=$(fetched)
trainer --label flipped --expect nfs --range $((P - 100001)):$((3 << 20)) \
	--range $((Q - 5)):$((1 << 20)) --range 0:$((2 << 20)) "$MNT/big" "$EXPORT/big"
c1=$(counter shardfs_cache_checksum_failures_total)
check "flipped: checksum failures counted ($c0 -> $c1)" [ "$c1" -ge $((c0 + 2)) ]
check "flipped: the damaged chunks refetched ($(($(fetched) - f0)) bytes)" [ "$(fetched)" -gt "$f0" ]
trainer --label "flipped, again" --range $((P - 100001)):$((3 << 20)) \
	--range $((Q - 5)):$((1 << 20)) "$MNT/big" "$EXPORT/big"
trainer --label "flipped, whole file" --calls 3 --seed 33 "$MNT/big" "$EXPORT/big"
check "unmount ends the daemon" sfs_umount
sfs_finish
