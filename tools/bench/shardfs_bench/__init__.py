# SPDX-License-Identifier: Apache-2.0
"""shardfs-bench: the shardfs read benchmark (not a timed test).

Starts a local NFSv3 cluster with tools/testbed/shardfs-cluster, writes a data set,
and compares, on the same files with the same parallelism:

  * the raw striped libnfs reader (build/tools/shardfs-rawread), and
  * the shardfs FUSE mount (build/fs/shardfs) read by READERS parallel
    `dd bs=1M` processes, each taking the next file and reading it whole,

uncapped at 4 nodes and at 1 node, then with every node's link capped
(tc tbf) at 4 nodes and at 1 node, and prints one table with the ratios.

Fairness: both read the same files with READERS files in flight, NCONN
connections per node, 1 MiB reads; the raw reader keeps DEPTH reads in
flight per connection and drives its connections from as many threads as
the machine has CPUs (the daemon's io_threads=0 default: one per CPU).
Page caches are dropped before every measured pass. The data lives on tmpfs
by default, so that drop_caches empties only the client's (FUSE) page cache
and the nodes serve from memory: the benchmark measures the network and
client path, not the local disk. Needs root.

Other modes (--cache, --stall, --slow-node, --small-files, --random-records,
--sf-rss, --hints, --fleet, --fleet-warm) each print their own table;
--small-files, --random-records and --sf-rss read with
build/tools/shardfs-smallread:

  --small-files     an ImageNet-like tree (N files of 100-130 KB in D
                    folders); T threads open, read whole and close the next
                    file of one shuffled order. Rows: raw libnfs (one sync
                    context per thread, threads round-robin over the nodes),
                    the mount cold without and with an empty cache_dir
                    (ratios to raw), warm on the same mount and remounted
                    (ratios to local disk), and a local-disk copy.
  --random-records  one S GiB file of ~110 KB records read in one shuffled
                    order by R threads, one pread per record: raw libnfs,
                    the mount cold without a cache, the mount's epoch 1
                    (cold, cache_dir) and epoch 2 (warm), and local disk.
  The cold pass with cache_dir of both is also given against its limit:
  the slower of the raw reader and an O_DIRECT write of the same bytes to
  the cache's filesystem (a cold epoch that fills the cache cannot beat it).
  --sf-rss          the daemon's peak RSS per file after listing and
                    reading many 1 KiB files.
  --slow-node       every node's link capped at RATE, then the last one at
                    half: one file read by the raw striped reader and by one
                    dd through a default mount, passes alternated, with equal
                    caps and with the slow node; the mount / raw ratios.
  --stall           one file read by one dd through a default mount, healthy
                    and with one node stopped (SIGSTOP) for 300 ms of every
                    second, passes alternated; the ratio stalled / healthy
                    and the hedged READs.
  --hints           every node's link capped (--hint-rate): a torchvision
                    ImageFolder DataLoader (2 and 8 workers; a cache of half
                    the data set, epoch 2) without and with HintSampler, and
                    shuffled records of one file read by 2 threads without
                    and with shardfs.hint, beside the raw libnfs reader with
                    16 in flight; ratios, the hints' waste, daemon CPU per
                    item. torch runs under --hint-python (/usr/bin/python3).
  --fleet K         K client nodes (fleet network namespaces of
                    shardfs-cluster, each with its own daemon, empty
                    cache_dir and mount) against --nodes nodes capped at
                    --rate, whose links they share as a real node's NIC:
                    every client reads the same data set (--fleet-files x
                    --fleet-file-mib) with READERS dd in its own shuffled
                    order, cold at once (epoch 1, then 2 from the caches)
                    for K = 1, 2, 4, ... up to K (or a comma list), then the
                    largest K started --fleet-stagger s apart. Aggregate
                    MB/s against the caps and against the raw libnfs reader
                    alone from one client, per client MB/s and max/min, NFS
                    bytes per client over the data set, the nodes' links
                    over time, daemon CPU per GiB and peak RSS.
  --fleet-warm      client 1 runs shardfs-warm on a larger data set
                    (--fleet-warm-files x --fleet-warm-mib; its mount also
                    gets --fleet-opts) while clients 2..4 train as above,
                    against the three training alone: pace with / without.

Every row is one run; the mount rows add the daemon's CPU per item, its
peak RSS (VmHWM) and the NFS and FUSE calls per item from the stats file,
and (small files, random records) its context switches and page faults per
item: counts that the machine's noise leaves alone, for comparing builds.

The package (tools/bench/shardfs_bench/, installed beside the entry point in
PKGLIBEXECDIR): cli.py parses the options and runs the modes; modes/ holds one
module per mode, registered in modes.MODES (modes/__init__.py says what a mode
module declares, and that adding one is a module and a line there). What the
modes share: common.py (ARGS, paths, tool(), log, run), cluster.py, mount.py,
passes.py (one measured pass), accounting.py (CPU and memory from /proc),
perf.py, disk.py, data.py, report.py, floor.py (the FUSE floor),
fleet_clients.py, and hint_child.py (the --hints child).

Threading: see each module; the package keeps no state across runs.
"""
