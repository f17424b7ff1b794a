# SPDX-License-Identifier: Apache-2.0
"""The data sets of --mlperf: a workload's files written once into the export
(DLIO's layout and sample sizes, mlperf_workloads.dataset_specs), their
local-disk copy, and the readers' lists of one shuffled epoch.

A data set is a top-level directory of the export named for its workload,
scale, length and seed, published whole: its .complete marker is written
last, and a directory without one is written again. The bytes come from one
seeded 64 MiB random pool, each file starting at its own offset in it:
nothing on the path compresses or deduplicates, and writing costs no more
than the copy. Does not choose sizes (modes/mlperf.py) or read.
Threading: the main thread.
"""

import os
import random
import shutil

from .common import MiB, log
from .data import copy_tree_once, write_list

POOL_BYTES = 64 * MiB


class DataSet:
    """A workload's data set in the export and on local disk, with the
    readers' lists: name (its directory), specs [(relative path, bytes,
    record bytes)], total bytes, local (the copy's directory), lst_mnt /
    lst_nfs / lst_local (one shuffled epoch, relative to the mount, the
    export and the copy)."""

    def __init__(self, export, cache_base, work, w, scale_tag, specs, seed):
        self.name = f"mlperf-{w.name}-{scale_tag}-{len(specs)}f-s{seed}"
        self.specs = specs
        self.total = sum(s for _, s, _ in specs)
        self.root = os.path.join(export, self.name)
        write_dataset(self.root, specs, seed)
        rels = [r for r, _, _ in specs]
        self.local = os.path.join(cache_base, "local-mlperf", self.name)
        log(f"mlperf: local-disk copy in {self.local}")
        copy_tree_once(self.root, self.local, rels)
        order = list(rels)
        random.Random(seed).shuffle(order)
        self.lst_mnt = os.path.join(work, f"{self.name}-list")
        self.lst_nfs = os.path.join(work, f"{self.name}-list-nfs")
        self.lst_local = os.path.join(work, f"{self.name}-list-local")
        write_list(self.lst_mnt, [f"{self.name}/{r}" for r in order])
        write_list(self.lst_nfs, [f"/{self.name}/{r}" for r in order])
        write_list(self.lst_local, order)


def write_dataset(root, specs, seed):
    """The files specs under root, unless its .complete marker says they are
    there."""
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker):
        return
    total = sum(s for _, s, _ in specs)
    log(f"mlperf: writing {len(specs)} files, {total / 1e9:.2f} GB, to {root}")
    shutil.rmtree(root, ignore_errors=True)
    rng = random.Random(f"mlperf-pool-{seed}")
    pool = memoryview(b"".join(rng.randbytes(4 * MiB) for _ in range(POOL_BYTES // (4 * MiB))))
    for i, (rel, size, _) in enumerate(specs):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        off = (i * 7919 * 4096) % POOL_BYTES
        with open(path, "wb") as f:
            left = size
            while left:
                piece = pool[off:off + min(left, POOL_BYTES - off)]
                f.write(piece)
                left -= len(piece)
                off = (off + len(piece)) % POOL_BYTES
    with open(marker, "w") as f:
        f.write(f"seed {seed} files {len(specs)} bytes {total}\n")
