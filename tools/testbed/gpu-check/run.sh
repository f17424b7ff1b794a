#!/bin/bash
# run.sh: one-shot GPU-machine check of shardfs, run there from the repo
# root out of the bundle (tools/testbed/gpu-check/build-bundle.sh copies it to .gpu/):
#   bash .gpu/run.sh            (OUT=DIR for the logs; default /tmp/gpu-out)
#
#  1. machine facts (nvidia-smi, kernel, /dev/fuse, network namespaces)
#  2. test_staging_cuda, plain and ASan        -> staging_cuda.log, staging_cuda_asan.log
#  3. NFS cluster (tools/testbed/shardfs-cluster), files in its export, a shardfs
#     mount with cache_dir on a tmpfs, warmed, shardfs-stage-bench --passes 3
#     (default range and --range 16 MiB) and --procs 8 (STAGE, read() +
#     cudaMemcpy, cuFile in compat mode); again with the cache on disk
#                                              -> stage_bench.log, stats_tmpfs.txt, stats_disk.txt
#  4. test_staging_cuda under compute-sanitizer, if there is one, with the time left
#                                              -> staging_cuda_sanitizer.log
# Everything else it prints goes to run.log too. Every step has a timeout and
# the whole run a budget (SFS_GPU_BUDGET_S, default 360 s); a failed step is
# logged and the run goes on; cleanup always runs.
#
# .gpu/ is made by tools/testbed/gpu-check/build-bundle.sh (on the build machine,
# after a rebuild).
# Needs nothing outside the repo's tracked files and .gpu/ (built binaries,
# nfs-ganesha, rpcbind, fusermount3 and their libraries, from Debian 12; the
# target's glibc must be >= 2.36). Knobs: SFS_GPU_FILE_MB (256), SFS_GPU_NFILES
# (2), SFS_GPU_NODES (2), SFS_GPU_WORK (/var/tmp/shardfs-gpu.PID),
# SFS_GPU_DAEMONS ("shardfs": the daemons to bench on the tmpfs cache, in
# turn; "shardfs shardfs-old" for an A/B with a bundle made with
# SFS_GPU_OLD_DAEMON), SFS_GPU_DISK_DAEMONS (the same for the disk cache),
# SFS_GPU_ROUNDS (1: how many times each runs),
# SFS_GPU_DROP_CACHES (1: drop the page cache before the disk-cache bench),
# SFS_GPU_FORCE_NONETNS (1: skip the netns cluster, use one host-netns node).
set -u

G=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$G")
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
BUDGET=${SFS_GPU_BUDGET_S:-360}
RESERVE=25 # seconds kept for cleanup
FILE_MB=${SFS_GPU_FILE_MB:-256}
NFILES=${SFS_GPU_NFILES:-2}
NODES=${SFS_GPU_NODES:-2}
DROP_CACHES=${SFS_GPU_DROP_CACHES:-1}
W=${SFS_GPU_WORK:-/var/tmp/shardfs-gpu.$$}
CL=$ROOT/tools/testbed/shardfs-cluster
START=$SECONDS

exec > >(tee -a "$OUT/run.log") 2>&1
TEE_PID=$!

# shellcheck source=common.sh
. "$G/common.sh"
gpu_path_setup

tap_summary() {
	log "   $(grep -c '^ok' "$1") ok, $(grep -c '^not ok' "$1") not ok; last lines of ${1##*/}:"
	tail -n 6 "$1" | sed 's/^/   | /' >&2
}

# --- cleanup -----------------------------------------------------------------

MNT=$W/mnt
DPID=
ID=
SOLO_PID=
MADE_MTAB=0
cleanup() {
	set +e
	trap - EXIT INT TERM HUP
	log "== cleanup"
	umount_fs
	if [[ -n $ID ]]; then timeout 60 "$CL" stop "$ID" || log "cluster stop $ID failed"; fi
	if [[ -n $SOLO_PID ]]; then kill -KILL -- "-$SOLO_PID" 2>/dev/null; fi
	is_mounted "$W/cache-tmpfs" && umount "$W/cache-tmpfs"
	if is_mounted "$MNT" || is_mounted "$W/cache-tmpfs"; then
		log "still mounted under $W: not removing it"
	elif [[ -n $W && -d $W ]]; then
		timeout 60 rm -rf "$W"
	fi
	((MADE_MTAB)) && rm -f /etc/mtab
	finish_log
}
trap_cleanup

