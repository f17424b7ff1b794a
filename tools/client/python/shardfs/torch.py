# SPDX-License-Identifier: Apache-2.0
"""shardfs.torch — hint each epoch's reading order of a PyTorch DataLoader to the mount.

    from shardfs.torch import HintSampler, items_from_samples
    ds = torchvision.datasets.ImageFolder("/mnt/dataset/imagenet/train", transform=...)
    sampler = HintSampler(RandomSampler(ds), items_from_samples(ds))
    loader = DataLoader(ds, batch_size=64, sampler=sampler, num_workers=2)

HintSampler wraps any sampler. At the start of each epoch (each iter()) it draws the
wrapped sampler's whole order, sends it to the mount as an epoch hint (shardfs.hint:
the daemon fetches the files ahead, in that order) and yields exactly those indices.
Hints never break training: when they cannot be sent (not a shardfs mount, a daemon
without hints, a malformed item) the sampler warns once and yields the same indices.

Imported only on request (import shardfs does not import it); `import torch` here is
the real torch.

Owns: each sampler's packed items and its open descriptor of the mount's root
(the hint list's owner). Does not own: the order (the wrapped sampler's), the
fetching (the mount's), the ioctl packing (shardfs). Threading: a sampler is
iterated by one thread at a time (the DataLoader's main process iterates it);
it keeps no shared state.
"""

import errno
import os
import warnings

import torch  # noqa: F401  (the real torch: this module's name is shardfs.torch)
from torch.utils.data import Sampler

import shardfs as _sfs

__all__ = ["HintSampler", "items_from_samples", "items_from_paths", "items_from_recordio_idx"]

# Refusals that will not change from one epoch to the next: stop asking.
_PERMANENT = {errno.ENOTTY, errno.EOPNOTSUPP, errno.ENOSYS, errno.EPERM, errno.EACCES,
              errno.ENOENT, errno.ENOTDIR, errno.EINVAL, errno.E2BIG}


class HintSampler(Sampler):
    """Wraps `sampler` (RandomSampler, SequentialSampler, DistributedSampler, a
    BatchSampler, ... anything iterable over dataset indices) and hints each epoch's
    order to the shardfs mount before yielding it unchanged.

    items[i] says what sample i reads: a path (str, bytes, os.PathLike) absolute on
    the mount or relative to its root, a (path, label) pair as in torchvision's
    DatasetFolder.samples, or (path, offset, length) for a byte range of a file
    (RecordIO, TFRecord, WebDataset shards: see items_from_recordio_idx). items is
    read, not copied; each item is packed once, at the first epoch.

    mount: the mountpoint; by default the mount holding the first item (which must
    then be absolute; see shardfs.find_mount). The sampler keeps one open descriptor
    of the mount's root: the hint list belongs to it, each epoch's list replaces the
    last one, and close() (or the sampler's end) drops it. Every rank or job holds its
    own list: with DistributedSampler each rank hints the indices it will read.

    len() and set_epoch() are the wrapped sampler's (set_epoch only where it has
    one), as are its other attributes. A BatchSampler's batches are hinted in order,
    flattened. An epoch of more than shardfs.HINT_MAX_ITEMS indices is hinted up to
    that many. Attributes: last_hinted (items in the list sent last, None before),
    disabled (why hints stopped, or None).
    """

    def __init__(self, sampler, items, mount=None):
        super().__init__(None)
        self.sampler, self.items, self.mount = sampler, items, mount
        self.last_hinted, self.disabled = None, None
        self._records = None  # items packed, by index; built at the first epoch
        self._fd = None       # the mount's root, open while hints are sent
        self._warned = False

    def __iter__(self):
        order = list(iter(self.sampler))
        if self.disabled is None:
            self._hint(order)
        return iter(order)

    def __len__(self):
        return len(self.sampler)

    def __getattr__(self, name):
        # Only what HintSampler lacks arrives here: set_epoch, epoch, num_replicas...
        if name.startswith("__") or name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)

    # --- hints ---------------------------------------------------------------

    def _warn(self, msg):
        if not self._warned:
            self._warned = True
            warnings.warn("shardfs.torch.HintSampler: %s; yielding the sampler's indices "
                          "without hints" % msg, RuntimeWarning, stacklevel=3)

    def _hint(self, order):
        try:
            if self._records is None:
                self._prepare()
            idx = order
            if order and isinstance(order[0], (list, tuple)):
                idx = [i for batch in order for i in batch]
            if len(idx) > _sfs.HINT_MAX_ITEMS:
                idx = idx[:_sfs.HINT_MAX_ITEMS]
            recs = self._records
            self.last_hinted = _sfs._hint_send(self._fd, [recs[i] for i in idx])
        except Exception as e:  # noqa: BLE001 — training must not stop for a hint
            if not isinstance(e, OSError) or e.errno in _PERMANENT:
                self.disabled = "%s: %s" % (type(e).__name__, e)
                self.close()
            self._warn("epoch hint not sent (%s: %s)" % (type(e).__name__, e))

    def _prepare(self):
        """Find and open the mount's root, pack every item."""
        items = self.items
        mount = self.mount
        if mount is None:
            if not len(items):
                raise ValueError("no items")
            first = _path_of(items[0])
            if not os.path.isabs(os.fsdecode(first)):
                raise ValueError("items are relative (%r): give mount=" % (first,))
            mount = _sfs.find_mount(first)
        root = os.path.realpath(os.fsdecode(mount))
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            rel = _Relative(root, os.fsdecode(mount))
            records, rec = [], _sfs._hint_record
            for i, it in enumerate(items):
                try:
                    if isinstance(it, (tuple, list)):
                        if len(it) == 3:
                            records.append(rec(rel(it[0]), it[1], it[2]))
                            continue
                        if len(it) != 2:
                            raise ValueError("expected a path, (path, label) or "
                                             "(path, offset, length), got %r" % (it,))
                        it = it[0]
                    records.append(rec(rel(it)))
                except (ValueError, TypeError) as e:
                    raise type(e)("item %d: %s" % (i, e)) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._records = fd, records

    def status(self):
        """shardfs.hint_status of the list sent last, or None when none was sent."""
        return _sfs.hint_status(self._fd) if self._fd is not None else None

    def close(self):
        """Close the mount's root: the mount drops the list. Idempotent; a later epoch
        opens it again."""
        fd, self._fd, self._records = self._fd, None, None
        if fd is not None:
            os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def __getstate__(self):
        # A copy (pickle, deepcopy) opens its own descriptor and packs again.
        state = self.__dict__.copy()
        state.update(_fd=None, _records=None)
        return state


