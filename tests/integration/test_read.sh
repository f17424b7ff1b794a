#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Byte-exact reads through a real mount of a real 4-node NFS cluster:
# big shards, 10,000 small files in class folders, nested directories,
# symlinks, a 100,000-entry directory, 16 concurrent readers, EROFS, stats.
. "$(dirname "$0")/lib.sh"
sfs_require

SMALL=${SFS_TEST_SMALL_FILES:-10000}
mkdir -p "$EXPORT"
"$GENDATA" "$EXPORT" --shards 4 --shard-mib 32 --small "$SMALL" --classes 100 --small-kib 110 --seed 7 -q
head -c $((256 << 20)) /dev/urandom >"$EXPORT/shards/big-00000.tfrecord"
head -c $((300 << 20 | 12345)) /dev/urandom >"$EXPORT/shards/big-00001.tfrecord"
mkdir -p "$EXPORT/deep/a/b/c/d/e/f/g"
echo "deep file" >"$EXPORT/deep/a/b/c/d/e/f/g/leaf.txt"
ln -s ../shards/big-00000.tfrecord "$EXPORT/deep/link-to-shard"
ln -s a/b/c "$EXPORT/deep/link-to-dir"
ln -s /nonexistent/target "$EXPORT/deep/dangling"
mkdir -p "$EXPORT/pc"
head -c $((8 << 20 | 7)) /dev/urandom >"$EXPORT/pc/epochs.bin"
head -c 500000 /dev/urandom >"$EXPORT/pc/small.bin"
: >"$EXPORT/empty"
printf x >"$EXPORT/one-byte"
python3 - "$EXPORT/wide" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d)
for i in range(100000):
    os.close(os.open(f"{d}/entry-{i:06d}", os.O_CREAT | os.O_WRONLY, 0o644))
PY
sfs_cluster_up 4
sfs_mount "timeo=20,retrans=3"

# Big shards, sequential 1 MiB reads, page cache dropped first.
drop_caches
for f in "$EXPORT"/shards/big-*.tfrecord "$EXPORT"/shards/train-*.tfrecord; do
	rel=${f#$EXPORT/}
	check "shard $rel is byte-exact" same_bytes "$MNT/$rel" "$f"
done
check "read via dd bs=1M with O_DIRECT is byte-exact" \
	bash -c "dd if='$MNT/shards/big-00001.tfrecord' bs=1M iflag=direct status=none | cmp -s - '$EXPORT/shards/big-00001.tfrecord'"
check "unaligned pread at the end of a file" \
	bash -c "python3 -c 'import os,sys; a=os.open(sys.argv[1],os.O_RDONLY); b=os.open(sys.argv[2],os.O_RDONLY); sz=os.fstat(b).st_size
for off,n in ((sz-7,100),(sz-1048577,3000000),(1048575,2),(12345,1048576*2+5),(sz,10),(sz+100,10)):
    assert os.pread(a,n,off)==os.pread(b,n,off),(off,n)' '$MNT/shards/big-00001.tfrecord' '$EXPORT/shards/big-00001.tfrecord'"
check "empty file reads as empty" bash -c "[ ! -s '$MNT/empty' ] && [ -f '$MNT/empty' ]"
# A READ that returns 1 byte once meant "short read, ask again" to the origin.
check "a 1-byte file reads its byte" bash -c "[ \"\$(cat '$MNT/one-byte')\" = x ]"

# Small files: every one byte-exact (checksums of both trees).
drop_caches
sums() { (cd "$1" && find images -type f -print0 | sort -z | xargs -0 md5sum); }
sums "$EXPORT" >"$WORK/small.expected"
sums "$MNT" >"$WORK/small.got"
check "$SMALL small files in class folders are byte-exact" cmp -s "$WORK/small.expected" "$WORK/small.got"
check "small file count" [ "$(wc -l <"$WORK/small.got")" = "$SMALL" ]

# Namespace: nested directories, symlinks, attributes.
check "nested directory file" grep -qx "deep file" "$MNT/deep/a/b/c/d/e/f/g/leaf.txt"
check "symlink target is kept" [ "$(readlink "$MNT/deep/link-to-shard")" = "../shards/big-00000.tfrecord" ]
check "read through a symlink" same_bytes "$MNT/deep/link-to-shard" "$EXPORT/shards/big-00000.tfrecord"
check "symlink to a directory" [ -f "$MNT/deep/link-to-dir/d/e/f/g/leaf.txt" ]
check "dangling symlink is a symlink" bash -c "[ -L '$MNT/deep/dangling' ] && ! [ -e '$MNT/deep/dangling' ]"
check "sizes and mtimes match" bash -c "[ \"\$(cd '$EXPORT' && find shards deep -printf '%p %s %T@ %y\n' | sort)\" = \"\$(cd '$MNT' && find shards deep -printf '%p %s %T@ %y\n' | sort)\" ]"
check "missing file is ENOENT" bash -c "! cat '$MNT/no/such/file' 2>&1 | grep -q . || cat '$MNT/no/such/file' 2>&1 | grep -q 'No such file'"

# The 100,000-entry directory lists completely and exactly.
ls -f "$MNT/wide" | grep -v '^\.\.\?$' | sort >"$WORK/wide.got"
check "100,000-entry directory lists every entry once" \
	bash -c "[ \$(wc -l <'$WORK/wide.got') = 100000 ] && [ \"\$(uniq '$WORK/wide.got' | wc -l)\" = 100000 ]"
check "100,000-entry directory names match" \
	bash -c "cmp -s '$WORK/wide.got' <(ls -f '$EXPORT/wide' | grep -v '^\.\.\?$' | sort)"
check "ls -l (readdirplus + stat) on the wide directory" bash -c "[ \$(ls -l '$MNT/wide' | grep -c entry-) = 100000 ]"
rss=$(ps -o rss= -p "$(daemon_pid)")
diag "daemon RSS after listing 100k entries: ${rss} KiB"

# 16 concurrent readers over shards and small files.
drop_caches
pids=()
for i in $(seq 0 15); do
	case $((i % 4)) in
	0) f=shards/big-00000.tfrecord ;; 1) f=shards/big-00001.tfrecord ;;
	2) f=shards/train-0000$((i % 4))-of-00004.tfrecord ;;
	3) f=$(cd "$EXPORT" && find images -type f | sed -n "$((i * 37 + 1))p") ;;
	esac
	( cmp -s "$MNT/$f" "$EXPORT/$f" ) &
	pids+=($!)
