#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The mount outlives its serving process (fs/restart/keeper.c), on a real 2-node
# cluster with a cache: five readers (whole shards twice, small files,
# random records, STAGE into a shm region registered once) compare every
# byte with the export while
# the serving process is killed with SIGKILL 10 times, 3 s apart, then
# stopped (SIGSTOP) and killed 3 times, then stopped and left (a wedge: the
# keeper replaces it after wedge_timeout) twice: no read fails, no byte is
# wrong, the restarts are counted, the mount stays one mount. Then a crash loop: a
# serving process that dies at its start (a fault the daemon reads from
# SHARDFS_TEST_RESUME_FAULT) three times in a row stops the restarts, reads
# fail with EIO, and umount works; the keeper goes with the mount.
. "$(dirname "$0")/lib.sh"
sfs_require
READER=$SRC_ROOT/tests/integration/keeper_reader.py

mkdir -p "$EXPORT" "$WORK/cache"
"$GENDATA" "$EXPORT" --shards 4 --shard-mib 16 --small 200 --classes 4 --small-kib 30 --seed 11 -q
mkdir "$EXPORT/big"
for i in $(seq 3000); do echo "$i" >"$EXPORT/big/file-$i"; done
sfs_cluster_up 2
export SHARDFS_TEST_RESUME_FAULT=$WORK/fault
# page_cache=never: every read reaches the daemon, none is answered by the
# kernel's page cache while the serving process is down.
# actimeo=1: the kernel's attributes of the mount root expire while it idles,
# so a resumed server that looked at its own mountpoint would wait for itself.
# wedge_timeout=10 (the default): a serving process that a loaded machine
# holds up for a few seconds is not taken for wedged (that restart would be
# counted as one), and the stops of 1 s below stay far below it.
sfs_mount "cache_dir=$WORK/cache,nconnect=2,page_cache=never,wedge_timeout=10,actimeo=1"

keeper_pid() { pgrep -f "^$SHARDFS --keeper $MNT " | head -1; }

# --- the process tree ------------------------------------------------------------
S0=$(serving_pid)
K=$(keeper_pid)
check "a keeper holds the mount; the serving process ($S0) is its child" \
	bash -c "[ -n '$K' ] && [ \"\$(ps -o ppid= -p '$S0' | tr -d ' ')\" = '$K' ]"
check "stats: crash recovery available (kernel resends), no restart yet" \
	bash -c "[ '$(stat_value shardfs_crash_recovery)' = 1 ] && [ '$(counter 'shardfs_daemon_restarts_total{reason="crash"}')' = 0 ]"

# --- readers under kill -9 ---------------------------------------------------------
exec 7<"$MNT/shards/train-00001-of-00004.tfrecord" # opened by the first serving process
rm -f "$WORK/stop"
for m in shards shards small small records records records stage; do
	python3 "$READER" "$m" "$MNT" "$EXPORT" "$WORK/stop" >"$WORK/reader-$m-$RANDOM.json" 2>&1 &
done
sleep 2
kills=0
echo "kill9 $(date +%s.%N)" >"$WORK/phases"
for _ in $(seq 10); do
	p=$(serving_pid) && kill -9 "$p" && kills=$((kills + 1))
	sleep 3
done
echo "stop1s+kill9 $(date +%s.%N)" >>"$WORK/phases"
for _ in $(seq 3); do
	p=$(serving_pid) && kill -STOP "$p" && sleep 1 && kill -9 "$p" && kills=$((kills + 1))
	sleep 3
done
# A wedge: the serving process stopped and left so; its heartbeat stops and
# the keeper replaces it after wedge_timeout (10 s): wait for that (a minute
# at most) before the next.
stops=0
echo "wedge $(date +%s.%N)" >>"$WORK/phases"
for _ in $(seq 2); do
	p=$(serving_pid) && kill -STOP "$p" && stops=$((stops + 1))
	wait_for 60 bash -c "! kill -0 $p 2>/dev/null"
	sleep 2
done
echo "end $(date +%s.%N)" >>"$WORK/phases"
touch "$WORK/stop"
wait
check "13 serving processes killed ($kills)" [ "$kills" = 13 ]
check "the readers: every read answered, every byte right" python3 - "$WORK" <<'PY'
import glob, json, sys
bad, slow = False, []
for p in sorted(glob.glob(sys.argv[1] + "/reader-*.json")):
    try:
        r = json.loads(open(p).read().strip().splitlines()[-1])
    except Exception as e:
        print(f"# {p}: {e}: {open(p).read()[-400:]}")
        bad = True
        continue
    print(f"# {r['mode']}: {r['reads']} reads, {r['bytes'] / 1e6:.1f} MB, {r['failed']} failed, "
          f"{r['wrong']} wrong, longest call {r['max_call_s']:.3f} s {r['errors']}")
    bad |= r["failed"] > 0 or r["wrong"] > 0 or r["reads"] == 0
    slow.extend(r["slow"])
