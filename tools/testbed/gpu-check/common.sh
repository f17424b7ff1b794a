# shellcheck shell=bash
# SPDX-License-Identifier: Apache-2.0
# common.sh: what the GPU machine's two scripts (run.sh, node-bench.sh) share,
# sourced by them from the bundle (build-bundle.sh copies it to .gpu/): the
# bundle's programs first on PATH, the step runner under a time budget, and
# the machine's preparation for FUSE and the NFS cluster (netconfig,
# /dev/fuse, /dev/shm, /etc/mtab).
#
# Owns nothing on disk but the /etc/mtab link it may make (MADE_MTAB=1: the
# caller's cleanup removes it) and the /etc/netconfig it may install. The
# caller sets G (the bundle), START (SECONDS at its start), BUDGET (seconds)
# and RESERVE (seconds kept for its cleanup) before calling anything here,
# and runs it all in one shell, one step at a time; its stdout and stderr go
# through a tee (pid TEE_PID) to its log in OUT.

SUMMARY=()
# shellcheck disable=SC2034 # read by the caller's cleanup
MADE_MTAB=0

# gpu_path_setup: the bundle's wrappers first on PATH, its fallbacks last,
# the cluster's daemons the bundle's, no library path inherited; the
# executable bits back where the copy to this machine lost them.
gpu_path_setup() {
	chmod a+x "$G"/bin/* "$G"/fallback/* "$G"/libexec/* "$G"/libexec/*/* 2>/dev/null
	export PATH=$G/bin:${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}:$G/fallback
	export SHARDFS_CLUSTER_GANESHA=$G/bin/ganesha.nfsd
	export SHARDFS_CLUSTER_RPCBIND=$G/bin/rpcbind
	unset LD_LIBRARY_PATH LD_PRELOAD
}

log() { printf '[%4ds] %s\n' $((SECONDS - START)) "$*" >&2; }
left() { echo $((BUDGET - (SECONDS - START))); }

# run_step NAME MAX_S CMD...: CMD under timeout (MAX_S, or less when the
# budget is short: what is left less RESERVE; SIGKILL KILL_AFTER seconds
# after the SIGTERM, default 10), its output into the file STEP_OUT where
# that is set (the step's own lines stay on stderr); logs its status and
# time and adds a line to SUMMARY. Returns CMD's status (124: timed out or
# skipped).
run_step() {
	local name=$1 max=$2 t s rc
	shift 2
	t=$(($(left) - RESERVE))
	((t > max)) && t=$max
	if ((t < 5)); then
		log "SKIP $name: out of time"
		SUMMARY+=("$name: skipped (no time left)")
		return 124
	fi
	log "== $name (timeout ${t}s): $*"
	s=$SECONDS
	if [[ -n ${STEP_OUT:-} ]]; then
		timeout -k "${KILL_AFTER:-10}" "$t" "$@" >"$STEP_OUT" 2>&1
	else
		timeout -k "${KILL_AFTER:-10}" "$t" "$@"
	fi
	rc=$?
	log "-- $name: rc=$rc ($((SECONDS - s))s)"
	SUMMARY+=("$name: rc=$rc ($((SECONDS - s))s)")
	return $rc
}

alive() { [[ -n ${1:-} && -e /proc/$1 ]] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/self/mounts; }

# machine_prep: what FUSE mounts and the NFS cluster need that a bare image
# may lack: /etc/netconfig (libtirpc), /dev/fuse and the fuse module, a
# tmpfs on /dev/shm (POSIX shm), /etc/mtab (ganesha's VFS reads it; made
# here as a link, MADE_MTAB=1).
machine_prep() {
	[ -e /etc/netconfig ] || { cp "$G/netconfig" /etc/netconfig && log "installed /etc/netconfig (libtirpc needs it)"; }
	if [[ ! -c /dev/fuse ]]; then
		log "/dev/fuse missing: mknod c 10 229"
		mknod -m 0666 /dev/fuse c 10 229 || log "mknod /dev/fuse failed"
	fi
	grep -qw fuse /proc/filesystems || { log "fuse not in /proc/filesystems: modprobe fuse"; modprobe fuse 2>&1 | head -2 >&2; }
	log "/dev/fuse: $(ls -l /dev/fuse 2>&1); /proc/filesystems fuse: $(grep -cw fuse /proc/filesystems)"
	if ! awk '$2 == "/dev/shm" { f = 1 } END { exit !f }' /proc/self/mounts; then
		log "/dev/shm is not a mount: mounting a tmpfs there"
		mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm || log "mount /dev/shm failed"
	fi
	if [[ ! -e /etc/mtab ]]; then
		log "/etc/mtab missing: symlink to /proc/self/mounts (removed at the end)"
		# shellcheck disable=SC2034 # read by the caller's cleanup
		ln -s ../proc/self/mounts /etc/mtab && MADE_MTAB=1
	fi
}

# machine_facts: the lines that say which machine and bundle a log is from.
machine_facts() {
	cat "$G/BUILD-INFO" 2>/dev/null | head -2
	date -u
	uname -a
	grep -E '^(PRETTY_NAME|VERSION_ID)=' /etc/os-release 2>/dev/null
	echo "cpus: $(nproc)  glibc: $(getconf GNU_LIBC_VERSION 2>/dev/null)  bash: $BASH_VERSION  id: $(id -u)"
	free -m | head -2
}

# finish_log: the steps' summary, the time taken, and the end of the log's
# tee (TEE_PID): the last thing the caller's cleanup does.
finish_log() {
	local l
	log "== summary"
	for l in "${SUMMARY[@]}"; do log "   $l"; done
	log "done in $((SECONDS - START))s; logs in $OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
	exec >&- 2>&-
	wait "$TEE_PID" 2>/dev/null
}

# trap_cleanup: the caller's cleanup() on exit, and an exit on the signals
# that stop a run (so that the cleanup runs then too).
trap_cleanup() {
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}
