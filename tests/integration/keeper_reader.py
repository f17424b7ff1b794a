#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""One reader for test_keeper.sh: reads through the mount until STOP exists,
compares every byte with the export, and prints one JSON line: reads, bytes,
failed reads (an errno), wrong bytes, and the longest single call (open or
read) in seconds.

usage: keeper_reader.py MODE MNT EXPORT STOP
MODE: shards (whole files, 1 MiB reads), small (open, read, close each
small file), records (random 4-200 KiB preads inside the shards), stage
(one shard kept open with one shm region registered once, random ranges
STAGEd into it: a region lost with a dead serving process is registered
again by the shardfs module, unseen here).
"""
import json
import os
import random
import sys
import time

mode, mnt, export, stop = sys.argv[1:5]
stats = {"mode": mode, "reads": 0, "bytes": 0, "failed": 0, "wrong": 0, "max_call_s": 0.0,
         "errors": [], "slow": []}


def timed(fn, *args):
    t0 = time.monotonic()
    try:
        return fn(*args)
    finally:
        d = time.monotonic() - t0
        stats["max_call_s"] = max(stats["max_call_s"], d)
        if d >= 0.05 and len(stats["slow"]) < 2000:  # (when it began, wall clock; how long)
            stats["slow"].append((time.time() - d, d))


def files(sub, small):
    out = []
    for root, _, names in os.walk(os.path.join(export, sub)):
        for n in sorted(names):
            p = os.path.join(root, n)
            if (os.path.getsize(p) <= 1 << 20) == small:
                out.append(os.path.relpath(p, export))
    return out


def failed(e, what):
    stats["failed"] += 1
    if len(stats["errors"]) < 5:
        stats["errors"].append(f"{what}: {e}")


shards = files("shards", False)
if mode == "stage":
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../../tools/client/python"))
    import shardfs
    rel = shards[0]
    with open(os.path.join(export, rel), "rb") as f:
        want = f.read()
    sf = open(os.path.join(mnt, rel), "rb")
    region = shardfs.ShmRegion(sf, 1 << 20)
    rng = random.Random(os.getpid())
    while not os.path.exists(stop):
        n = rng.randint(4 << 10, 1 << 20)
        off = rng.randrange(0, len(want) - n)
        try:
            placed, _ = timed(region.stage, [(0, off, n)])
            stats["reads"] += 1
            stats["bytes"] += placed[0]
            if placed[0] != n or bytes(region.buf[:n]) != want[off:off + n]:
                stats["wrong"] += 1
        except OSError as e:
            failed(e, "stage")
    region.close()
    sf.close()
    print(json.dumps(stats))
    sys.exit(0)
small = files("", True)
truth = {}
rng = random.Random(os.getpid())
while not os.path.exists(stop):
    if mode in ("shards", "records"):
        rel = rng.choice(shards)
        if rel not in truth:
            with open(os.path.join(export, rel), "rb") as f:
                truth[rel] = f.read()
        want = truth[rel]
        try:
            fd = timed(os.open, os.path.join(mnt, rel), os.O_RDONLY)
        except OSError as e:
            failed(e, "open " + rel)
            continue
        try:
            if mode == "shards":
                off = 0
                while off < len(want):
                    b = timed(os.pread, fd, 1 << 20, off)
                    stats["reads"] += 1
                    if b != want[off:off + len(b)] or not b:
                        stats["wrong"] += 1
                        break
                    off += len(b)
                    stats["bytes"] += len(b)
            else:
                for _ in range(50):
                    n = rng.randint(4 << 10, 200 << 10)
                    off = rng.randrange(0, max(1, len(want) - n))
                    b = timed(os.pread, fd, n, off)
                    stats["reads"] += 1
                    stats["bytes"] += len(b)
                    if b != want[off:off + n]:
                        stats["wrong"] += 1
        except OSError as e:
            failed(e, "read " + rel)
        finally:
            os.close(fd)
    else:
        rel = rng.choice(small)
        try:
            def whole():
                with open(os.path.join(mnt, rel), "rb") as f:
                    return f.read()
            b = timed(whole)
            stats["reads"] += 1
            stats["bytes"] += len(b)
            with open(os.path.join(export, rel), "rb") as f:
                if b != f.read():
                    stats["wrong"] += 1
        except OSError as e:
            failed(e, "small " + rel)
print(json.dumps(stats))
