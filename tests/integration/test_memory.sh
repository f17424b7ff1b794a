#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Memory within the budget when the cache disk is slower than the network:
# the reference FIO job's shape (4 jobs x 4 files, O_DIRECT 1 MiB reads)
# against a cache_dir on a loop device whose writes the blkio cgroup holds
# to 50 MB/s. Without admission control the writes waiting held every
# fetched chunk (measured: VmHWM 1.98 GB for 2 GiB read with a 256 MiB
# budget); now they hold about prefetch_mem at most, what cannot be written in
# time is not cached (counted), and the readers get every byte.
. "$(dirname "$0")/lib.sh"
sfs_require
command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null ||
	skip "losetup or mkfs.ext4 missing"
BLKIO=/sys/fs/cgroup/blkio
[ -w "$BLKIO/cgroup.procs" ] || skip "no cgroup v1 blkio controller to throttle the cache disk"

MB=$((1 << 20))
BUDGET_MB=128
CG=$BLKIO/shardfs-$TEST_NAME-$$
LOOP=
# The daemon goes first (it holds files on the slow filesystem and is in the
# cgroup), then the filesystem, the loop device and the cgroup.
memory_cleanup() {
	set +e
	if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
	pkill -f "shardfs .* $MNT( |\$)"
	for _ in $(seq 50); do pgrep -f "shardfs .* $MNT( |\$)" >/dev/null || break; sleep 0.1; done
	pkill -9 -f "shardfs .* $MNT( |\$)" # still draining writes to the slow disk
	for _ in $(seq 50); do pgrep -f "shardfs .* $MNT( |\$)" >/dev/null || break; sleep 0.1; done
	mountpoint -q "$WORK/slow" && umount "$WORK/slow"
	[ -n "$LOOP" ] && losetup -d "$LOOP"
	[ -d "$CG" ] && rmdir "$CG"
	sfs_cleanup
}
trap memory_cleanup EXIT

mkdir -p "$EXPORT/fio" "$WORK/slow"
for i in $(seq 0 15); do head -c $((64 * MB)) /dev/urandom >"$EXPORT/fio/f$i"; done
truncate -s 2G "$WORK/slow.img"
LOOP=$(losetup -f --show "$WORK/slow.img") || skip "no loop device"
mkfs.ext4 -q "$LOOP" && mount "$LOOP" "$WORK/slow" || skip "cannot make the slow cache filesystem"
mkdir "$CG" || skip "cannot create a blkio cgroup"
echo "$(lsblk -no MAJ:MIN "$LOOP" | tr -d ' ') $((50 * 1000 * 1000))" >"$CG/blkio.throttle.write_bps_device" ||
	skip "cannot throttle the loop device"
sfs_cluster_up 4

sfs_mount "cache_dir=$WORK/slow/cache,cache_size=1536M,prefetch_mem=${BUDGET_MB}M"
pid=$(daemon_pid)
for t in /proc/"$pid"/task/*; do echo "${t##*/}" >"$CG/tasks"; done
check "the daemon's threads are in the throttled cgroup" \
	[ "$(wc -l <"$CG/tasks")" = "$(ls /proc/"$pid"/task | wc -l)" ]
echo 5 >"/proc/$pid/clear_refs" # VmHWM from here

drop_caches
bad=0
for j in 0 1 2 3; do
	(
		for k in 0 1 2 3; do
			f=fio/f$((j * 4 + k))
			dd if="$MNT/$f" bs=1M iflag=direct status=none | cmp -s - "$EXPORT/$f" || exit 1
		done
	) &
done
for j in 0 1 2 3; do wait -n || bad=$((bad + 1)); done
check "4 jobs x 4 files, O_DIRECT: every byte exact ($bad jobs failed)" [ "$bad" = 0 ]
hwm=$(awk '/^VmHWM:/ { print $2 * 1024 }' "/proc/$pid/status")
skipped=$(counter shardfs_cache_write_skipped_bytes_total)
pinned=$(counter shardfs_prefetch_write_pinned_bytes)
diag "VmHWM $((hwm / MB)) MiB, budget $BUDGET_MB MiB; $((skipped / MB)) MiB not cached; $((pinned / MB)) MiB waiting to be written"
check "peak RSS $((hwm / MB)) MiB <= budget $BUDGET_MB MiB + 64 MiB" [ "$hwm" -le $(((BUDGET_MB + 64) * MB)) ]
# Chunks fetched ahead are offered while the writes waiting hold half the
# budget, readers' own chunks while they hold less than all of it: the
# excess is at most the chunks in flight of the 4 readers.
check "writes waiting hold about the budget at most ($((pinned / MB)) MiB <= $BUDGET_MB + 16 MiB)" \
	[ "$pinned" -le $(((BUDGET_MB + 16) * MB)) ]
check "what the slow disk could not take was skipped, and counted ($((skipped / MB)) MiB)" \
	[ "$skipped" -gt 0 ]
# How far the whole-file fetch stayed ahead of the readers is a race
# between the fetch's threads and the readers' processes, which a busy
# machine decides: it is reported here and measured by shardfs-bench
# --memory (its slow-disk row), not checked.
diag "the fetch ran ahead of the readers for $(counter shardfs_prefetch_readahead_chunks_total) of 1024 chunks"
wait_idle
check "the daemon is alive and serves the stats" [ -n "$(stat_value shardfs_inodes)" ]
rss=$(counter shardfs_process_resident_bytes)
bufs=$(counter 'shardfs_memory_bytes{kind="chunk_buffers"}')
check "the stats file shows the RSS ($((rss / MB)) MiB) and the chunk buffers in it ($((bufs / MB)) MiB)" \
	bash -c "[ $rss -gt 0 ] && [ $bufs -le $rss ] && [ $bufs -le $(((BUDGET_MB + 64) * MB)) ]"
check "unmount ends the daemon" sfs_umount
sfs_finish
