#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Refusals: every bad option, source, address, export or mountpoint gets one
# line on stderr naming the cause, a non-zero exit within about
# timeo x retrans, and nothing mounted. Also the mount(8) / fstab path.
. "$(dirname "$0")/lib.sh"
sfs_require

mkdir -p "$EXPORT"
echo hello >"$EXPORT/hello.txt"
sfs_cluster_up 2
A1=127.1.1.2 A2=127.1.2.2
GOOD="$ADDRS:/ifs"
touch "$WORK/a-file"

# refuse DESCRIPTION PATTERN SECONDS ARGS...: run the daemon (in the
# client namespace) with ARGS; it must fail with one matching line within
# SECONDS, what the refusal may take (0: decided without waiting for the
# network, or answered by nodes that are up; timeo x retrans where no node
# answers), plus SLACK.
# SLACK: a loaded machine (both cores busy) is slow to start the namespace's
# helper and the daemon; a refusal that hangs still fails (the 60 s timeout).
SLACK=15
refuse() {
	local desc=$1 pat=$2 max=$(($3 + SLACK)) t0 t1 rc lines
	shift 3
	t0=$(date +%s%N)
	in_ns timeout 60 "$SHARDFS" "$@" >"$WORK/out" 2>"$WORK/err"
	rc=$?
	t1=$(date +%s%N)
	lines=$(wc -l <"$WORK/err")
	local el=$(( (t1 - t0) / 1000000 ))
	if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$lines" = 1 ] && grep -qiE -- "$pat" "$WORK/err" &&
		! mountpoint -q "$MNT" && [ "$el" -le $((max * 1000)) ]; then
		ok "$desc: exit $rc in ${el} ms: $(cat "$WORK/err")"
	else
		not_ok "$desc (rc=$rc, ${el} ms, $lines lines, want /$pat/): $(head -3 "$WORK/err")"
		mountpoint -q "$MNT" && umount "$MNT"
	fi
}

refuse "no arguments" "missing source" 0
refuse "no mountpoint" "missing MOUNTPOINT" 0 "$GOOD"
refuse "extra argument" "unexpected argument 'extra'" 0 "$GOOD" "$MNT" extra
refuse "unknown command-line flag" "unknown option '-x'" 0 -x "$GOOD" "$MNT"
refuse "unknown mount option" "unknown mount option 'bogus'" 0 -o bogus=1 "$GOOD" "$MNT"
refuse "misspelled mount option: the closest name" "did you mean 'nconnect'" 0 -o nconect=2 "$GOOD" "$MNT"
refuse "cache_policy without cache_dir" "cache_policy without cache_dir" 0 -o cache_policy=pin "$GOOD" "$MNT"
refuse "cache_idle without cache_dir" "cache_idle without cache_dir" 0 -o cache_idle=30 "$GOOD" "$MNT"
refuse "mem_max too small to run" "mem_max=32M is too small.*minimum is 64M" 0 -o mem_max=32M "$GOOD" "$MNT"
refuse "malformed number" "nconnect=abc" 0 -o nconnect=abc "$GOOD" "$MNT"
refuse "nconnect=0 out of range" "out of range" 0 -o nconnect=0 "$GOOD" "$MNT"
refuse "nconnect=17 out of range" "out of range" 0 -o nconnect=17 "$GOOD" "$MNT"
refuse "rsize too small" "rsize=100.*out of range" 0 -o rsize=100 "$GOOD" "$MNT"
refuse "rsize too large" "rsize=2M.*out of range" 0 -o rsize=2M "$GOOD" "$MNT"
refuse "timeo=0" "timeo=0.*out of range" 0 -o timeo=0 "$GOOD" "$MNT"
refuse "retrans=0" "retrans=0.*out of range" 0 -o retrans=0 "$GOOD" "$MNT"
refuse "negative actimeo" "actimeo=-1" 0 -o actimeo=-1 "$GOOD" "$MNT"
refuse "non-numeric uid" "uid=root" 0 -o uid=root "$GOOD" "$MNT"
refuse "flag with a value" "'soft' takes no value" 0 -o soft=1 "$GOOD" "$MNT"
refuse "option without its value" "'nconnect' needs a value" 0 -o nconnect "$GOOD" "$MNT"
refuse "empty option in a list" "empty mount option" 0 -o nconnect=2,,soft "$GOOD" "$MNT"
refuse "-o without argument" "-o needs an argument" 0 "$GOOD" "$MNT" -o
refuse "bad size suffix" "prefetch_mem=12X" 0 -o prefetch_mem=12X "$GOOD" "$MNT"
refuse "empty source" "empty source" 0 "" "$MNT"
refuse "source without export" "not HOST" 0 "$A1" "$MNT"
refuse "source without host" "names no host" 0 ":/ifs" "$MNT"
refuse "relative export" "not HOST" 0 "$A1:ifs" "$MNT"
refuse "empty host in list" "empty host" 0 "$A1,,$A2:/ifs" "$MNT"
refuse "bad character in host" "invalid character" 0 "$A1;reboot:/ifs" "$MNT"
refuse "unresolvable host name" "cannot resolve host 'no-such-node.invalid'" 10 "no-such-node.invalid:/ifs" "$MNT"
refuse "unreachable address" "127.1.9.2" 2 -o timeo=10,retrans=2 "127.1.9.2:/ifs" "$MNT"
refuse "every address unreachable" "no node could mount" 2 -o timeo=10,retrans=2 "127.1.9.2,127.1.8.2:/ifs" "$MNT"
refuse "missing export" "/no-such-export" 0 "$ADDRS:/no-such-export" "$MNT"
refuse "missing mountpoint" "mountpoint '$WORK/nope'" 0 "$GOOD" "$WORK/nope"
refuse "mountpoint is a file" "not a directory" 0 "$GOOD" "$WORK/a-file"
"$CLUSTER" freeze "$CID" all >/dev/null
refuse "every node hung (timeo=10, retrans=2: ~2 s)" "no node could mount|cannot mount" 2 \
	-o timeo=10,retrans=2 "$GOOD" "$MNT"
