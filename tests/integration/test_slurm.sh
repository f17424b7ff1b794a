#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Slurm prolog and epilog (packaging/deploy/slurm/) under a real
# one-node Slurm (Debian's slurmctld and slurmd 22.05, munged), all started
# here in $WORK with their own key, socket, ports and slurm.conf (SLURM_CONF;
# nothing system-wide), against a shardfs mount with a cache on a real
# 2-node cluster. Jobs are submitted with sbatch:
#   - a job that names its dataset (--comment=shardfs-warm=DIR) finds it
#     wholly cached when it starts (shardfs-warm --check in the job, cold
#     just before), reads it all from the cache, byte-exact, and its reads
#     are counted as job="slurm/ID";
#   - a job whose dataset does not exist: slurmd's log has the prolog's line,
#     the job runs and fails on its own open, the node is not drained;
#   - a background warm-up (SHARDFS_WARM_WAIT=0) over a capped cluster still
#     runs while the job runs, and the epilog ends it when the job ends (and
#     with it the daemon's fetching).
# Job tracking: proctrack/cgroup and task/cgroup where slurmd can run them
# (the job then lands in .../slurm_NODE/uid_U/job_ID/step_batch), else
# proctrack/linuxproc with slurmd's error line as a diagnostic, and the job's
# process is moved into that same layout under a cgroup hierarchy here, so
# the per-job accounting is still checked. SFS_SLURM_CGROUP=0 forces that.
# slurm_cleanup and job_over run from trap and wait_for:
# shellcheck disable=SC2317
. "$(dirname "$0")/lib.sh"
sfs_require
for c in munged slurmctld slurmd sbatch scontrol sinfo squeue scancel getfattr ss; do
	command -v "$c" >/dev/null ||
		skip "$c is not installed (tools/testbed/install-deps installs munge, slurmctld, slurmd, slurm-client)"
done
WARM=$SRC_ROOT/tools/cmd/shardfs-warm
SL=$WORK/slurm
NODE=$(hostname -s)
export SLURM_CONF=$SL/slurm.conf
PIDS=()         # munged and every slurmctld, slurmd started: ended on exit
CG_MADE=()      # cgroup directories made here (slurmd's or ours), removed on exit
SLURMD_PID=
CTLD_PID=

slurm_cleanup() {
	set +e
	if [ -n "$SLURMD_PID" ]; then
		squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null
		for _ in $(seq 100); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
	fi
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null
	done
	# Steps of our jobs (slurmstepd inherits SLURM_CONF from slurmd) and
	# background warm-ups the epilog did not end.
	for p in $(pgrep -x slurmstepd); do
		tr '\0' '\n' 2>/dev/null <"/proc/$p/environ" | grep -qxF "SLURM_CONF=$SLURM_CONF" && kill -9 "$p"
	done
	for p in "$SL"/run/job_*.pid; do
		[ -e "$p" ] && kill -9 -- "-$(cut -d' ' -f1 "$p")" 2>/dev/null
	done
	for p in "${CG_MADE[@]}"; do
		find "$p" -depth -type d -exec rmdir {} + 2>/dev/null
	done
	sfs_cleanup
}
trap slurm_cleanup EXIT

# --- the dataset, the cluster, the mount ----------------------------------------
mkdir -p "$EXPORT/warm" "$EXPORT/slow"
head -c $((16 << 20)) /dev/urandom | split -b $((4 << 20)) -d - "$EXPORT/warm/part-"
head -c $((144 << 20)) /dev/urandom | split -b $((24 << 20)) -d - "$EXPORT/slow/part-"
WARM_BYTES=$((16 << 20))
sfs_cluster_up 2
sfs_mount "cache_dir=$WORK/cache"

# --- munged, slurmctld, slurmd --------------------------------------------------
mkdir -p "$SL/ctld" "$SL/spool" "$SL/run" "$SL/out" "$SL/jobs"
# free_port: a TCP port nothing listens on.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		[ -z "$(ss -Hltn "sport = :$p")" ] && { echo "$p"; return 0; }
	done
	return 1
}
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
[ "$CTLD_PORT" != "$SLURMD_PORT" ] || SLURMD_PORT=$((CTLD_PORT + 1))
head -c 1024 /dev/urandom >"$SL/munge.key"
chmod 0400 "$SL/munge.key"
munged -F -f --key-file="$SL/munge.key" --socket="$SL/munge.sock" --pid-file="$SL/munged.pid" \
	--log-file="$SL/munged.log" --seed-file="$SL/munged.seed" 2>>"$SL/munged.log" &
PIDS+=($!)
wait_for 60 test -S "$SL/munge.sock" || { cat "$SL/munged.log"; echo "Bail out! munged did not start"; exit 1; }

