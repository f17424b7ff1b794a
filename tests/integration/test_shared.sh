#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A shared training node (issue 11), on a real mount of a real 2-node cluster:
# - two unprivileged users and a group: with allow_other, modes 0600/0640/0644,
#   group membership and directory search bits give the same allow/deny
#   answers through the mount as on the exported directory itself;
#   allow_other_unchecked restores the old behaviour (anyone reads anything);
# - readers moved into cgroups named like Slurm's and Kubernetes' (cgroup v2)
#   are counted under job="slurm/N" and job="k8s/UID" with their exact bytes;
#   one process's many reads read /proc once; 10,000 short-lived readers
#   leave the pid cache at its bound;
# - the stats file parses with prometheus_client (when installed), and
#   shardfs-stat --jobs shows the jobs.
. "$(dirname "$0")/lib.sh"
sfs_require
for t in useradd userdel groupadd groupdel runuser python3; do
	command -v "$t" >/dev/null || skip "$t is not installed"
done
STAT=$SRC_ROOT/tools/cmd/shardfs-stat
U1=sfsa$$ U2=sfsb$$ G=sfsg$$
CGROOT=
CG=

cleanup_shared() {
	set +e
	if [ -n "$CG" ] && [ -d "$CG" ]; then
		find "$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
	fi
	userdel "$U1" 2>/dev/null
	userdel "$U2" 2>/dev/null
	groupdel "$G" 2>/dev/null
}
trap 'cleanup_shared; sfs_cleanup' EXIT

groupadd "$G" || { echo "Bail out! groupadd failed"; exit 1; }
useradd -M -N -s /bin/sh -G "$G" "$U1" && useradd -M -N -s /bin/sh "$U2" ||
	{ echo "Bail out! useradd failed"; exit 1; }
UID1=$(id -u "$U1") UID2=$(id -u "$U2")
diag "users $U1 ($UID1, in $G) and $U2 ($UID2)"

# --- the export: files owned by different uids and gids --------------------------
mkdir -p "$EXPORT"
chmod 0755 "$WORK"
mk() { # mk NAME OWNER:GROUP MODE [BYTES]
	head -c "${4:-100}" /dev/urandom >"$EXPORT/$1"
	chown "$2" "$EXPORT/$1"
	chmod "$3" "$EXPORT/$1"
}
mk u1-0600 "$U1:users" 0600
mk u1-0640-g "$U1:$G" 0640
mk root-0640-g "root:$G" 0640
mk root-0644 root:root 0644
mk root-0600 root:root 0600
mk u2-0400 "$U2:users" 0400
mk root-0604 "root:$G" 0604 # group members are denied: the group bits win
mkdir -m 0700 "$EXPORT/u1-private" && chown "$U1" "$EXPORT/u1-private"
mk u1-private/open-0644 "$U1:users" 0644
mkdir -m 0711 "$EXPORT/search-only"
mk search-only/0644 root:root 0644
FILES="u1-0600 u1-0640-g root-0640-g root-0644 root-0600 u2-0400 root-0604 u1-private/open-0644 search-only/0644"
# Files for the job accounting: sizes that are not multiples of anything.
mk job-slurm root:root 0644 $((3 << 20 | 12345))
mk job-k8s root:root 0644 $((5 << 20 | 777))
mk job-k8s-systemd root:root 0644 $((1 << 20 | 4321))
mk job-uid root:root 0644 $((2 << 20 | 99))
mk small root:root 0644 65536
sfs_cluster_up 2

# answer USER PATH: allow or deny for reading the first 10 bytes.
answer() { if runuser -u "$1" -- head -c 10 "$2" >/dev/null 2>&1; then echo allow; else echo deny; fi; }
# Compare every user's answer for every file on the mount with the export.
# Expected answers are written out too, so both sides can't be wrong alike.
compare_all() {
	local label=$1 u f l m bad=0
	for u in "$U1" "$U2"; do
		for f in $FILES; do
			l=$(answer "$u" "$EXPORT/$f")
			m=$(answer "$u" "$MNT/$f")
			[ "$l" = "$m" ] || { diag "$label: $u $f: local $l, mount $m"; bad=1; }
		done
	done
	return $bad
}
want() { [ "$(answer "$1" "$MNT/$2")" = "$3" ] || { diag "$1 $2: want $3"; return 1; }; }

# --- allow_other: kernel permission checks ------------------------------------------
sfs_mount "allow_other,timeo=20,retrans=3,cache_dir=$WORK/cache"
opts=$(awk -v m="$MNT" '$2 == m { print $4 }' /proc/mounts)
check "allow_other adds default_permissions to the mount ($opts)" \
	bash -c "[[ ',$opts,' == *,default_permissions,* && ',$opts,' == *,allow_other,* ]]"
