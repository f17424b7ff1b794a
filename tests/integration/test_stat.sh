#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tools/cmd/shardfs-stat against a live mount of a real 3-node cluster: the
# text report (a line per node, 80 columns), --json (parsed), numbers that
# move when a file is read, interval reports, a node going down, metrics
# the daemon may not report (cache, staging), and the refusals: bad
# arguments, missing paths, not a shardfs mount, permission, a dead mount.
. "$(dirname "$0")/lib.sh"
sfs_require
STAT=${SFS_STAT:-$SRC_ROOT/tools/cmd/shardfs-stat}
[ -x "$STAT" ] || skip "no $STAT"

mkdir -p "$EXPORT"
"$GENDATA" "$EXPORT" --shards 4 --shard-mib 16 --small 20 --classes 2 --small-kib 20 --seed 3 -q
sfs_cluster_up 3
sfs_mount "nconnect=2,timeo=20,retrans=2"
SHARD=shards/train-00000-of-00004.tfrecord
SHARD_BYTES=$(stat -c %s "$EXPORT/$SHARD")

# jq-like checks in python: pyjson FILE EXPR... asserts every EXPR on the
# list of reports R (one JSON object per line of FILE); E is the environment.
export ADDRS
pyjson() {
	python3 - "$@" <<'PY'
import json, os, sys
R = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for e in sys.argv[2:]:
    if not eval(e, {"R": R, "E": os.environ}):
        print(f"# failed: {e}")
        print("# " + json.dumps(R)[:600])
        sys.exit(1)
PY
}