# slurm_conf PROCTRACK TASK: slurm.conf, cgroup.conf and the prolog's
# settings (beside slurm.conf, where the prolog looks for them).
slurm_conf() {
	cat >"$SL/slurm.conf" <<-EOF
	ClusterName=sfstest
	SlurmctldHost=$NODE(127.0.0.1)
	SlurmUser=root
	SlurmdUser=root
	SlurmctldPort=$CTLD_PORT
	SlurmdPort=$SLURMD_PORT
	AuthType=auth/munge
	AuthInfo=socket=$SL/munge.sock
	CredType=cred/munge
	StateSaveLocation=$SL/ctld
	SlurmdSpoolDir=$SL/spool
	SlurmctldPidFile=$SL/slurmctld.pid
	SlurmdPidFile=$SL/slurmd.pid
	SlurmctldLogFile=$SL/slurmctld.log
	SlurmdLogFile=$SL/slurmd.log
	SlurmctldDebug=info
	# debug2: slurmd logs what a prolog or epilog prints (prep/script)
	SlurmdDebug=debug2
	ProctrackType=proctrack/$1
	TaskPlugin=task/$2
	JobAcctGatherType=jobacct_gather/none
	AccountingStorageType=accounting_storage/none
	JobCompType=jobcomp/none
	SchedulerType=sched/builtin
	SelectType=select/cons_tres
	SelectTypeParameters=CR_CPU
	MpiDefault=none
	ReturnToService=2
	Prolog=$SRC_ROOT/packaging/deploy/slurm/prolog.sh
	Epilog=$SRC_ROOT/packaging/deploy/slurm/epilog.sh
	PrologFlags=Alloc
	NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
	PartitionName=test Nodes=$NODE Default=YES MaxTime=10 State=UP
	EOF
	cat >"$SL/cgroup.conf" <<-EOF
	CgroupPlugin=autodetect
	CgroupMountpoint=/sys/fs/cgroup
	ConstrainCores=$([ "$2" = cgroup ] && echo yes || echo no)
	EOF
}
# prolog_conf WAIT: the prolog's settings; the tool from this tree.
prolog_conf() {
	cat >"$SL/shardfs-prolog.conf" <<-EOF
	SHARDFS_WARM_TOOL=$WARM
	SHARDFS_WARM_WAIT=$1
	SHARDFS_PROLOG_RUN_DIR=$SL/run
	EOF
}
node_state() { sinfo -h -n "$NODE" -o %T 2>/dev/null; }
node_idle() { [ "$(node_state)" = idle ]; }

# The slurm_NODE cgroups that slurmd makes, where none were before.
for d in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
	[ -e "${d}slurm_$NODE" ] || [ -e "${d}slurm" ] || CG_MADE+=("${d}slurm_$NODE" "${d}slurm")
done

# slurm_start PROCTRACK TASK: (re)start slurmctld (with no state: -c, so a
# node drained under the first setup starts fresh) and slurmd with that
# tracking; true when the node is idle within 120 s (a loaded machine
# starts them slowly), false as soon as slurmd exits.
slurm_start() {
	local p
	for p in $SLURMD_PID $CTLD_PID; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	slurm_conf "$1" "$2"
	slurmctld -D -c -i 2>>"$SL/slurmctld.stderr" &
	CTLD_PID=$!
	PIDS+=("$CTLD_PID")
	slurmd -D 2>>"$SL/slurmd.stderr" &
	SLURMD_PID=$!
	PIDS+=("$SLURMD_PID")
	for _ in $(seq 1200); do
		kill -0 "$SLURMD_PID" 2>/dev/null || return 1
		node_idle && return 0
		sleep 0.1
	done
	return 1
}

# submit_job OUT COMMENT BODY: sbatch a bash script; prints the job id.
N_JOBS=0
submit_job() {
	N_JOBS=$((N_JOBS + 1))
	printf '#!/bin/bash\n%s\n' "$3" >"$SL/jobs/$N_JOBS.sh"
	sbatch --parsable -o "$1" ${2:+--comment="$2"} "$SL/jobs/$N_JOBS.sh" 2>>"$SL/sbatch.log"
}
job_state() { scontrol show job -o "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# job_over ID: the job ended and its epilog ran (the node is idle again).
job_over() {
	case $(job_state "$1") in
	COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) node_idle ;;
	*) return 1 ;;
	esac
}
stat_job() { counter "shardfs_job_read_${2}_total{job=\"slurm/$1\"}"; }

