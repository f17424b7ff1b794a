#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""shardfs.torch.HintSampler with the real torch (and torchvision's ImageFolder):
only the sender of a hint list (shardfs._hint_send) is faked, by one that reads
the packed items back; the samplers, the DataLoader and the sampler logic are
real. Checks that the indices are exactly the wrapped sampler's (RandomSampler
with a seeded generator, DistributedSampler for two ranks over several epochs,
SequentialSampler, a BatchSampler), that each epoch's hinted list is the items
in yielded order (absolute, relative, (path, label), ranges, through symlinks),
that failures warn once and change nothing, and items_from_recordio_idx.

Run by meson (tests/unit/meson.build) with /usr/bin/python3: Debian's
python3-torch and python3-torchvision (tools/testbed/install-deps). Without them the
test fails: it does not skip. TAP output.
"""
import copy
import errno
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import warnings

try:
    import torch
    import torchvision
    from torch.utils.data import (BatchSampler, DataLoader, DistributedSampler,
                                  RandomSampler, SequentialSampler)
except ImportError as e:
    print("Bail out! PyTorch is missing for %s (%s): run tools/testbed/install-deps (Debian "
          "packages python3-torch and python3-torchvision)" % (sys.executable, e))
    sys.exit(1)

import shardfs
from shardfs.torch import (HintSampler, items_from_paths, items_from_recordio_idx,
                           items_from_samples)

import tapcheck as T  # tests/integration: the TAP lines of the Python checks

ok = T.ok


# --- the faked sender: reads the records back -------------------------------------

sent = []  # (fd, [path or (path, offset, length)]) per list sent
fail = {"errno": None, "calls": 0}
decode = True


def decode_records(records):
    out = []
    for r in records:
        ib, pl, kind, r0, off, ln = struct.unpack_from("=HHHHQQ", r, 0)
        assert ib == len(r) and ib % 8 == 0 and r0 == 0, (ib, len(r))
        assert not any(r[24 + pl:]), "padding"
        p = r[24:24 + pl].decode()
        assert (kind, off, ln) == (0, 0, 0) or (kind == 1 and ln > 0), (kind, off, ln)
        out.append(p if kind == 0 else (p, off, ln))
    return out


def fake_send(fd, records):
    fail["calls"] += 1
    if fail["errno"] is not None:
        raise OSError(fail["errno"], os.strerror(fail["errno"]))
    sent.append((fd, decode_records(records) if decode else len(records)))
    return len(records)


shardfs._hint_send = fake_send


def reset():
    del sent[:]
    fail.update(errno=None, calls=0)


N = 50
tmp = tempfile.mkdtemp(prefix="shardfs-hint-")
root = os.path.join(tmp, "mnt")
rel = ["train/c%d/img%03d.jpg" % (i % 3, i) for i in range(N)]
for p in rel:
    os.makedirs(os.path.join(root, os.path.dirname(p)), exist_ok=True)
    open(os.path.join(root, p), "wb").close()
absp = [os.path.join(root, p) for p in rel]
data = list(range(N))  # what the samplers draw from: only its length matters


def epochs(sampler, k, set_epoch=False):
    out = []
    for e in range(k):
        if set_epoch:
            sampler.set_epoch(e)
        out.append(list(sampler))
    return out


# import shardfs alone does not bring torch in
r = subprocess.run([sys.executable, "-c", "import shardfs, sys; "
                    "print('torch' in sys.modules, 'shardfs.torch' in sys.modules)"],
                   capture_output=True, text=True, env=dict(os.environ))
ok(r.stdout.split() == ["False", "False"], "import shardfs imports neither torch nor "
   "shardfs.torch", r.stdout + r.stderr)
ok(sys.modules["shardfs.torch"].torch is torch, "shardfs.torch's torch is the real torch")

# RandomSampler with a seeded generator: the same indices as the bare sampler
reset()
hs = HintSampler(RandomSampler(data, generator=torch.Generator().manual_seed(7)), rel,
                 mount=root)
got = epochs(hs, 3)
want = epochs(RandomSampler(data, generator=torch.Generator().manual_seed(7)), 3)
ok(got == want and got[0] != got[1], "RandomSampler: the indices of the bare sampler, "
   "a new order each epoch")
ok([s[1] for s in sent] == [[rel[i] for i in e] for e in got],
   "RandomSampler: each epoch hinted, the items in yielded order")
ok(len({s[0] for s in sent}) == 1 and os.fstat(sent[0][0]) is not None
   and hs.last_hinted == N, "one descriptor of the mount's root kept across epochs")
fd = sent[0][0]
hs.close()
try:
    os.fstat(fd)
    ok(False, "close() closes the mount's root")
except OSError as e:
    ok(e.errno == errno.EBADF, "close() closes the mount's root")
ok(len(hs) == N and not hasattr(hs, "set_epoch"),
   "len() passes through; no set_epoch where the sampler has none")

# DistributedSampler, two ranks, set_epoch
reset()
ds_got, ds_want = [], []
for rank in (0, 1):
    hs = HintSampler(DistributedSampler(data, num_replicas=2, rank=rank, seed=3), absp,
                     mount=root)
    ds_got.append(epochs(hs, 3, set_epoch=True))
    ds_want.append(epochs(DistributedSampler(data, num_replicas=2, rank=rank, seed=3), 3,
                          set_epoch=True))
    ok(len(hs) == N // 2 and hs.num_replicas == 2 and hs.epoch == 2,
       "DistributedSampler rank %d: len, num_replicas, epoch pass through" % rank)
    hs.close()
ok(ds_got == ds_want, "DistributedSampler ranks 0 and 1, 3 epochs: the bare samplers' "
   "indices")
ok(all(sorted(ds_got[0][e] + ds_got[1][e]) == data for e in range(3))
   and ds_got[0][0] != ds_got[0][1], "DistributedSampler: the ranks split each epoch, "
   "set_epoch reshuffles")
ok([s[1] for s in sent] == [[rel[i] for i in e] for r_ in ds_got for e in r_],
   "DistributedSampler: each rank hints its own indices, absolute items made relative")

# SequentialSampler, (path, label) items from a real ImageFolder, ranges
reset()
ifo = torchvision.datasets.ImageFolder(os.path.join(root, "train"),
                                       is_valid_file=lambda p: p.endswith(".jpg"))
items = items_from_samples(ifo)
hs = HintSampler(SequentialSampler(ifo), ifo.samples, mount=root)
got = list(hs)
names = [os.path.relpath(p, root) for p, _ in ifo.samples]
ok(got == list(range(len(ifo))) and sent[-1][1] == names,
   "SequentialSampler over ImageFolder.samples ((path, label) pairs): in order")
ok(items == [p for p, _ in ifo.samples] and items_from_samples(
   torch.utils.data.Subset(ifo, [4, 2])) == [items[4], items[2]],
   "items_from_samples: the paths of .samples, of a Subset too")
list(HintSampler(SequentialSampler(ifo), items, mount=root))
ok(sent[-1][1] == names, "items_from_samples' paths hint the same list")

ranges = [("shards/s%d.rec" % (i % 4), i * 4096, 1000 + i) for i in range(N)]
list(HintSampler(SequentialSampler(data), ranges, mount=root))
ok(sent[-1][1] == ranges, "(path, offset, length) items: ranges, relative paths as given")

import pathlib
mixed = [pathlib.Path(absp[0]), os.fsencode(rel[1]), rel[2], (absp[3], 1),
         (os.fsencode(absp[4]), 0, 9), os.path.join(root, "train", ".", "c2", "img005.jpg"),
         root + "//train/c0/img006.jpg"]
list(HintSampler(SequentialSampler(mixed), items_from_paths(mixed[:3]) + mixed[3:],
                 mount=root))
ok(sent[-1][1] == rel[:4] + [(rel[4], 0, 9)] + rel[5:7],
   "pathlib, bytes, '/./' and '//' in absolute paths: all made relative", repr(sent[-1][1]))

# the mount reached through symlinks: the mount given as a link, a directory link
os.symlink(root, os.path.join(tmp, "link"))
os.symlink(os.path.join(root, "train", "c1"), os.path.join(tmp, "c1link"))
linked = [os.path.join(tmp, "link", rel[0]), os.path.join(tmp, "c1link", "img001.jpg"),
          absp[2]]
list(HintSampler(SequentialSampler(linked), linked, mount=os.path.join(tmp, "link")))
ok(sent[-1][1] == rel[:3], "symlinks: a linked mount and a linked directory resolved",
   repr(sent[-1][1]))

# a BatchSampler: its batches flattened for the hint, yielded as batches
bs = BatchSampler(SequentialSampler(data), batch_size=8, drop_last=False)
got = list(HintSampler(bs, rel, mount=root))
ok(got == list(bs) and sent[-1][1] == rel, "BatchSampler: batches yielded, hinted flat")

# through a DataLoader with worker processes, as the README shows it
reset()


class Named(torch.utils.data.Dataset):
    def __len__(self):
        return N

    def __getitem__(self, i):
        return i


ds = Named()
hs = HintSampler(RandomSampler(ds, generator=torch.Generator().manual_seed(1)), rel, mount=root)
dl = DataLoader(ds, batch_size=4, sampler=hs, num_workers=2)
seen = [[int(x) for b in dl for x in b] for _ in range(2)]
ok(seen == epochs(RandomSampler(ds, generator=torch.Generator().manual_seed(1)), 2)
   and [s[1] for s in sent] == [[rel[i] for i in e] for e in seen],
   "DataLoader(num_workers=2): samples in the sampler's order, one hint per epoch")
hs.close()

# failures: warn once, yield the same indices, stop asking when it will not change
reset()
fail["errno"] = errno.ENOTTY
hs = HintSampler(RandomSampler(data, generator=torch.Generator().manual_seed(5)), rel,
                 mount=root)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    got = epochs(hs, 3)
ok(got == epochs(RandomSampler(data, generator=torch.Generator().manual_seed(5)), 3),
   "ENOTTY from the mount: the indices unchanged")
ok(len(w) == 1 and "without hints" in str(w[0].message) and fail["calls"] == 1
   and hs.disabled, "ENOTTY: one warning, not asked again", [str(x.message) for x in w])

reset()
fail["errno"] = errno.ENOMEM
hs = HintSampler(SequentialSampler(data), rel, mount=root)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    epochs(hs, 2)
    fail["errno"] = None
    got = list(hs)
ok(len(w) == 1 and fail["calls"] == 3 and got == data and sent[-1][1] == rel
   and not hs.disabled, "ENOMEM: one warning, tried again next epoch, then sent")
hs.close()


def warns_and_yields(sampler, items, mount, what):
    reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        hs = HintSampler(sampler, items, mount=mount)
        got = epochs(hs, 2)
    ok(got == [data, data] and len(w) == 1 and not sent,
       "%s: one warning, indices unchanged, nothing sent" % what,
       [str(x.message) for x in w])
    return str(w[0].message) if w else ""


msg = warns_and_yields(SequentialSampler(data), absp, None, "mount=None on a non-shardfs "
                       "directory")
ok("not on a shardfs mount" in msg, "... the warning says why", msg)
msg = warns_and_yields(SequentialSampler(data), rel, None, "relative items without mount=")
ok("mount=" in msg, "... the warning says to give mount=", msg)
msg = warns_and_yields(SequentialSampler(data), rel[:3] + ["../etc/passwd"] + rel[4:], root,
                       "an item with '..'")
ok("item 3" in msg, "... the warning names the item", msg)
msg = warns_and_yields(SequentialSampler(data), ["/elsewhere/x.jpg"] * N, root,
                       "absolute items outside the mount")
ok("not on the mount" in msg, "... the warning says so", msg)
msg = warns_and_yields(SequentialSampler(data), rel, os.path.join(tmp, "nonexistent"),
                       "a mount that does not exist")

# copies open their own descriptor
reset()
hs = HintSampler(SequentialSampler(data), rel, mount=root)
list(hs)
c1, c2 = copy.deepcopy(hs), pickle.loads(pickle.dumps(hs))
list(c1), list(c2)
ok(len({s[0] for s in sent}) == 3 and [s[1] for s in sent] == [rel] * 3,
   "deepcopy and pickle: each copy opens its own descriptor and hints the same list")
for h in (hs, c1, c2):
    h.close()

# items_from_recordio_idx on a generated .rec/.idx (one line out of order, a blank)
rec = os.path.join(root, "data.rec")
lengths = [40, 1000, 8, 64, 4096, 12]
with open(rec, "wb") as f:
    f.write(os.urandom(sum(lengths)))
offs = [sum(lengths[:k]) for k in range(len(lengths))]
order = [0, 1, 3, 2, 4, 5]  # line j holds record order[j]
with open(rec[:-4] + ".idx", "w") as f:
    for j, k in enumerate(order):
        f.write("%d\t%d\n" % (j, offs[k]))
        if j == 2:
            f.write("\n")
got = items_from_recordio_idx(rec[:-4] + ".idx", rec)
ok(got == [(rec, offs[k], lengths[k]) for k in order],
   "items_from_recordio_idx: (rec, offset, length) per .idx line; each record to the "
   "next offset, the last to the end of the file", repr(got))
list(HintSampler(SequentialSampler(got), got, mount=root))
ok(sent[-1][1] == [("data.rec", offs[k], lengths[k]) for k in order],
   "RecordIO items hint ranges of the .rec")
for bad, what in (("0\t5\n1\n", "a line without an offset"),
                  ("0\t0\n1\t%d\n" % sum(lengths), "an offset at the end of the file")):
    with open(rec[:-4] + ".bad", "w") as f:
        f.write(bad)
    try:
        items_from_recordio_idx(rec[:-4] + ".bad", rec)
        ok(False, "items_from_recordio_idx: %s raises ValueError" % what)
    except ValueError as e:
        ok(".bad:2" in str(e), "items_from_recordio_idx: %s raises ValueError naming "
           "the line" % what, str(e))

# an ImageNet-sized epoch: packed once, then each epoch sent quickly
decode = False
reset()
big = ["train/n%08d/n%08d_%d.JPEG" % (i % 1000, i % 1000, i) for i in range(1281167)]
hs = HintSampler(RandomSampler(big, generator=torch.Generator().manual_seed(0)), big,
                 mount=root)
t0 = time.monotonic()
it = iter(hs)
t1 = time.monotonic()
iter(hs)
t2 = time.monotonic()
print("# 1281167 items: first epoch (packing) %.2f s, next epoch %.2f s" % (t1 - t0, t2 - t1))
ok([s[1] for s in sent] == [1281167] * 2, "1.28 M items: each epoch's whole list sent")
hs.close()
shutil.rmtree(tmp)

print("1..%d" % T._n)
if T.failed:
    print("# %d of %d failed" % (T.failed, T._n))
sys.exit(1 if T.failed else 0)
