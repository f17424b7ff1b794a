#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Small files packed in segments (cache/store/segment.h) against a real 4-node
# cluster: 10,000 files of 1-20 KB and 300 of ~110 KB read through the
# mount, cold then warm then after a remount; a segment deleted while
# mounted; flipped bytes, a truncated segment, damaged .idx files and a torn
# tail; SIGKILL in the middle of a cold fill; a cache smaller than the data
# (lru and pin); small files read alongside large shards; sizes at the edges
# of the packed layout; 4 readers of the same files at once. Every read is
# compared with the export's bytes; the stats file tells what came from NFS.
. "$(dirname "$0")/lib.sh"
sfs_require

N_SMALL=${SFS_TEST_SMALL_FILES:-10000}
N_MED=${SFS_TEST_MED_FILES:-300}
CACHE=$WORK/cache
MB=$((1 << 20))
SF="python3 $WORK/sf.py"
mkdir -p "$EXPORT"

# sf.py: the data set, byte checks, and a map of the packed records in a
# cache_dir found by content (layout-agnostic past segment.h's contract:
# records 4096-aligned, a 64-byte header, then the object's bytes).
cat >"$WORK/sf.py" <<'PY'
import hashlib, json, mmap, os, random, sys
from concurrent.futures import ThreadPoolExecutor

MAX_PACKED = 1 << 20  # SFS_SEG_MAX_OBJECT
HDR = 64
EDGE_SIZES = (0, 1, 31, 4032, 4033, 65536, 65537, MAX_PACKED - 1, MAX_PACKED, MAX_PACKED + 1)

def digest(b):
    return hashlib.blake2b(b, digest_size=16).hexdigest()

def load(manifest, prefixes=("",)):
    rows = []
    with open(manifest) as f:
        for line in f:
            rel, size, h = line.split()
            if rel.startswith(tuple(prefixes)):
                rows.append((rel, int(size), h))
    return rows