# --- job tracking: cgroups where slurmd can --------------------------------------
CG_MODE=slurmd
if [ "${SFS_SLURM_CGROUP:-1}" != 0 ] && slurm_start cgroup cgroup; then
	id=$(submit_job "$SL/out/probe" "" 'cat /proc/self/cgroup')
	wait_for 120 job_over "$id"
	if grep -q "/job_$id/step_batch" "$SL/out/probe" 2>/dev/null; then
		diag "proctrack/cgroup, task/cgroup: $(grep -m1 "job_$id" "$SL/out/probe")"
	else
		CG_MODE=ours
		diag "proctrack/cgroup: job $id (state $(job_state "$id"), node $(node_state)) shows no job_$id cgroup:" \
			"$({ tr '\n' ' ' <"$SL/out/probe"; } 2>/dev/null)"
		grep 'error:' "$SL/slurmd.log" 2>/dev/null | grep -iv pmix | tail -3 | sed 's/^/# slurmd: /'
	fi
else
	CG_MODE=ours
	[ "${SFS_SLURM_CGROUP:-1}" = 0 ] && diag "SFS_SLURM_CGROUP=0: proctrack/linuxproc"
	grep 'error:' "$SL/slurmd.log" 2>/dev/null | grep -iv pmix | tail -3 | sed 's/^/# slurmd: /'
