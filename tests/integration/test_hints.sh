#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Epoch hints (fs/hints/hints.h, SHARDFS_IOC_HINT_*) against a real 4-node cluster:
# a list of 1,500 files of ~100 KB hinted in a shuffled order and read in it
# (bytes compared with the export, fetched once); missing paths, directories
# and ranges past the end skipped and counted; malformed batches (EINVAL) and
# a list past the limit (E2BIG); an unprivileged sender on an allow_other
# mount (files it may not read are never fetched); a list larger than the
# fetch memory; a reader that stops mid-epoch (fetching stops within a
# window); a reader that jumps ahead (the fetch follows it); a job killed
# mid-epoch (its list goes); a list past mem_max / 8 (ENOMEM); two jobs with overlapping
# lists; records of a big file hinted as ranges; a full pinned cache (items
# wait in memory, not admitted); replacing and cancelling.
. "$(dirname "$0")/lib.sh"
sfs_require
command -v runuser >/dev/null || skip "runuser is not installed"
export PYTHONPATH=$SRC_ROOT/tools/client/python:$SRC_ROOT/tests/integration

HUSER=sfshint$$
trap 'userdel "$HUSER" 2>/dev/null; sfs_cleanup' EXIT

mkdir -p "$EXPORT/rec" "$EXPORT/secret" "$EXPORT/locked"
python3 - "$EXPORT" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(41)
for c in range(15):
    d = os.path.join(root, "img", "c%02d" % c)
    os.makedirs(d)
    for i in range(100):
        with open(os.path.join(d, "f%04d.JPEG" % (c * 100 + i)), "wb") as f:
            f.write(rng.randbytes(rng.randint(90_000, 120_000)))
with open(os.path.join(root, "rec", "records.bin"), "wb") as f:
    f.write(rng.randbytes(24 << 20))
for name in ("secret/only-root.bin", "secret/public.bin", "locked/inside.bin"):
    with open(os.path.join(root, name), "wb") as f:
        f.write(rng.randbytes(200_000))
PY
chmod 0600 "$EXPORT/secret/only-root.bin"
chmod 0644 "$EXPORT/secret/public.bin"
chmod 0755 "$EXPORT/secret"
chmod 0700 "$EXPORT/locked"
sfs_cluster_up 4

run_phase() { sfs_relay_tap python3 "$SRC_ROOT/tests/integration/hint_check.py" "$MNT" "$EXPORT" "$@"; }
# fresh: a new mount with an empty cache (OPTS extra options).
fresh() {
	mountpoint -q "$MNT" && sfs_umount
	rm -rf "$WORK/cache"
	sfs_mount "cache_dir=$WORK/cache${1:+,$1}"
}

fresh
run_phase read
run_phase unknown
run_phase malformed
run_phase replace

# A list of 1,500 files (~160 MB) against prefetch_mem=16M: half of it, 8 MiB,
# held unread at most, plus what the fetchers have in hand (16 x 120 KB).
fresh "prefetch_mem=16M"
run_phase budget $(((8 << 20) + 16 * 120000))

# All lists together: at most mem_max / 8 (here 8 MiB).
fresh "mem_max=64M"
run_phase memcap $((8 << 20))

fresh "hint_window=100"
run_phase stop 100
run_phase jump 100
run_phase killed

fresh
run_phase two_jobs
run_phase records

# A full cache that admits nothing more: what hints fetch waits in memory.
fresh "cache_size=24M,cache_policy=pin"
run_phase policy $((24 << 20))

# An unprivileged sender on an allow_other mount.
useradd -M -s /usr/sbin/nologin "$HUSER" 2>/dev/null || true
chmod 0755 "$WORK" "$SRC_ROOT" 2>/dev/null
fresh "allow_other"
if runuser -u "$HUSER" -- python3 -c 'import shardfs' 2>/dev/null; then
	sfs_relay_tap runuser -u "$HUSER" -- env PYTHONPATH="$PYTHONPATH" \
		python3 "$SRC_ROOT/tests/integration/hint_check.py" "$MNT" "$EXPORT" denied
else
	not_ok "the unprivileged user cannot import the shardfs module from $SRC_ROOT/tools/client/python"
fi
alive() { serving_pid >/dev/null; }
check "the daemon served through every phase (its serving process is alive)" alive
# The last phase's fd was closed as its process exited: its RELEASE, which
# drops the list and what it held, reaches the daemon after that (waited
# for as long as a loaded machine takes).
none_held() { [ "$(counter shardfs_hint_lists)" = 0 ] && [ "$(counter shardfs_hint_held_bytes)" = 0 ]; }
check "with every list closed, nothing is held" wait_for 60 none_held
sfs_umount
sfs_finish
