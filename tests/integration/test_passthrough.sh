#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# FUSE passthrough (passthrough=auto, the default with a cache_dir) and the
# scrubber against a real 4-node cluster: a file wholly in the cache and
# verified is read by the kernel from its cache file (no READ reaches the
# daemon); the kernel's rules hold (no EIO: other opens beside passthrough
# ones join them, an open beside a page-cache one is not passthrough, a new
# version under an open reader is read through the daemon); packed small
# files and tool opens stay on the daemon's path; a restarted daemon serves a
# reloaded version only once verified; bytes flipped in a cache file are
# found by the scrubber (also by its pass at mount, for a flip made while
# unmounted) and never served to a new open; versions evicted under
# passthrough readers count as held until their last release, across a
# crash too; O_DIRECT opens with the cache on disk and on tmpfs;
# passthrough=off; a daemon that is not root falls back with one log line.
# Bytes compared with the export throughout.
. "$(dirname "$0")/lib.sh"
sfs_require

MB=$((1 << 20))
mkdir -p "$EXPORT/shards" "$EXPORT/small"
for i in 0 1 2 3; do head -c $((24 * MB + 777 * i)) /dev/urandom >"$EXPORT/shards/s$i"; done
for i in 0 1 2; do head -c $((100000 + i)) /dev/urandom >"$EXPORT/small/f$i"; done
sfs_cluster_up 4

served() { counter shardfs_fuse_read_bytes_total; } # bytes the daemon answered reads with
pt_opens() { counter shardfs_passthrough_opens_total; }
CACHE=$WORK/cache
OPTS="cache_dir=$CACHE,passthrough,actimeo=1,scrub_interval=3600"
# scrub_passes N: the scrubber finished N passes or more
scrub_passes() { [ "$(counter shardfs_cache_scrub_passes_total)" -ge "$1" ]; }

sfs_mount "$OPTS"
if [ "$(counter shardfs_passthrough_enabled)" != 1 ]; then
	grep -i passthrough "$WORK/daemon.log" | sed 's/^/# /'
	skip "this kernel does not offer FUSE passthrough (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH)"
fi
check "scrubber running at the default rate (256 MiB/s)" \
	[ "$(counter shardfs_cache_scrub_rate_bytes)" = $((256 * MB)) ]

# --- a cached shard is read by the kernel ------------------------------------------
check "s0 cold: byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
wait_idle
check "s0 cold: not passthrough (not in the cache at open)" [ "$(pt_opens)" = 0 ]
drop_caches
r0=$(served)
check "s0 warm: byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
check "s0 warm: a passthrough open" [ "$(pt_opens)" = 1 ]
check "s0 warm: no read reached the daemon ($(served) bytes served vs $r0)" [ "$(served)" = "$r0" ]
check "s0 warm: its bytes counted at open ($(counter shardfs_passthrough_open_bytes_total))" \
	[ "$(counter shardfs_passthrough_open_bytes_total)" = $((24 * MB)) ]
check "mmap of a passthrough file: byte-exact" python3 - "$MNT/shards/s0" "$EXPORT/shards/s0" <<'PY'
import mmap, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as g:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    sys.exit(0 if m[:] == g.read() else 1)
PY

# --- several opens of one inode -----------------------------------------------------
exec 3<"$MNT/shards/s0" # a passthrough open, held
b=$(counter shardfs_passthrough_backing_files_total)
check "a second open joins the first (same backing file): byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
check "... passthrough, no new backing file ($(counter shardfs_passthrough_backing_files_total) vs $b)" \
	[ "$(counter shardfs_passthrough_backing_files_total)" = "$b" ]
p=$(pt_opens)
check "a tool's open (O_NONBLOCK) beside it: byte-exact" python3 - "$MNT/shards/s0" "$EXPORT/shards/s0" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
got = b"".join(iter(lambda: os.read(fd, 1 << 20), b""))
os.close(fd)
sys.exit(0 if got == open(sys.argv[2], "rb").read() else 1)
PY
check "... joins the passthrough opens (the kernel allows no other open beside them)" [ "$(pt_opens)" = $((p + 1)) ]
check "the held passthrough fd reads on: byte-exact" cmp -s - "$EXPORT/shards/s0" <&3
exec 3<&-