fi
if [ "$CG_MODE" = ours ]; then
	slurm_start linuxproc none || {
		tail -20 "$SL/slurmd.log"
		echo "Bail out! slurmd did not start with proctrack/linuxproc (node: $(node_state))"
		exit 1
	}
	# Where to build slurmd's layout: a v1 hierarchy (as proctrack/cgroup
	# uses freezer), else the v2 root.
	if [ "$(stat -f -c %T /sys/fs/cgroup/freezer 2>/dev/null)" = cgroupfs ]; then
		CG_ROOT=/sys/fs/cgroup/freezer
	elif [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
		CG_ROOT=/sys/fs/cgroup
	else
		echo "Bail out! no cgroup hierarchy to place jobs in"
		exit 1
	fi
	diag "jobs tracked by proctrack/linuxproc; accounting checked in $CG_ROOT/slurm_$NODE/uid_0/job_ID/step_batch"
fi
check "slurmd runs, node $NODE idle" node_idle

# into_job_cgroup ID PID: move PID where slurmd would have put the job's
# batch step (only when slurmd does not).
into_job_cgroup() {
	[ "$CG_MODE" = ours ] || return 0
	local d=$CG_ROOT/slurm_$NODE/uid_0/job_$1/step_batch
	mkdir -p "$d" && echo "$2" >"$d/cgroup.procs"
}

# A job script: records its cgroup and pid, waits for GO (so the test can
# move it; up to 120 s), then runs BODY. Every job reads its files with cat
# from this shell's children, which inherit its cgroup.
job_script() {
	echo "cat /proc/self/cgroup >\"$SL/out/\$SLURM_JOB_ID.cgroup\"
echo \$\$ >\"$SL/out/\$SLURM_JOB_ID.pid\"
for _ in \$(seq 1200); do [ -e \"$SL/out/\$SLURM_JOB_ID.go\" ] && break; sleep 0.1; done
$1"
}
# go ID: let the job past its wait, after moving it into its cgroup; false
# when the job did not start or could not be moved.
go() {
	local rc=0
	wait_for 120 test -s "$SL/out/$1.pid" || return 1
	into_job_cgroup "$1" "$(cat "$SL/out/$1.pid")" || rc=1
	[ "$CG_MODE" = ours ] && cp "/proc/$(cat "$SL/out/$1.pid")/cgroup" "$SL/out/$1.cgroup"
	touch "$SL/out/$1.go"
	return $rc
}

# --- a job that names its dataset: warmed before it starts -----------------------
prolog_conf 1
"$WARM" --check "$MNT/warm" >"$WORK/cold" 2>&1
check "before the job: its dataset is not cached ($(tail -1 "$WORK/cold"))" grep -q ' 0/4 files complete' "$WORK/cold"
id=$(submit_job "$SL/out/warm" "shardfs-warm=$MNT/warm" "$(job_script "
'$WARM' --check '$MNT/warm' >'$SL/out/warm.check' 2>&1
cat '$MNT'/warm/part-* | cksum >'$SL/out/warm.sum'")")
check "sbatch --comment=shardfs-warm=$MNT/warm: job $id submitted" [ -n "$id" ]
check "job $id started" go "$id"
wait_for 180 job_over "$id"
check "job $id completed (state $(job_state "$id"))" [ "$(job_state "$id")" = COMPLETED ]
check "slurmd's log: the prolog warmed it before the job ($(grep -o "shardfs-prolog: job $id: warmed in [0-9]* s" "$SL/slurmd.log"))" \
	grep -q "shardfs-prolog: job $id: warmed in [0-9]* s" "$SL/slurmd.log"
check "the job found its dataset cached when it started ($(tail -1 "$SL/out/warm.check" 2>/dev/null))" \
	grep -q ' 4/4 files complete' "$SL/out/warm.check"
check "the job read its dataset byte-exact" \
	[ "$(cat "$SL/out/warm.sum" 2>/dev/null)" = "$(cat "$EXPORT"/warm/part-* | cksum)" ]
# (with our layout, the job's cgroup as it was once moved)
check "the job ran in its Slurm job's cgroup ($CG_MODE: $(grep -m1 "/job_$id/" "$SL/out/$id.cgroup"))" \
	grep -q "/job_$id/step_batch" "$SL/out/$id.cgroup"
rb=$(stat_job "$id" bytes)
cb=$(stat_job "$id" cache_bytes)
check "stats: job=\"slurm/$id\" read the dataset ($rb of $WARM_BYTES bytes)" [ "$rb" = "$WARM_BYTES" ]
check "stats: ... all of it from the cache ($cb bytes)" [ "$cb" = "$WARM_BYTES" ]

# --- a dataset that does not exist: logged, the job runs, the node stays up ------
id=$(submit_job "$SL/out/missing" "shardfs-warm=$MNT/no-such-dataset" \
	"$(job_script "cat '$MNT/no-such-dataset/part-00'")")
go "$id"
wait_for 180 job_over "$id"
check "slurmd's log: the prolog names the missing dataset" \
	grep -q "shardfs-prolog: job $id: not warming $MNT/no-such-dataset: no such file or directory" "$SL/slurmd.log"
check "the job started and failed on its own open (state $(job_state "$id"))" \
	bash -c "[ '$(job_state "$id")' = FAILED ] && grep -q 'No such file or directory' '$SL/out/missing'"
check "the node is not drained (sinfo: $(node_state))" node_idle
check "scontrol show node: no DRAIN" bash -c "! scontrol show node '$NODE' | grep -q 'State=[A-Z+]*DRAIN'"

# --- a background warm-up that outlives the job: the epilog ends it --------------
# 144 MiB at 2 x 8 Mbit/s: over a minute of warming, so that it still runs
# when the job looks and when the epilog ends it on a loaded machine
# (slurmd may take many seconds to start the job); the job lasts 3 s.
prolog_conf 0
"$CLUSTER" cap "$CID" all 8mbit >/dev/null
id=$(submit_job "$SL/out/bg" "shardfs-warm=$MNT/slow" "$(job_script "
read -r p _ <'$SL/run/job_'\$SLURM_JOB_ID.pid && kill -0 -- -\$p && echo \"running \$p\" >'$SL/out/bg.seen'
sleep 3")")
go "$id"
wait_for 180 job_over "$id"
bgpid=$(awk '{ print $2 }' "$SL/out/bg.seen" 2>/dev/null)
check "slurmd's log: the prolog started the warm-up in the background" \
	grep -q "shardfs-prolog: job $id: warming in the background (pid ${bgpid:-?})" "$SL/slurmd.log"
check "the job ran while its warm-up was running (pid ${bgpid:-none})" [ -n "$bgpid" ]
check "the epilog ended it: no process of its group is left" bash -c "! kill -0 -- -${bgpid:-0} 2>/dev/null"
check "slurmd's log: the epilog says so" \
	grep -q "shardfs-epilog: job $id: ended the background warm-up (pid ${bgpid:-?})" "$SL/slurmd.log"
check "the epilog removed the job's pid file" bash -c "[ -n '$bgpid' ] && [ ! -e '$SL/run/job_$id.pid' ]"
check "the node is still idle, not drained (sinfo: $(node_state))" node_idle
# Its files closed, the daemon fetches no more of them: with the cap off,
# the fetches in flight end at once, nothing grows after, and the dataset
# stays part-cached (a fetch that went on would finish it in a second).
"$CLUSTER" cap "$CID" all off >/dev/null
wait_idle
f0=$(fetched)
sleep 2
f1=$(fetched)
"$WARM" --check "$MNT/slow" >"$WORK/slow" 2>&1
check "no fetching after the epilog ($((f1 - f0)) bytes in 2 s), the warm-up cut short ($(tail -1 "$WORK/slow"))" \
	bash -c "[ '$f1' = '$f0' ] && grep -q ' [0-5]/6 files complete' '$WORK/slow'"

grep -o "shardfs-[a-z]*: job .*" "$SL/slurmd.log" | sed 's/^/# slurmd: /'
sfs_finish
