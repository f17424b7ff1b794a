#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The FUSE worker pool (fs/workers.c) against a real 2-node cluster, with a
# single active worker: a read that waits for NFS (every node frozen) hands
# its place to a spare, so requests that need no NFS are served meanwhile
# (the stats file, a file from the cache), and the read completes with the
# right bytes once the nodes thaw; then the pool ends on SIGTERM
# (unmounted, daemon gone).
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
wait_idle

"$CLUSTER" freeze "$CID" all >/dev/null
dd if="$MNT/big.bin" of="$WORK/head" bs=1M count=2 status=none &
DD=$!
sleep 1
check "the read waits for the frozen nodes" kill -0 "$DD"
check "the stats file is served while it waits" timeout 5 cp "$MNT/.shardfs/stats" "$WORK/stats"
# (the kernel's readahead may have more than one read waiting)
check "it counts the workers waiting and a spare that took their place" bash -c "
	awk '/^shardfs_fuse_workers\\{state=\"waiting\"\\} / {w = \$2}
	     /^shardfs_fuse_worker_handoffs_total / {h = \$2}
	     END {exit !(w >= 1 && h >= 1)}' '$WORK/stats'"
check "a file in the cache is read while it waits" \
	timeout 5 bash -c "echo 1 >/proc/sys/vm/drop_caches; grep -q 'file 1' '$MNT/dir/f1'"
"$CLUSTER" thaw "$CID" all >/dev/null
wait "$DD"
check "the read completes once the nodes thaw" [ $? = 0 ]
check "its bytes are the file's" cmp -s "$WORK/head" <(head -c $((2 << 20)) "$EXPORT/big.bin")

PID=$(pgrep -f "shardfs .* $MNT( |\$)" | head -1)
kill -TERM "$PID"
check "SIGTERM: unmounted" wait_for 5 bash -c "! mountpoint -q '$MNT'"
check "SIGTERM: the daemon exited" wait_for 5 bash -c "! kill -0 $PID 2>/dev/null"
sfs_finish