# A page-cache open held while the file becomes cached: the next open may
# not be passthrough (the kernel would fail it with EIO); once it closes, it may.
exec 4<"$MNT/shards/s1"
check "s1 cold, an open held: byte-exact" same_bytes "$MNT/shards/s1" "$EXPORT/shards/s1"
wait_idle
p=$(pt_opens)
check "s1 cached, opened beside the held open: byte-exact" same_bytes "$MNT/shards/s1" "$EXPORT/shards/s1"
check "... and not passthrough" [ "$(pt_opens)" = "$p" ]
exec 4<&-
check "s1 after the held open closed: byte-exact" same_bytes "$MNT/shards/s1" "$EXPORT/shards/s1"
check "... passthrough" [ "$(pt_opens)" = $((p + 1)) ]

# --- packed small files stay on the daemon's path ------------------------------------
for i in 0 1 2; do cat "$MNT/small/f$i" >/dev/null; done
wait_idle
p=$(pt_opens)
check "small files warm: byte-exact" bash -c "for i in 0 1 2; do cmp -s $MNT/small/f\$i $EXPORT/small/f\$i || exit 1; done"
check "... not passthrough (packed in segments)" [ "$(pt_opens)" = "$p" ]

# --- a new version under an open passthrough reader --------------------------------
check "s2 cold: byte-exact" same_bytes "$MNT/shards/s2" "$EXPORT/shards/s2"
wait_idle
cp "$EXPORT/shards/s2" "$WORK/s2.old"
exec 5<"$MNT/shards/s2"
p=$(pt_opens)
check "s2 held open as passthrough" [ "$p" -ge 1 ]
head -c $((24 * MB + 1554)) /dev/urandom >"$WORK/s2.new"
cp "$WORK/s2.new" "$EXPORT/shards/s2"
sleep 2 # actimeo=1
# Its lookup gives the name a new inode (the old one keeps its passthrough
# readers): the open is served as any other.
check "s2's new version, opened under the old one's reader: byte-exact" same_bytes "$MNT/shards/s2" "$WORK/s2.new"
check "the old reader still reads the old version: byte-exact" cmp -s - "$WORK/s2.old" <&5
exec 5<&-
wait_idle
check "s2's new version after the old reader closed: byte-exact" same_bytes "$MNT/shards/s2" "$WORK/s2.new"

# --- a crash of the serving process under a passthrough reader (the keeper) ---------
# The kernel keeps the inode's backing file; the next server finds the id and
# the count in the shared inode slot: a new open joins, none fails.
drop_caches
p=$(pt_opens)
exec 7<"$MNT/shards/s1"
check "s1 held open through passthrough before the crash" [ "$(pt_opens)" = $((p + 1)) ]
kill -9 "$(serving_pid)"
# The new server loaded the cache unverified: its first scrub pass verifies
# s1 (until then an open beside the reader is retried on a new inode).
wait_for 120 scrub_passes 1
check "after the crash, s1 opened beside the held reader: byte-exact" \
	same_bytes "$MNT/shards/s1" "$EXPORT/shards/s1"
check "... it joined the passthrough open ($(pt_opens) passthrough opens in the new server)" \
	[ "$(pt_opens)" = 1 ]
check "the reader held across the crash: byte-exact" cmp -s - "$EXPORT/shards/s1" <&7
exec 7<&-
check "s1 after both closed (an inode adopted from the dead server: served by the daemon): byte-exact" \
	same_bytes "$MNT/shards/s1" "$EXPORT/shards/s1"
check "... and that open was not passthrough" [ "$(pt_opens)" = 1 ]
check "s0 (no open across the crash, so not adopted with opens): byte-exact" \
	same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
sfs_umount

# --- a restart: reloaded versions are verified before passthrough -------------------
# No scrub passes (only the verification of what opens ask for).
sfs_mount "cache_dir=$CACHE,passthrough,scrub_interval=0,scrub_rate=1G"
drop_caches
check "after a restart, s0: byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
check "... not passthrough before verified ($(counter shardfs_passthrough_unverified_opens_total) unverified)" \
	bash -c "[ $(pt_opens) = 0 ] && [ $(counter shardfs_passthrough_unverified_opens_total) -ge 1 ]"
verified_for_open() { [ "$(counter shardfs_cache_scrub_verified_for_open_total)" -ge 1 ]; }
wait_for 120 verified_for_open
check "the scrubber verified it ($(counter shardfs_cache_scrub_verified_for_open_total))" \
	[ "$(counter shardfs_cache_scrub_verified_for_open_total)" -ge 1 ]
