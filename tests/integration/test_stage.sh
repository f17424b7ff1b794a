#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Staging ioctls, shm path, end to end: cold (from NFS) and cached ranges,
# aligned/unaligned/crossing chunks/EOF, batches, every refusal, a second
# uid; the C example; the stats. (The CUDA path: test_stage_cuda_fake.sh,
# through the daemon against the fake CUDA runtime; tests/unit/test_staging_cuda
# runs it on a real GPU and exits 77 elsewhere.)
. "$(dirname "$0")/lib.sh"
sfs_require
export PYTHONPATH=$SRC_ROOT/tools/client/python
mkdir -p "$EXPORT"
head -c $((20 << 20 | 12345)) /dev/urandom >"$EXPORT/big"
head -c 5000 /dev/urandom >"$EXPORT/small"
head -c $((96 << 20)) /dev/urandom >"$EXPORT/other" # never cached: read beside staging
sfs_cluster_up 4

run_phase() { sfs_relay_tap python3 "$SRC_ROOT/tests/integration/stage_check.py" "$MNT" "$EXPORT" "$1"; }

# Cold: no cache, nothing read yet: every byte comes from NFS first.
sfs_mount "prefetch=off,allow_other"
drop_caches
run_phase cold
run_phase uid
check "stats count shm staging" bash -c "[ \$(awk '/^shardfs_stage_bytes_total\\{target=\"shm\"\\}/ {print \$2}' '$MNT/.shardfs/stats') -gt 0 ]"
check "stats count refusals" bash -c "[ \$(awk '/^shardfs_stage_errors_total\\{reason=\"out_of_range\"\\}/ {print \$2}' '$MNT/.shardfs/stats') -gt 0 ]"
check "shardfs_gpus is reported" grep -q '^shardfs_gpus ' "$MNT/.shardfs/stats"
sfs_umount

# Warm: from the local cache.
sfs_mount "cache_dir=$WORK/cache"
"$SRC_ROOT/tools/cmd/shardfs-warm" -q "$MNT/big" "$MNT/small" >/dev/null 2>&1
drop_caches
run_phase warm
STAGE_SHM=${SFS_STAGE_SHM:-$(dirname "$SHARDFS")/../tools/stage_shm}
if [ -x "$STAGE_SHM" ]; then
	"$STAGE_SHM" "$MNT/big" 12345 >"$WORK/stage_shm.out" 2>&1
	rc=$?
	while IFS= read -r l; do diag "$l"; done <"$WORK/stage_shm.out"
	check "C example stage_shm: whole file, 12345-byte pieces, every byte checked" [ "$rc" = 0 ]
else
	not_ok "C example not built: $STAGE_SHM"
fi
check "no shm objects left behind" bash -c "! ls /dev/shm | grep -q shardfs-check"
check "unmount ends the daemon" sfs_umount
sfs_finish
