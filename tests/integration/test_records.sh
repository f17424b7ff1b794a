#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Random-offset records in one big file against a real 4-node cluster: a
# file larger than prefetch_max and prefetch_mem read with shuffled preads
# of 110 KB records and odd lengths (across 16 KiB and 1 MiB boundaries, at
# and past EOF), cold then warm (served straight from the cache: by the
# kernel from the cache file under passthrough, else by the daemon, verified
# per 16 KiB sub-block), by 8 concurrent readers, with one sub-block of the
# cached object corrupted and with its short last chunk corrupted, and with
# direct_io (every pread reaches the daemon at its own offset and length;
# these three with passthrough=off), and without a cache (a reader that
# jumps around fetches its own bytes).
# Every pread is compared with the same pread on the export; the stats file
# tells what came from NFS.
. "$(dirname "$0")/lib.sh"
sfs_require

CACHE=$WORK/cache
MB=$((1 << 20))
SIZE=$((96 * MB + 12345))
OPTS="cache_dir=$CACHE,cache_size=1G,prefetch_max=16M,prefetch_mem=64M"
REC="python3 $WORK/rec.py"
mkdir -p "$EXPORT"
head -c "$SIZE" /dev/urandom >"$EXPORT/records.bin"

# rec.py PLAN_SEED THREADS MOUNT_FILE EXPORT_FILE: one epoch of preads, the
# same plan on both files; each thread reads every record of the plan in its
# own shuffled order. Prints the number of preads and mismatches.
cat >"$WORK/rec.py" <<'PY'
import os, random, sys, threading

KIB, MIB = 1 << 10, 1 << 20
REC = 110000

