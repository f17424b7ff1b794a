#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# node-bench.sh: shardfs-bench on the GPU machine's cores (a training node's
# CPUs, not the 2-core VM's), the bundle's daemon and an older one
# alternated, in one device call, run there from the repository root out of
# the bundle (tools/testbed/gpu-check/build-bundle.sh copies it to .gpu/):
#   bash .gpu/node-bench.sh            (OUT=DIR for the logs; default /tmp/gpu-out)
#
# Runs shardfs-bench (the bundle's copy, .gpu/bench/) with --reps 1 and
# reduced sizes, each workload once per daemon, in turn (new then old, the
# order swapped every other workload):
#   default        cold shards, no cache (--skip-capped)
#   --cache        epochs through a cache_dir (lru), then pin
#   --small-files  an ImageNet-like tree, cold and warm
#   --passthrough  warm shards and records: the kernel's path and the daemon's
#   mlperf         (only when SFS_NODE_PLAN names it, e.g. mlperf:disk) shardfs-bench
#                  --mlperf unet3d with 16-core sizes, the bundle's daemon only;
#                  its own table is in its log, not in node-table.md
# the last three with --cache-base (the cache and the local-disk copies) on a
# tmpfs, standing in for an NVMe RAID, and then on the machine's disk. The
# export is on /dev/shm. Each run's output goes to
# OUT/nb-WORKLOAD-WHERE-DAEMON.log and a line of OUT/node-runs.tsv;
# node-table.py turns them into one table (OUT/node-table.md), printed last.
#
# An older daemon may not know an option the bench passes: each daemon runs
# behind a shim that drops the -o options its --help does not list (and
# NAME=off for a flag it lists only bare: off is that flag's default); what
# was dropped is listed under the table.
#
# Every run has a timeout and the whole a budget (SFS_NODE_BUDGET_S, default
# 470 s); a run that did not finish leaves its row's cell empty and says why.
# Needs nothing outside the repo's tracked files and .gpu/ but python3.
# Knobs: SFS_NODE_DAEMONS ("shardfs shardfs-old" where the bundle has an old
# daemon, else "shardfs"), SFS_NODE_PLAN (the runs, WORKLOAD:WHERE words;
# default below), SFS_NODE_STEP_S (90: one run's most), SFS_NODE_NODES (4),
# SFS_NODE_FILES (8), SFS_NODE_FILE_MIB (128: default's shards),
# SFS_NODE_CACHE_FILE_MIB (64: --cache's and --passthrough's),
# SFS_NODE_EPOCHS (2), SFS_NODE_SF_FILES (8000), SFS_NODE_SF_DIRS (100),
# SFS_NODE_RR_GIB (0.25), SFS_NODE_MLPERF (unet3d), SFS_NODE_MLPERF_N (1,2,4,8),
# SFS_NODE_MLPERF_MEM_MIB (4096: the readers' cgroup; the data set is 5 x),
# SFS_NODE_MLPERF_TRIAL_S (20), SFS_NODE_MLPERF_S (360: its run's most), SFS_NODE_WORK (/var/tmp/shardfs-node.PID: the disk
# cache-base), SFS_NODE_EXTRA (more shardfs-bench options, every run).
set -u

G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
BUDGET=${SFS_NODE_BUDGET_S:-470}
RESERVE=20 # seconds kept for the table and the cleanup
KILL_AFTER=30 # a bench told to stop unmounts and stops its cluster first
STEP_S=${SFS_NODE_STEP_S:-90}
W=${SFS_NODE_WORK:-/var/tmp/shardfs-node.$$}
DATA=/dev/shm/shardfs-node-data.$$
TMPFS_BASE=$W/tmpfs-base
BENCH_ID=nb$(($$ % 10000))
BENCH=$G/bench/tools/bench/shardfs-bench
START=$SECONDS

exec > >(tee -a "$OUT/node-bench.log") 2>&1
TEE_PID=$!

# shellcheck source=common.sh
. "$G/common.sh"
gpu_path_setup

if [[ -n ${SFS_NODE_DAEMONS:-} ]]; then
	read -ra DAEMONS <<<"$SFS_NODE_DAEMONS"
elif [[ -x $G/bin/shardfs-old ]]; then
	DAEMONS=(shardfs shardfs-old)
