#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Fleet clients of tools/testbed/shardfs-cluster: client namespaces that reach every
# node through the node's own link (so its tbf cap is shared), a daemon
# mounted from one of them reading byte-exact, the client namespace
# forwarding only once a fleet client exists, nothing host-wide touched,
# bad arguments refused, and stop removing every namespace.
. "$(dirname "$0")/lib.sh"
sfs_require

mkdir -p "$EXPORT/shards"
head -c $((16 << 20 | 4321)) /dev/urandom >"$EXPORT/shards/a.bin"

host_conf() { cat /proc/sys/net/ipv4/conf/all/forwarding /proc/sys/net/ipv4/conf/all/rp_filter \
	/proc/sys/net/ipv4/conf/default/rp_filter /proc/sys/net/ipv4/ip_forward | tr '\n' ' '; }
HOST_BEFORE=$(host_conf)

sfs_cluster_up 4
fwd() { in_ns cat /proc/sys/net/ipv4/conf/all/forwarding; }
check "without fleet clients the client namespace does not forward" [ "$(fwd)" = 0 ]

check "client 1-2 prints the clients' addresses" \
	[ "$("$CLUSTER" client "$CID" 1-2 2>>"$WORK/cluster.log")" = "127.2.1.2,127.2.2.2" ]
check "client 2 again (already there) succeeds" \
	[ "$("$CLUSTER" client "$CID" 2 2>>"$WORK/cluster.log")" = "127.2.2.2" ]
check "clients lists both" \
	[ "$("$CLUSTER" clients "$CID" | awk '{print $1 ":" $2 ":" $3}' | tr '\n' ' ')" = \
		"1:127.2.1.2:sfsf-$CID-1 2:127.2.2.2:sfsf-$CID-2 " ]
check "with fleet clients the client namespace forwards" [ "$(fwd)" = 1 ]
# reaches C K: fleet client C gets an NFSv3 answer from node K (an address
# not routed fails at once; the bound only ends a hang, so it is far above
# what an answer takes on a loaded machine)
reaches() { timeout 30 "$CLUSTER" exec "$CID" --client "$1" -- rpcinfo -t "$2" nfs 3 >/dev/null; }
for c in 1 2; do
	for k in 1 4; do
		check "fleet client $c reaches node $k (NFSv3)" reaches "$c" "127.1.$k.2"
	done
done
check "exec --client runs in the fleet namespace" \
	bash -c "'$CLUSTER' exec '$CID' --client 1 -- ip -4 -o addr show | grep -q ' 127.2.1.2/30 '"
check "exec without --client still runs in the client namespace" \
	bash -c "'$CLUSTER' exec '$CID' -- ip -4 -o addr show | grep -q ' 127.1.1.1/30 '"
check "exec --client of a client that does not exist fails" \
	bash -c "! '$CLUSTER' exec '$CID' --client 3 -- true 2>/dev/null"
for bad in 0 255 a 2-1; do
	"$CLUSTER" client "$CID" "$bad" >/dev/null 2>&1
	check "client '$bad' is refused as bad usage" [ $? = 2 ]
done

# A daemon in fleet client 2: byte-exact, every node read, and the bytes
# crossed the nodes' own links (where their caps are).
link_tx() { # the bytes every node's link has sent so far
	local p t=0
	for p in $("$CLUSTER" status "$CID" | awk '{print $2}'); do
		t=$((t + $(awk -F: 'NR > 2 && $1 !~ /lo$/ { split($2, v, " "); s += v[9] } END { print s + 0 }' "/proc/$p/net/dev")))
	done
	echo "$t"
}
"$CLUSTER" exec "$CID" --client 2 -- "$SHARDFS" "$ADDRS:/ifs" "$MNT" 2>>"$WORK/daemon.log" ||
	{ cat "$WORK/daemon.log"; echo "Bail out! mount from fleet client 2 failed"; exit 1; }
drop_caches
TX0=$(link_tx)
check "a file read through the fleet client's mount is byte-exact" \
	same_bytes "$MNT/shards/a.bin" "$EXPORT/shards/a.bin"
TX1=$(link_tx)
for k in 1 2 3 4; do
	check "node $k served the fleet client's mount" \
		[ "$(counter "shardfs_node_read_bytes_total{node=\"127.1.$k.2\"}" | cut -d. -f1)" -gt 0 ]
done
check "the bytes crossed the nodes' links ($((TX1 - TX0)) bytes sent)" \
	[ $((TX1 - TX0)) -ge $((16 << 20)) ]
sfs_umount

"$CLUSTER" stop "$CID" 2>>"$WORK/cluster.log"
check "stop removes every namespace of the cluster" \
	bash -c "! ip netns list | grep -qE '^sfs[cfn]-$CID(-| |\$)'"
check "nothing host-wide changed" [ "$(host_conf)" = "$HOST_BEFORE" ]
sfs_finish
