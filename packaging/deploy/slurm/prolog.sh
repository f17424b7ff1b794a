#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Slurm node prolog: warm the job's dataset on this node's shardfs mount
# before the job starts, so the first epoch does not wait on the NFS cluster.
#
# Install, on every node: this file as /etc/slurm/prolog.d/50-shardfs-warm.sh
# and epilog.sh (it ends a background warm-up when the job ends) as
# /etc/slurm/epilog.d/50-shardfs-warm.sh, mode 0755, and in slurm.conf:
#   Prolog=/etc/slurm/prolog.d/*
#   Epilog=/etc/slurm/epilog.d/*
#   PrologFlags=Alloc
# (slurmd 22.05 runs every file such a glob names.) With PrologFlags=Alloc
# the prolog runs when the job is allocated, not at its first step.
#
# A job names what to warm in its comment, as shardfs-warm=PATH[:PATH...]
# (paths on a shardfs mount, directories or files):
#   sbatch --comment=shardfs-warm=/mnt/dataset/imagenet/train job.sh
# The site may also warm fixed paths for every job: SHARDFS_WARM_PATHS.
#
# Settings (the variables below) come from the first file that exists of:
# $SHARDFS_PROLOG_DEFAULTS (when running it by hand: slurmd gives a prolog
# only SLURM_* variables, not its own environment), shardfs-prolog.conf in
# the directory of the slurm.conf that slurmd names (SLURM_CONF), and
# /etc/default/shardfs-prolog.
#
# How: with `shardfs-warm` (package shardfs) when it is on the PATH: it asks
# the daemon to fetch each file whole into the local NVMe cache, without
# passing the bytes through this process, SHARDFS_WARM_JOBS files at a time.
# Without it (an older package), every regular file is read with
# `cat >/dev/null`, SHARDFS_WARM_JOBS files at a time: reading through the
# mount fills the local cache where the daemon has one; without one it only
# fills the kernel's page cache, which helps only when the dataset fits in
# memory. A shardfs-warm failure (no cache on the mount, cache full) is
# logged, not retried with cat.
#
# Safety: the prolog runs as root but the job's comment is the user's, so
# only paths on a fuse.shardfs mount are warmed, files are read as the
# job's user (so file permissions apply), symlinks are not followed out of
# the tree, and the whole warm-up is bounded by SHARDFS_WARM_TIMEOUT
# seconds. It always exits 0: a failing prolog drains the node, and a cold
# cache is only slower. A warm-up in the background (SHARDFS_WARM_WAIT=0)
# is its own session, recorded in SHARDFS_PROLOG_RUN_DIR/job_ID.pid for the
# epilog.
#
# Messages ("job ID: ...", one line each) go to syslog (tag shardfs-prolog)
# and to stderr, which slurmd 22.05 writes to its log at SlurmdDebug=debug2
# or above ("prep/script: _run_subpath_command: prolog success rc:0
# output:..."); at the default level it discards them. A background
# warm-up's own messages go to syslog only.
# warm, as_user and log run in a child bash (export -f).
# shellcheck disable=SC2317
set -u

SHARDFS_WARM_PATHS=""         # colon-separated, warmed for every job
SHARDFS_WARM_TIMEOUT=900      # seconds for the whole warm-up
SHARDFS_WARM_JOBS=""          # files warmed (or read) at once; empty: shardfs-warm
                              # chooses (8 for shards, 64 for small files), cat 16
SHARDFS_WARM_WAIT=1           # 1: the job waits; 0: warm in the background
SHARDFS_WARM_TOOL=shardfs-warm  # a name that is not found selects the fallback
SHARDFS_PROLOG_RUN_DIR=/run/shardfs-prolog  # background warm-ups, for the epilog
# slurmd runs a prolog with no PATH (bash then searches ".", slurmd's
# working directory, too).
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
for f in "${SHARDFS_PROLOG_DEFAULTS:-}" "${SLURM_CONF:+$(dirname "$SLURM_CONF")/shardfs-prolog.conf}" \
	/etc/default/shardfs-prolog; do
	# shellcheck disable=SC1090
	[ -n "$f" ] && [ -r "$f" ] && { . "$f"; break; }
done

log() {
	logger -t shardfs-prolog -- "job ${SLURM_JOB_ID:-?}: $*" 2>/dev/null
	echo "shardfs-prolog: job ${SLURM_JOB_ID:-?}: $*" >&2
}

# The job's comment: in the environment on recent Slurm, else the job's
# record from scontrol (the shardfs-warm= token is found wherever it is).
job_comment() {
	if [ -n "${SLURM_JOB_COMMENT:-}" ]; then
		printf '%s\n' "$SLURM_JOB_COMMENT"
	elif [ -n "${SLURM_JOB_ID:-}" ] && command -v scontrol >/dev/null; then
		scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null
	fi
}