else
	DAEMONS=(shardfs)
fi
read -ra PLAN <<<"${SFS_NODE_PLAN:-default:none cache:tmpfs small-files:tmpfs passthrough:tmpfs cache:disk small-files:disk passthrough:disk}"
FILES=${SFS_NODE_FILES:-8}
FILE_MIB=${SFS_NODE_FILE_MIB:-128}
CACHE_MIB=${SFS_NODE_CACHE_FILE_MIB:-64}
RUNS=$OUT/node-runs.tsv
: >"$RUNS"

# --- cleanup -------------------------------------------------------------------

# bench_leftovers: what a bench stopped by SIGKILL may have left: its
# mounts and its cluster.
bench_leftovers() {
	local m
	for m in $(awk -v p="/tmp/shardfs-bench-$BENCH_ID/" 'index($2, p) == 1 { print $2 }' /proc/self/mounts); do
		log "left mounted: $m: unmounting"
		umount "$m" 2>/dev/null || umount -l "$m"
	done
	timeout 60 "$G/bench/tools/testbed/shardfs-cluster" stop "$BENCH_ID" >/dev/null 2>&1
}

cleanup() {
	set +e
	trap - EXIT INT TERM HUP
	log "== cleanup"
	bench_leftovers
	is_mounted "$TMPFS_BASE" && umount "$TMPFS_BASE"
	if is_mounted "$TMPFS_BASE"; then
		log "still mounted: $TMPFS_BASE: not removing $W"
	else
		timeout 60 rm -rf "$W"
	fi
	rm -rf "$DATA"
	((MADE_MTAB)) && rm -f /etc/mtab
	finish_log
}
trap_cleanup

# --- the machine, the daemons ---------------------------------------------------

log "== machine"
machine_facts >&2
machine_prep
log "python3: $(command -v python3 || echo NONE: shardfs-bench cannot run)  ip: $(command -v ip)  tc: $(command -v tc)"
mkdir -p "$W" "$TMPFS_BASE" "$W/disk-base"
mount -t tmpfs -o size=50% shardfs-node-base "$TMPFS_BASE" || log "tmpfs at $TMPFS_BASE FAILED: its runs will fail"
log "disk cache-base $W/disk-base: $(df -hT "$W" | awk 'NR == 2 {print $1, $2, $5 " used of " $3}')"

# daemon_shim NAME: a program that runs .gpu/bin/NAME with the -o options its
# --help does not list dropped (see the header); prints its path.
daemon_shim() {
	local d=$W/daemon/$1
	mkdir -p "$d"
	"$G/bin/$1" --help >"$d/help.txt" 2>&1
	: >"$d/dropped.txt"
	cat >"$d/shardfs" <<EOF
#!/bin/bash
# $1 for shardfs-bench, behind node-bench.sh's option shim
HELP=$d/help.txt
DROPPED=$d/dropped.txt
args=()
while ((\$#)); do
	if [[ \$1 == -o && \$# -ge 2 ]]; then
		keep=()
		IFS=, read -ra opts <<<"\$2"
		for o in "\${opts[@]}"; do
			n=\${o%%=*}
			if grep -Eq "^ +\$n=" "\$HELP" || { [[ \$o != *=* ]] && grep -Eq "^ +\$n( |\\\$)" "\$HELP"; }; then
				keep+=("\$o")
			elif [[ \$o == *=* ]] && grep -Eq "^ +\$n( |\\\$)" "\$HELP" && [[ \${o#*=} =~ ^(off|0|no|false)\$ ]]; then
				echo "\$o (a flag here, off by default)" >>"\$DROPPED"
			elif [[ \$o == *=* ]] && grep -Eq "^ +\$n( |\\\$)" "\$HELP"; then
				keep+=("\$o")
			else
				echo "\$o (not in its --help)" >>"\$DROPPED"
			fi
		done
		args+=(-o "\$(IFS=,; echo "\${keep[*]}")")
		shift 2
	else
		args+=("\$1")
		shift
	fi
done
exec "$G/bin/$1" "\${args[@]}"
EOF
	chmod 755 "$d/shardfs"
	echo "$d/shardfs"
}

declare -A SHIM
for d in "${DAEMONS[@]}"; do
	if [[ ! -x $G/bin/$d ]]; then
		log "no daemon .gpu/bin/$d (bundle one with SFS_GPU_OLD_DAEMON): left out"
		continue
	fi
	SHIM[$d]=$(daemon_shim "$d")
	log "daemon $d: $("$G/bin/$d" --version 2>&1 | head -1)"
done

# --- the runs -------------------------------------------------------------------

# bench_args WORKLOAD: its shardfs-bench options (besides the shared ones)
bench_args() {
	case $1 in
	default) echo "--skip-capped --files $FILES --file-mib $FILE_MIB" ;;
	cache) echo "--cache --epochs ${SFS_NODE_EPOCHS:-2} --files $FILES --file-mib $CACHE_MIB" ;;
	small-files) echo "--small-files --sf-files ${SFS_NODE_SF_FILES:-8000} --sf-dirs ${SFS_NODE_SF_DIRS:-100}" ;;
	passthrough) echo "--passthrough --files $FILES --file-mib $CACHE_MIB --rr-gib ${SFS_NODE_RR_GIB:-0.25}" ;;
	mlperf) echo "--mlperf ${SFS_NODE_MLPERF:-unet3d} --mlperf-n ${SFS_NODE_MLPERF_N:-1,2,4,8} --mlperf-mem-mib ${SFS_NODE_MLPERF_MEM_MIB:-4096} --mlperf-trial-s ${SFS_NODE_MLPERF_TRIAL_S:-20}" ;;
	*) return 1 ;;
	esac
}

# step_s WORKLOAD: the most one run of it may take.
step_s() {
	case $1 in
	mlperf) echo "${SFS_NODE_MLPERF_S:-360}" ;;
	*) echo "$STEP_S" ;;
	esac
}

