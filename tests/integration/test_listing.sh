#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Lookups answered from directory listings (not immutable) against a real
# 2-node cluster: a directory whose names miss twice is listed whole
# (READDIRPLUS over several replies) and answers its lookups for actimeo
# from the listing's start: byte-exact epochs without a LOOKUP per file;
# a name the listing lacks goes to NFS, so files and folders created on the
# server open at once (a name NFS found missing stays missing for actimeo);
# names renamed and rewritten on the server seen once actimeo has passed; a
# listing over listing_max falls back to LOOKUPs; expired listings leave
# memory.
. "$(dirname "$0")/lib.sh"
sfs_require

# actimeo: the listing epoch 1 starts must still answer all of epoch 2 and
# the checks right after it. Wide enough for epochs on a loaded 2-core
# machine (both cores busy) and under ThreadSanitizer; should a run still
# outlast it, the checks that need that listing are skipped, not failed
# (fresh, below). SCAN_TTL: the kernel's readdir cache, two scans in a row.
TTL=30 SCAN_TTL=10 N_FILES=600
python3 - "$EXPORT" "$N_FILES" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
r = random.Random(7)
for d, count in (("big", n), ("small", 3)):
    os.makedirs(f"{root}/{d}", exist_ok=True)
    for f in range(count):
        with open(f"{root}/{d}/image-with-a-longer-name-{f:05}.jpg", "wb") as fh:
            fh.write(r.randbytes(r.randint(100, 9000)))
os.makedirs(f"{root}/huge", exist_ok=True)
for f in range(60000):  # empty: a folder of many names
    open(f"{root}/huge/f{f:05}", "wb").close()
PY
sfs_cluster_up 2

# NFS LOOKUPs so far, over all nodes
lookups() { awk '/^shardfs_node_metadata_calls_total\{.*kind="lookup"/ { s += $2 } END { print s + 0 }' "$MNT/.shardfs/stats"; }
# read every file of DIR through the mount in a shuffled order; 0 if all
# exact. One process for all files: a cmp per file took ~15 ms to start on a
# loaded paravirtualised VM, and 600 of them made an epoch outlast actimeo.
read_exact() {
	python3 - "$MNT/$1" "$EXPORT/$1" <<'PY'
import os, random, sys
mnt, exp = sys.argv[1], sys.argv[2]
names = os.listdir(exp)
random.shuffle(names)
bad = 0
for n in names:
    with open(os.path.join(mnt, n), "rb") as a, open(os.path.join(exp, n), "rb") as b:
        if a.read() != b.read():
            bad += 1
            print(f"# differs: {os.path.basename(mnt)}/{n}")
sys.exit(1 if bad else 0)
PY
}

sfs_mount "actimeo=$TTL"
drop_caches
t_before=$(date +%s.%N)
# fresh: big's listing, started during epoch 1 (after t_before), still
# answers now. Checks that need it are skipped where a slow run has let
# actimeo pass: whether the listing expired cannot be told apart then.
fresh() { awk -v t0="$t_before" -v now="$(date +%s.%N)" -v ttl="$TTL" 'BEGIN { exit !(now - t0 < ttl) }'; }
check_fresh() {
	local d=$1
	shift
	if fresh; then check "$d" "$@"; else ok "$d # SKIP actimeo ($TTL s) passed since epoch 1 began: a slow run"; fi
}
l0=$(lookups)
check "epoch 1: every file byte-exact" read_exact big
t_after=$(date +%s.%N)
l1=$(lookups)
diag "epoch 1: $((l1 - l0)) NFS LOOKUPs for $N_FILES files, $(counter shardfs_listings_total) listing(s), $(awk "BEGIN { printf \"%.2f\", $t_after - $t_before }") s"
check "epoch 1: the directory was listed, not looked up file by file" \
	[ "$(counter shardfs_listings_total)" -ge 1 -a $((l1 - l0)) -lt $((N_FILES / 4)) ]