done
bad=0
for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
check "16 concurrent readers all byte-exact" [ "$bad" = 0 ]

# page_cache=auto (the default): a file over 1 MiB is read direct_io while
# its opens overlap its first since the kernel took the inode in, then
# through the page cache, which keeps it for the next open. Files of 1 MiB
# or less always go through the page cache.
diag "--- page_cache=auto"
opens() { counter shardfs_fuse_direct_opens_total; }
served() { counter shardfs_fuse_read_bytes_total; }
forgotten() { [ "$(counter shardfs_inodes)" = 0 ]; }
# (the kernel's FORGETs come after drop_caches returns: waited for as long
# as a loaded machine takes)
forget_all() { drop_caches && wait_for 60 forgotten; }
PC=pc/epochs.bin
PC_BYTES=$(stat -c %s "$EXPORT/$PC")
check "the daemon negotiated shared mmap of direct_io files" [ "$(counter shardfs_fuse_direct_io_mmap)" = 1 ]
check "the kernel forgets every inode (drop_caches)" forget_all
# The second and third reads count on the kernel keeping the inode and its
# pages since the first; tests beside this one may drop the kernel's caches
# meanwhile (drops: the host's count of drop_caches), and then the three
# reads are done again (5 tries at most).
drops() { awk '/^drop_(pagecache|slab) / { s += $2 } END { print s + 0 }' /proc/vmstat; }
for try in 1 2 3 4 5; do
	[ "$try" = 1 ] || forget_all
	k0=$(drops)
	d0=$(opens) r0=$(served)
	same_bytes "$MNT/$PC" "$EXPORT/$PC"; e1=$?
	d1=$(opens) r1=$(served)
	same_bytes "$MNT/$PC" "$EXPORT/$PC"; e2=$?
	d2=$(opens) r2=$(served)
	same_bytes "$MNT/$PC" "$EXPORT/$PC"; e3=$?
	r3=$(served)
	kept=$([ "$(drops)" = "$k0" ] && echo 1)
	[ -n "$kept" ] && break
	diag "try $try: another process dropped the kernel's caches meanwhile"
done
# check_kept DESCRIPTION CMD...: a check that needs the kernel's caches kept
# (skipped where every try saw them dropped)
check_kept() {
	local d=$1
	shift
	if [ -n "$kept" ]; then check "$d" "$@"; else ok "$d # SKIP the kernel's caches were dropped by another process in every try"; fi
}
check "first read of $PC: byte-exact" [ "$e1" = 0 ]
check "first read: one direct_io open ($d0 -> $d1)" [ "$d1" = $((d0 + 1)) ]
check "first read: the daemon served it ($((r1 - r0)) bytes)" [ $((r1 - r0)) -ge "$PC_BYTES" ]
check "second read: byte-exact" [ "$e2" = 0 ]
check_kept "second read: through the page cache (no direct_io open: $d1 -> $d2)" [ "$d2" = "$d1" ]
check "second read: the daemon served it (the page cache had none of it)" [ $((r2 - r1)) -ge "$PC_BYTES" ]
check "third read: byte-exact" [ "$e3" = 0 ]
# (a page the kernel reclaimed meanwhile, under the memory pressure of the
# suites beside this one, is read again: at most 1% of the file may be)
check_kept "third read: from the page cache (the daemon served $((r3 - r2)) bytes)" \
	[ $((r3 - r2)) -le $((PC_BYTES / 100)) ]
