#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The FUSE worker pool (fs/kernel/workers.c) against a real 2-node cluster, with a
# single active worker: a read that waits for NFS (every node frozen) hands
# its place to a spare, so requests that need no NFS are served meanwhile
# (the stats file, a file from the cache), and the read completes with the
# right bytes once the nodes thaw; then the pool ends on SIGTERM
# (unmounted, daemon gone). A mount is unmounted at once after the mount
# command returns (the daemon sends itself no request that keeps it busy),
# and active_threads=0 (libfuse's loop) serves the same bytes.
. "$(dirname "$0")/lib.sh"
sfs_require

mkdir -p "$EXPORT/dir"
head -c $((8 << 20)) /dev/urandom >"$EXPORT/big.bin"
for i in 1 2 3; do echo "file $i" >"$EXPORT/dir/f$i"; done
sfs_cluster_up 2
sfs_mount "nconnect=1,timeo=600,active_threads=1,max_threads=4,cache_dir=$WORK/cache"

# Names and attributes first: they need NFS.
stat "$MNT/big.bin" >/dev/null
ls "$MNT/dir" >/dev/null
check "a file read before the freeze" grep -q "file 1" "$MNT/dir/f1"
# Its bytes in the cache before the freeze: lib.sh's wait_idle gives up
# after 10 s, this waits as long as a loaded machine takes.
wait_idle

"$CLUSTER" freeze "$CID" all >/dev/null
dd if="$MNT/big.bin" of="$WORK/head" bs=1M count=2 status=none &
DD=$!
# The nodes stay frozen until after these checks, and a read that waits for
# them waits for good (timeo=600: no re-issue in that time): a request that
# is not served within 30 s was held up behind the waiting read, however
# slow a loaded machine is.
# counted: the stats file shows a worker waiting and a spare that took its
# place (the kernel's readahead may have more than one read waiting); the
# time dd takes to get its read into the daemon is waited for.
counted() {
	timeout 30 cp "$MNT/.shardfs/stats" "$WORK/stats" &&
		awk '/^shardfs_fuse_workers\{state="waiting"\} / {w = $2}
		     /^shardfs_fuse_worker_handoffs_total / {h = $2}
		     END {exit !(w >= 1 && h >= 1)}' "$WORK/stats"
}
wait_for 30 counted
check "the read waits for the frozen nodes" kill -0 "$DD"
check "the stats file is served while it waits" timeout 30 cp "$MNT/.shardfs/stats" "$WORK/stats"
check "it counts the workers waiting and a spare that took their place" counted
# Only f1's pages are dropped: a global drop_caches waits on every mounted
# filesystem (an unmount elsewhere holds it up), and timeout cannot stop it.
check "a file in the cache is read while it waits" \
	timeout 30 python3 -c "import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd); sys.exit(b'file 1' not in open(sys.argv[1], 'rb').read())" "$MNT/dir/f1"
"$CLUSTER" thaw "$CID" all >/dev/null
wait "$DD"
check "the read completes once the nodes thaw" [ $? = 0 ]
check "its bytes are the file's" cmp -s "$WORK/head" <(head -c $((2 << 20)) "$EXPORT/big.bin")

PID=$(pgrep -f "shardfs .* $MNT( |\$)" | head -1)
kill -TERM "$PID"
check "SIGTERM: unmounted" wait_for 30 bash -c "! mountpoint -q '$MNT'"
check "SIGTERM: the daemon exited" wait_for 30 bash -c "! kill -0 $PID 2>/dev/null"

# Mount, -o overmount on top, and unmount both at once, ten times: every
# umount succeeds on its first try (a stat of the mountpoint by the daemon
# itself once made 1 in 5 fail with EBUSY).
busy=0
for i in $(seq 10); do
	in_ns "$SHARDFS" "$ADDRS:/ifs" "$MNT" -o nconnect=1 2>>"$WORK/daemon.log" &&
		in_ns "$SHARDFS" -o overmount,nconnect=1 "$ADDRS:/ifs" "$MNT" 2>>"$WORK/daemon.log" || break
	umount "$MNT" 2>>"$WORK/umount.err" || busy=$((busy + 1))
	umount "$MNT" 2>>"$WORK/umount.err" || busy=$((busy + 1))
	wait_for 30 bash -c "! mountpoint -q '$MNT'" || sfs_umount
	wait_for 30 bash -c "! pgrep -f 'shardfs .* $MNT( |\$)' >/dev/null"
done
check "10 stacked mounts, each unmounted at once: $busy umounts refused ($(sort -u "$WORK/umount.err" 2>/dev/null | head -1))" \
	[ "$i-$busy" = 10-0 ]

sfs_mount "nconnect=1,active_threads=0"
check "active_threads=0 (libfuse's loop): a cold read is byte-exact" cmp -s "$MNT/big.bin" "$EXPORT/big.bin"
check "active_threads=0: no pool in the stats" \
	grep -q '^shardfs_fuse_workers{state="working"} 0$' "$MNT/.shardfs/stats"
sfs_umount
sfs_finish