check "its listing holds every name" [ "$(counter shardfs_listing_names)" -ge "$N_FILES" ]
check "the listings' memory is accounted" \
	[ "$(stat_value 'shardfs_memory_bytes{kind="listings"}')" -gt $((N_FILES * 100)) ]

drop_caches
h0=$(counter shardfs_listing_hits_total) n0=$(counter shardfs_listings_total)
check "epoch 2 (within actimeo, kernel caches dropped): byte-exact" read_exact big
l2=$(lookups)
# A listing started during epoch 2 answers until actimeo after its own
# start: the root's (big's LOOKUP missed there twice), or big's again if
# epoch 2 outlasted actimeo (a slow run). Time the waits below from the
# end of epoch 2 then.
t_ref=$t_after
[ "$(counter shardfs_listings_total)" = "$n0" ] || { t_ref=$(date +%s.%N); diag "a listing started during epoch 2"; }
diag "epoch 2: $((l2 - l1)) NFS LOOKUPs, $(($(counter shardfs_listing_hits_total) - h0)) lookups from listings"
# (one LOOKUP may be the directory's own, in the root: its second miss there)
check_fresh "epoch 2: every name from the listing, no NFS LOOKUP for a file" \
	[ $((l2 - l1)) -le 1 -a $(($(counter shardfs_listing_hits_total) - h0)) -ge "$N_FILES" ]
a0=$(counter shardfs_listing_absent_total) l3=$(lookups)
check "a name not in the listing: ENOENT" bash -c "! stat '$MNT/big/nothing-here' 2>/dev/null"
check_fresh "asked of NFS, not answered from the listing" \
	[ "$(counter shardfs_listing_absent_total)" = $((a0 + 1)) -a "$(lookups)" = $((l3 + 1)) ]

# Changes on the server while the listing is current (the listings of big
# and of the root answer): names never seen reach the server at once.
NEW=$MNT/big/new-file.bin
mv "$EXPORT/big/image-with-a-longer-name-00001.jpg" "$EXPORT/big/renamed.jpg"
head -c 12345 /dev/urandom >"$EXPORT/big/image-with-a-longer-name-00002.jpg"
python3 - "$EXPORT" <<'PY'
import os, random, sys
root, r = sys.argv[1], random.Random(11)
with open(f"{root}/big/new-file.bin", "wb") as f:
    f.write(r.randbytes(5000))
for k in range(20):
    with open(f"{root}/big/new-{k:02}.bin", "wb") as f:
        f.write(r.randbytes(r.randint(100, 9000)))
os.makedirs(f"{root}/newdir/sub")
for k in range(30):
    with open(f"{root}/newdir/sub/n{k:02}.bin", "wb") as f:
        f.write(r.randbytes(r.randint(100, 9000)))
PY
check_fresh "the listing of big is current (its names are answered from it)" \
	[ "$(counter shardfs_listing_dirs)" -ge 1 ]
check "a file created on the server, opened by name at once: byte-exact" \
	same_bytes "$NEW" "$EXPORT/big/new-file.bin"
# 20 new files opened at once by 20 processes, as trainers handed the names
new_exact() { seq -w 0 19 | xargs -P 20 -I{} cmp -s "$MNT/big/new-{}.bin" "$EXPORT/big/new-{}.bin"; }
check "20 new files in the listed folder, opened at once: all byte-exact" new_exact
check "a new folder under the listed root, and its files at once: byte-exact" \
	bash -c "for k in \$(seq -w 0 29); do cmp -s '$MNT/newdir/sub/n'\$k.bin '$EXPORT/newdir/sub/n'\$k.bin || exit 1; done"
check "the new folder lists exactly" diff <(cd "$EXPORT/newdir/sub" && ls) <(ls "$MNT/newdir/sub")
diag "$(($(counter shardfs_listing_absent_total) - a0)) lookups of names the listings lacked went to NFS"
# A name NFS found missing may stay missing for actimeo (the kernel's
# negative entry), as on NFS; once that entry is gone, it is asked again.
head -c 777 /dev/urandom >"$EXPORT/big/nothing-here"
drop_caches
check "a name found missing, made on the server: found once the kernel's negative entry is gone" \
	same_bytes "$MNT/big/nothing-here" "$EXPORT/big/nothing-here"