# one_run WORKLOAD WHERE DAEMON: shardfs-bench under the budget, its output
# in OUT, its line in RUNS.
one_run() {
	local wl=$1 where=$2 d=$3 args base f s rc
	args=$(bench_args "$wl") || { log "unknown workload $wl: skipped"; return; }
	case $where in
	tmpfs) base=$TMPFS_BASE ;;
	*) base=$W/disk-base ;;
	esac
	f=$OUT/nb-$wl-$where-$d.log
	s=$SECONDS
	# shellcheck disable=SC2086
	STEP_OUT=$f run_step "$wl-$where-$d" "$(step_s "$wl")" python3 "$BENCH" --id "$BENCH_ID" \
		--nodes "${SFS_NODE_NODES:-4}" --reps 1 --data-dir "$DATA" --cache-base "$base" \
		--shardfs "${SHIM[$d]}" $args ${SFS_NODE_EXTRA:-}
	rc=$?
	printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$wl" "$where" "$d" "${f##*/}" "$rc" $((SECONDS - s)) >>"$RUNS"
	if ((rc != 0)); then
		tail -n 5 "$f" | sed 's/^/   | /' >&2
		bench_leftovers
	fi
}

i=0
for item in "${PLAN[@]}"; do
	order=()
	for d in "${DAEMONS[@]}"; do [[ -n ${SHIM[$d]:-} ]] && order+=("$d"); done
	# MLPerf runs for minutes: the bundle's daemon only.
	[[ ${item%%:*} == mlperf ]] && order=("${order[@]:0:1}")
	if ((i % 2)); then
		for ((k = 0, j = ${#order[@]} - 1; k < j; k++, j--)); do
			t=${order[k]}
			order[k]=${order[j]}
			order[j]=$t
		done
	fi
	for d in "${order[@]}"; do one_run "${item%%:*}" "${item#*:}" "$d"; done
	i=$((i + 1))
done

# --- the table ------------------------------------------------------------------

{
	for d in "${!SHIM[@]}"; do
		f=$W/daemon/$d/dropped.txt
		[[ -s $f ]] && echo "$d: options dropped: $(sort "$f" | uniq -c | awk '{$1 = $1 " x"; print}' | paste -sd ';' -)"
	done
} >"$OUT/node-dropped.txt"
python3 "$G/node-table.py" "$RUNS" "$OUT" "$OUT/node-dropped.txt" >"$OUT/node-table.md" 2>&1 ||
	log "node-table.py failed (rc $?)"
log "== the table ($OUT/node-table.md)"
cat "$OUT/node-table.md"
exit 0