def gen(root, manifest, n_small, n_med):
    # One seeded generator: the same bytes on every run.
    rng = random.Random(0x5F5)
    rows = []
    def put(rel, size):
        data = rng.randbytes(size)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        rows.append((rel, size, digest(data)))
    per_dir = 100
    for i in range(n_small):
        d = "%s/small/d%03d" % (root, i // per_dir)
        if i % per_dir == 0:
            os.makedirs(d)
        put("small/d%03d/f%05d" % (i // per_dir, i), rng.randint(1000, 20000))
    os.makedirs(root + "/med")
    for i in range(n_med):
        put("med/m%04d" % i, rng.randint(100000, 120000))
    # Sizes at the edges of the packed layout: a record that fills its 4096
    # bytes exactly (4032 + the 64-byte header) or by one more, the largest
    # packed object (1 MiB) and the smallest per-file one, an empty file.
    os.makedirs(root + "/edge")
    for size in EDGE_SIZES:
        put("edge/e%07d" % size, size)
    os.makedirs(root + "/big")
    for i, size in enumerate((8 << 20, (24 << 20) + 777, 64 << 20)):
        put("big/b%d" % i, size)
    with open(manifest, "w") as f:
        for r in rows:
            f.write("%s %d %s\n" % r)

def check(root, manifest, prefixes, quiet=False):
    # Big files first, so that they are read alongside the small ones.
    rows = sorted(load(manifest, prefixes), key=lambda r: -r[1])
    def one(r):
        try:
            with open(os.path.join(root, r[0]), "rb") as f:
                data = f.read()
        except OSError as e:
            return "%s: %s" % (r[0], e)
        if len(data) != r[1] or digest(data) != r[2]:
            return "%s: differs (%d of %d bytes)" % (r[0], len(data), r[1])
        return None
    with ThreadPoolExecutor(8) as ex:
        bad = [b for b in ex.map(one, rows) if b]
    if not quiet:
        for b in bad[:5]:
            print("# " + b)
        print("# %d of %d files differ" % (len(bad), len(rows)))
    return 1 if bad else 0

def seg_paths(cache):
    d = os.path.join(cache, "segments")
    if not os.path.isdir(d):
        return []
    return [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".seg")]

def segmap(cache, export, manifest):
    """Every record whose bytes start with a packed file's first 32 bytes:
    [seg, off, rel, size, sealed, intact], in segment and offset order."""
    rows = [r for r in load(manifest) if r[1] <= MAX_PACKED]
    first = {}
    for rel, size, _ in rows:
        with open(os.path.join(export, rel), "rb") as f:
            first[f.read(32)] = (rel, size)
    out = []
    for p in seg_paths(cache):
        sz = os.path.getsize(p)
        if sz < HDR + 32:
            continue
        sealed = os.path.exists(p[:-4] + ".idx")
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            for o in range(0, sz - HDR - 32 + 1, 4096):
                hit = first.get(m[o + HDR:o + HDR + 32])
                if not hit:
                    continue
                rel, size = hit
                with open(os.path.join(export, rel), "rb") as e:
                    intact = m[o + HDR:o + HDR + size] == e.read()
                out.append([os.path.basename(p), o, rel, size, sealed, intact])
    return out

def recoverable(recs):
    """rel -> size of what recovery can find: every intact record of a
    sealed segment; in a segment without .idx, the intact records before
    the first one that does not check."""
    live, stopped = {}, set()
    for seg, off, rel, size, sealed, intact in recs:
        if not intact and not sealed:
            stopped.add(seg)
        if intact and (sealed or seg not in stopped):
            live[rel] = size
    return live

def damage(cache, export, manifest):
    """Flip bytes inside one record in the middle of a sealed segment,
    truncate another sealed segment in half, corrupt one .idx and delete
    another, tear the last record of the newest segment. Prints: the flipped file, 1 if its segment is sealed (a
    flip in an unsealed one is found by the recovery scan, which drops the
    rest of that segment), the bytes of the files recovery will not find
    (refetched on read), the number of files lost, what was done."""
    recs = segmap(cache, export, manifest)
    segs = []
    for r in recs:
        if r[0] not in segs:
            segs.append(r[0])
    sealed = [s for s in segs if any(r[0] == s and r[4] for r in recs)]
    d = os.path.join(cache, "segments")
    lost, done = {}, []
    def recs_of(s):
        return [r for r in recs if r[0] == s]
    # flip
    fs = sealed[len(sealed) // 2] if sealed else segs[-1]
    rs = recs_of(fs)
    victim = rs[len(rs) // 2]
    with open(os.path.join(d, fs), "r+b") as f:
        for at in (1, victim[3] // 2, victim[3] - 1):
            f.seek(victim[1] + HDR + at)
            b = f.read(1)
            f.seek(victim[1] + HDR + at)
            f.write(bytes([b[0] ^ 0x5A]))
    for r in rs[rs.index(victim):] if victim[0] not in sealed else [victim]:
        lost[r[2]] = r[3]
    done.append("flipped %s@%d (%s)" % (fs, victim[1], victim[2]))
    # truncate a sealed segment other than the flipped one
    other = [s for s in sealed if s != fs]
    if other:
        ts = other[0]
        p = os.path.join(d, ts)
        new = os.path.getsize(p) // 2 + 1234
        os.truncate(p, new)
        for r in recs_of(ts):
            if r[1] + HDR + r[3] > new:
                lost[r[2]] = r[3]
        done.append("truncated %s to %d" % (ts, new))
    # a corrupted .idx and a missing .idx: recovery scans those segments
    # instead, and loses none of their records
    spare = [s for s in sealed if s != fs and s not in other[:1]]
    if spare:
        p = os.path.join(d, spare[0][:-4] + ".idx")
        with open(p, "r+b") as f:
            f.seek(os.path.getsize(p) // 2)
            b = f.read(1)
            f.seek(os.path.getsize(p) // 2)
            f.write(bytes([b[0] ^ 0xFF]))
        done.append("corrupted %s.idx" % spare[0][:-4])
    if len(spare) > 1:
        os.unlink(os.path.join(d, spare[1][:-4] + ".idx"))
        done.append("deleted %s.idx" % spare[1][:-4])
    # tear the last record of the newest segment
    ls = segs[-1]
    last = recs_of(ls)[-1]
    if ls != fs or last[2] not in lost:
        os.truncate(os.path.join(d, ls), last[1] + HDR + last[3] // 2)
        lost[last[2]] = last[3]
        done.append("tore %s@%d (%s)" % (ls, last[1], last[2]))
    # What recovery will not find: the damaged records, and any file that
    # was in no segment already (one deleted while mounted).
    packed = {r[0]: r[1] for r in load(manifest, ("small/", "med/"))}
    live = recoverable(segmap(cache, export, manifest))
    missing = [rel for rel in packed if rel not in live]
    assert all(rel in missing for rel in lost), "a damaged record still checks"
    print(victim[2], int(victim[0] in sealed), sum(packed[rel] for rel in missing),
          len(missing), "; ".join(done))

def main(a):
    cmd = a[0]
    if cmd == "gen":
        gen(a[1], a[2], int(a[3]), int(a[4]))
    elif cmd == "check":
        return check(a[1], a[2], a[3:] or [""])
    elif cmd == "check-quiet":
        return check(a[1], a[2], a[3:] or [""], quiet=True)
    elif cmd == "map":
        # records intact_files intact_bytes segments sealed_segments
        recs = segmap(a[1], a[2], a[3])
        live = recoverable(recs)
        segs = {r[0] for r in recs}
        print(len(recs), len(live), sum(live.values()), len(segs),
              len({r[0] for r in recs if r[4]}))
    elif cmd == "damage":
        damage(a[1], a[2], a[3])
    elif cmd == "bytes":
        print(sum(r[1] for r in load(a[1], a[2:] or [""])))
    elif cmd == "count":
        print(len(load(a[1], a[2:] or [""])))
    return 0

sys.exit(main(sys.argv[1:]))
PY

$SF gen "$EXPORT" "$WORK/manifest" "$N_SMALL" "$N_MED" || { echo "Bail out! cannot generate the data set"; exit 1; }
N_PACKED=$($SF count "$WORK/manifest" small/ med/)
PACKED_BYTES=$($SF bytes "$WORK/manifest" small/ med/)
diag "$N_PACKED small files, $((PACKED_BYTES / MB)) MiB"
sfs_cluster_up 4

# Segments are cache_size / 16 (4 to 256 MiB; cache/store/store.c): 256M makes
# 16 MiB segments, so that the data set fills several, sealed with an .idx;
# a cache of a quarter of the data (lru, pin) has 4 MiB segments.
SIZE_OPT=cache_size=256M

# small_exact: every small file read through the mount is byte-exact
small_exact() { $SF check "$MNT" "$WORK/manifest" small/ med/; }
cache_files() { find "$CACHE" -type f ! -name LOCK | wc -l; }
object_files() { find "$CACHE/objects" -type f ! -name '*.sums' 2>/dev/null | wc -l; }
# map: "records intact_files intact_bytes segments sealed" of the cache
map() { $SF map "$CACHE" "$EXPORT" "$WORK/manifest"; }
le() { [ "$1" -le "$2" ]; }
# section NAME: a diag line with the seconds so far (where the time goes)
section() { diag "--- $1 (at ${SECONDS}s)"; }

# --- no cache: each file fetched as asked and answered from the READ's reply
# (no copy into a buffer of the daemon's: cache/nfs/origin.h, lend) ----------------
section "no cache"
sfs_mount ""
drop_caches
check "no cache: $N_PACKED small files byte-exact" small_exact
df=$(counter shardfs_prefetch_direct_fetches_total)
check "no cache: read as asked, without chunks ($df direct fetches >= $N_PACKED)" le "$N_PACKED" "$df"
drop_caches
check "no cache, again: byte-exact" small_exact
sfs_umount

# --- cold, warm, remount -------------------------------------------------------
section "cold, warm, remount"
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
check "cold: $N_PACKED small files byte-exact" small_exact
wait_idle
f1=$(fetched)
check "cold: fetched $f1 bytes, at least the $PACKED_BYTES of the files" le "$PACKED_BYTES" "$f1"
n=$(cache_files)
check "cold: the cache holds $n files for $N_PACKED objects (<= 64)" le "$n" 64
check "cold: no small file in objects/ ($(object_files))" [ "$(object_files)" = 0 ]
read -r recs live live_bytes segs sealed < <(map)
diag "segments: $segs ($sealed sealed), $recs records"
check "cold: every small file is a record in a segment ($live of $N_PACKED)" [ "$live" = "$N_PACKED" ]
[ -n "" ] && check "cold: segments were sealed with an index ($sealed of $segs)" le 1 "$sealed"
check "cold: shardfs_cache_objects counts them ($(stat_value shardfs_cache_objects))" \
	le "$N_PACKED" "$(counter shardfs_cache_objects)"
check "cold: shardfs_cache_small_objects = $N_PACKED ($(stat_value shardfs_cache_small_objects))" \
	[ "$(counter shardfs_cache_small_objects)" = "$N_PACKED" ]
n=$(find "$CACHE/segments" -name '*.seg' 2>/dev/null | wc -l)
check "cold: shardfs_cache_segments = $n segment files ($(stat_value shardfs_cache_segments))" \
	[ "$(counter shardfs_cache_segments)" = "$n" ]
used=$(counter shardfs_cache_used_bytes)
check "cold: used bytes $used >= the files' bytes" le "$PACKED_BYTES" "$used"
w1=$(counter shardfs_cache_write_bytes_total)

drop_caches
d1=$(counter shardfs_cache_direct_reads_total)
h1=$(counter shardfs_cache_hit_bytes_total)
check "warm: byte-exact" small_exact
check "warm: nothing fetched from NFS ($f1 -> $(fetched))" [ "$(fetched)" = "$f1" ]
check "warm: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]
h2=$(counter shardfs_cache_hit_bytes_total)
check "warm: hits count every byte ($((h2 - h1)) of $PACKED_BYTES)" le "$PACKED_BYTES" $((h2 - h1))
d2=$(counter shardfs_cache_direct_reads_total)
check "warm: served by direct reads ($((d2 - d1)) >= $N_PACKED)" le "$N_PACKED" $((d2 - d1))
check "warm: nothing written to the cache" [ "$(counter shardfs_cache_write_bytes_total)" = "$w1" ]
sfs_umount

sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
check "remount: byte-exact" small_exact
check "remount: nothing fetched from NFS ($(fetched))" [ "$(fetched)" = 0 ]
check "remount: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]
check "remount: the index holds every object ($(stat_value shardfs_cache_objects))" \
	le "$N_PACKED" "$(counter shardfs_cache_objects)"

# --- a segment deleted while mounted ----------------------------------------------
section "a segment deleted while mounted"
mapfile -t segfiles < <(find "$CACHE/segments" -name '*.seg' 2>/dev/null | sort)
if [ "${#segfiles[@]}" -gt 0 ]; then
	victim=${segfiles[$(( (${#segfiles[@]} - 1) / 2 ))]}
	rm -f "$victim" "${victim%.seg}.idx"
	f0=$(fetched)
	drop_caches
	check "segment $(basename "$victim") deleted while mounted: byte-exact" small_exact
	diag "refetched $(( ($(fetched) - f0) / 1024 )) KiB after the delete"
	wait_idle
	drop_caches
	check "segment deleted: still byte-exact on a second pass" small_exact
else
	not_ok "segment deleted while mounted: no segment files under $CACHE/segments"
fi
wait_idle
sfs_umount

# --- flipped bytes, a truncated segment, damaged .idx files, a torn tail ---
section "flipped bytes, a truncated segment, damaged .idx files, a torn tail"
read -r flipped flip_sealed missing_bytes missing_files what < <($SF damage "$CACHE" "$EXPORT" "$WORK/manifest" 2>"$WORK/damage.err")
diag "damage: ${what:-none ($(tail -1 "$WORK/damage.err"))}; $missing_files files ($missing_bytes bytes) not in the cache"
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
if [ -n "${flipped:-}" ]; then
	check "flipped bytes in a record: byte-exact" cmp -s "$MNT/$flipped" "$EXPORT/$flipped"
	# A flip in a sealed segment is found by the read that verifies it.
	[ "$flip_sealed" = 1 ] && check "flipped bytes: counted as a checksum failure" \
		le 1 "$(counter shardfs_cache_checksum_failures_total)"
	check "flipped bytes: refetched ($(fetched) bytes)" le "$(stat -c %s "$EXPORT/$flipped")" "$(fetched)"
else
	not_ok "flipped bytes: no record found to damage"
fi
check "flipped, truncated, .idx damaged, torn: every file byte-exact" small_exact
f=$(fetched)
check "what was lost was refetched, nothing else ($f bytes, missing ${missing_bytes:-?})" \
	bash -c "[ $f -ge ${missing_bytes:-1} ] && [ $f -le $(( ${missing_bytes:-0} + MB )) ]"
wait_idle
drop_caches
f=$(fetched)
check "after the damage: a second pass is byte-exact" small_exact
check "after the damage: the refetched records were cached again" [ "$(fetched)" = "$f" ]
sfs_umount

# --- SIGKILL in the middle of a cold fill --------------------------------------------
section "SIGKILL in the middle of a cold fill"
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
( $SF check-quiet "$MNT" "$WORK/manifest" small/ med/ >/dev/null 2>&1 ) &
reader=$!
# Killed once a third of the data is durable, waited for as long as a
# loaded machine takes.
third_durable() { [ "$(counter shardfs_cache_write_bytes_total)" -ge $((PACKED_BYTES / 3)) ]; }
wait_for 120 third_durable
daemon_kill
umount -l "$MNT" 2>/dev/null
wait "$reader"
read -r recs live live_bytes segs sealed < <(map)
diag "killed with $live files ($((live_bytes / 1024)) KiB) durable in $segs segments ($sealed sealed)"
check "SIGKILL mid-fill: some records were durable" le 1 "${live:-0}"
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
check "SIGKILL mid-fill, remount: byte-exact" small_exact
f=$(fetched)
check "SIGKILL mid-fill: >= 95% of the durable records reused (fetched $f of $PACKED_BYTES, durable $live_bytes)" \
	le "$f" $(( PACKED_BYTES - live_bytes * 95 / 100 ))
wait_idle
drop_caches
f=$(fetched)
check "SIGKILL mid-fill: the next pass comes from the cache" small_exact
check "SIGKILL mid-fill: nothing more fetched" [ "$(fetched)" = "$f" ]
sfs_umount

# --- a cache smaller than the data: lru ------------------------------------------------
section "a cache smaller than the data: lru"
rm -rf "$CACHE"
LIMIT=$(( PACKED_BYTES / 4 / MB ))
[ "$LIMIT" -ge 16 ] || LIMIT=16
sfs_mount "cache_dir=$CACHE,cache_size=${LIMIT}M,cache_policy=lru"
drop_caches
check "lru ${LIMIT}M: byte-exact" small_exact
wait_idle
used=$(counter shardfs_cache_used_bytes)
check "lru ${LIMIT}M: used $((used / MB)) MiB <= ${LIMIT} MiB" le "$used" $((LIMIT * MB))
check "lru ${LIMIT}M: on disk too ($(du -sm "$CACHE" | cut -f1) MiB)" le "$(du -sm "$CACHE" | cut -f1)" $((LIMIT + 2))
check "lru ${LIMIT}M: evictions counted" le 1 "$(counter shardfs_cache_evicted_bytes_total)"
# Whole segments go, oldest first: what is left is the newest run of them.
check "lru ${LIMIT}M: the segments left are the newest ones, each whole" python3 - "$CACHE/segments" <<'PY'
import os, sys
d = sys.argv[1]
seqs = sorted(int(n[:-4], 16) for n in os.listdir(d) if n.endswith(".seg"))
ok = bool(seqs) and seqs == list(range(seqs[0], seqs[0] + len(seqs)))
print("# segments left:", ["%08x" % s for s in seqs])
sys.exit(0 if ok else 1)
PY
drop_caches
check "lru ${LIMIT}M: second pass byte-exact" small_exact
wait_idle
check "lru ${LIMIT}M: still under the limit" le "$(counter shardfs_cache_used_bytes)" $((LIMIT * MB))
sfs_umount

# --- a cache smaller than the data: pin -------------------------------------------------
section "a cache smaller than the data: pin"
rm -rf "$CACHE"
LIMIT=$(( PACKED_BYTES / 2 / MB ))
[ "$LIMIT" -ge 16 ] || LIMIT=16
sfs_mount "cache_dir=$CACHE,cache_size=${LIMIT}M,cache_policy=pin"
drop_caches
check "pin ${LIMIT}M: epoch 1 byte-exact" small_exact
wait_idle
used=$(counter shardfs_cache_used_bytes)
check "pin ${LIMIT}M: used $((used / MB)) MiB <= ${LIMIT} MiB" le "$used" $((LIMIT * MB))
check "pin ${LIMIT}M: the rest was not admitted" le 1 "$(counter shardfs_cache_not_admitted_bytes_total)"
check "pin ${LIMIT}M: nothing evicted" [ "$(counter shardfs_cache_evicted_bytes_total)" = 0 ]
read -r recs live pinned segs sealed < <(map)
diag "pinned $live files, $((pinned / MB)) MiB"
check "pin ${LIMIT}M: at least a third of the data is pinned" le $((PACKED_BYTES / 3)) "${pinned:-0}"
f1=$(fetched)
w1=$(counter shardfs_cache_write_bytes_total)
h1=$(counter shardfs_cache_hit_bytes_total)
drop_caches
check "pin ${LIMIT}M: epoch 2 byte-exact" small_exact
f2=$(fetched)
h2=$(counter shardfs_cache_hit_bytes_total)
check "pin ${LIMIT}M: epoch 2 serves the pinned files from the cache (hits $((h2 - h1)), pinned $pinned)" \
	le $(( pinned * 95 / 100 )) $((h2 - h1))
check "pin ${LIMIT}M: epoch 2 fetches only the rest ($((f2 - f1)) <= $((PACKED_BYTES - pinned * 95 / 100)))" \
	le $((f2 - f1)) $((PACKED_BYTES - pinned * 95 / 100))
check "pin ${LIMIT}M: epoch 2 writes nothing new" [ "$(counter shardfs_cache_write_bytes_total)" = "$w1" ]
sfs_umount

# --- small files alongside large shards -------------------------------------------------
section "small files alongside large shards"
rm -rf "$CACHE"
sfs_mount "cache_dir=$CACHE,cache_size=1G"
drop_caches
check "mixed: small files and 8-64 MiB shards read together, byte-exact" \
	$SF check "$MNT" "$WORK/manifest" big/ small/ med/
wait_idle
check "mixed: the 3 large files are objects in objects/ ($(object_files))" [ "$(object_files)" = 3 ]
check "mixed: each object holds a whole large file" python3 - "$CACHE/objects" "$EXPORT/big" <<'PY'
import os, sys
objs = sorted(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(sys.argv[1]) for n in ns if not n.endswith(".sums"))
big = sorted(os.path.getsize(os.path.join(sys.argv[2], n)) for n in os.listdir(sys.argv[2]))
print("# %d objects, the largest %s; files %s" % (len(objs), objs[-3:], big))
sys.exit(0 if len(objs) == len(big) and all(o >= b for o, b in zip(objs, big)) else 1)
PY
read -r recs live live_bytes segs sealed < <(map)
check "mixed: the small files are records in segments ($live of $N_PACKED)" [ "$live" = "$N_PACKED" ]
f=$(fetched)
drop_caches
check "mixed: warm pass byte-exact" $SF check "$MNT" "$WORK/manifest" big/ small/ med/
check "mixed: warm pass fetched nothing" [ "$(fetched)" = "$f" ]
sfs_umount

# --- sizes at the edges of the packed layout ------------------------------------------------
section "edge sizes"
CACHE=$WORK/cache-edge
edge_exact() { $SF check "$MNT" "$WORK/manifest" edge/; }
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
check "edge sizes (0, 1, 31, 4032, 4033, 64 KiB +- 1, 1 MiB +- 1), cold: byte-exact" edge_exact
wait_idle
check "edge sizes: only the 1 MiB + 1 file is an object in objects/ ($(object_files))" [ "$(object_files)" = 1 ]
check "edge sizes: the 8 of 1 B .. 1 MiB are packed ($(stat_value shardfs_cache_small_objects))" \
	[ "$(counter shardfs_cache_small_objects)" = 8 ]
read -r recs live live_bytes segs sealed < <(map)
check "edge sizes: those of 32 B .. 1 MiB are whole records in a segment ($live of 6)" [ "$live" = 6 ]
f1=$(fetched)
drop_caches
check "edge sizes, warm: byte-exact" edge_exact
check "edge sizes, warm: nothing fetched ($f1 -> $(fetched))" [ "$(fetched)" = "$f1" ]
sfs_umount
sfs_mount "cache_dir=$CACHE,$SIZE_OPT"
drop_caches
check "edge sizes, remount: byte-exact" edge_exact
check "edge sizes, remount: nothing fetched ($(fetched))" [ "$(fetched)" = 0 ]
check "edge sizes: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]

# --- 4 readers of the same small files at once, cold --------------------------------------
section "4 readers of the same files"
N_MED_BYTES=$($SF bytes "$WORK/manifest" med/)
drop_caches
f0=$(fetched)
pids=()
for r in 1 2 3 4; do
	$SF check "$MNT" "$WORK/manifest" med/ >"$WORK/same.$r" 2>&1 &
	pids+=($!)
done
bad=0
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
[ "$bad" = 0 ] || diag "$(cat "$WORK"/same.* | head -5)"
check "4 readers of the same $N_MED files, cold: all byte-exact" [ "$bad" = 0 ]
wait_idle
f=$(( $(fetched) - f0 ))
check "4 readers: each file fetched once ($f of $N_MED_BYTES bytes)" le "$f" $(( N_MED_BYTES * 11 / 10 ))
check "4 readers: packed once each ($(stat_value shardfs_cache_small_objects) = 8 + $N_MED)" \
	[ "$(counter shardfs_cache_small_objects)" = $((8 + N_MED)) ]
read -r recs live live_bytes segs sealed < <(map)
check "4 readers: one record per file ($recs records, $live files)" [ "$recs" = "$live" ]
check "unmount ends the daemon" sfs_umount
section "done"
sfs_finish