def _path_of(item):
    if isinstance(item, (tuple, list)):
        return item[0]
    return item


class _Relative:
    """Maps an item's path to the path relative to the mount's root that a hint
    carries: relative ones as they are, absolute ones under the root (as given or
    resolved) by cutting the root off; others by resolving their directory (once
    per directory: a symlink to a directory of the mount)."""

    def __init__(self, root, given):
        self.prefixes = [root.rstrip("/") + "/"]
        if given.rstrip("/") + "/" not in self.prefixes:
            self.prefixes.append(given.rstrip("/") + "/")
        self.root = root
        self.dirs = {}

    def __call__(self, path):
        if isinstance(path, (bytes, os.PathLike)):
            path = os.fsdecode(path)
        if not isinstance(path, str) or not path.startswith("/"):
            return path
        if "//" in path or "/." in path:
            path = os.path.normpath(path)
        for p in self.prefixes:
            if path.startswith(p):
                return path[len(p):]
        d, _, base = path.rpartition("/")
        rd = self.dirs.get(d)
        if rd is None:
            rd = self.dirs[d] = os.path.realpath(d or "/")
        if rd == self.root:
            return base
        if rd.startswith(self.prefixes[0]):
            return rd[len(self.prefixes[0]):] + "/" + base
        raise ValueError("%r is not on the mount at %s" % (path, self.root))


def items_from_samples(dataset):
    """The paths of a torchvision DatasetFolder / ImageFolder (its .samples, (path,
    label) pairs), in index order; a torch.utils.data.Subset of one gives its own
    indices' paths. TypeError for a dataset without .samples."""
    if isinstance(dataset, torch.utils.data.Subset):
        base = items_from_samples(dataset.dataset)
        return [base[i] for i in dataset.indices]
    samples = getattr(dataset, "samples", None)
    if samples is None:
        raise TypeError("%s has no .samples (a torchvision DatasetFolder / ImageFolder); "
                        "build the items with items_from_paths" % type(dataset).__name__)
    return [s[0] for s in samples]


def items_from_paths(paths):
    """Items from any iterable of paths (str, bytes, pathlib.Path): one whole-file item
    per path, in order, absolute on the mount or relative to its root."""
    return [p if isinstance(p, (str, bytes)) else os.fspath(p) for p in paths]


def items_from_recordio_idx(idx_path, rec_path):
    """Items for the records of an MXNet RecordIO file from its .idx (text lines
    "key<TAB>offset", as im2rec and MXIndexedRecordIO write them): a list of
    (rec_path, offset, length), entry j for the j-th line of the .idx (blank lines
    skipped). That is the index MXNet's RecordFileDataset / ImageRecordDataset use
    (dataset[j] reads the record of the j-th key), and, for im2rec's files (keys
    0..n-1 in order), the key itself.

    A record's length runs to the next record's offset (in the file, whatever the
    line order), the last one's to the end of rec_path, which is stat'ed (give it as
    this process can open it; an absolute path on the mount is what HintSampler
    wants anyway). ValueError for a malformed line or an offset past the file's end."""
    offsets, lines = [], []
    with open(idx_path, "rb") as f:
        for n, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                if len(fields) != 2:
                    raise ValueError
                offsets.append(int(fields[1]))
                lines.append(n)
            except ValueError:
                raise ValueError("%s:%d: expected 'key<TAB>offset', got %r"
                                 % (os.fsdecode(idx_path), n, line)) from None
    size = os.stat(rec_path).st_size
    ends = sorted(set(offsets))
    ends.append(size)
    nxt = {o: ends[k + 1] for k, o in enumerate(ends[:-1])}
    out = []
    for j, o in enumerate(offsets):
        if o < 0 or o >= size:
            raise ValueError("%s:%d: offset %d is outside %s (%d bytes)"
                             % (os.fsdecode(idx_path), lines[j], o, os.fsdecode(rec_path),
                                size))
        out.append((rec_path, o, nxt[o] - o))
    return out