check "the kernel forgets every inode again" forget_all
d3=$(opens)
check "two overlapping opens of a forgotten file, MAP_SHARED mmap of one: byte-exact" \
	python3 - "$MNT/$PC" "$EXPORT/$PC" <<'PY'
import mmap, sys
a, b, want = open(sys.argv[1], "rb"), open(sys.argv[1], "rb"), open(sys.argv[2], "rb").read()
m = mmap.mmap(b.fileno(), 0, access=mmap.ACCESS_READ)
sys.exit(0 if a.read() == want and m[:] == want else 1)
PY
check "both overlapping opens were direct_io ($d3 -> $(opens))" [ "$(opens)" = $((d3 + 2)) ]
d4=$(opens)
check "a file of 1 MiB or less: byte-exact" same_bytes "$MNT/pc/small.bin" "$EXPORT/pc/small.bin"
check "a file of 1 MiB or less: through the page cache on its first read" [ "$(opens)" = "$d4" ]
# A mount whose readers read in small pieces learns it: direct_io would cost
# them a FUSE round trip per read (fs/kernel/pagecache.h).
small_reader() { forget_all && dd if="$MNT/$PC" bs=16k status=none | cmp -s - "$EXPORT/$PC"; }
for k in 1 2 3 4 5 6; do
	check "first read $k in 16 KiB pieces: byte-exact" small_reader
done
share=$(stat_value shardfs_fuse_small_read_share)
check "six direct_io readers of 16 KiB pieces: they dominate (share $share >= 0.5)" \
	python3 -c "import sys; sys.exit(not float('$share') >= 0.5)"
d5=$(opens)
check "then a first read of a big file goes through the page cache: byte-exact" small_reader
check "... with no direct_io open ($d5 -> $(opens))" [ "$(opens)" = "$d5" ]

# Read-only: every way of modifying fails with EROFS and changes nothing.
erofs() { local out; out=$("$@" 2>&1) && return 1; grep -q "Read-only file system" <<<"$out"; }
check "write to a file: EROFS" erofs bash -c "echo x >> '$MNT/empty'"
check "create: EROFS" erofs touch "$MNT/newfile"
check "mkdir: EROFS" erofs mkdir "$MNT/newdir"
check "unlink: EROFS" erofs rm -f "$MNT/empty"
check "rmdir: EROFS" erofs rmdir "$MNT/deep/a/b/c/d/e/f/g"
check "rename: EROFS" erofs mv "$MNT/empty" "$MNT/empty2"
check "truncate: EROFS" erofs truncate -s 0 "$MNT/shards/big-00000.tfrecord"
check "chmod: EROFS" erofs chmod 600 "$MNT/empty"
check "symlink: EROFS" erofs ln -s x "$MNT/newlink"
check "export unchanged" bash -c "[ -f '$EXPORT/empty' ] && [ ! -e '$EXPORT/newfile' ]"

# The stats file: hidden from readdir, reachable by path, valid exposition.
check ".shardfs is not listed in the root" bash -c "! ls -a '$MNT' | grep -qx .shardfs"
check "stats file is reachable" [ -s "$MNT/.shardfs/stats" ]
cp "$MNT/.shardfs/stats" "$WORK/stats"
check "every stats line is a comment or a sample" \
	bash -c "! grep -vE '^(# (HELP|TYPE) [a-z_]+ .+|[a-z_]+(\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\})? [0-9.e+-]+)$' '$WORK/stats'"
for m in shardfs_build_info shardfs_uptime_seconds shardfs_node_up shardfs_node_read_bytes_total \
	shardfs_node_read_requests_total shardfs_node_errors_total shardfs_node_reissued_total \
	shardfs_node_latency_seconds_bucket shardfs_fuse_requests_total shardfs_fuse_read_bytes_total; do
	check "stats has $m" grep -q "^$m[{ ]" "$WORK/stats"
done
for a in ${ADDRS//,/ }; do
	v=$(grep -F "shardfs_node_read_bytes_total{node=\"$a\"}" "$WORK/stats" | awk '{print $2}')
	check "node $a served reads ($v bytes)" [ "${v:-0}" -gt 0 ]
	check "node $a is up" grep -qF "shardfs_node_up{node=\"$a\"} 1" "$WORK/stats"
done
check "statfs works (df)" bash -c "df -P '$MNT' | tail -1 | grep -q '$MNT'"
check "unmount ends the daemon" sfs_umount
sfs_finish
