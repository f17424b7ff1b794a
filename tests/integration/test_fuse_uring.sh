#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# FUSE over io_uring (fs/kernel/fuse_uring.c, experimental) through a real mount:
# build/tools/shardfs-fusefloor --uring serves a tree of files of a known
# pattern from memory over the ring, with the fuse module's enable_uring set
# for the test (and put back after): whole files of awkward sizes, ranges
# across 4 KiB and 1 MiB boundaries and parallel readers come back
# byte-exact, and the requests went through the ring. With enable_uring
# off, the same mount warns once and serves the same bytes over /dev/fuse.
# No NFS cluster: the transport alone is under test.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" = 0 ] || skip "needs root (FUSE mounts, the fuse module's parameters)"
[ -c /dev/fuse ] || skip "no /dev/fuse"
FLOOR=${SFS_FUSEFLOOR:-$SRC_ROOT/build/tools/shardfs-fusefloor}
[ -x "$FLOOR" ] || skip "not built: $FLOOR"
[ "${SFS_FUSE_URING_BUILT:-1}" = 1 ] || skip "built without FUSE over io_uring (meson option fuse_uring): the stub answers -ENOTSUP"
PARAM=/sys/module/fuse/parameters/enable_uring
[ -w "$PARAM" ] || skip "this kernel's fuse module has no FUSE over io_uring ($PARAM)"
OLD=$(cat "$PARAM")
restore() {
	echo "$OLD" >"$PARAM" 2>/dev/null
	sfs_cleanup
}
trap restore EXIT

mkdir -p "$MNT"
# RELPATH SIZE: empty, one byte, around a page, around a chunk, 3 MiB.
cat >"$WORK/tree" <<EOF
d/empty 0
d/one 1
d/page-1 4095
d/page 4096
d/page+1 4097
d/img 130000
d/chunk+1 1048577
big 3145728
EOF

# The pattern shardfs-fusefloor serves: byte o of every file is
# ((o % 4093) * 7 + 3) & 255 (a period that no request offset shares).
expect() { # expect OFFSET LENGTH: the file's bytes there
	python3 -c "import sys
o, n = int(sys.argv[1]), int(sys.argv[2])
sys.stdout.buffer.write(bytes((((o + i) % 4093) * 7 + 3) & 255 for i in range(n)))" "$1" "$2"
}
range_is() { # range_is FILE OFFSET LENGTH
	cmp -s <(python3 -c "import os, sys
f = os.open(sys.argv[1], os.O_RDONLY)
sys.stdout.buffer.write(os.pread(f, int(sys.argv[3]), int(sys.argv[2])))" "$1" "$2" "$3") <(expect "$2" "$3")
}

floor_up() { # floor_up LOG: mount the tree, over the ring where offered
	"$FLOOR" --uring "$WORK/tree" "$MNT" 2>"$1" &
	FLOOR_PID=$!
	wait_for 30 mountpoint -q "$MNT" # (a loaded machine starts it slowly)
}
floor_down() {
	umount "$MNT"
	wait "$FLOOR_PID"
}
reads_exact() { # reads_exact WHAT: every check of the bytes, described by WHAT
	while read -r rel size; do
		check "$WHAT: $rel ($size bytes) reads whole and exact" \
			cmp -s "$MNT/$rel" <(expect 0 "$size")
	done <"$WORK/tree"
	check "$WHAT: a range across a page boundary" range_is "$MNT/big" 4000 200
	check "$WHAT: a range across a chunk boundary" range_is "$MNT/big" $((1048576 - 70000)) 110000
	check "$WHAT: the file's last bytes, asked past its end" \
		range_is "$MNT/d/img" 129000 1000
	local i pids=""
	for i in 1 2 3 4 5 6 7 8; do
		cmp -s "$MNT/big" <(expect 0 3145728) &
		pids="$pids $!"
	done
	local bad=0
	for i in $pids; do wait "$i" || bad=$((bad + 1)); done
	check "$WHAT: 8 parallel readers of one file, all exact" [ "$bad" = 0 ]
}

echo 1 >"$PARAM"
check "mounted with enable_uring on" floor_up "$WORK/on.log"
WHAT="io_uring" reads_exact
floor_down
n=$(sed -n 's/.*: \([0-9]*\) requests over io_uring.*/\1/p' "$WORK/on.log")
check "the requests went through the ring (${n:-none})" [ "${n:-0}" -gt 50 ]
check "no warning that the kernel offers no ring" \
	bash -c "! grep -q 'does not offer' '$WORK/on.log'"

echo 0 >"$PARAM"
check "mounted with enable_uring off" floor_up "$WORK/off.log"
WHAT="/dev/fuse" reads_exact
floor_down
check "it warns that the kernel offers no ring" grep -q "does not offer FUSE over io_uring" "$WORK/off.log"
check "and no request went through a ring" grep -q ": 0 requests over io_uring" "$WORK/off.log"

sfs_finish