check "then s0: byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
check "... passthrough" [ "$(pt_opens)" = 1 ]
sfs_umount

# --- the scrubber finds flipped bytes -----------------------------------------------
# The data file of s3 holds byte x at x: find it by its first 64 KiB.
sfs_mount "$OPTS"
check "s3 cold: byte-exact" same_bytes "$MNT/shards/s3" "$EXPORT/shards/s3"
wait_idle
sfs_umount
want=$(head -c 65536 "$EXPORT/shards/s3" | md5sum | cut -c1-32)
obj=
for o in $(find "$CACHE/objects" -type f ! -name '*.sums'); do
	[ "$(head -c 65536 "$o" | md5sum | cut -c1-32)" = "$want" ] && obj=$o
done
check "s3's cache file found" [ -n "$obj" ]
sfs_mount "cache_dir=$CACHE,passthrough,scrub_interval=4"
# The restart left s3 unverified: the first scrub pass (at mount) verifies it.
wait_for 120 scrub_passes 1
exec 6<"$MNT/shards/s3"
check "s3 held open through passthrough" [ "$(pt_opens)" = 1 ]
python3 - "$obj" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    for off in (5 * 1048576 + 17, 20 * 1048576 + 3):
        f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0x5A]))
PY
# The contract: a flip is found within one scrub_interval and a pass. The
# bound allows the pass many seconds on a loaded 2-core machine; without
# passes every interval it is never found.
t0=$(date +%s)
scrub_failed() { [ "$(counter shardfs_cache_scrub_failures_total)" -ge 1 ]; }
wait_for 60 scrub_failed
t1=$(date +%s)
check "the scrubber found the flip within one interval and a pass ($((t1 - t0)) s, interval 4 s, bound 40 s)" \
	bash -c "[ $(counter shardfs_cache_scrub_failures_total) = 1 ] && [ $((t1 - t0)) -le 40 ]"
check "... and evicted the version (its cache file is gone)" [ ! -e "$obj" ]
drop_caches
st=$(counter shardfs_passthrough_stale_opens_total)
check "s3 opened after the scrub, beside its old reader: byte-exact (fetched again)" \
	same_bytes "$MNT/shards/s3" "$EXPORT/shards/s3"
check "... refused once with ESTALE and retried by the kernel on a new inode" \
	[ "$(counter shardfs_passthrough_stale_opens_total)" -gt "$st" ]
check "the reader that held it reads the cache file as it is (documented: the flipped bytes)" \
	bash -c "! cmp -s - '$EXPORT/shards/s3'" <&6
exec 6<&-
check "the other versions passed ($(counter shardfs_cache_scrub_versions_total) checked, $(counter shardfs_cache_scrub_passes_total) passes)" \
	[ "$(counter shardfs_cache_scrub_versions_total)" -ge 3 ]
sfs_umount

# --- the defaults: passthrough=auto, a daily scrub with a pass at mount -------------
# A byte flipped in the cache while unmounted is found by the pass at mount.
sfs_mount "cache_dir=$CACHE"
check "defaults: passthrough on" [ "$(counter shardfs_passthrough_enabled)" = 1 ]
check "defaults: a scrub pass daily" [ "$(counter shardfs_cache_scrub_interval_seconds)" = 86400 ]
check "defaults, s3: byte-exact" same_bytes "$MNT/shards/s3" "$EXPORT/shards/s3"
wait_idle
sfs_umount
obj=
for o in $(find "$CACHE/objects" -type f ! -name '*.sums'); do
	[ "$(head -c 65536 "$o" | md5sum | cut -c1-32)" = "$want" ] && obj=$o
done
check "s3's cache file found again" [ -n "$obj" ]
python3 - "$obj" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(7 * 1048576 + 5); b = f.read(1); f.seek(7 * 1048576 + 5); f.write(bytes([b[0] ^ 0x21]))
PY
sfs_mount "cache_dir=$CACHE"
wait_for 120 scrub_passes 1
check "the pass at mount found the byte flipped while unmounted ($(counter shardfs_cache_scrub_failures_total))" \
	[ "$(counter shardfs_cache_scrub_failures_total)" = 1 ]
check "... and evicted the version" [ ! -e "$obj" ]
check "s3 after it: byte-exact (fetched again)" same_bytes "$MNT/shards/s3" "$EXPORT/shards/s3"