check "the local export gives the expected answers" bash -c "
	[ \$(runuser -u $U2 -- head -c 10 '$EXPORT/u1-0600' 2>/dev/null | wc -c) = 0 ] &&
	[ \$(runuser -u $U1 -- head -c 10 '$EXPORT/root-0640-g' | wc -c) = 10 ]"
check "every user x file answer on the mount matches the export" compare_all "allow_other"
check "owner reads 0600, other user does not" eval 'want "$U1" u1-0600 allow && want "$U2" u1-0600 deny'
check "group member reads 0640, non-member does not" eval 'want "$U1" root-0640-g allow && want "$U2" root-0640-g deny'
check "0644 readable by both; root-owned 0600 by neither" eval 'want "$U1" root-0644 allow && want "$U2" root-0644 allow && want "$U1" root-0600 deny && want "$U2" root-0600 deny'
check "a 0700 directory hides a 0644 file from others" eval 'want "$U1" u1-private/open-0644 allow && want "$U2" u1-private/open-0644 deny'
check "group bits deny a member of the file's group (0604)" eval 'want "$U1" root-0604 deny && want "$U2" root-0604 allow'
check "ls of a 0700 directory is refused to others, allowed to its owner" bash -c "
	! runuser -u $U2 -- ls '$MNT/u1-private' >/dev/null 2>&1 &&
	runuser -u $U1 -- ls '$MNT/u1-private' | grep -q open-0644"
check "root still reads everything" bash -c "head -c 10 '$MNT/u1-0600' >/dev/null && head -c 10 '$MNT/root-0600' >/dev/null"
check "the stats file is readable by any user" bash -c "runuser -u $U2 -- cat '$MNT/.shardfs/stats' | grep -q '^shardfs_uptime_seconds '"

# --- per-job accounting ----------------------------------------------------------------
# job_value JOB METRIC: the sample of METRIC{job="JOB"}, or empty.
job_value() { awk -v m="$2{job=\"$1\"} " 'index($0, m) == 1 { print $2; exit }' "$MNT/.shardfs/stats"; }
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	CGROOT=/sys/fs/cgroup
elif [ "$(stat -f -c %T /sys/fs/cgroup/unified 2>/dev/null)" = cgroup2fs ]; then
	CGROOT=/sys/fs/cgroup/unified
fi
if [ -n "$CGROOT" ] && mkdir "$CGROOT/sfstest$$" 2>/dev/null; then
	CG=$CGROOT/sfstest$$
else
	diag "SKIP job checks: no writable cgroup v2 hierarchy (${CGROOT:-none found})"
