#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Shared fixture for integration tests: a real nfs-ganesha cluster from
# tools/testbed/shardfs-cluster, a real FUSE mount of build/fs/shardfs, TAP output.
# Source it; call sfs_require, then sfs_cluster_up, then sfs_mount.
set -u

SRC_ROOT=${SFS_SRC_ROOT:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
SHARDFS=${SFS_SHARDFS:-$SRC_ROOT/build/fs/shardfs}
# SFS_PASSTHROUGH=off: every mount of the suite with passthrough=off (the
# daemon path, verified per read), through pt-off/shardfs.
case ${SFS_PASSTHROUGH:-} in
'' | auto) ;;
off)
	export SFS_REAL_SHARDFS=$SHARDFS
	SHARDFS=$SRC_ROOT/tests/integration/pt-off/shardfs
	;;
*) echo "Bail out! SFS_PASSTHROUGH='$SFS_PASSTHROUGH': want off or auto"; exit 1 ;;
esac
CLUSTER=$SRC_ROOT/tools/testbed/shardfs-cluster
GENDATA=$SRC_ROOT/tools/testbed/shardfs-gendata
TEST_NAME=$(basename "$0" .sh)
# Cluster ids are short ([a-z0-9]{1,6}): a prefix per test and the pid.
CID=${CID:-t$(( $$ % 99999 ))}
WORK=${SFS_TEST_TMP:-/tmp}/shardfs-$TEST_NAME-$$
MNT=$WORK/mnt
EXPORT=$WORK/export
ADDRS=
N_TESTS=0
N_FAILED=0

skip() { echo "1..0 # SKIP $*"; exit 77; }

# Skip (exit 77, with the reason) where the test cannot run at all.
sfs_require() {
	[ "$(id -u)" = 0 ] || skip "needs root (network namespaces, FUSE mounts)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v ganesha.nfsd >/dev/null || skip "nfs-ganesha is not installed"
	command -v rpcbind >/dev/null || [ -x /usr/sbin/rpcbind ] || skip "rpcbind is not installed"
	[ -x "${SFS_REAL_SHARDFS:-$SHARDFS}" ] || skip "daemon not built: ${SFS_REAL_SHARDFS:-$SHARDFS}"
	unshare --net true 2>/dev/null || skip "cannot create network namespaces"
}

ok() { N_TESTS=$((N_TESTS + 1)); echo "ok $N_TESTS - $*"; }
not_ok() { N_TESTS=$((N_TESTS + 1)); N_FAILED=$((N_FAILED + 1)); echo "not ok $N_TESTS - $*"; }
# check DESCRIPTION COMMAND...: one TAP line from the command's status.
check() { local d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }
diag() { echo "# $*"; }
# sfs_relay_tap CMD...: run CMD (a Python check, tapcheck.py) and count its
# TAP lines as this test's; its other lines become diagnostics.
sfs_relay_tap() {
	local out line
	out=$("$@" 2>&1)
	while IFS= read -r line; do
		case $line in
		ok\ *) ok "${line#ok * - }" ;;
		not\ ok\ *) not_ok "${line#not ok * - }" ;;
		*) diag "$line" ;;
		esac
	done <<<"$out"
}

sfs_cleanup() {
	set +e
	if mountpoint -q "$MNT" 2>/dev/null; then
		umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
	fi
	# The daemon exits when unmounted; make sure no process of ours stays.
	pkill -f "shardfs .* $MNT( |\$)" 2>/dev/null
	"$CLUSTER" stop "$CID" >/dev/null 2>&1
	[ -n "${SFS_KEEP_WORK:-}" ] || rm -rf "$WORK" # SFS_KEEP_WORK=1: keep logs for a look
}

sfs_finish() {
	echo "1..$N_TESTS"
	[ "$N_FAILED" = 0 ] && exit 0
	echo "# $N_FAILED of $N_TESTS failed"
	exit 1
}

# sfs_cluster_up NODES: start the cluster on $EXPORT (fill it first).
sfs_cluster_up() {
	mkdir -p "$EXPORT" "$MNT"
	ADDRS=$("$CLUSTER" start --id "$CID" --nodes "${1:-4}" --export "$EXPORT" \
		--state "$WORK/cluster" 2>"$WORK/cluster.log" | tail -1) || {
		cat "$WORK/cluster.log"
		echo "Bail out! cannot start the NFS cluster"
		exit 1
	}
	diag "cluster $CID: $ADDRS"
}

# Run a command in the client network namespace.
in_ns() { "$CLUSTER" exec "$CID" -- "$@"; }