rm -rf "$EXPORT/newdir" "$EXPORT/big/nothing-here" "$EXPORT"/big/new-??.bin
# Renamed and rewritten files keep actimeo's rule: seen once actimeo has
# passed since the listing started (before t_ref).
sleep "$(awk "BEGIN { d = $t_ref + $TTL + 1.5 - $(date +%s.%N); print (d > 0 ? d : 0) }")"
drop_caches
check "after actimeo: a renamed file under its new name, byte-exact" \
	same_bytes "$MNT/big/renamed.jpg" "$EXPORT/big/renamed.jpg"
check "and not under its old name" bash -c "! stat '$MNT/big/image-with-a-longer-name-00001.jpg' 2>/dev/null"
check "after actimeo: a rewritten file reads its new bytes" \
	same_bytes "$MNT/big/image-with-a-longer-name-00002.jpg" "$EXPORT/big/image-with-a-longer-name-00002.jpg"
check "epoch 3 (after actimeo): every file byte-exact" read_exact big
check "epoch 3 listed the directory again" [ "$(counter shardfs_listings_total)" -ge 2 ]
# (the sweep runs some time after actimeo: waited for as long as a loaded
# machine takes)
names_gone() { [ "$(counter shardfs_listing_names)" = 0 ]; }
wait_for $((TTL + 60)) names_gone
check "listings older than actimeo leave memory" [ "$(counter shardfs_listing_names)" = 0 -a \
	"$(stat_value 'shardfs_memory_bytes{kind="listings"}')" -lt 100000 ]
sfs_umount

# The kernel keeps a directory's listing (cache_readdir) while its mtime, as
# of attributes at most actimeo old, is unchanged: a second scan costs no
# READDIRPLUS, and a name made on the server shows once actimeo has passed.
# (Two scans of 600 names back to back fit SCAN_TTL many times over.) Tests
# beside this one may drop the kernel's caches between the two scans (drops:
# the host's count of drop_caches): then both are done again (5 tries).
readdirs() { awk '/^shardfs_node_metadata_calls_total\{.*kind="readdir"/ { s += $2 } END { print s + 0 }' "$MNT/.shardfs/stats"; }
same_names() { diff <(cd "$EXPORT/$1" && ls) <(ls "$MNT/$1") >/dev/null; }
drops() { awk '/^drop_(pagecache|slab) / { s += $2 } END { print s + 0 }' /proc/vmstat; }
sfs_mount "actimeo=$SCAN_TTL"
for try in 1 2 3 4 5; do
	k0=$(drops)
	same_names big; e1=$?
	r1=$(readdirs)
	same_names big; e2=$?
	r2=$(readdirs)
	kept=$([ "$(drops)" = "$k0" ] && echo 1)
	[ -n "$kept" ] && break
	diag "try $try: another process dropped the kernel's caches between the scans"
done
check "a scan lists the directory exactly" [ "$e1" = 0 ]
check "a second scan lists it exactly" [ "$e2" = 0 ]
if [ -n "$kept" ]; then
	check "and comes from the kernel's copy: no READDIRPLUS ($r1 then $r2)" [ "$r2" = "$r1" ]
else
	ok "and comes from the kernel's copy # SKIP the kernel's caches were dropped by another process in every try"
fi
head -c 100 /dev/urandom >"$EXPORT/big/made-after-the-scan"
sleep $((SCAN_TTL + 1))
check "after actimeo, a name made on the server is listed" same_names big
rm "$EXPORT/big/made-after-the-scan"
sfs_umount