# --- versions evicted while passthrough readers hold them ---------------------------
# Their files are unlinked and the kernel reads on: their bytes count as held
# (and used) until the last release, also across a crash of the server.
TOOL=${SFS_CACHE_TOOL:-$SRC_ROOT/build/tools/shardfs-cache}
held() { counter shardfs_cache_held_bytes; }
held_is() { [ "$(held)" = "$1" ]; }
s0=$((24 * MB))
s1=$((24 * MB + 777))
evict_shards() { "$TOOL" evict "$MNT" /ifs/shards >>"$WORK/evict.log" 2>&1; }
# new_server OLD: a server other than OLD answers
new_server() { p=$(stat_value shardfs_serving_pid 2>/dev/null) && [ -n "$p" ] && [ "$p" != "$1" ]; }
warm() { same_bytes "$MNT/shards/$1" "$EXPORT/shards/$1" && wait_idle && drop_caches; }
check "s0 warm again: byte-exact" warm s0
p=$(pt_opens)
exec 3<"$MNT/shards/s0"
check "s0 held open through passthrough" [ "$(pt_opens)" = $((p + 1)) ]
evict_shards
check "evicted while held: its bytes held ($(held))" [ "$(held)" = "$s0" ]
check "... and counted as used ($(counter shardfs_cache_used_bytes))" \
	[ "$(counter shardfs_cache_used_bytes)" -ge "$s0" ]
check "the held reader reads on: byte-exact" cmp -s - "$EXPORT/shards/s0" <&3
exec 3<&-
wait_for 60 held_is 0
check "its last release: nothing held ($(held))" held_is 0

check "s0 warm again: byte-exact" warm s0
check "s1 warm again: byte-exact" warm s1
exec 3<"$MNT/shards/s0" 4<"$MNT/shards/s1"
check "s0 and s1 held open through passthrough" [ "$(pt_opens)" -ge 2 ]
"$TOOL" evict "$MNT" "$MNT/shards/s1" >>"$WORK/evict.log" 2>&1
check "s1 evicted while held ($(held))" [ "$(held)" = "$s1" ]
old=$(serving_pid)
kill -9 "$old"
wait_for 60 new_server "$old"
check "after a crash, the dead server's evicted s1 is still counted as held ($(held))" \
	[ "$(held)" = "$s1" ]
evict_shards
check "s0, evicted by the new server under its adopted reader: held too ($(held))" \
	[ "$(held)" = $((s0 + s1)) ]
check "the readers held across the crash: byte-exact" \
	bash -c "cmp -s - '$EXPORT/shards/s0' <&3 && cmp -s - '$EXPORT/shards/s1' <&4"
exec 3<&- 4<&-
wait_for 60 held_is 0
check "their last releases: nothing held ($(held))" held_is 0
sfs_umount

# --- O_DIRECT readers (cuFile compat mode, KvikIO, DALI) ---------------------------
# An O_DIRECT open of a cached file is a passthrough open like any other: its
# reads meet the cache filesystem's O_DIRECT rules. Cache on disk and on tmpfs.
odirect() { # FILE EXPORT ALIGNED|MISALIGNED: prints what the reads gave
	python3 - "$@" <<'PY'
import mmap, os, sys
path, ref, mode = sys.argv[1:4]
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
want = open(ref, "rb").read()
if mode == "aligned":
    buf, got, off = mmap.mmap(-1, 1 << 20), bytearray(), 0
    while True:
        n = os.preadv(fd, [buf], off)
        got += buf[:n]
        off += n
        if n < len(buf):
            break
    print("exact" if bytes(got) == want else "differ")
else:
    try:
        b = os.pread(fd, 4096, 1)
        print("exact" if b == want[1:4097] else "differ")
    except OSError as e:
        print("errno", e.errno)
os.close(fd)
PY
}
TMPC=$WORK/tmpfs-cache
mkdir -p "$TMPC"
mount -t tmpfs -o size=256m shardfs-test "$TMPC"
for where in disk tmpfs; do
	c=$CACHE
	[ $where = tmpfs ] && c=$TMPC/cache
	sfs_mount "cache_dir=$c"
	wait_for 120 scrub_passes 1
	check "$where cache: s2 warm: byte-exact" warm s2
	p=$(pt_opens)
	check "$where cache: aligned O_DIRECT reads as the first open: byte-exact" \
		[ "$(odirect "$MNT/shards/s2" "$EXPORT/shards/s2" aligned)" = exact ]
	check "... a passthrough open" [ "$(pt_opens)" = $((p + 1)) ]
	exec 5<"$MNT/shards/s2"
	check "$where cache: aligned O_DIRECT beside a buffered passthrough open: byte-exact" \
		[ "$(odirect "$MNT/shards/s2" "$EXPORT/shards/s2" aligned)" = exact ]
	mis=$(odirect "$MNT/shards/s2" "$EXPORT/shards/s2" misaligned)
	# shardfs(8): a misaligned O_DIRECT read gets what the cache filesystem
	# gives: EINVAL on a block filesystem, the bytes on tmpfs.
	if [ $where = disk ]; then
		check "disk cache: a misaligned O_DIRECT read fails with EINVAL ($mis)" [ "$mis" = "errno 22" ]
	else
		check "tmpfs cache: a misaligned O_DIRECT read gets the bytes ($mis)" [ "$mis" = exact ]
	fi
	check "$where cache: the buffered reader beside them: byte-exact" cmp -s - "$EXPORT/shards/s2" <&5
	exec 5<&-
	sfs_umount