"$CLUSTER" thaw "$CID" all >/dev/null

# Help and version succeed and mount nothing.
check "--help documents every option" bash -c "out=\$('$SHARDFS' --help) && for o in nconnect rsize timeo retrans soft hard actimeo uid gid allow_other default_permissions prefetch_mem; do grep -q \"\$o\" <<<\"\$out\" || exit 1; done"
check "--version" bash -c "'$SHARDFS' --version | grep -q '^shardfs [0-9]'"

# One good mount through mount(8) -> mount.fuse3 -> shardfs, with the
# options an fstab line would carry. mount(8) gives helpers a fixed PATH, so
# name the binary with fuse's "PROGRAM#SOURCE" form (the packaged binary is
# found by "-t fuse.shardfs" the same way).
if command -v mount.fuse3 >/dev/null; then
	check "mount -t fuse PROGRAM#SOURCE with fstab-style options" \
		in_ns mount -t fuse "$SHARDFS#$GOOD" "$MNT" -o nconnect=2,timeo=20,_netdev,nofail,noatime
	check "mount(8) mount reads" grep -qx hello "$MNT/hello.txt"
	check "mount(8) mount shows the source" bash -c "findmnt -n -o SOURCE '$MNT' | grep -qF '$ADDRS:/ifs'"
	# A second daemon on a live mount (a re-run prolog, a restarted unit)
	# is refused, through mount(8) and directly; -o overmount stacks.
	check "mount(8) over a live shardfs mount is refused, one mount stays" \
		bash -c "! '$CLUSTER' exec '$CID' -- mount -t fuse '$SHARDFS#$GOOD' '$MNT' 2>'$WORK/err' && grep -q 'already a fuse.shardfs mount' '$WORK/err' && [ \$(grep -c ' $MNT ' /proc/mounts) = 1 ]"
	in_ns "$SHARDFS" "$GOOD" "$MNT" 2>"$WORK/err"
	rc=$?
	check "shardfs over a live mount: exit $rc, one line: $(cat "$WORK/err")" \
		bash -c "[ $rc != 0 ] && [ \$(wc -l <'$WORK/err') = 1 ] && grep -q 'already a fuse.shardfs mount' '$WORK/err' && [ \$(grep -c ' $MNT ' /proc/mounts) = 1 ]"
	check "-o overmount stacks a second mount" bash -c "'$CLUSTER' exec '$CID' -- '$SHARDFS' -o overmount '$GOOD' '$MNT' && [ \$(grep -c ' $MNT ' /proc/mounts) = 2 ]"
	umount "$MNT" 2>/dev/null
	sfs_umount
	check "mount(8) refuses a bad option and mounts nothing" \
		bash -c "! '$CLUSTER' exec '$CID' -- mount -t fuse '$SHARDFS#$GOOD' '$MNT' -o nconnect=99 2>'$WORK/err' && grep -q 'out of range' '$WORK/err' && ! mountpoint -q '$MNT'"
else
	not_ok "mount.fuse3 is missing (package fuse3)"
fi
sfs_finish
