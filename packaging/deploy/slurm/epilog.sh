#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Slurm node epilog, the partner of prolog.sh: when the job ends, end the
# warm-up that the prolog left running in the background for it
# (SHARDFS_WARM_WAIT=0), so a finished or cancelled job stops costing the
# NFS cluster: the warm-up's files close, and the daemon stops fetching a
# file when its last open ends (fetches in flight finish). What was already
# fetched stays in the cache.
#
# Install: as /etc/slurm/epilog.d/50-shardfs-warm.sh, mode 0755, on every
# node that has the prolog, with Epilog=/etc/slurm/epilog.d/* in slurm.conf
# (see prolog.sh). It reads the prolog's settings file (the same lookup:
# $SHARDFS_PROLOG_DEFAULTS, shardfs-prolog.conf beside slurm.conf,
# /etc/default/shardfs-prolog) for SHARDFS_PROLOG_RUN_DIR.
#
# How: the prolog records "PID START_TIME" of the warm-up's session leader
# in SHARDFS_PROLOG_RUN_DIR/job_ID.pid (a root-only directory). When that
# process still runs (same start time, still leading its session), its
# process group gets SIGTERM, then SIGKILL after SHARDFS_EPILOG_KILL_WAIT
# seconds; a pid reused by another process is left alone. The file is
# removed either way.
#
# Safety: it always exits 0 (a failing epilog drains the node) and signals
# nothing but the group the prolog started for this job. Messages go to
# syslog (tag shardfs-epilog) and to stderr, which slurmd 22.05 writes to its
# log at SlurmdDebug=debug2 or above.
set -u

SHARDFS_PROLOG_RUN_DIR=/run/shardfs-prolog
SHARDFS_EPILOG_KILL_WAIT=5 # seconds from SIGTERM to SIGKILL
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for f in "${SHARDFS_PROLOG_DEFAULTS:-}" "${SLURM_CONF:+$(dirname "$SLURM_CONF")/shardfs-prolog.conf}" \
	/etc/default/shardfs-prolog; do
	# shellcheck disable=SC1090
	[ -n "$f" ] && [ -r "$f" ] && { . "$f"; break; }
done

log() {
	logger -t shardfs-epilog -- "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null
	echo "shardfs-epilog: job ${SLURM_JOB_ID:-?}: $*" >&2
}

# stat_field PID N: field N (>= 3) of /proc/PID/stat (as in prolog.sh).
stat_field() {
	local s n=$2
	s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	s=${s##*) }
	# shellcheck disable=SC2086
	set -- $s
	[ $# -ge $((n - 2)) ] || return 1
	shift $((n - 3))
	echo "$1"
}

# group_alive PGID: true while any process of the group exists.
group_alive() { kill -0 -- "-$1" 2>/dev/null; }

main() {
	local f pid st
	[ -n "${SLURM_JOB_ID:-}" ] || return 0
	f=$SHARDFS_PROLOG_RUN_DIR/job_$SLURM_JOB_ID.pid
	[ -e "$f" ] || return 0
	read -r pid st <"$f"
	rm -f "$f"
	if ! [[ $pid =~ ^[1-9][0-9]*$ && $st =~ ^[0-9]+$ ]]; then
		log "ignoring $f: not 'PID START_TIME'"
		return 0
	fi
	if [ "$(stat_field "$pid" 22)" != "$st" ] || [ "$(stat_field "$pid" 6)" != "$pid" ]; then
		return 0 # the warm-up ended by itself (its pid may be another's now)
	fi
	kill -TERM -- "-$pid" 2>/dev/null
	for _ in $(seq $((SHARDFS_EPILOG_KILL_WAIT * 10))); do
		group_alive "$pid" || break
		sleep 0.1
	done
	if group_alive "$pid"; then
		kill -KILL -- "-$pid" 2>/dev/null
		log "ended the background warm-up (pid $pid) with SIGKILL"
	else
		log "ended the background warm-up (pid $pid)"
	fi
}

main
exit 0