done
umount "$TMPC"

# --- passthrough=off: every read through the daemon, no scrubber --------------------
sfs_mount "cache_dir=$CACHE,passthrough=off"
check "passthrough=off: s0 byte-exact" same_bytes "$MNT/shards/s0" "$EXPORT/shards/s0"
check "... no passthrough, no scrubber" [ "$(counter shardfs_passthrough_enabled)" = 0 ] && \
	[ "$(pt_opens)" = 0 ] && [ "$(counter shardfs_cache_scrub_rate_bytes)" = 0 ]
sfs_umount

# --- a daemon that may not register backing files (not root) ------------------------
# Passthrough is off for the mount with one log line saying why; reads are
# served by the daemon.
NR=$WORK/nonroot
mkdir -p "$NR/cache" && chown -R 65534:65534 "$NR" "$MNT"
# Debian's udev makes /dev/fuse 0666 (any user mounts through fusermount3);
# a machine that made it 0600 gets that mode for this section, then its own.
fuse_mode=$(stat -c %a /dev/fuse)
chmod 666 /dev/fuse
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
# Without allow_other only the mounting user may enter the mount: the reads
# and the stats file are read as that user.
nb_counter() { as_nobody awk -v m="$1 " 'index($0, m) == 1 { print $2; f = 1; exit } END { if (!f) print 0 }' "$MNT/.shardfs/stats"; }
in_ns setpriv --reuid=65534 --regid=65534 --clear-groups \
	"$SHARDFS" "$ADDRS:/ifs" "$MNT" -f -o "cache_dir=$NR/cache" 2>"$NR/daemon.log" &
nonroot=$!
mounted() { grep -q " $MNT fuse" /proc/mounts; }
wait_for 30 mounted
if mounted; then
	check "not root: s0 byte-exact (cold)" as_nobody cmp -s "$MNT/shards/s0" "$EXPORT/shards/s0"
	nb_idle() { [ "$(nb_counter shardfs_prefetch_inflight_bytes)" = 0 ] && [ "$(nb_counter shardfs_cache_write_queue_bytes)" = 0 ]; }
	wait_for 60 nb_idle
	drop_caches
	check "not root: s0 byte-exact (warm)" as_nobody cmp -s "$MNT/shards/s0" "$EXPORT/shards/s0"
	check "not root: passthrough off, no passthrough open, no backing file tried" \
		[ "$(nb_counter shardfs_passthrough_enabled)$(nb_counter shardfs_passthrough_opens_total)$(nb_counter shardfs_passthrough_backing_errors_total)" = 000 ]
	n=$(grep -c "passthrough off: the kernel refused a backing file: .*CAP_SYS_ADMIN" "$NR/daemon.log")
	check "... said in one log line naming the reason ($n)" [ "$n" = 1 ]
else
	sed 's/^/# /' "$NR/daemon.log"
	not_ok "a daemon as uid 65534 mounts (fusermount3)"
fi
umount "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
kill "$nonroot" 2>/dev/null
wait "$nonroot" 2>/dev/null
chmod "$fuse_mode" /dev/fuse
chown 0:0 "$MNT"
sfs_finish