# --- 1. the machine -----------------------------------------------------------

log "== machine"
{
	machine_facts
	if command -v nvidia-smi >/dev/null; then
		timeout 30 nvidia-smi -L || echo "nvidia-smi -L failed: $?"
		timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader
	else
		echo "nvidia-smi: not found"
	fi
	ls -l /dev/nvidia* 2>&1 | head -8
} >&2

# CUDA runtime: the target's own where the loader finds it (as the test and
# the daemon look for it), else the bundle's libcudart.so.13 (13.0).
cudart_sys=$(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.13 / {print $NF; exit}')
[[ -n $cudart_sys && -e $cudart_sys ]] || cudart_sys=
for f in /usr/local/cuda/lib64/libcudart.so.13 /usr/local/cuda/lib64/libcudart.so; do
	[[ -z $cudart_sys && -e $f ]] && cudart_sys=$f
done
if [[ -n $cudart_sys ]]; then
	CUDA_LIBS=
	log "libcudart: the target's, $cudart_sys"
else
	CUDA_LIBS=$G/cuda
	log "libcudart: none found on the target (ldconfig, /usr/local/cuda/lib64): the bundle's 13.0"
	ls -d /usr/local/cuda*/lib*/libcudart.so* /usr/lib/x86_64-linux-gnu/libcudart.so* 2>/dev/null | head -5 >&2
fi
export SFS_GPU_EXTRA_LIBS=$CUDA_LIBS
log "libcuda.so.1 (driver): $(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 / {print $NF; exit}')"
# "${CUDA_ENV[@]}" CMD...: CMD with only the CUDA fallback on the library path
CUDA_ENV=(env)
[[ -n $CUDA_LIBS ]] && CUDA_ENV=(env LD_LIBRARY_PATH="$CUDA_LIBS")

machine_prep
# network namespaces and veth (tools/testbed/shardfs-cluster needs both)
NETNS_OK=0
probe=sfsgpuprobe$$
if ip netns add "$probe" 2>&1; then
	if ip -n "$probe" link add sfsgpa type veth peer name sfsgpb 2>&1; then
		NETNS_OK=1
	fi
	ip netns del "$probe"
fi
log "ip: $(command -v ip); network namespaces + veth: $( ((NETNS_OK)) && echo ok || echo FAILED)"
log "tc: $(command -v tc)  nsenter: $(command -v nsenter)  unshare: $(command -v unshare)  python3: $(command -v python3 || echo none)"
RND=$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo '?')
log "vm.mmap_rnd_bits=$RND"
SAN=$(command -v compute-sanitizer 2>/dev/null || ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda*/bin/compute-sanitizer \
	/usr/local/cuda*/compute-sanitizer/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
log "compute-sanitizer: ${SAN:-none}"

# --- 2. test_staging_cuda -----------------------------------------------------

SAN_ENV=(ASAN_OPTIONS=protect_shadow_gap=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
F=$OUT/staging_cuda.log
run_step staging_cuda 120 "${CUDA_ENV[@]}" "${SAN_ENV[@]}" "$G/libexec/test_staging_cuda" >"$F" 2>&1
rc=$?
((rc == 77)) && log "   staging_cuda: SKIPPED (exit 77)"
tap_summary "$F"

# ASan: GCC 12's runtime from the bundle. Kernels with mmap_rnd_bits > 28
# (Ubuntu 24.04's 32) make older ASan runtimes crash at start: no ASLR then.
ASAN_LIBS=$G/lib-asan
ldconfig -p 2>/dev/null | grep -q 'libstdc++\.so\.6 ' || ASAN_LIBS+=:$G/lib-compat
ASAN_PRE=()
if [[ $RND =~ ^[0-9]+$ ]] && ((RND > 28)); then
	ASAN_PRE=(setarch "$(uname -m)" -R)
	log "   ASan test without ASLR (setarch -R): mmap_rnd_bits=$RND > 28"
fi
F=$OUT/staging_cuda_asan.log
run_step staging_cuda_asan 120 env LD_LIBRARY_PATH="$ASAN_LIBS${CUDA_LIBS:+:$CUDA_LIBS}" "${SAN_ENV[@]}" \
	"${ASAN_PRE[@]}" "$G/libexec/test_staging_cuda_asan" >"$F" 2>&1
rc=$?
((rc == 77)) && log "   staging_cuda_asan: SKIPPED (exit 77)"
if ((rc != 0 && rc != 77)) && grep -q LeakSanitizer "$F"; then
	log "   LeakSanitizer reported leaks: again with detect_leaks=0 (appended to the same log)"
	echo "=== again with ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0" >>"$F"
	run_step staging_cuda_asan_noleaks 120 env LD_LIBRARY_PATH="$ASAN_LIBS${CUDA_LIBS:+:$CUDA_LIBS}" \
		ASAN_OPTIONS=protect_shadow_gap=0:detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"${ASAN_PRE[@]}" "$G/libexec/test_staging_cuda_asan" >>"$F" 2>&1
fi
tap_summary "$F"

# --- 3. cluster, mount, warm, stage-bench -------------------------------------

MODE=
ADDRS=
FILES=()
BENCH=$OUT/stage_bench.log
: >"$BENCH"

# Single ganesha + rpcbind in the host network namespace, reached at
# 127.0.0.1 (no netns or veth needed): the fallback when the cluster does not
# start. No Bind_addr: with no non-loopback IPv4 address (a VM without
# network) ganesha cannot resolve 127.0.0.1 as a bind address.
solo_up() {
	local S=$W/solo i
	mkdir -p "$S/run/rpcbind" "$S/varlibnfs/ganesha" /var/lib/nfs
	: >"$S/ganesha.log"
	cat >"$S/ganesha.conf" <<EOF
NFS_CORE_PARAM {
	NFS_Port = 2049;
	MNT_Port = 20048;
	Enable_NLM = false;
	Enable_RQUOTA = false;
	Enable_UDP = false;
	Protocols = 3, 4;
	mount_path_pseudo = true;
}
NFSV4 { Graceless = true; }
NFS_KRB5 { Active_krb5 = false; }
EXPORT {
	Export_Id = 1;
	Path = "$W/export";
	Pseudo = /ifs;
	Access_Type = RO;
	Squash = No_Root_Squash;
	SecType = sys;
	Protocols = 3, 4;
	Transports = TCP;
	MaxRead = 1048576;
	PrefRead = 1048576;
	Attr_Expiration_Time = 0;
	FSAL { Name = VFS; }
}
EOF
	setsid unshare --mount --propagation private -- /bin/sh -c '
		S=$1
		mount --bind "$S/run" /run && mount --bind "$S/varlibnfs" /var/lib/nfs || exit 1
		rpcbind -f >"$S/rpcbind.log" 2>&1 &
		i=0
		while [ ! -S /run/rpcbind.sock ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
		exec ganesha.nfsd -F -f "$S/ganesha.conf" -L "$S/ganesha.log" -p "$S/ganesha.pid" -N NIV_EVENT
	' sh "$S" </dev/null >"$S/solo.out" 2>&1 &
	SOLO_PID=$!
	for ((i = 0; i < 300; i++)); do
		if timeout 3 rpcinfo -t 127.0.0.1 nfs 3 >/dev/null 2>&1 &&
			timeout 3 rpcinfo -t 127.0.0.1 mountd 3 >/dev/null 2>&1; then
			ADDRS=127.0.0.1
			return 0
		fi
		alive "$SOLO_PID" || break
		sleep 0.1
	done
	log "single node did not come up; its logs:"
	tail -n 20 "$S/solo.out" "$S/rpcbind.log" "$S/ganesha.log" >&2
	return 1
}

cluster_up() {
	ID=gp$((RANDOM % 10000))
	run_step cluster_start 60 "$CL" start --id "$ID" --nodes "$NODES" --export "$W/export" \
		--state "$W/cluster" >"$W/cluster.out" 2>"$W/cluster.err"
	local rc=$?
	cat "$W/cluster.err" >&2
	if ((rc == 0)); then
		ADDRS=$(tail -n 1 "$W/cluster.out")
		return 0
	fi
	local f
	for f in "$W"/cluster/failed-start/node1/* "$W"/cluster/node1/*.log "$W"/cluster/node1/*.out; do
		[[ -f $f ]] || continue
		log "--- $f (last lines)"
		tail -n 15 "$f" >&2
	done
	timeout 60 "$CL" stop "$ID" >&2
	ID=
	return 1
}

# mount_fs CACHE_DIR TAG [DAEMON]: shardfs (or .gpu/bin/DAEMON) at $MNT
# (foreground daemon in the background, its log in $W/daemon-TAG.log)
mount_fs() {
	local cache=$1 tag=$2 daemon=${3:-shardfs} i pre=()
	[[ $MODE == cluster ]] && pre=("$CL" exec "$ID" --)
	mkdir -p "$MNT" "$cache"
	CACHE=$cache
	log "== mount ($tag): $daemon -f $ADDRS:/ifs $MNT -o cache_dir=$cache"
	"${pre[@]}" "$G/bin/$daemon" -f "$ADDRS:/ifs" "$MNT" -o "cache_dir=$cache" \
		</dev/null >"$W/daemon-$tag.log" 2>&1 &
	DPID=$!
	for ((i = 0; i < 200; i++)); do
		is_mounted "$MNT" && break
		alive "$DPID" || break
		sleep 0.1
	done
	if ! is_mounted "$MNT"; then
		log "mount ($tag) FAILED; daemon log:"
		tail -n 30 "$W/daemon-$tag.log" >&2
		SUMMARY+=("mount $tag: FAILED")
		return 1
	fi
	SUMMARY+=("mount $tag: ok")
	return 0
}

umount_fs() {
	local i tag=${1:-}
	if is_mounted "$MNT"; then
		fusermount3 -u "$MNT" 2>&1 || umount "$MNT" 2>&1 || umount -l "$MNT"
	fi
	if alive "$DPID"; then
		for ((i = 0; i < 100; i++)); do alive "$DPID" || break; sleep 0.1; done
		if alive "$DPID"; then
			log "daemon $DPID still alive after unmount: SIGKILL"
			kill -KILL "$DPID" 2>/dev/null
		fi
	fi
	if [[ -n $tag && -s $W/daemon-$tag.log ]]; then
		log "daemon log ($tag), last lines:"
		tail -n 8 "$W/daemon-$tag.log" | sed 's/^/   | /' >&2
	fi
	DPID=
}

# warm TAG: whole files into the cache (shardfs-warm, or cat where no python3)
warm() {
	local m=() f
	for f in "${FILES[@]}"; do m+=("$MNT/${f##*/}"); done
	if command -v python3 >/dev/null; then
		run_step "warm_$1" 150 python3 "$ROOT/tools/cmd/shardfs-warm" -q "${m[@]}"
		python3 "$ROOT/tools/cmd/shardfs-warm" --check "${m[@]}" 2>&1 | tail -n 4 >&2
	else
		run_step "warm_cat_$1" 150 cat "${m[@]}" >/dev/null
		for ((i = 0; i < 100; i++)); do
			[[ $(awk '/^shardfs_prefetch_inflight_bytes / {print $2}' "$MNT/.shardfs/stats") == 0 &&
				$(awk '/^shardfs_cache_write_queue_bytes / {print $2}' "$MNT/.shardfs/stats") == 0 ]] && break
			sleep 0.1
		done
	fi
}

# bench TAG: stage-bench with the default range, 16 MiB ranges, and 8
# processes at once (staging, then doing read()+cudaMemcpy); each beside the
# cache's O_DIRECT rate, cuFile in compat mode, and the daemon's CPU per GiB
# (the bench finds the serving process in the mount's stats file)
bench() {
	local tag=$1 m=() f args from extra
	for f in "${FILES[@]}"; do m+=("$MNT/${f##*/}"); done
	from=$(wc -l <"$BENCH" 2>/dev/null || echo 0) # this call's lines are echoed below
	extra="--cache-dir $CACHE"
	for args in "--passes 3" "--passes 3 --range 16777216" "--passes 2 --procs 8"; do
		# shellcheck disable=SC2086
		{
			echo "=== [$tag] shardfs-stage-bench $args $extra ${m[*]}"
			run_step "bench_${tag}_${args// /_}" 120 "${CUDA_ENV[@]}" CUFILE_LOGFILE_PATH="$OUT/cufile.log" \
				"$G/libexec/shardfs-stage-bench" $args $extra "${m[@]}" 2>&1
			echo "=== rc=$?"
			echo
		} >>"$BENCH"
	done
	tail -n +$((from + 1)) "$BENCH" | sed 's/^/   | /' >&2
	cp "$MNT/.shardfs/stats" "$OUT/stats_${tag%%-*}.txt" 2>&1 || log "no stats file at $MNT/.shardfs/stats"
}

# each_daemon CACHE TAG DROP DAEMON...: SFS_GPU_ROUNDS rounds of each daemon
# in turn on the cache dir CACHE (the first warms it, the others find it
# warm): mount, warm, drop the page cache where DROP is 1, bench, unmount.
# Runs are tagged TAG, or TAG-DAEMON for a daemon other than shardfs.
each_daemon() {
	local cache=$1 base=$2 drop=$3 round d tag
	shift 3
	for ((round = 1; round <= ${SFS_GPU_ROUNDS:-1}; round++)); do
		for d in "$@"; do
			tag=$base
			[[ $d == shardfs ]] || tag=$base-$d
			mount_fs "$cache" "$tag" "$d" || continue
			warm "$tag"
			if [[ $drop == 1 ]]; then
				sync
				echo 3 >/proc/sys/vm/drop_caches && log "page cache dropped (cache files now cold on disk)"
			fi
			bench "$tag"
			umount_fs "$tag"
		done
	done
}

stage_part() {
	local i mb
	mkdir -p "$W/export" "$MNT" || return 1
	log "work dir $W: $(df -hT "$W" | awk 'NR == 2 {print $1, $2, $5 " used of " $3}')"
	log "== data: $NFILES x $FILE_MB MiB from /dev/urandom"
	for ((i = 1; i <= NFILES; i++)); do
		head -c $((FILE_MB << 20)) /dev/urandom >"$W/export/shard-$i.bin" || return 1
		FILES+=("$W/export/shard-$i.bin")
	done
	if [[ ${SFS_GPU_FORCE_NONETNS:-0} != 1 ]] && cluster_up; then
		MODE=cluster
		log "cluster $ID: $ADDRS"
	else
		log "== no netns cluster: one ganesha in the host network namespace (127.0.0.1)"
		solo_up || return 1
		MODE=solo
		SUMMARY+=("nfs: single host-netns node (fallback)")
	fi

	# (a) cache on a tmpfs of its own
	mb=$((NFILES * FILE_MB * 11 / 10 + 256))
	mkdir -p "$W/cache-tmpfs"
	if mount -t tmpfs -o size=${mb}m shardfs-gpu-cache "$W/cache-tmpfs"; then
		# shellcheck disable=SC2086
		each_daemon "$W/cache-tmpfs/c" tmpfs 0 ${SFS_GPU_DAEMONS:-shardfs}
	else
		log "tmpfs mount failed: cache on /dev/shm instead"
		# shellcheck disable=SC2086
		each_daemon "/dev/shm/shardfs-gpu-cache.$$" tmpfs 0 ${SFS_GPU_DAEMONS:-shardfs}
		rm -rf "/dev/shm/shardfs-gpu-cache.$$"
	fi

	# (b) cache on the disk under the work dir
	if (($(left) - RESERVE < 60)); then
		log "SKIP disk-cache run: $(left)s left"
		SUMMARY+=("disk-cache run: skipped (time)")
		return 0
	fi
	# An A/B on the disk cache as on tmpfs: SFS_GPU_DISK_DAEMONS.
	# shellcheck disable=SC2086
	each_daemon "$W/cache-disk" disk "$DROP_CACHES" ${SFS_GPU_DISK_DAEMONS:-shardfs}
}
stage_part || log "stage part stopped early"
if [[ -n $ID ]]; then
	timeout 60 "$CL" stop "$ID" >&2 && log "cluster $ID stopped"
	ID=
fi

# --- 4. compute-sanitizer -----------------------------------------------------

if [[ -n $SAN ]]; then
	F=$OUT/staging_cuda_sanitizer.log
	run_step staging_cuda_sanitizer 240 "${CUDA_ENV[@]}" "${SAN_ENV[@]}" "$SAN" --tool memcheck \
		--target-processes all --error-exitcode 99 "$G/libexec/test_staging_cuda" >"$F" 2>&1
	tap_summary "$F"
	grep -E 'ERROR SUMMARY' "$F" | head -3 >&2
else
	log "compute-sanitizer: not found, skipped"
fi
exit 0
