#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# An upgrade under readers (fs/restart/takeover.c): `shardfs -o takeover SOURCE MNT`
# with another binary hands the live mount of a real 2-node cluster over to
# it while four readers compare every byte with the export: no read fails,
# no byte is wrong, one mount before and after, the new serving process runs
# the new binary, the keeper counts the takeover, a later crash restarts the
# new binary; and back again. The refusals leave the running daemon
# untouched: a mount that is not shardfs, another export, another user, a
# binary that fails its check.
. "$(dirname "$0")/lib.sh"
sfs_require
READER=$SRC_ROOT/tests/integration/keeper_reader.py

mkdir -p "$EXPORT" "$WORK/cache" "$WORK/new" "$WORK/tmpfs"
"$GENDATA" "$EXPORT" --shards 4 --shard-mib 16 --small 200 --classes 4 --small-kib 30 --seed 12 -q
cp "$SHARDFS" "$WORK/new/shardfs" # another build, as far as paths go
sfs_cluster_up 2
export SHARDFS_TEST_RESUME_FAULT=$WORK/fault
OPTS="cache_dir=$WORK/cache,nconnect=2,page_cache=never"
sfs_mount "$OPTS"
SOURCE=$ADDRS:/ifs

# refused DESCRIPTION RC OUTPUT PATTERN: a refusal: non-zero, one line naming
# the cause.
refused() {
	if [ "$2" != 0 ] && [ "$(wc -l <<<"$3")" = 1 ] && grep -q -- "$4" <<<"$3"; then
		ok "$1"
	else
		not_ok "$1"
		diag "rc $2: $3"
	fi
}
# takeover BINARY [SOURCE [MNT]]: the request, in the mount's namespace.
takeover() { in_ns "$1" -o "takeover,$OPTS" "${2:-$SOURCE}" "${3:-$MNT}"; }
exe_of() { readlink "/proc/$1/exe"; }
S0=$(serving_pid)

# --- refusals ----------------------------------------------------------------------
mount -t tmpfs none "$WORK/tmpfs"
out=$(takeover "$WORK/new/shardfs" "$SOURCE" "$WORK/tmpfs" 2>&1); rc=$?
refused "a mount that is not shardfs: refused" "$rc" "$out" 'no shardfs keeper holds'
diag "$out"
umount "$WORK/tmpfs"
out=$(takeover "$WORK/new/shardfs" "${ADDRS%%,*}:/other" 2>&1); rc=$?
refused "another export: refused" "$rc" "$out" "not ${ADDRS%%,*}:/other"
diag "$out"
out=$(in_ns setpriv --reuid=65534 --regid=65534 --clear-groups "$WORK/new/shardfs" -o "takeover" "$SOURCE" "$MNT" 2>&1); rc=$?
refused "another user: refused" "$rc" "$out" 'only it or root'
diag "$out"
touch "$WORK/fault"
out=$(takeover "$WORK/new/shardfs" 2>&1); rc=$?
rm -f "$WORK/fault"
refused "a binary that fails its check: refused" "$rc" "$out" 'cannot take this mount over'
diag "$out"
check "after the refusals the same process serves, nothing restarted" \
	bash -c "[ '$(serving_pid)' = '$S0' ] && [ '$(counter 'shardfs_daemon_restarts_total{reason="takeover"}')' = 0 ]"

# --- a takeover under readers, and back ------------------------------------------------
rm -f "$WORK/stop"
for m in shards small records stage; do
	python3 "$READER" "$m" "$MNT" "$EXPORT" "$WORK/stop" >"$WORK/reader-$m.json" 2>&1 &
done
# until the readers have read through the mount (a loaded machine starts
# them late)
readers_read() { [ "$(counter shardfs_cache_hit_bytes_total)" != 0 ]; }
wait_for 60 readers_read
sleep 1
before=$(counter shardfs_fuse_read_bytes_total)
hits_before=$(counter shardfs_cache_hit_bytes_total)
out=$(takeover "$WORK/new/shardfs" 2>&1); rc=$?
diag "$out"
S1=$(serving_pid)
after=$(counter shardfs_fuse_read_bytes_total)
hits_after=$(counter shardfs_cache_hit_bytes_total)
diag "bytes read: $before before the takeover, $after after; cache hits $hits_before, $hits_after"
check "the counters continue across the takeover (bytes read, cache hits)" \
	python3 -c "import sys; sys.exit(0 if $after >= $before > 0 and $hits_after >= $hits_before > 0 else 1)"
check "takeover: exit 0, a new serving process running the new binary" \
	bash -c "[ $rc = 0 ] && [ '$S1' != '$S0' ] && [ '$(exe_of "$S1")' = '$WORK/new/shardfs' ]"
sleep 3
kill -9 "$S1"
sleep 0.5
S2=$(serving_pid)
check "a crash after the takeover restarts the new binary" \
	bash -c "[ '$S2' != '$S1' ] && [ '$(exe_of "$S2")' = '$WORK/new/shardfs' ]"
sleep 2
out=$(takeover "$SHARDFS" 2>&1); rc=$?
S3=$(serving_pid)
check "and back to the first binary" bash -c "[ $rc = 0 ] && [ '$(exe_of "$S3")' = '$(readlink -f "$SHARDFS")' ]"
sleep 2
touch "$WORK/stop"
wait
check "the readers: every read answered, every byte right" python3 - "$WORK" <<'PY'
import glob, json, sys
bad = False
for p in sorted(glob.glob(sys.argv[1] + "/reader-*.json")):
    r = json.loads(open(p).read().strip().splitlines()[-1])
    print(f"# {r['mode']}: {r['reads']} reads, {r['bytes'] / 1e6:.1f} MB, {r['failed']} failed, "
          f"{r['wrong']} wrong, longest call {r['max_call_s']:.3f} s {r['errors']}")
    bad |= r["failed"] > 0 or r["wrong"] > 0 or r["reads"] == 0
sys.exit(1 if bad else 0)
PY
check "stats: 2 takeovers and 1 crash restart counted" \
	bash -c "[ '$(counter 'shardfs_daemon_restarts_total{reason="takeover"}')' = 2 ] && [ '$(counter 'shardfs_daemon_restarts_total{reason="crash"}')' = 1 ]"
check "one mount at $MNT before and after" bash -c "[ \$(awk -v m='$MNT' '\$2 == m' /proc/mounts | wc -l) = 1 ]"
umount "$MNT"
check "umount ends the keeper" wait_for 30 bash -c "! pgrep -f '^/.*shardfs --keeper $MNT ' >/dev/null"
sfs_finish