fi
PODUID=5f2c1a9e-3b7d-4c11-9a0e-1234567890ab
if [ -n "$CG" ]; then
	diag "cgroups under $CG"
	SL=$CG/slurm/uid_1000/job_4242/step_0
	KP=$CG/kubepods/burstable/pod$PODUID/ctr0
	KS=$CG/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod${PODUID//-/_}.slice
	SN=$CG/system.slice/slurmstepd.scope/job_777/step_0
	mkdir -p "$SL" "$KP" "$KS" "$SN"
	drop_caches
	# A reader moves itself into the cgroup, then execs the read.
	in_cgroup() { local cg=$1; shift; bash -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cg" "$@"; }
	# O_DIRECT: every byte reaches the daemon whatever the page cache holds
	# (a buffered cat fell short of the file size once in six runs).
	in_cgroup "$SL" dd if="$MNT/job-slurm" of=/dev/null bs=1M iflag=direct status=none
	in_cgroup "$KP" runuser -u "$U1" -- dd if="$MNT/job-k8s" of=/dev/null bs=1M iflag=direct status=none
	in_cgroup "$KS" dd if="$MNT/job-k8s-systemd" of=/dev/null bs=1M iflag=direct status=none
	check "Slurm job_4242 (cgroup v2 path .../job_4242/step_0): bytes = file size" \
		[ "$(job_value slurm/4242 shardfs_job_read_bytes_total)" = "$(stat -c %s "$EXPORT/job-slurm")" ]
	check "Kubernetes pod$PODUID (cgroupfs) + systemd-driver pod slice: bytes of both files" \
		[ "$(job_value "k8s/$PODUID" shardfs_job_read_bytes_total)" = \
		  "$(($(stat -c %s "$EXPORT/job-k8s") + $(stat -c %s "$EXPORT/job-k8s-systemd")))" ]
	req=$(job_value slurm/4242 shardfs_job_read_requests_total)
	cnt=$(awk -v m='shardfs_job_read_wait_seconds_count{job="slurm/4242"} ' 'index($0, m) == 1 { print $2 }' "$MNT/.shardfs/stats")
	inf=$(awk -v m='shardfs_job_read_wait_seconds_bucket{job="slurm/4242",le="+Inf"} ' 'index($0, m) == 1 { print $2 }' "$MNT/.shardfs/stats")
	check "the job's wait histogram counts every read request ($req requests, $cnt waits, +Inf $inf)" \
		bash -c "[ -n '$req' ] && [ '$req' -gt 0 ] && [ '$req' = '$cnt' ] && [ '$cnt' = '$inf' ]"
	# Read again from the local cache (page cache dropped, fetch buffers
	# freed at close): the job's cache bytes grow. The first read's cache
	# writes are waited for first.
	wait_idle
	c0=$(job_value slurm/4242 shardfs_job_read_cache_bytes_total)
	drop_caches
	in_cgroup "$SL" cat "$MNT/job-slurm" >/dev/null
	c1=$(job_value slurm/4242 shardfs_job_read_cache_bytes_total)
	check "a second read from the local cache counts as cache bytes ($((c1 - c0)) of $(stat -c %s "$EXPORT/job-slurm"))" \
		[ $((c1 - c0)) -ge $((3 << 19)) ]
	check "blocked time is reported for the job" bash -c "[ -n '$(job_value slurm/4242 shardfs_job_read_blocked_seconds_total)' ]"
	# Outside any job: uid/<uid>, unless this test itself runs inside one.
	if grep -qE '/job_[0-9]+(/|$)|pod' /proc/self/cgroup; then
		diag "this test runs inside a job's cgroup: uid/ fallback not checked"
	else
		b0=$(job_value "uid/$UID2" shardfs_job_read_bytes_total)
		runuser -u "$U2" -- cat "$MNT/job-uid" >/dev/null
		b1=$(job_value "uid/$UID2" shardfs_job_read_bytes_total)
		check "a reader in no job's cgroup is counted as uid/$UID2" \
			[ "$((b1 - ${b0:-0}))" = "$(stat -c %s "$EXPORT/job-uid")" ]
	fi
	# One process, 2,000 O_DIRECT reads: one /proc read, not one per request;
	# then 10,000 short-lived readers, each with its own pid. A pid's entry
	# lives 10 s (SFS_JOBS_DEFAULT_TTL_MS): the reads may take longer on a
	# loaded machine, and each 10 s may then read /proc once more.
	r0=$(stat_value shardfs_job_cgroup_reads_total)
	t0=$SECONDS
	in_cgroup "$SN" python3 - "$MNT/small" 2000 0 <<'PY'
import mmap, os, sys
path, n_reads, n_procs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
buf = mmap.mmap(-1, 4096)
def one(k):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    for i in range(k):
        if os.preadv(fd, [buf], (i % 16) * 4096) != 4096:
            sys.exit("short read")
    os.close(fd)
one(n_reads)
for p in range(n_procs):
    pid = os.fork()
    if pid == 0:
        one(1)
        os._exit(0)
    if os.waitpid(pid, 0)[1] != 0:
        sys.exit("a child failed")
PY
	r1=$(stat_value shardfs_job_cgroup_reads_total)
	most=$((2 + (SECONDS - t0) / 10))
	check "2,000 reads of one process in $((SECONDS - t0)) s: $((r1 - r0)) /proc reads (at most $most)" \
		bash -c "[ $((r1 - r0)) -ge 1 ] && [ $((r1 - r0)) -le $most ]"
	check "... counted under slurm/777: 2,000 x 4096 bytes" \
		[ "$(job_value slurm/777 shardfs_job_read_bytes_total)" = $((2000 * 4096)) ]
	# (8 at a time: one after another, each waits its turn for a CPU on a
	# loaded machine, and all of them outlast the test's timeout)
	in_cgroup "$SN" python3 - "$MNT/small" 0 10000 <<'PY'
import mmap, os, sys
path, n_procs = sys.argv[1], int(sys.argv[3])
buf = mmap.mmap(-1, 4096)
live = 0
def reap():
    global live
    if os.wait()[1] != 0:
        sys.exit("a child failed")
    live -= 1
for p in range(n_procs):
    if live == 8:
        reap()
    pid = os.fork()
    if pid == 0:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        os._exit(0 if os.preadv(fd, [buf], 0) == 4096 else 1)
    live += 1
while live:
    reap()
PY
	r2=$(stat_value shardfs_job_cgroup_reads_total)
	pids=$(stat_value shardfs_job_pid_entries)
	check "10,000 short-lived readers: each resolved once ($((r2 - r1)) /proc reads)" \
		bash -c "[ $((r2 - r1)) -ge 10000 ] && [ $((r2 - r1)) -le 10010 ]"
	check "... the pid cache stays at its bound: $pids entries <= 4096" \
		bash -c "[ -n '$pids' ] && [ '$pids' -le 4096 ] && [ '$pids' -ge 2048 ]"
	check "... and every read is in slurm/777" \
		[ "$(job_value slurm/777 shardfs_job_read_bytes_total)" = $(((2000 + 10000) * 4096)) ]
	check "shardfs_jobs counts the jobs" bash -c "[ \$(awk '\$1 == \"shardfs_jobs\" { print \$2 }' '$MNT/.shardfs/stats') -ge 3 ]"
	# shardfs-stat --jobs: a line per job, and JSON.
	"$STAT" --jobs "$MNT" >"$WORK/jobs.txt" 2>&1
	sed 's/^/# /' "$WORK/jobs.txt"
	check "shardfs-stat --jobs lists slurm/4242, slurm/777 and the pod" bash -c "
		grep -qE '^slurm/4242 ' '$WORK/jobs.txt' && grep -qE '^slurm/777 ' '$WORK/jobs.txt' &&
		grep -qE '^k8s/$PODUID ' '$WORK/jobs.txt'"
	check "shardfs-stat --jobs --json: bytes, p50/p99, blocked fraction" bash -c "
		'$STAT' --jobs --json '$MNT' | python3 -c '
import json, sys
r = json.load(sys.stdin)
j = {x[\"job\"]: x for x in r[\"jobs\"]}
s = j[\"slurm/777\"]
assert s[\"read_bytes\"] == 12000 * 4096, s
assert s[\"wait_p50_ms\"] is not None and s[\"wait_p99_ms\"] >= s[\"wait_p50_ms\"], s
assert 0 <= s[\"blocked\"] <= 1.0, s
assert s[\"read_mb_s\"] > 0, s
'"
else
	diag "per-job checks skipped: see above"
fi

# --- the stats file is valid Prometheus text -----------------------------------------
if /usr/bin/python3 -c 'import prometheus_client' 2>/dev/null; then
	check "prometheus_client parses the stats file, job families included" \
		/usr/bin/python3 -c '
import sys
from prometheus_client.parser import text_string_to_metric_families
fams = {f.name: f for f in text_string_to_metric_families(open(sys.argv[1]).read())}
for n in ("shardfs_job_read_bytes", "shardfs_job_read_requests", "shardfs_job_read_wait_seconds",
          "shardfs_job_read_cache_bytes", "shardfs_job_read_blocked_seconds", "shardfs_job_pid_entries"):
    assert n in fams, n
assert fams["shardfs_job_read_wait_seconds"].type == "histogram"
' "$MNT/.shardfs/stats"
else
	diag "python3-prometheus-client not installed: strict parse not checked"
fi
check "unmount" sfs_umount

# --- allow_other_unchecked: today's behaviour, by name ----------------------------------
sfs_mount "allow_other_unchecked,timeo=20,retrans=3"
opts=$(awk -v m="$MNT" '$2 == m { print $4 }' /proc/mounts)
check "allow_other_unchecked: allow_other without default_permissions ($opts)" \
	bash -c "[[ ',$opts,' == *,allow_other,* && ',$opts,' != *,default_permissions,* ]]"
check "allow_other_unchecked: the other user reads the 0600 file" \
	bash -c "[ \$(runuser -u $U2 -- head -c 10 '$MNT/u1-0600' | wc -c) = 10 ]"
check "allow_other_unchecked: and the root-owned 0600 file" \
	bash -c "[ \$(runuser -u $U2 -- head -c 10 '$MNT/root-0600' | wc -c) = 10 ]"
check "unmount" sfs_umount
if in_ns "$SHARDFS" "$ADDRS:/ifs" "$MNT" -o allow_other_unchecked,default_permissions 2>"$WORK/err"; then
	not_ok "allow_other_unchecked,default_permissions must refuse the mount"
	sfs_umount
else
	check "allow_other_unchecked,default_permissions refuses the mount: $(cat "$WORK/err")" \
		grep -q "contradict" "$WORK/err"
fi
sfs_finish