def plan(size, seed):
    rng = random.Random(seed)
    # Every record of the file once (an epoch), in a shuffled order.
    reads = [(o, REC) for o in range(0, size, REC)]
    # Across 1 MiB chunk boundaries and 16/64 KiB block boundaries.
    for k in rng.sample(range(1, size // MIB), 12):
        reads += [(k * MIB - 50000, 100000), (k * MIB - 1, 2), (k * MIB - REC + 7, REC)]
    for k in rng.sample(range(1, size // (64 * KIB)), 24):
        reads += [(k * 64 * KIB - 3, 7), (k * 64 * KIB - 4096, 65536 + 8192)]
    for k in rng.sample(range(1, size // (16 * KIB)), 24):
        reads += [(k * 16 * KIB - 1, 2), (k * 16 * KIB - 8192, 3 * 16 * KIB)]
    # Odd lengths at odd offsets.
    for n in (1, 3, 4095, 4097, 65535, 65537, 131071, MIB - 1, MIB + 1, 2 * MIB + 5):
        reads.append((rng.randrange(0, size - n), n))
    # At EOF and past it.
    reads += [(size - 7, 100), (size - 1, 1), (size - MIB - 1, 3 * MIB), (size - REC, REC),
              (size, 10), (size + 100, REC), (size + 5 * MIB, 1)]
    rng.shuffle(reads)
    return reads

def main(seed, n_threads, got_path, want_path):
    size = os.path.getsize(want_path)
    reads = plan(size, seed)
    bad = []
    def reader(t):
        order = list(reads)
        random.Random(seed * 100 + t).shuffle(order)
        g = os.open(got_path, os.O_RDONLY)
        w = os.open(want_path, os.O_RDONLY)
        try:
            for off, n in order:
                try:
                    got = os.pread(g, n, off)
                except OSError as e:
                    bad.append((off, n, str(e)))
                    continue
                if got != os.pread(w, n, off):
                    bad.append((off, n, "%d bytes differ" % len(got)))
        finally:
            os.close(g)
            os.close(w)
    ts = [threading.Thread(target=reader, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for b in bad[:5]:
        print("# pread(off=%d, len=%d): %s" % b)
    print("# %d threads x %d preads, %d wrong" % (n_threads, len(reads), len(bad)))
    return 1 if bad else 0

sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]))
PY

sfs_cluster_up 4

le() { [ "$1" -le "$2" ]; }
# epoch SEED THREADS: one epoch of shuffled preads, compared with the export
epoch() { $REC "$1" "$2" "$MNT/records.bin" "$EXPORT/records.bin"; }
section() { diag "--- $1 (at ${SECONDS}s)"; }
BOUND=$((SIZE * 11 / 10))
# skipped: bytes the daemon fetched but did not cache: because the cache
# writes waiting held prefetch_mem (this disk's fdatasync can lag 8 readers),
# or because cache_policy=auto did not admit them (any dataset, any reason):
# a chunk may then be fetched again, and only then.
refused() {
	awk 'index($0, "shardfs_cache_dataset_refused_bytes_total{") == 1 { s += $2 } END { print s + 0 }' \
		"$MNT/.shardfs/stats"
}
skipped() { echo $(($(counter shardfs_cache_write_skipped_bytes_total) + $(refused))); }

# --- cold, then warm ---------------------------------------------------------------
section "cold and warm epochs"
sfs_mount "$OPTS"
drop_caches
check "cold epoch: every pread byte-exact" epoch 1 1
wait_idle
f1=$(fetched)
s1=$(skipped)
check "cold epoch: fetched $f1 bytes, at least the file ($SIZE)" le "$SIZE" "$f1"
check "cold epoch: fetched $f1 bytes <= 1.1 x the file ($BOUND) + not cached ($s1)" \
	le "$f1" $((BOUND + s1))
check "cold epoch: the whole file is cached ($(counter shardfs_cache_used_bytes)) or skipped ($s1)" \
	le "$SIZE" $(($(counter shardfs_cache_used_bytes) + s1))
check "cold epoch: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]

drop_caches
# With passthrough on and the file wholly cached (its xattr says how much),
# the kernel reads it from the cache file: the daemon sees one open, counted
# as the file's bytes from the cache, and no read. Otherwise (passthrough=off,
# or a chunk left uncached) the daemon reads the cache, verifying as it reads.
cached=$(getfattr --only-values -n user.shardfs.cached "$MNT/records.bin" 2>/dev/null)
pt_whole=$(pt_on && [ "${cached:-0}" = "$SIZE" ] && echo 1)
d1=$(counter shardfs_cache_direct_reads_total)
h1=$(counter shardfs_cache_hit_bytes_total)
w1=$(counter shardfs_cache_write_bytes_total)
o1=$(counter shardfs_passthrough_open_bytes_total)
r1=$(counter shardfs_fuse_read_bytes_total)
check "warm epoch: every pread byte-exact" epoch 2 1
check "warm epoch: nothing fetched from NFS but what was not cached ($f1 -> $(fetched), $s1)" \
	le $(($(fetched) - f1)) "$s1"
d2=$(counter shardfs_cache_direct_reads_total)
h2=$(counter shardfs_cache_hit_bytes_total)
o2=$(counter shardfs_passthrough_open_bytes_total)
r2=$(counter shardfs_fuse_read_bytes_total)
if [ -n "$pt_whole" ]; then
	check "warm epoch, passthrough: opened as a passthrough of the cache file ($((o2 - o1)) bytes)" \
		[ $((o2 - o1)) = "$SIZE" ]
	check "warm epoch, passthrough: no read reached the daemon ($((r2 - r1)) bytes)" [ "$r2" = "$r1" ]
else
	diag "warm epoch through the daemon: passthrough $(counter shardfs_passthrough_enabled), $cached of $SIZE bytes cached"
	check "warm epoch: served by direct reads from the cache ($((d2 - d1)))" le 1 $((d2 - d1))
	check "warm epoch: hits cover the file ($((h2 - h1)) >= $SIZE)" le "$SIZE" $((h2 - h1))
fi
check "warm epoch: nothing written to the cache" [ "$(counter shardfs_cache_write_bytes_total)" = "$w1" ]
check "warm epoch: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]
sfs_umount

# --- 8 concurrent readers of the same chunks -------------------------------------------
section "8 concurrent readers"
rm -rf "$CACHE"
sfs_mount "$OPTS"
drop_caches
check "8 readers, cold: every pread byte-exact" epoch 3 8
wait_idle
f1=$(fetched)
s1=$(skipped)
check "8 readers, cold: each chunk fetched once ($f1 <= $BOUND), or again where not cached ($s1)" \
	le "$f1" $((BOUND + s1))
drop_caches
check "8 readers, warm: every pread byte-exact" epoch 4 8
check "8 readers, warm: nothing fetched from NFS but what was not cached ($((f1 - $(fetched))), $s1)" \
	le $(($(fetched) - f1)) "$s1"
check "8 readers: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]
sfs_umount

# --- a corrupted 16 KiB sub-block ----------------------------------------------------------
section "a corrupted sub-block"
mapfile -t objs < <(find "$CACHE/objects" -type f ! -name '*.sums' 2>/dev/null)
check "one cache object for the file (${#objs[@]})" [ "${#objs[@]}" = 1 ]
# flip OBJECT FILE_OFFSET...: flip one byte of the object at each offset of
# the file's bytes. Where they start in the object is found by content (the
# first 4096-aligned offset holding the file's first 4096 bytes), not from
# the header's layout. Prints the object offset of the first flip.
flip() {
	python3 - "$1" "$EXPORT/records.bin" "${@:2}" <<'PY'
import sys
obj, src, offs = sys.argv[1], sys.argv[2], [int(x) for x in sys.argv[3:]]
with open(src, "rb") as f:
    first = f.read(4096)
with open(obj, "r+b") as f:
    head = f.read(4 << 20)
    data_off = next((o for o in range(0, len(head) - 4096, 4096) if head[o:o + 4096] == first), None)
    if data_off is None:
        sys.exit("the file's first bytes are not in the object")
    print("# data_off %d" % data_off, file=sys.stderr)
    for o in offs:
        f.seek(data_off + o)
        b = f.read(1)
        f.seek(data_off + o)
        f.write(bytes([b[0] ^ 0xA5]))
print(data_off + offs[0])
PY
}
# pread_exact OFF LEN: one pread through the mount equals the export's
pread_exact() {
	python3 -c "
import os, sys
g = os.open(sys.argv[1], os.O_RDONLY); w = os.open(sys.argv[2], os.O_RDONLY)
sys.exit(os.pread(g, $2, $1) != os.pread(w, $2, $1))" "$MNT/records.bin" "$EXPORT/records.bin"
}
# Inside 16 KiB sub-block SUB of chunk CHUNK, not at its edges.
CHUNK=40
SUB=21
base=$(( (CHUNK << 20) + (SUB << 14) ))
at=$(flip "${objs[0]:-/nonexistent}" $((base + 100)) $((base + 8000)) $((base + 16000)))
diag "flipped 3 bytes at ${at:-?} of the object"
check "corrupted the object" [ -n "$at" ]
# passthrough=off here and for the last chunk: what is checked is the
# per-read verification (a passthrough open reads the cache file unchecked;
# its scrubber would evict the whole version instead).
sfs_mount "$OPTS,passthrough=off"
drop_caches
f0=$(fetched)
check "corrupted sub-block: the record that covers it is byte-exact" pread_exact $((base - 20000)) 110000
f1=$(fetched)
check "corrupted sub-block: counted as a checksum failure" le 1 "$(counter shardfs_cache_checksum_failures_total)"
check "corrupted sub-block: refetched about one chunk ($((f1 - f0)) bytes)" \
	bash -c "[ $((f1 - f0)) -ge 16384 ] && [ $((f1 - f0)) -le $((2 * MB)) ]"
check "corrupted sub-block: a whole epoch is byte-exact" epoch 5 1
wait_idle
f2=$(fetched)
check "corrupted sub-block: only that chunk was refetched ($((f2 - f0)) bytes)" le $((f2 - f0)) $((2 * MB))
drop_caches
check "corrupted sub-block: whole file byte-exact (sequential)" cmp -s "$MNT/records.bin" "$EXPORT/records.bin"
check "corrupted sub-block: the chunk was cached again (nothing more fetched)" [ "$(fetched)" = "$f2" ]
sfs_umount

# --- the short last chunk corrupted --------------------------------------------------------
section "a corrupted last chunk"
LAST=$(( (SIZE >> 20) << 20 ))
at=$(flip "${objs[0]:-/nonexistent}" $((SIZE - 10)) $((LAST + 5)))
check "corrupted the last chunk (${at:-?})" [ -n "$at" ]
sfs_mount "$OPTS,passthrough=off"
drop_caches
f0=$(fetched)
check "corrupted last chunk: a pread at EOF is byte-exact" pread_exact $((SIZE - 100)) 1000
check "corrupted last chunk: counted as a checksum failure" \
	le 1 "$(counter shardfs_cache_checksum_failures_total)"
check "corrupted last chunk: the whole file is byte-exact" cmp -s "$MNT/records.bin" "$EXPORT/records.bin"
wait_idle
f1=$(fetched)
check "corrupted last chunk: refetched only it ($((f1 - f0)) bytes, $((SIZE - LAST)) expected)" \
	bash -c "[ $((f1 - f0)) -ge $((SIZE - LAST)) ] && [ $((f1 - f0)) -le $((SIZE - LAST + MB)) ]"
sfs_umount

# --- direct_io: every pread reaches the daemon at its own offset and length --------------
section "direct_io"
# passthrough=off: a passthrough open is never direct_io (the kernel reads
# the cache file), and what is checked here is the daemon's answer to each
# pread and to mappings of direct_io files.
sfs_mount "$OPTS,direct_io,passthrough=off"
d1=$(counter shardfs_cache_direct_reads_total)
check "direct_io, warm, 8 readers: every pread byte-exact" epoch 6 8
check "direct_io, warm: nothing fetched from NFS ($(fetched))" [ "$(fetched)" = 0 ]
d2=$(counter shardfs_cache_direct_reads_total)
check "direct_io, warm: the preads were direct reads ($((d2 - d1)) >= 1017)" le 1017 $((d2 - d1))
check "direct_io, warm: no checksum failures" [ "$(counter shardfs_cache_checksum_failures_total)" = 0 ]
# LMDB, numpy.memmap and Arrow map files MAP_SHARED; on a direct_io open the
# kernel allows that only when the daemon negotiated FUSE_DIRECT_IO_ALLOW_MMAP
# (Linux 6.6+).
mmap_check() { # MODE: shared|private; the whole file through the mapping, byte-exact
	python3 - "$1" "$MNT/records.bin" "$EXPORT/records.bin" <<'PY'
import mmap, sys
mode, got, want = sys.argv[1:]
with open(got, "rb") as f:
    flags = mmap.MAP_SHARED if mode == "shared" else mmap.MAP_PRIVATE
    with mmap.mmap(f.fileno(), 0, flags=flags, prot=mmap.PROT_READ) as m, open(want, "rb") as w:
        step = 1 << 20
        for off in range(0, len(m), step):
            if m[off:off + step] != w.read(step):
                print("# mapping differs in the MiB at %d" % off)
                sys.exit(1)
        sys.exit(0 if len(m) == w.seek(0, 2) else 1)
PY
}
if printf '6.6\n%s\n' "$(uname -r)" | sort -C -V; then
	check "direct_io: the daemon negotiated shared mmap of direct_io files" \
		[ "$(counter shardfs_fuse_direct_io_mmap)" = 1 ]
	check "direct_io: MAP_SHARED mmap of the file, read whole, byte-exact" mmap_check shared
else
	check "direct_io: Linux $(uname -r) < 6.6 cannot map direct_io files shared, and says so" \
		[ "$(counter shardfs_fuse_direct_io_mmap)" = 0 ]
fi
check "direct_io: MAP_PRIVATE mmap of the file, read whole, byte-exact" mmap_check private
check "direct_io: preads still byte-exact after the mappings" epoch 9 2
sfs_umount
rm -rf "$CACHE"
sfs_mount "$OPTS,direct_io"
check "direct_io, cold, 8 readers: every pread byte-exact" epoch 7 8
wait_idle
f1=$(fetched)
s1=$(skipped)
check "direct_io, cold: fetched $f1 bytes <= 1.1 x the file ($BOUND) + not cached ($s1)" \
	le "$f1" $((BOUND + s1))
check "direct_io, cold then warm: every pread byte-exact" epoch 8 1
check "direct_io, warm: nothing more fetched but what was not cached ($s1)" \
	le $(($(fetched) - f1)) "$s1"
sfs_umount

# --- no cache: a reader that jumps around fetches its own bytes ---------------------------
section "no cache"
sfs_mount "prefetch_max=16M,prefetch_mem=32M"
drop_caches
check "no cache, 8 readers: every pread byte-exact" epoch 9 8
sfs_umount
# direct_io: every pread reaches the daemon, once.
sfs_mount "prefetch_max=16M,prefetch_mem=32M,direct_io"
check "no cache, direct_io: every pread byte-exact" epoch 10 1
f1=$(fetched)
df=$(counter shardfs_prefetch_direct_fetches_total)
check "no cache: preads fetched as asked, not as chunks ($df)" le 800 "$df"
# Whole 1 MiB chunks per 110 KB record, most dropped (32M budget) before
# the file's other records come, would fetch several times the file.
check "no cache: fetched $((f1 / MB)) MiB for one epoch of $((SIZE / MB)) MiB, <= 1.2x" \
	le "$f1" $((SIZE * 12 / 10))
check "unmount ends the daemon" sfs_umount
section "done"
sfs_finish