# sfs_mount [OPTS]: mount all nodes at $MNT (daemonized); logs in $WORK/daemon.log
sfs_mount() {
	local opts=${1:-}
	in_ns "$SHARDFS" "$ADDRS:/ifs" "$MNT" ${opts:+-o "$opts"} 2>>"$WORK/daemon.log" || {
		cat "$WORK/daemon.log"
		echo "Bail out! mount failed"
		exit 1
	}
	mountpoint -q "$MNT" || { echo "Bail out! not mounted"; exit 1; }
}

# daemon_pid: the mount's serving process (not its keeper, fs/restart/keeper.h: the
# one whose command line has no --keeper), where its memory, threads and
# CPU are.
daemon_pid() {
	local p
	for p in $(pgrep -f "shardfs .* $MNT( |\$)"); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- ' --keeper ' || { echo "$p"; return 0; }
	done
	return 1
}
# serving_pid: the serving process as the stats file names it (waits up to
# 60 s for one that is alive: a keeper may be starting it, on a busy machine).
serving_pid() {
	local p
	for _ in $(seq 1200); do
		p=$(stat_value shardfs_serving_pid 2>/dev/null)
		[ -n "$p" ] && kill -0 "$p" 2>/dev/null && { echo "$p"; return 0; }
		sleep 0.05
	done
	return 1
}
# daemon_kill: SIGKILL the whole daemon, keeper and serving process: a
# crash the mount does not survive (the cache must).
daemon_kill() { pkill -9 -f "shardfs .* $MNT( |\$)"; }

# sfs_umount: unmount and wait (up to 60 s: a busy machine, writes still
# draining) for the daemon's end, so that the next mount of the same
# cache_dir does not find it still in use.
sfs_umount() {
	umount "$MNT" 2>/dev/null || umount -l "$MNT"
	wait_for 60 daemon_gone
}

drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

# wait_for SECONDS CMD...: until CMD succeeds, polling every 0.1 s.
wait_for() {
	local n=$(($1 * 10))
	shift
	for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
	return 1
}

# same_bytes A B: byte-for-byte comparison
same_bytes() { cmp -s "$1" "$2"; }

# stat_value METRIC_WITH_LABELS: value from the stats file
stat_value() { awk -v m="$1 " 'index($0, m) == 1 { print $2; exit }' "$MNT/.shardfs/stats"; }
# counter NAME: a counter's value, 0 when the daemon does not export it
counter() { local v; v=$(stat_value "$1"); echo "${v:-0}"; }
# pt_on: passthrough is on for this mount (the kernel reads wholly cached,
# verified files from the cache: their reads never reach the daemon, so no
# per-read counter moves and a cached byte is not checked per read).
pt_on() { [ "$(counter shardfs_passthrough_enabled)" = 1 ]; }
# from_cache: bytes readers got from the local cache so far: the daemon's
# hits, and the versions opened through passthrough (counted whole at open).
from_cache() { echo $(($(counter shardfs_cache_hit_bytes_total) + $(counter shardfs_passthrough_open_bytes_total))); }
# fetched: bytes fetched from NFS so far
fetched() { stat_value shardfs_prefetch_fetched_bytes_total; }
# settled: no chunk is in flight and nothing waits to be written, twice
# 0.2 s apart (the two gauges are read one after the other, and a chunk
# leaves "in flight" just before its write is queued).
settled_once() {
	[ "$(stat_value shardfs_prefetch_inflight_bytes)" = 0 ] &&
		[ "$(stat_value shardfs_cache_write_queue_bytes)" = 0 ]
}
settled() { settled_once && sleep 0.2 && settled_once; }
# wait_idle: until settled (up to 60 s, for a busy machine; says so when it
# gives up, and fails).
wait_idle() {
	wait_for 60 settled && return 0
	diag "not idle after 60 s: $(grep -E '^shardfs_(prefetch_inflight|cache_write_queue)_bytes ' "$MNT/.shardfs/stats" | tr '\n' ' ')"
	return 1
}
# daemon_gone: no process of this mount's daemon is left.
daemon_gone() { ! pgrep -f "shardfs .* $MNT( |\$)" >/dev/null; }
# retry_for SECONDS CMD...: until CMD succeeds, by the clock (for a CMD that
# may itself take seconds, such as a read), every 0.5 s.
retry_for() {
	local end=$((SECONDS + $1))
	shift
	until "$@"; do [ "$SECONDS" -lt "$end" ] || return 1; sleep 0.5; done
}
# SLACK: seconds added to a time bound that is the feature's contract, so
# that a loaded machine (both cores busy) does not break it; a reader left
# waiting for good is still caught.
SLACK=15

trap sfs_cleanup EXIT
trap 'exit 130' INT TERM