# The longest call that began in each phase (a report: timings are not checked).
phases = [(l.split()[0], float(l.split()[1])) for l in open(sys.argv[1] + "/phases")]
for (name, t0), (_, t1) in zip(phases, phases[1:]):
    d = max([d for s, d in slow if t0 <= s < t1] or [0])
    print(f"# longest single call in phase {name}: {d:.3f} s")
sys.exit(1 if bad else 0)
PY
check "stats: 13 crash restarts and $stops wedge restarts counted by the keeper" \
	bash -c "[ '$(counter 'shardfs_daemon_restarts_total{reason="crash"}')' = 13 ] && [ '$(counter 'shardfs_daemon_restarts_total{reason="wedge"}')' = 2 ] && [ $stops = 2 ]"
check "one mount at $MNT, one keeper, one serving process" bash -c "
	[ \$(awk -v m='$MNT' '\$2 == m' /proc/mounts | wc -l) = 1 ] &&
	[ \$(pgrep -f '^$SHARDFS --keeper $MNT ' | wc -l) = 1 ] &&
	[ \$(pgrep -P '$K' | wc -l) = 1 ]"
check "a file opened before the kills reads byte-exact after them" \
	bash -c "cat <&7 | cmp -s - '$EXPORT/shards/train-00001-of-00004.tfrecord'"
exec 7<&-

# --- a listing read in 4 KiB getdents calls, the server killed after the fifth ------
check "a directory listed across a kill -9: every name once" python3 - "$MNT" "$EXPORT" <<'PY'
import ctypes, os, signal, sys, time
mnt, export = sys.argv[1:3]
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.path.join(mnt, "big"), os.O_RDONLY | os.O_DIRECTORY)
buf = ctypes.create_string_buffer(4096)
names, calls = [], 0
while True:
    n = libc.syscall(217, fd, buf, 4096)  # getdents64
    if n < 0:
        print(f"# getdents64: errno {ctypes.get_errno()}")
        sys.exit(1)
    if n == 0:
        break
    calls += 1
    raw, off = buf.raw, 0
    while off < n:
        reclen = int.from_bytes(raw[off + 16:off + 18], "little")
        names.append(raw[off + 19:off + reclen].split(b"\0")[0].decode())
        off += reclen
    if calls == 5:
        stats = open(os.path.join(mnt, ".shardfs/stats")).read().splitlines()
        pid = int([l.split()[1] for l in stats if l.startswith("shardfs_serving_pid ")][0])
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.3)
want = set(os.listdir(os.path.join(export, "big"))) | {".", ".."}
print(f"# {calls} getdents64 calls, {len(names)} names, {len(want - set(names))} missing, "
      f"{len(names) - len(set(names))} twice")
sys.exit(0 if sorted(names) == sorted(want) else 1)
PY

# --- a crash of an idle mount (the root's attributes expired) ----------------------
sleep 2
kill -9 "$(serving_pid)"
check "after a crash of an idle mount, it lists and reads" \
	bash -c "ls '$MNT/shards' >/dev/null && cmp -s '$MNT/shards/train-00000-of-00004.tfrecord' '$EXPORT/shards/train-00000-of-00004.tfrecord'"

# --- a crash loop --------------------------------------------------------------------
touch "$WORK/fault"
kill -9 "$(serving_pid)"
# Three starts that fail take a while (more on a loaded machine): wait for
# the keeper to have given up.
gave_up() { [ -z "$(pgrep -P "$K")" ] && ! cat "$MNT/shards/train-00002-of-00004.tfrecord" >/dev/null 2>&1; }
wait_for 60 gave_up
check "after 3 serving processes died at start: no more restarts, a read fails with EIO" \
	bash -c "[ -z \"\$(pgrep -P '$K')\" ] && cat '$MNT/shards/train-00003-of-00004.tfrecord' 2>&1 >/dev/null | grep -q 'Input/output error'"
t0=$(date +%s%N)
umount "$MNT"
rc=$?
diag "umount took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
check "umount succeeds" [ "$rc" = 0 ]
check "the keeper exits with the mount" wait_for 30 bash -c "! kill -0 '$K' 2>/dev/null"
sfs_finish