# Paths named by the site and by the job (shardfs-warm=A:B), one per line.
wanted_paths() {
	{
		printf '%s\n' "$SHARDFS_WARM_PATHS" | tr ':' '\n'
		job_comment | grep -o 'shardfs-warm=[^ ,;]*' | sed 's/^shardfs-warm=//' | tr ':' '\n'
	} | sed '/^$/d' | sort -u
}

# on_shardfs PATH: true when PATH lies on a shardfs mount.
on_shardfs() {
	[ "$(findmnt -n -o FSTYPE -T "$1" 2>/dev/null)" = fuse.shardfs ]
}

# Run a command as the job's user (root when the job's uid is unknown).
as_user() {
	if [ -n "${SLURM_JOB_UID:-}" ] && [ "${SLURM_JOB_UID}" != 0 ]; then
		setpriv --reuid="$SLURM_JOB_UID" --regid="${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}" \
			--clear-groups -- "$@"
	else
		"$@"
	fi
}

warm() {
	local p err
	for p in "$@"; do
		if command -v "$SHARDFS_WARM_TOOL" >/dev/null; then
			err=$(as_user "$SHARDFS_WARM_TOOL" -q ${SHARDFS_WARM_JOBS:+-j "$SHARDFS_WARM_JOBS"} \
				-- "$p" 2>&1 >/dev/null) ||
				log "$SHARDFS_WARM_TOOL $p failed: $(tail -n 1 <<<"$err")"
		else
			# -xdev: stay on the mount; find does not follow symlinks.
			as_user find "$p" -xdev -type f -print0 |
				as_user xargs -0 -r -P "${SHARDFS_WARM_JOBS:-16}" -n 32 cat -- >/dev/null 2>&1 ||
				log "reading $p: some files could not be read"
		fi
	done
}

# stat_field PID N: field N (>= 3) of /proc/PID/stat: 6 is the session,
# 22 the start time (clock ticks since boot, which tells the process from a
# later one with its pid).
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

# background_started PID: wait (up to 5 s) until the background warm-up
# leads its own session, then record "PID START_TIME" in
# SHARDFS_PROLOG_RUN_DIR/job_ID.pid for the epilog. The wait matters:
# slurmd kills the prolog's process group as soon as the prolog exits, and
# a child that has not yet called setsid() is still in it.
background_started() {
	local f=$SHARDFS_PROLOG_RUN_DIR/job_${SLURM_JOB_ID:-0}.pid st
	for _ in $(seq 50); do
		[ "$(stat_field "$1" 6)" = "$1" ] && break
		sleep 0.1
	done
	[ -n "${SLURM_JOB_ID:-}" ] || return 0
	st=$(stat_field "$1" 22) || return 0 # already over
	if ! { mkdir -p "$SHARDFS_PROLOG_RUN_DIR" && chmod 0700 "$SHARDFS_PROLOG_RUN_DIR" &&
		echo "$1 $st" >"$f.tmp" && mv -f "$f.tmp" "$f"; }; then
		log "cannot record the background warm-up in $f: the epilog will not end it"
	fi
}

main() {
	local paths=() p t0 t
	while IFS= read -r p; do
		if [ ! -e "$p" ]; then
			log "not warming $p: no such file or directory"
		elif on_shardfs "$p"; then
			paths+=("$p")
		else
			log "not warming $p: not on a shardfs mount"
		fi
	done < <(wanted_paths)
	[ ${#paths[@]} -gt 0 ] || return 0
	t0=$(date +%s)
	log "warming ${paths[*]} ($(command -v "$SHARDFS_WARM_TOOL" >/dev/null && echo "$SHARDFS_WARM_TOOL" || echo 'cat, fallback'))"
	if [ "$SHARDFS_WARM_WAIT" = 1 ]; then
		export -f warm as_user log
		export SHARDFS_WARM_JOBS SHARDFS_WARM_TOOL
		timeout "$SHARDFS_WARM_TIMEOUT" bash -c 'warm "$@"' warm "${paths[@]}"
		case $? in
		0) log "warmed in $(( $(date +%s) - t0 )) s" ;;
		124) log "warm-up stopped after ${SHARDFS_WARM_TIMEOUT} s; the job starts anyway" ;;
		*) log "warm-up ended with errors after $(( $(date +%s) - t0 )) s" ;;
		esac
	else
		export -f warm as_user log
		export SHARDFS_WARM_JOBS SHARDFS_WARM_TOOL
		# Its own session, led by timeout: the epilog signals the group.
		setsid timeout "$SHARDFS_WARM_TIMEOUT" bash -c 'warm "$@"' warm "${paths[@]}" \
			</dev/null >/dev/null 2>&1 &
		t=$!
		background_started "$t"
		log "warming in the background (pid $t)"
	fi
}

main
exit 0