# --- text ---------------------------------------------------------------------
"$STAT" "$MNT" >"$WORK/text" 2>"$WORK/err"
rc=$?
check "one report: exit 0, nothing on stderr" [ "$rc" = 0 -a ! -s "$WORK/err" ]
sed 's/^/# /' "$WORK/text"
for a in ${ADDRS//,/ }; do
	check "text: a line for node $a, state up" grep -qE "^$a +up " "$WORK/text"
done
check "text: a total line with 3/3 up" grep -qE '^total +3/3 up ' "$WORK/text"
check "text: the first report is since the mount" grep -q "since mount" "$WORK/text"
check "text: header and prefetch lines" bash -c "grep -q 'MB/s.*req/s.*lat ms' '$WORK/text' && grep -q '^prefetch ' '$WORK/text'"
check "text: a workers line" \
	grep -qE '^workers +working [0-9]+ +waiting [0-9]+ +parked [0-9]+ +hand-offs [0-9.]+/s +at limit [0-9]+$' "$WORK/text"
check "text: a names line (lookups from directory listings)" \
	grep -qE '^names +listings [0-9]+ dirs \([0-9]+ names\) +lookups from them [0-9]+/s +to NFS [0-9]+/s$' "$WORK/text"
check "text: fits in 80 columns" bash -c "! awk 'length(\$0) > 80' '$WORK/text' | grep -q ."
check "a path inside the mount finds the mount" bash -c "'$STAT' '$MNT/shards' | head -1 | grep -q '^$MNT '"

# --- JSON, and numbers that move ----------------------------------------------
"$STAT" --json "$MNT" >"$WORK/j0"
check "--json: one object that parses, since the mount, 3 nodes up" \
	pyjson "$WORK/j0" 'len(R) == 1' 'R[0]["since_mount"] is True' \
	'sorted(n["node"] for n in R[0]["nodes"]) == sorted(E["ADDRS"].split(","))' \
	'all(n["state"] == "up" and n["connections"] == 2 for n in R[0]["nodes"])' \
	'R[0]["total"]["nodes_up"] == 3' 'R[0]["uptime_s"] > 0' \
	'all(k in R[0] for k in ("fuse", "prefetch", "cache", "stage", "total"))' \
	'set(R[0]["fuse"]["workers"]) == {"working", "waiting", "parked", "handoffs_s", "at_limit"}' \
	'set(R[0]["names"]) == {"listing_dirs", "listing_names", "listings", "from_listings_s", "to_nfs_s"}' \
	'all(v is None or isinstance(v, (int, float, bool)) for v in R[0]["cache"].values())'
# All four shards at once (64 chunks queued together): one shard's 16 chunks
# fit the READ slots of two nodes (2 connections x 4 each), so the first two
# nodes to wake could take them all and leave the third none (seen once).
drop_caches
for f in "$MNT"/shards/*.tfrecord; do cat "$f" >/dev/null & done
wait
"$STAT" --json "$MNT" >>"$WORK/j0"
check "--json: reading the shards moves the totals (>= $SHARD_BYTES bytes)" \
	pyjson "$WORK/j0" "R[1]['fuse']['read_bytes'] - R[0]['fuse']['read_bytes'] >= $SHARD_BYTES" \
	"R[1]['total']['read_bytes'] - R[0]['total']['read_bytes'] >= $SHARD_BYTES" \
	'R[1]["total"]["latency_ms"] is not None and R[1]["total"]["latency_ms"] > 0'
check "--json: every node served part of the read" \
	pyjson "$WORK/j0" 'all(b["read_bytes"] > a["read_bytes"] for a, b in zip(R[0]["nodes"], R[1]["nodes"]))'

# Interval reports: 4 reports 1 s apart while a shard is read; the reads
# land in some interval, so the intervals together hold at least the shard.
drop_caches
"$STAT" --json "$MNT" 1 4 >"$WORK/j1" 2>"$WORK/err" &
stat_pid=$!
# The read starts once the first report (since the mount) is out: started
# after a fixed 0.5 s, it landed in that report whenever the tool took longer
# to start, and the intervals held nothing (seen here under load).
for _ in $(seq 200); do [ -s "$WORK/j1" ] && break; sleep 0.05; done
cat "$MNT/shards/train-00001-of-00004.tfrecord" >/dev/null
wait "$stat_pid"
check "interval: exit 0 after COUNT reports" [ $? = 0 ]
check "interval: 4 reports, the later ones over ~1 s intervals" \
	pyjson "$WORK/j1" 'len(R) == 4' 'R[0]["since_mount"] and not any(r["since_mount"] for r in R[1:])' \
	'all(0.5 <= r["interval_s"] <= 2.0 for r in R[1:])'
check "interval: the intervals' read bytes add up to the shard" \
	pyjson "$WORK/j1" "sum(r['fuse']['read_bytes'] for r in R[1:]) >= $SHARD_BYTES" \
	"sum(r['total']['read_bytes'] for r in R[1:]) >= $SHARD_BYTES" \
	'max(r["total"]["read_mb_s"] for r in R[1:]) > 0' 'max(r["total"]["read_req_s"] for r in R[1:]) > 0'
"$STAT" "$MNT" 0.3 2 >"$WORK/text2"
check "text interval: 2 reports, the second over an interval" \
	bash -c "[ \$(grep -c '^total ' '$WORK/text2') = 2 ] && grep -q ' interval 0\\.[0-9] s' '$WORK/text2'"
# A shell that starts us in the background may have SIGINT ignored, and an
# ignored signal stays ignored in every child: then there is no Ctrl-C to test.
if (( 0x$(sh -c 'sed -n "s/^SigIgn:\t//p" /proc/self/status') & 2 )); then
	diag "SIGINT is ignored in this process tree: Ctrl-C not tested"
else
	timeout -k 5 --preserve-status -s INT 1.5 "$STAT" "$MNT" 1 >/dev/null 2>"$WORK/err"
	rc=$?
	check "SIGINT ends it with 130 and no traceback (rc=$rc)" [ "$rc" = 130 -a ! -s "$WORK/err" ]
fi

# --- every metric the live daemon renders is in shardfs-stats(7) -------------------
check "shardfs-stats(7) describes every metric of the live stats file" python3 - \
	"$MNT/.shardfs/stats" "$SRC_ROOT" <<'PY'
import os, re, sys
sys.path.insert(0, os.path.join(sys.argv[2], "tests/docs"))
import check_docs
live = set(re.findall(r"^# TYPE (\S+) ", open(sys.argv[1]).read(), re.M))
page = os.path.join(sys.argv[2], "packaging/man/shardfs-stats.7")
named = {n for h in check_docs.man_headings(page) for n in re.findall(r"shardfs_[a-z0-9_]+", h)}
missing = sorted(live - named)
print("# %d live metrics; missing: %s" % (len(live), " ".join(missing) or "none"))
sys.exit(1 if missing or len(live) < 50 else 0)
PY

# --- metrics the daemon may not report: from a stats file copy -----------------
cp "$MNT/.shardfs/stats" "$WORK/copy.prom"
grep -v '^shardfs_cache_\|^shardfs_stage_' "$WORK/copy.prom" >"$WORK/nocache.prom"
check "a stats file copy works as MOUNT; absent cache metrics are '-' and null" bash -c "
	'$STAT' '$WORK/nocache.prom' | grep -qE '^cache +hit - +used -\$' &&
	'$STAT' '$WORK/nocache.prom' | grep -qE '^stage +-\$' &&
	'$STAT' --json '$WORK/nocache.prom' | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"cache\"][\"hit_ratio\"] is None and d[\"stage\"] is None'"
{ cat "$WORK/nocache.prom"
  printf '%s\n' 'shardfs_cache_enabled 1' 'shardfs_cache_hit_bytes_total 3000000' \
	'shardfs_cache_miss_bytes_total 1000000' 'shardfs_cache_used_bytes 5000000000' \
	'shardfs_cache_capacity_bytes 20000000000' 'shardfs_stage_bytes_total{target="shm"} 2000000'
} >"$WORK/cache.prom"
check "cache hit ratio, usage and staging when reported" bash -c "
	'$STAT' '$WORK/cache.prom' | grep -qE '^cache +hit 75\\.0% +used 5\\.0 GB of 20\\.0 GB \\(25%\\)' &&
	'$STAT' '$WORK/cache.prom' | grep -qE '^stage +shm [0-9.]+ MB/s' &&
	'$STAT' --json '$WORK/cache.prom' | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d[\"cache\"][\"hit_ratio\"] == 0.75 and d[\"stage\"][\"shm\"][\"bytes\"] == 2000000'"

# --- a node going down ----------------------------------------------------------
"$CLUSTER" kill "$CID" 3 >/dev/null
down=${ADDRS##*,}
for _ in $(seq 50); do
	"$STAT" --json "$MNT" >"$WORK/j2"
	pyjson "$WORK/j2" 'R[0]["total"]["nodes_up"] == 2' >/dev/null && break
	cat "$MNT/shards/train-0000$(( RANDOM % 4 ))-of-00004.tfrecord" >/dev/null
	sleep 0.2
done
check "a killed node shows as down, total 2/3 up" \
	pyjson "$WORK/j2" "[n['state'] for n in R[0]['nodes'] if n['node'] == '$down'] == ['down']" \
	'R[0]["total"]["nodes_up"] == 2'
check "text shows it" bash -c "'$STAT' '$MNT' | grep -qE '^$down +down ' && '$STAT' '$MNT' | grep -qE '^total +2/3 up '"

# --- refusals: one line on stderr, exit 1 (can't read) or 2 (usage) -------------
# refuse DESCRIPTION RC PATTERN ARGS...
refuse() {
	local desc=$1 want=$2 pat=$3 rc
	shift 3
	${STAT_RUN:-} "$STAT" "$@" >"$WORK/out" 2>"$WORK/err"
	rc=$?
	if [ "$rc" = "$want" ] && [ "$(wc -l <"$WORK/err")" = 1 ] && grep -qE -- "$pat" "$WORK/err" && [ ! -s "$WORK/out" ]; then
		ok "$desc: exit $rc: $(cat "$WORK/err")"
	else
		not_ok "$desc (rc=$rc, want $want and /$pat/): $(head -3 "$WORK/err")"
	fi
}
refuse "missing mount point" 1 "no such file or directory" "$WORK/nonexistent"
# The default MOUNT, in a private mount namespace where /mnt is an empty
# tmpfs: whatever the host has at /mnt/dataset (the demo's mount, say) is
# not seen, and the tool must find no mount point there, then no shardfs.
# private_mnt [MKDIR] CMD...: CMD with /mnt empty (and /mnt/dataset a plain
# folder when MKDIR is "dir").
private_mnt() {
	local mk=$1
	shift
	unshare --mount --propagation private sh -c \
		'mount -t tmpfs sfs-test /mnt && { [ "$0" != dir ] || mkdir /mnt/dataset; } && shift && exec "$@"' \
		"$mk" - "$@"
}
STAT_RUN="private_mnt none" refuse "default /mnt/dataset missing" 1 "/mnt/dataset: no such"
STAT_RUN="private_mnt dir" refuse "default /mnt/dataset not a shardfs mount" 1 "/mnt/dataset: not a shardfs mount"
refuse "not a shardfs mount" 1 "not a shardfs mount" "$WORK"
refuse "/proc is not a shardfs mount" 1 "not a shardfs mount \\(proc " /proc
refuse "a file that is not a stats file" 1 "not a shardfs stats file" /etc/hostname
refuse "INTERVAL 0" 2 "INTERVAL '0' must be > 0" "$MNT" 0
refuse "negative INTERVAL" 2 "INTERVAL '-1' must be > 0" "$MNT" -1
refuse "INTERVAL not a number" 2 "INTERVAL 'x' is not a number" "$MNT" x
refuse "COUNT 0" 2 "COUNT '0' must be > 0" "$MNT" 1 0
refuse "COUNT not an integer" 2 "COUNT '1.5' is not an integer" "$MNT" 1 1.5
refuse "too many arguments" 2 "unexpected argument '3'" "$MNT" 1 2 3
refuse "unknown option" 2 "unknown option '--bogus'" --bogus "$MNT"
check "--help exits 0 with usage" bash -c "'$STAT' --help | grep -q '^usage: shardfs-stat'"
if command -v setpriv >/dev/null; then
	setpriv --reuid=65534 --regid=65534 --clear-groups "$STAT" "$MNT" >"$WORK/out" 2>"$WORK/err"
	rc=$?
	check "another user, mount without allow_other: exit 1, permission denied" \
		bash -c "[ $rc = 1 ] && [ \$(wc -l <'$WORK/err') = 1 ] && grep -q 'Permission denied' '$WORK/err'"
fi
pkill -KILL -f "shardfs .* $MNT( |\$)"
sleep 0.5
refuse "the daemon has exited (dead mount)" 1 "(not connected|exited)" "$MNT"
umount -l "$MNT" 2>/dev/null
sfs_finish
