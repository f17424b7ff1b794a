# SPDX-License-Identifier: Apache-2.0
"""The child of --hints: the entry point run by --hint-python (a Python with torch
and torchvision) as `shardfs-bench --hint-child SPEC`. It writes one JSON
object per line on stdout and waits for a word on stdin before each epoch, so
that the bench drops the page caches and takes its readings around the epoch
and nothing else (not the ImageFolder scan, not the index parse).

Imports torch, torchvision and the shardfs client module only in the child.
Threading: the child's main thread (the DataLoader's workers are processes).
"""

import json
import os
import sys
import time

from .common import PROG


HINT_CHILD = "--hint-child"

HINT_BATCH = 64


def child_send(obj):
    print(json.dumps(obj), flush=True)


def child_wait(word):
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"{PROG} {HINT_CHILD}: expected {word!r} on stdin, got {line!r}")


def read_length(path):
    """The ImageFolder loader= of the image cases: reads the file whole and
    decodes nothing; returns its length, so that batches carry no bytes
    between the DataLoader's processes."""
    with open(path, "rb") as f:
        return len(f.read())


def child_loader(spec):
    """spec["epochs"] epochs of an ImageFolder DataLoader over spec["root"],
    each started by "go"; hinted with HintSampler when spec["hints"]."""
    import torch
    from torch.utils.data import DataLoader, RandomSampler
    from torchvision.datasets import ImageFolder
    from shardfs.torch import HintSampler, items_from_samples

    ds = ImageFolder(spec["root"], loader=read_length)
    g = torch.Generator()
    g.manual_seed(spec["seed"])
    sampler = RandomSampler(ds, generator=g)
    if spec["hints"]:
        sampler = HintSampler(sampler, items_from_samples(ds))
    loader = DataLoader(ds, batch_size=HINT_BATCH, sampler=sampler,
                        num_workers=spec["workers"])
    for epoch in range(spec["epochs"]):
        child_send({"ready": epoch, "files": len(ds)})
        child_wait("go")
        t0 = time.monotonic()
        files = nbytes = 0
        for lengths, _labels in loader:
            files += len(lengths)
            nbytes += int(lengths.sum())
        res = {"epoch": epoch, "files": files, "bytes": nbytes,
               "secs": time.monotonic() - t0}
        if spec["hints"]:
            st = sampler.status()
            res["status"] = st._asdict() if st else None
            res["disabled"] = sampler.disabled
        child_send(res)
    if spec["hints"]:
        sampler.close()


def child_records(spec):
    """Hint the records of spec["list"] ("OFFSET LENGTH" lines, the readers'
    order) on the mount's root, with the lengths of items_from_recordio_idx;
    "go" sends the list, "done" reports its status and closes it. With
    spec["hold_open"], the .rec is open from before the list until the end,
    as a RecordIO dataset holds it from its construction."""
    import shardfs
    from shardfs.torch import items_from_recordio_idx

    lengths = {off: ln for _, off, ln in items_from_recordio_idx(spec["idx"], spec["rec"])}
    rel = os.path.relpath(spec["rec"], spec["root"])
    order = []
    with open(spec["list"]) as f:
        for line in f:
            off, ln = (int(x) for x in line.split())
            if lengths.get(off) != ln:
                raise SystemExit(f"{PROG} {HINT_CHILD}: record at {off}: the .idx says "
                                 f"{lengths.get(off)} bytes, the list {ln}")
            order.append((rel, off, ln))
    rec_fd = os.open(spec["rec"], os.O_RDONLY) if spec["hold_open"] else None
    fd = os.open(spec["root"], os.O_RDONLY | os.O_DIRECTORY)
    child_send({"ready": 0, "records": len(order)})
    child_wait("go")
    t0 = time.monotonic()
    shardfs.hint(fd, order)
    child_send({"sent": len(order), "secs": time.monotonic() - t0})
    child_wait("done")
    child_send({"status": shardfs.hint_status(fd)._asdict()})
    os.close(fd)
    if rec_fd is not None:
        os.close(rec_fd)


def hint_child_main(argv):
    """The child's entry: argv[0] is its JSON spec."""
    spec = json.loads(argv[0])
    (child_loader if spec["kind"] == "loader" else child_records)(spec)
    return 0