# 16 readers at once on a fresh mount: lookups race the listing they start.
sfs_mount "actimeo=$TTL"
drop_caches
par_exact() {
	(cd "$EXPORT/big" && ls | shuf) | xargs -P 16 -I{} cmp -s "$MNT/big/{}" "$EXPORT/big/{}"
}
check "16 parallel readers, a fresh mount: every file byte-exact" par_exact
drop_caches
check "again from the listing: every file byte-exact" par_exact
diag "$(counter shardfs_listing_hits_total) lookups from listings, $(counter shardfs_listings_total) listing(s)"
sfs_umount

# A huge folder with two lookups is not read whole (a first listing reads
# 8192 names per lookup missed); with many lookups it is.
sfs_mount "actimeo=$TTL"
cat "$MNT/huge/f00001" "$MNT/huge/f00002"
# (its first READDIRPLUS replies may take long: each node's server reads the
# whole folder first; waited for as long as a loaded machine takes)
abandoned() { [ "$(counter shardfs_listings_failed_total)" -ge 1 ]; }
wait_for 120 abandoned
few=$(readdirs)
check "two lookups in a folder of 60,000: its listing is abandoned" \
	[ "$(counter shardfs_listings_failed_total)" = 1 -a "$(counter shardfs_listing_names)" = 0 ]
sfs_umount
sfs_mount "actimeo=$TTL"
# Lookups from 16 threads of one process (a process per name starts far too
# slowly on a loaded machine) until the listing they start is complete: each
# miss lets it read 8,192 names further, so it completes after a few
# thousand of them however slowly they come. A watcher sees it whole as soon
# as it is (it answers for actimeo, then leaves memory); all 60,000 names
# looked up without it is a failure.
python3 - "$EXPORT/huge" "$MNT/huge" 60000 >"$WORK/huge.out" <<'PY'
import os, sys, threading, time
from concurrent.futures import ThreadPoolExecutor
exp, mnt, want = sys.argv[1], sys.argv[2], int(sys.argv[3])
stats = os.path.join(os.path.dirname(mnt), ".shardfs", "stats")
whole = threading.Event()
def names_held():
    with open(stats) as f:
        for line in f:
            if line.startswith("shardfs_listing_names "):
                return float(line.split()[1])
    return 0
def watch():
    while not whole.is_set():
        if names_held() >= want:
            whole.set()
        time.sleep(0.05)
def read_one(name):
    with open(os.path.join(mnt, name), "rb") as f:
        f.read()
threading.Thread(target=watch, daemon=True).start()
names, done = sorted(os.listdir(exp)), 0
with ThreadPoolExecutor(16) as pool:
    while done < len(names) and not whole.is_set():
        list(pool.map(read_one, names[done:done + 200]))
        done += 200
whole.wait(5)
print(done, int(whole.is_set()))
PY
read -r n_looked seen_whole <"$WORK/huge.out"
many=$(readdirs)
diag "READDIRPLUS calls: $few for two lookups, $many for ${n_looked:-?} lookups"
check "lookups in it until its listing completes (${n_looked:-?}): the listing holds all 60,000 names" \
	[ "${seen_whole:-0}" = 1 ]
check "and two lookups read less than half of it ($few against $many READDIRPLUS)" [ $((2 * few)) -lt "$many" ]
sfs_umount

# A directory over listing_max: its listing fails, LOOKUPs answer.
sfs_mount "actimeo=$TTL,listing_max=100"
drop_caches
l0=$(lookups)
check "listing_max below the directory: every file byte-exact" read_exact big
check "its listing failed and NFS answered the lookups" \
	[ "$(counter shardfs_listings_failed_total)" -ge 1 -a $(($(lookups) - l0)) -ge "$N_FILES" ]
check "and no name is held (the failed listing's names let go)" wait_for 60 names_gone
sfs_umount

# listing_max=0: lookups as before, one NFS LOOKUP per file.
sfs_mount "actimeo=$TTL,listing_max=0"
drop_caches
l0=$(lookups)
check "listing_max=0: every file byte-exact" read_exact big
check "listing_max=0: no listing, a LOOKUP per file" \
	[ "$(counter shardfs_listings_total)" = 0 -a $(($(lookups) - l0)) -ge "$N_FILES" ]
sfs_umount
sfs_finish
