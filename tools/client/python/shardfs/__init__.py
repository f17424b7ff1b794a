# SPDX-License-Identifier: Apache-2.0
"""shardfs — stage bytes of files on a shardfs mount into shared memory or GPU memory.

Pure Python (fcntl, struct, ctypes); no compiled extension. The ioctl ABI is
include/shardfs/shardfs_ioctl.h (installed as <shardfs/shardfs_ioctl.h>); every struct
below mirrors it field by field, and tests/unit/test_python_abi.sh checks
the sizes, offsets and ioctl numbers against the C compiler.

    import shardfs
    with open("/mnt/dataset/shards/train-00000.tfrecord", "rb") as f:
        q = shardfs.query(f)                          # caps, GPUs, limits
        with shardfs.ShmRegion(f, 64 << 20) as r:     # a /dev/shm buffer, registered
            placed, path = r.stage([(0, 4096, 1 << 20)])   # (region_off, file_off, length)
            data = r.buf[0:placed[0]]
        rid = shardfs.register_tensor(f, gpu_tensor)  # PyTorch / CuPy CUDA memory
        placed, path = shardfs.stage(f, rid, [(0, 0, gpu_tensor.nbytes)])
        shardfs.unregister(f, rid)
    for d in shardfs.cache_list("/mnt/dataset"):        # the mount's cache, per dataset
        print(d.name, d.bytes, d.hit_bytes, d.miss_bytes)
    shardfs.cache_evict("/mnt/dataset", "/ifs/data/old-experiment")
    root = os.open(shardfs.find_mount("/mnt/dataset"), os.O_RDONLY | os.O_DIRECTORY)
    shardfs.hint(root, ["train/a.jpg", ("shards/s0.rec", 4096, 81920)])  # read order
    print(shardfs.hint_status(root))                  # the list lives while root is open

`f` is everywhere a file object or a file descriptor of a file opened on the
mount. A region belongs to that open file and is dropped when it is closed.
The cache_* calls take a path on the mount (the mountpoint, say) as well; the
hint_* calls do not (a hint list lives as long as the open file it was sent on).
shardfs.torch (imported only when asked for) wraps a PyTorch sampler so that each
epoch's order is hinted.
Refusals of the mount raise OSError with its errno (see shardfs_ioctl.h);
bad Python arguments raise ValueError or TypeError.

Owns: packing the ioctl structs, this process's table of the regions it
registered (so that a region lost with a serving process that died is
registered again), and the shared-memory objects ShmRegion creates. Does not
own: the regions and hint lists (the open file's, on the mount), the GPU
memory (the caller's tensor or allocation), the bytes (the mount places them).
Threading: any thread; the region table is under one lock, and the daemon
serialises the ioctls of one open file.
"""

import bisect
import collections
import ctypes
import errno
import fcntl
import itertools
import mmap
import operator
import os
import secrets
import struct
import sys
import threading

__all__ = [
    "ABI_VERSION", "CAP_SHM", "CAP_CUDA_IPC", "CAP_WARM", "REGION_SHM", "REGION_CUDA",
    "STAGE_MAX_RANGES", "PATH_CACHE", "PATH_NFS", "PATH_SHM_COPY", "PATH_CUDA_PINNED",
    "WARM_ACTIVE", "XATTR_CACHED", "XATTR_KEY", "EVICT_ALL", "EVICT_MOUNT_PATH",
    "CACHE_EVICT_KEYS_MAX", "Query", "Warm", "CudaAllocation", "CacheDataset", "CacheList",
    "Evicted", "query", "register_shm", "register_cuda", "register_tensor", "cuda_allocation",
    "stage", "unregister", "warm", "path_names", "ShmRegion", "cache_list", "cache_evict",
    "cache_purge", "cache_key", "cache_evict_keys", "HINT_MAX_ITEMS", "HINT_FILE", "HINT_RANGE",
    "HintStatus", "hint", "hint_cancel", "hint_status", "find_mount",
]

# --- constants of include/shardfs/shardfs_ioctl.h ---------------------------------------

IOC_MAGIC = ord("S")
ABI_VERSION = 1
CAP_SHM, CAP_CUDA_IPC, CAP_WARM = 0x1, 0x2, 0x4
MAX_GPUS = 8
REGION_SHM, REGION_CUDA = 1, 2
STAGE_MAX_RANGES = 64
PATH_CACHE, PATH_NFS, PATH_SHM_COPY, PATH_CUDA_PINNED = 0x1, 0x2, 0x10, 0x20
WARM_ACTIVE = 0x1
XATTR_CACHED = "user.shardfs.cached"
XATTR_KEY = "user.shardfs.key"
SHM_NAME_MAX = 256  # char shm_name[256], NUL included
CACHE_LIST_BUF = 16000
EVICT_ALL, EVICT_MOUNT_PATH = 0x1, 0x2
EVICT_PREFIX_MAX = 4096  # char prefix[4096], NUL included
CACHE_EVICT_KEYS_MAX = 1000
HINT_MAX_ITEMS = 1 << 21
HINT_BUF = 16320
HINT_FILE, HINT_RANGE = 0, 1
HINT_PATH_MAX = 4095  # path_len 1..4095
FSTYPE = "fuse.shardfs"  # the mount's type in /proc/self/mountinfo

# --- struct layouts ----------------------------------------------------------
# One (field, struct format) pair per C field, in order. '=' means native
# byte order, standard sizes and no implicit padding: every C field is
# naturally aligned, so the offsets match the C compiler's exactly (checked
# by tests/unit/test_python_abi.sh). A new C field goes here too.

_FIELDS = {
    "shardfs_query": (
        ("size", "I"), ("abi_version", "I"), ("caps", "I"), ("n_gpus", "I"),
        ("max_ranges", "I"), ("max_regions", "I"), ("max_stage_bytes", "Q"),
        ("gpu_uuid", "%ds" % (MAX_GPUS * 16)), ("reserved", "8Q")),
    "shardfs_region": (
        ("size", "I"), ("kind", "I"), ("region_id", "Q"), ("offset", "Q"), ("length", "Q"),
        ("alloc_size", "Q"), ("shm_name", "%ds" % SHM_NAME_MAX),
        ("cuda_ipc_handle", "64s"), ("gpu_uuid", "16s"), ("reserved", "4Q")),
    "shardfs_range": (
        ("region_offset", "Q"), ("file_offset", "Q"), ("length", "Q"), ("placed", "Q")),
    "shardfs_stage": (
        ("size", "I"), ("n_ranges", "I"), ("region_id", "Q"), ("bytes_placed", "Q"),
        ("path", "I"), ("reserved0", "I"), ("reserved", "4Q"),
        ("ranges", "%dQ" % (4 * STAGE_MAX_RANGES))),
    "shardfs_unregister": (
        ("size", "I"), ("reserved0", "I"), ("region_id", "Q"), ("reserved", "2Q")),
    "shardfs_warm": (
        ("size", "I"), ("flags", "I"), ("file_bytes", "Q"), ("cached_bytes", "Q"),
        ("reserved", "4Q")),
    # name[] is the C flexible array member: offset only, no bytes of the fixed part.
    "shardfs_cache_entry": (
        ("entry_bytes", "H"), ("name_len", "H"), ("id", "I"), ("bytes", "Q"), ("objects", "Q"),
        ("packed_objects", "Q"), ("hit_bytes", "Q"), ("miss_bytes", "Q"), ("last_use_s", "q"),
        ("name", "0s")),
    "shardfs_cache_list": (
        ("size", "I"), ("start", "I"), ("n_entries", "I"), ("total", "I"),
        ("capacity_bytes", "Q"), ("used_bytes", "Q"), ("reserved", "4Q"),
        ("buf", "%ds" % CACHE_LIST_BUF)),
    "shardfs_cache_evict": (
        ("size", "I"), ("flags", "I"), ("datasets", "I"), ("reserved0", "I"), ("objects", "Q"),
        ("bytes", "Q"), ("disk_bytes", "Q"), ("reserved", "4Q"),
        ("prefix", "%ds" % EVICT_PREFIX_MAX)),
    "shardfs_cache_evict_keys": (
        ("size", "I"), ("n_keys", "I"), ("objects", "Q"), ("bytes", "Q"), ("disk_bytes", "Q"),
        ("reserved", "4Q"), ("keys", "%ds" % (16 * CACHE_EVICT_KEYS_MAX))),
    # path[] is a flexible array member, as name[] above.
    "shardfs_hint_item": (
        ("item_bytes", "H"), ("path_len", "H"), ("kind", "H"), ("reserved0", "H"),
        ("offset", "Q"), ("length", "Q"), ("path", "0s")),
    "shardfs_hint_begin": (
        ("size", "I"), ("reserved0", "I"), ("max_items", "Q"), ("window", "Q"),
        ("reserved", "4Q")),
    "shardfs_hint_append": (
        ("size", "I"), ("n_items", "I"), ("used", "I"), ("reserved0", "I"), ("reserved", "2Q"),
        ("buf", "%ds" % HINT_BUF)),
    "shardfs_hint_commit": (
        ("size", "I"), ("reserved0", "I"), ("n_items", "Q"), ("reserved", "4Q")),
    "shardfs_hint_cancel": (
        ("size", "I"), ("reserved0", "I"), ("reserved", "2Q")),
    "shardfs_hint_status": (
        ("size", "I"), ("active", "I"), ("n_items", "Q"), ("position", "Q"),
        ("fetched_items", "Q"), ("fetched_bytes", "Q"), ("read_items", "Q"),
        ("wasted_bytes", "Q"), ("cached_items", "Q"), ("unknown_items", "Q"),
        ("denied_items", "Q"), ("reserved", "4Q")),
}


def _fmt(name):
    return "=" + "".join(f for _, f in _FIELDS[name])


QUERY_FMT = _fmt("shardfs_query")
REGION_FMT = _fmt("shardfs_region")
RANGE_FMT = _fmt("shardfs_range")
STAGE_HDR_FMT = "=" + "".join(f for n, f in _FIELDS["shardfs_stage"] if n != "ranges")
STAGE_FMT = _fmt("shardfs_stage")
UNREGISTER_FMT = _fmt("shardfs_unregister")
WARM_FMT = _fmt("shardfs_warm")
CACHE_ENTRY_FMT = _fmt("shardfs_cache_entry")
CACHE_LIST_HDR_FMT = "=" + "".join(f for n, f in _FIELDS["shardfs_cache_list"] if n != "buf")
CACHE_LIST_FMT = _fmt("shardfs_cache_list")
CACHE_EVICT_FMT = _fmt("shardfs_cache_evict")
CACHE_EVICT_KEYS_FMT = _fmt("shardfs_cache_evict_keys")
HINT_ITEM_FMT = _fmt("shardfs_hint_item")
HINT_BEGIN_FMT = _fmt("shardfs_hint_begin")
HINT_APPEND_HDR_FMT = "=" + "".join(f for n, f in _FIELDS["shardfs_hint_append"] if n != "buf")
HINT_APPEND_FMT = _fmt("shardfs_hint_append")
HINT_COMMIT_FMT = _fmt("shardfs_hint_commit")
HINT_CANCEL_FMT = _fmt("shardfs_hint_cancel")
HINT_STATUS_FMT = _fmt("shardfs_hint_status")
QUERY_SIZE = struct.calcsize(QUERY_FMT)
REGION_SIZE = struct.calcsize(REGION_FMT)
RANGE_SIZE = struct.calcsize(RANGE_FMT)
STAGE_HDR_SIZE = struct.calcsize(STAGE_HDR_FMT)
STAGE_SIZE = struct.calcsize(STAGE_FMT)
UNREGISTER_SIZE = struct.calcsize(UNREGISTER_FMT)
WARM_SIZE = struct.calcsize(WARM_FMT)
CACHE_ENTRY_SIZE = struct.calcsize(CACHE_ENTRY_FMT)
CACHE_LIST_HDR_SIZE = struct.calcsize(CACHE_LIST_HDR_FMT)
CACHE_LIST_SIZE = struct.calcsize(CACHE_LIST_FMT)
CACHE_EVICT_SIZE = struct.calcsize(CACHE_EVICT_FMT)
CACHE_EVICT_KEYS_SIZE = struct.calcsize(CACHE_EVICT_KEYS_FMT)
HINT_ITEM_SIZE = struct.calcsize(HINT_ITEM_FMT)
HINT_BEGIN_SIZE = struct.calcsize(HINT_BEGIN_FMT)
HINT_APPEND_HDR_SIZE = struct.calcsize(HINT_APPEND_HDR_FMT)
HINT_APPEND_SIZE = struct.calcsize(HINT_APPEND_FMT)
HINT_COMMIT_SIZE = struct.calcsize(HINT_COMMIT_FMT)
HINT_CANCEL_SIZE = struct.calcsize(HINT_CANCEL_FMT)
HINT_STATUS_SIZE = struct.calcsize(HINT_STATUS_FMT)


def abi_layout():
    """{struct: {"size": n, "fields": {field: [offset, size]}}}, for the ABI test."""
    out = {}
    for name, fields in _FIELDS.items():
        off, fl = 0, {}
        for field, f in fields:
            size = struct.calcsize("=" + f)
            fl[field] = [off, size]
            off += size
        out[name] = {"size": struct.calcsize(_fmt(name)), "fields": fl}
    return out


# --- ioctl numbers: <asm-generic/ioctl.h> ------------------------------------
_IOC_NRBITS, _IOC_TYPEBITS, _IOC_SIZEBITS = 8, 8, 14
_IOC_NRSHIFT = 0
_IOC_TYPESHIFT = _IOC_NRSHIFT + _IOC_NRBITS
_IOC_SIZESHIFT = _IOC_TYPESHIFT + _IOC_TYPEBITS
_IOC_DIRSHIFT = _IOC_SIZESHIFT + _IOC_SIZEBITS
_IOC_WRITE, _IOC_READ = 1, 2


def _IOC(direction, typ, nr, size):
    if size >= 1 << _IOC_SIZEBITS:
        raise ValueError("ioctl argument of %d bytes does not fit" % size)
    return ((direction << _IOC_DIRSHIFT) | (typ << _IOC_TYPESHIFT) | (nr << _IOC_NRSHIFT)
            | (size << _IOC_SIZESHIFT))


def _IOW(typ, nr, size):
    return _IOC(_IOC_WRITE, typ, nr, size)


def _IOWR(typ, nr, size):
    return _IOC(_IOC_READ | _IOC_WRITE, typ, nr, size)


IOC_QUERY = _IOWR(IOC_MAGIC, 0x01, QUERY_SIZE)
IOC_REGISTER = _IOWR(IOC_MAGIC, 0x02, REGION_SIZE)
IOC_STAGE = _IOWR(IOC_MAGIC, 0x03, STAGE_SIZE)
IOC_UNREGISTER = _IOW(IOC_MAGIC, 0x04, UNREGISTER_SIZE)
IOC_WARM = _IOWR(IOC_MAGIC, 0x10, WARM_SIZE)
IOC_CACHE_LIST = _IOWR(IOC_MAGIC, 0x20, CACHE_LIST_SIZE)
IOC_CACHE_EVICT = _IOWR(IOC_MAGIC, 0x21, CACHE_EVICT_SIZE)
IOC_CACHE_EVICT_KEYS = _IOWR(IOC_MAGIC, 0x22, CACHE_EVICT_KEYS_SIZE)
IOC_HINT_BEGIN = _IOWR(IOC_MAGIC, 0x30, HINT_BEGIN_SIZE)
IOC_HINT_APPEND = _IOW(IOC_MAGIC, 0x31, HINT_APPEND_SIZE)
IOC_HINT_COMMIT = _IOWR(IOC_MAGIC, 0x32, HINT_COMMIT_SIZE)
IOC_HINT_CANCEL = _IOW(IOC_MAGIC, 0x33, HINT_CANCEL_SIZE)
IOC_HINT_STATUS = _IOWR(IOC_MAGIC, 0x34, HINT_STATUS_SIZE)

IOCTLS = {"SHARDFS_IOC_QUERY": IOC_QUERY, "SHARDFS_IOC_REGISTER": IOC_REGISTER,
          "SHARDFS_IOC_STAGE": IOC_STAGE, "SHARDFS_IOC_UNREGISTER": IOC_UNREGISTER,
          "SHARDFS_IOC_WARM": IOC_WARM, "SHARDFS_IOC_CACHE_LIST": IOC_CACHE_LIST,
          "SHARDFS_IOC_CACHE_EVICT": IOC_CACHE_EVICT,
          "SHARDFS_IOC_CACHE_EVICT_KEYS": IOC_CACHE_EVICT_KEYS,
          "SHARDFS_IOC_HINT_BEGIN": IOC_HINT_BEGIN, "SHARDFS_IOC_HINT_APPEND": IOC_HINT_APPEND,
          "SHARDFS_IOC_HINT_COMMIT": IOC_HINT_COMMIT, "SHARDFS_IOC_HINT_CANCEL": IOC_HINT_CANCEL,
          "SHARDFS_IOC_HINT_STATUS": IOC_HINT_STATUS}


# --- the ioctls ---------------------------------------------------------------

def _fd(f):
    if isinstance(f, int):
        return f
    if hasattr(f, "fileno"):
        return f.fileno()
    raise TypeError("expected a file object or a file descriptor, got %r" % type(f).__name__)


def _ioctl(f, cmd, buf):
    """Issue cmd with buf (a bytearray) as argument, in and out; OSError on refusal."""
    fcntl.ioctl(_fd(f), cmd, buf, True)
    return buf


Query = collections.namedtuple("Query", "abi_version caps n_gpus max_ranges max_regions "
                               "max_stage_bytes gpu_uuids")
Query.__doc__ = ("What a mount can do. gpu_uuids: the 16-byte UUIDs of its first "
                 "min(n_gpus, %d) GPUs." % MAX_GPUS)

Warm = collections.namedtuple("Warm", "flags file_bytes cached_bytes active")


def query(f):
    """SHARDFS_IOC_QUERY. Returns a Query; OSError (ENOTTY: not a shardfs file, or a
    daemon without staging)."""
    buf = bytearray(QUERY_SIZE)
    struct.pack_into("=I", buf, 0, QUERY_SIZE)
    v = struct.unpack(QUERY_FMT, _ioctl(f, IOC_QUERY, buf))
    _, abi, caps, n_gpus, max_ranges, max_regions, max_stage_bytes, uuids = v[:8]
    return Query(abi, caps, n_gpus, max_ranges, max_regions, max_stage_bytes,
                 [uuids[16 * i:16 * i + 16] for i in range(min(n_gpus, MAX_GPUS))])


def _shm_name(name):
    """'/name' as bytes from 'name' or '/name' (what shm_open(3) accepts)."""
    if isinstance(name, str):
        name = name.encode()
    name = b"/" + name.lstrip(b"/")
    if len(name) < 2 or b"/" in name[1:] or b"\0" in name:
        raise ValueError("bad shared-memory object name %r" % name)
    if len(name) >= SHM_NAME_MAX:
        raise ValueError("shared-memory object name longer than %d bytes" % (SHM_NAME_MAX - 1))
    return name


# Registrations of this process, so that a region lost with a serving process
# that died (the mount's keeper restarted it: STAGE answers EOWNERDEAD) is
# registered again and the STAGE sent again, with the caller's region id
# still valid: (fd, region id as returned) -> [REGISTER arguments, current id].
_regions = {}
_regions_lock = threading.Lock()


def _register_call(f, args):
    buf = bytearray(struct.pack(REGION_FMT, REGION_SIZE, args[0], 0, *args[1:], 0, 0, 0, 0))
    return struct.unpack(REGION_FMT, _ioctl(f, IOC_REGISTER, buf))[2]


def _register(f, kind, offset, length, alloc_size=0, shm_name=b"", handle=b"", uuid=b""):
    args = (kind, offset, length, alloc_size, shm_name, handle, uuid)
    rid = _register_call(f, args)
    with _regions_lock:
        _regions[(_fd(f), rid)] = [args, rid]
    return rid


def _current_region(f, region_id):
    """The region id the mount knows now for the caller's region_id."""
    with _regions_lock:
        r = _regions.get((_fd(f), region_id))
    return r[1] if r else region_id


def _register_again(f, region_id):
    """After EOWNERDEAD: register the caller's region_id again; its new id, or None
    when this process did not register it."""
    with _regions_lock:
        r = _regions.get((_fd(f), region_id))
    if r is None:
        return None
    new = _register_call(f, r[0])
    with _regions_lock:
        r[1] = new
    return new


def register_shm(f, name, offset, length):
    """Register `length` bytes at `offset` of the shm object `name` ('/x' or 'x', as for
    shm_open; multiprocessing.shared_memory's .name works). Returns the region id."""
    return _register(f, REGION_SHM, offset, length, shm_name=_shm_name(name))


def _uuid_bytes(uuid):
    """16 bytes from bytes, a uuid.UUID, or a string such as 'GPU-1b2c...' / '1b2c-...'."""
    if hasattr(uuid, "bytes") and not isinstance(uuid, (bytes, bytearray)):
        uuid = uuid.bytes
    elif isinstance(uuid, str):
        s = uuid.strip()
        for prefix in ("GPU-", "MIG-"):
            if s.startswith(prefix):
                s = s[len(prefix):]
        uuid = bytes.fromhex(s.replace("-", ""))
    uuid = bytes(uuid)
    if len(uuid) != 16:
        raise ValueError("a GPU UUID is 16 bytes, got %d" % len(uuid))
    return uuid


def register_cuda(f, ipc_handle, gpu_uuid, offset, length, alloc_size):
    """Register a view of `length` bytes at `offset` of a CUDA allocation of `alloc_size`
    bytes, given the 64-byte IPC handle of the allocation's base and the GPU's UUID.
    Keep the allocation alive while registered. Returns the region id."""
    ipc_handle = bytes(ipc_handle)
    if len(ipc_handle) != 64:
        raise ValueError("a CUDA IPC handle is 64 bytes, got %d" % len(ipc_handle))
    return _register(f, REGION_CUDA, offset, length, alloc_size, handle=ipc_handle,
                     uuid=_uuid_bytes(gpu_uuid))


def _stage_call(f, region_id, pieces):
    """One SHARDFS_IOC_STAGE of pieces [(region_off, file_off, length)]. Returns
    ([placed], path)."""
    n = len(pieces)
    buf = bytearray(STAGE_SIZE)
    struct.pack_into(STAGE_HDR_FMT, buf, 0, STAGE_SIZE, n, region_id, 0, 0, 0, 0, 0, 0, 0)
    for k, (ro, fo, ln) in enumerate(pieces):
        struct.pack_into(RANGE_FMT, buf, STAGE_HDR_SIZE + k * RANGE_SIZE, ro, fo, ln, 0)
    _ioctl(f, IOC_STAGE, buf)
    path = struct.unpack_from(STAGE_HDR_FMT, buf, 0)[4]
    placed = [struct.unpack_from(RANGE_FMT, buf, STAGE_HDR_SIZE + k * RANGE_SIZE)[3]
              for k in range(n)]
    return placed, path


def stage(f, region_id, ranges):
    """SHARDFS_IOC_STAGE: place file bytes into a region.

    ranges: iterable of (region_offset, file_offset, length). Any number: they go out in
    batches of at most STAGE_MAX_RANGES; if the mount refuses a batch and QUERY shows
    it was over max_ranges or max_stage_bytes, the rest is re-split to fit (a range
    over max_stage_bytes goes in pieces). Returns (placed, path): placed[i] the bytes
    of range i placed (short only at end of file), path the OR of PATH_* bits.
    Raises OSError with the errno of the first refused batch.
    """
    ranges = [(int(r[0]), int(r[1]), int(r[2])) for r in ranges]
    for ro, fo, ln in ranges:
        if min(ro, fo, ln) < 0:
            raise ValueError("negative offset or length in %r" % ((ro, fo, ln),))
    placed = [0] * len(ranges)
    path = 0
    max_ranges, max_bytes, asked = STAGE_MAX_RANGES, 0, False
    mine, region_id, renewed = region_id, _current_region(f, region_id), False
    i, done = 0, 0  # next piece: ranges[i] from byte `done`
    while i < len(ranges):
        first = (i, done)
        pieces, idx, batch_bytes = [], [], 0
        while (i < len(ranges) and len(pieces) < max_ranges
               and not (max_bytes and batch_bytes >= max_bytes)):
            ro, fo, ln = ranges[i]
            take = ln - done
            if max_bytes:
                take = min(take, max_bytes - batch_bytes)
            pieces.append((ro + done, fo + done, take))
            idx.append(i)
            batch_bytes += take
            done += take
            if done == ln:
                i, done = i + 1, 0
        try:
            got, bits = _stage_call(f, region_id, pieces)
        except OSError as e:
            if e.errno == errno.EOWNERDEAD and not renewed:
                # The serving process that held the region died; the mount's keeper
                # started another. Register again and send this batch again.
                new = _register_again(f, mine)
                if new is not None:
                    region_id, renewed = new, True
                    i, done = first
                    continue
            if not asked:
                asked = True
                try:
                    q = query(f)
                except OSError:
                    q = None
                if q and ((q.max_ranges and len(pieces) > q.max_ranges)
                          or (q.max_stage_bytes and batch_bytes > q.max_stage_bytes)):
                    if q.max_ranges:
                        max_ranges = min(max_ranges, q.max_ranges)
                    max_bytes = q.max_stage_bytes
                    i, done = first
                    continue
            raise
        for k, p in zip(idx, got):
            placed[k] += p
        path |= bits
    return placed, path


def unregister(f, region_id):
    """SHARDFS_IOC_UNREGISTER. OSError(ENOENT) if there is no such region on this open file.
    A region lost with a serving process that died (EOWNERDEAD) is gone already: no error."""
    with _regions_lock:
        r = _regions.pop((_fd(f), region_id), None)
    buf = bytearray(struct.pack(UNREGISTER_FMT, UNREGISTER_SIZE, 0, r[1] if r else region_id,
                                0, 0))
    try:
        _ioctl(f, IOC_UNREGISTER, buf)
    except OSError as e:
        if e.errno != errno.EOWNERDEAD:
            raise


def warm(f):
    """SHARDFS_IOC_WARM: start (first call) or poll fetching the whole file into the
    mount's cache, as a background fetch (the mount's warm_share and warm_rate);
    open the file with os.O_NONBLOCK so that the open starts no reader's prefetch.
    Returns Warm(flags, file_bytes, cached_bytes, active)."""
    buf = bytearray(WARM_SIZE)
    struct.pack_into("=I", buf, 0, WARM_SIZE)
    _, flags, file_bytes, cached = struct.unpack(WARM_FMT, _ioctl(f, IOC_WARM, buf))[:4]
    return Warm(flags, file_bytes, cached, bool(flags & WARM_ACTIVE))


def path_names(path):
    """'cache+shm_copy' and the like from a PATH_* bit set."""
    names = [n for bit, n in ((PATH_CACHE, "cache"), (PATH_NFS, "nfs"),
                              (PATH_SHM_COPY, "shm_copy"), (PATH_CUDA_PINNED, "cuda_pinned"))
             if path & bit]
    rest = path & ~(PATH_CACHE | PATH_NFS | PATH_SHM_COPY | PATH_CUDA_PINNED)
    if rest:
        names.append("0x%x" % rest)
    return "+".join(names) or "none"


# --- the mount's cache: list per dataset, evict, purge --------------------------
# SHARDFS_IOC_CACHE_*: on any file or directory of the mount, root and the
# user the daemon runs as only (EPERM); ENOTSUP where the mount has no
# cache_dir. The daemon does the work on its store's writer thread while
# readers go on (what shardfs-cache does on a live mount).

CacheDataset = collections.namedtuple(
    "CacheDataset", "name id bytes objects packed_objects hit_bytes miss_bytes last_use_s")
CacheDataset.__doc__ = (
    "One dataset of a mount's cache: name ('/EXPORT/DIR', '/EXPORT' for the export's root "
    "files; None for objects of no known dataset), its id in the cache, bytes and file "
    "versions cached (objects, packed_objects of them small files packed in segments), "
    "bytes readers got from the cache (hit_bytes) and from NFS (miss_bytes) since its last "
    "eviction, last_use_s: last read or cache write, Unix time, 0 never.")

Evicted = collections.namedtuple("Evicted", "datasets objects bytes disk_bytes")
Evicted.__doc__ = ("What an eviction did: datasets that matched (0 for keys), file versions "
                   "evicted, their bytes, disk space freed now (packed files free theirs "
                   "when their segment goes).")


class CacheList(list):
    """cache_list()'s answer: a list of CacheDataset, and the cache's
    capacity_bytes (the cache_size in effect) and used_bytes (counted against it)."""

    def __init__(self, datasets=(), capacity_bytes=0, used_bytes=0):
        super().__init__(datasets)
        self.capacity_bytes, self.used_bytes = capacity_bytes, used_bytes

    def __repr__(self):
        return "CacheList(%s, capacity_bytes=%d, used_bytes=%d)" % (
            list.__repr__(self), self.capacity_bytes, self.used_bytes)


class _TargetFd:
    """with _TargetFd(target) as fd: a file object or descriptor as it is, a path
    (str, bytes, os.PathLike) opened read-only for the block (a directory too)."""

    def __init__(self, target):
        self.target, self.fd = target, None

    def __enter__(self):
        if isinstance(self.target, (str, bytes, os.PathLike)):
            self.fd = os.open(self.target, os.O_RDONLY | os.O_CLOEXEC)
            return self.fd
        return _fd(self.target)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)


def cache_list(target, idle=False):
    """SHARDFS_IOC_CACHE_LIST: what the mount's cache holds, per dataset. target: a
    path on the mount (the mountpoint), or a file object / descriptor of one.

    Returns a CacheList of CacheDataset in the mount's order, each dataset once (the
    pages of the listing are deduplicated by id). Datasets with nothing cached and no
    reads since their last eviction (the cache never forgets a name) are left out, as
    shardfs-cache list leaves them out, unless idle is true. OSError: EPERM (not root
    or the mount's user), ENOTSUP (no cache_dir), ENOTTY (not on a shardfs mount)."""
    out, seen = CacheList(), set()
    buf = bytearray(CACHE_LIST_SIZE)
    with _TargetFd(target) as fd:
        start = 0
        while True:
            buf[:] = bytes(CACHE_LIST_SIZE)
            struct.pack_into("=II", buf, 0, CACHE_LIST_SIZE, start)
            _ioctl(fd, IOC_CACHE_LIST, buf)
            n, total, capacity, used = struct.unpack_from(CACHE_LIST_HDR_FMT, buf, 0)[2:6]
            at, end = CACHE_LIST_HDR_SIZE, CACHE_LIST_SIZE
            for _ in range(n):
                v = struct.unpack_from(CACHE_ENTRY_FMT, buf, at)
                entry_bytes, name_len, ds_id = v[:3]
                if (entry_bytes < CACHE_ENTRY_SIZE + name_len + 1
                        or at + entry_bytes > end):
                    raise OSError(errno.EPROTO, "malformed SHARDFS_IOC_CACHE_LIST entry "
                                  "at byte %d" % (at - CACHE_LIST_HDR_SIZE))
                name = None
                if name_len:
                    name = os.fsdecode(bytes(buf[at + CACHE_ENTRY_SIZE:
                                                 at + CACHE_ENTRY_SIZE + name_len]))
                at += entry_bytes
                d = CacheDataset(name, ds_id, *v[3:9])
                if ds_id in seen or not (idle or d.objects or d.hit_bytes or d.miss_bytes):
                    continue
                seen.add(ds_id)
                out.append(d)
            out.capacity_bytes, out.used_bytes = capacity, used
            start += n
            if start >= total or not n:
                return out


def _evict(target, flags, prefix):
    buf = bytearray(struct.pack(CACHE_EVICT_FMT, CACHE_EVICT_SIZE, flags, 0, 0, 0, 0, 0,
                                0, 0, 0, 0, prefix))
    with _TargetFd(target) as fd:
        v = struct.unpack(CACHE_EVICT_FMT, _ioctl(fd, IOC_CACHE_EVICT, buf))
    return Evicted(v[2], v[4], v[5], v[6])


def cache_evict(target, dataset, mount_path=False):
    """SHARDFS_IOC_CACHE_EVICT: evict the datasets named `dataset` or under it: a name
    as cache_list() gives it ('/EXPORT/DIR'), or a prefix of names ('/EXPORT': every
    dataset of the export). mount_path=True: `dataset` is a directory relative to the
    mount's root instead ('imagenet' for /mnt/dataset/imagenet on a mount of
    HOST:/EXPORT). Readers of evicted files keep reading (their chunks become misses,
    fetched from NFS again). Returns Evicted. OSError: ENOENT (no dataset matches; a
    path inside a dataset is not one: see cache_evict_keys), EPERM, ENOTSUP."""
    dataset = os.fsencode(dataset)
    if b"\0" in dataset or len(dataset) >= EVICT_PREFIX_MAX:
        raise ValueError("bad dataset name %r" % dataset)
    if not mount_path and not dataset.startswith(b"/"):
        raise ValueError("a dataset name is absolute ('/EXPORT/DIR'), got %r; "
                         "mount_path=True for a path of the mount" % dataset)
    return _evict(target, EVICT_MOUNT_PATH if mount_path else 0, dataset)


def cache_purge(target):
    """SHARDFS_IOC_CACHE_EVICT with EVICT_ALL: evict every cached object of the mount.
    Returns Evicted."""
    return _evict(target, EVICT_ALL, b"")


def cache_key(path):
    """The cache key of the current version of a file on the mount, as 16 bytes: its
    xattr user.shardfs.key (32 hex digits; reading it opens nothing and fetches
    nothing; a symlink is not followed). path: a path, or a file object / descriptor.
    OSError(ENODATA): the file has none (a mount without cache_dir, not a regular file)."""
    if isinstance(path, (str, bytes, os.PathLike)):
        v = os.getxattr(path, XATTR_KEY, follow_symlinks=False)
    else:
        v = os.getxattr(_fd(path), XATTR_KEY)
    try:
        if len(v) != 32:
            raise ValueError
        return bytes.fromhex(v.decode("ascii"))
    except ValueError:
        raise OSError(errno.ENODATA, "no cache key in %s: %r" % (XATTR_KEY, v)) from None


def _key_bytes(key):
    if isinstance(key, str):
        key = bytes.fromhex(key)
    elif isinstance(key, (bytes, bytearray)) and len(key) == 32:
        key = bytes.fromhex(key.decode("ascii"))  # the xattr's value as it is
    key = bytes(key)
    if len(key) != 16:
        raise ValueError("a cache key is 16 bytes (or 32 hex digits), got %d bytes" % len(key))
    return key


def cache_evict_keys(target, keys):
    """SHARDFS_IOC_CACHE_EVICT_KEYS: evict single file versions by cache key (what
    shardfs-cache does for a path inside a dataset):

        shardfs.cache_evict_keys(mnt, [shardfs.cache_key(p) for p in paths])

    keys: 16-byte keys (cache_key()) or their 32 hex digits, any number (sent
    CACHE_EVICT_KEYS_MAX to an ioctl); keys not cached are skipped. A key names one
    version: a file changed on the server since it was read has another. Returns
    Evicted (datasets 0, the sums of every batch); an OSError stops at its batch, the
    batches before it stay evicted."""
    keys = [_key_bytes(k) for k in keys]
    objects = nbytes = disk = 0
    if not keys:
        return Evicted(0, 0, 0, 0)
    with _TargetFd(target) as fd:
        for i in range(0, len(keys), CACHE_EVICT_KEYS_MAX):
            batch = keys[i:i + CACHE_EVICT_KEYS_MAX]
            buf = bytearray(struct.pack(CACHE_EVICT_KEYS_FMT, CACHE_EVICT_KEYS_SIZE, len(batch),
                                        0, 0, 0, 0, 0, 0, 0, b"".join(batch)))
            v = struct.unpack(CACHE_EVICT_KEYS_FMT, _ioctl(fd, IOC_CACHE_EVICT_KEYS, buf))
            objects, nbytes, disk = objects + v[2], nbytes + v[3], disk + v[4]
    return Evicted(0, objects, nbytes, disk)


# --- epoch hints: the order of the coming reads --------------------------------
# SHARDFS_IOC_HINT_*: a list of items (whole files or byte ranges, paths
# relative to the mount's root) that the daemon fetches ahead, in order. The
# list belongs to the open file the calls are made on and goes away when it
# is closed; a new list on the same open file replaces the old one.
#
# An item is packed once into its record (the bytes it takes in an APPEND
# buffer: fixed part, path, zeros up to a multiple of 8); sending a list is
# then slicing a list of records into batches and joining each batch.

HintStatus = collections.namedtuple(
    "HintStatus", "active n_items position fetched_items fetched_bytes read_items "
    "wasted_bytes cached_items unknown_items denied_items")
HintStatus.__doc__ = (
    "Progress of the active hint list of an open file (all zero without one): active "
    "(items remain to be fetched or read), n_items in the list, position (items done "
    "with: read, skipped or dropped), fetched_items / fetched_bytes ahead, read_items "
    "(of those, read), wasted_bytes (fetched and dropped unread), and the items skipped: "
    "cached_items (already cached), unknown_items (missing, not a file, out of range), "
    "denied_items (the caller may not read them).")

# The fixed part ("0s" of path[] would take an argument of its own).
_HINT_ITEM = struct.Struct("=" + "".join(f for n, f in _FIELDS["shardfs_hint_item"] if n != "path"))
_HINT_PAD = tuple(bytes(k) for k in range(8))
_hint_file_hdrs = {}  # path_len -> the fixed part of a whole-file item
_FS_ENCODING, _FS_ERRORS = sys.getfilesystemencoding(), sys.getfilesystemencodeerrors()


def _hint_path(path):
    """path (str, bytes, os.PathLike) as the bytes an item carries; ValueError when
    the ABI would refuse it."""
    if isinstance(path, str):
        p = path.encode(_FS_ENCODING, _FS_ERRORS)
    elif isinstance(path, bytes):
        p = path
    else:
        p = os.fsencode(path)  # TypeError for what is not a path
    n = len(p)
    why = None
    if n == 0:
        why = "empty path"
    elif n > HINT_PATH_MAX:
        why = "path longer than %d bytes" % HINT_PATH_MAX
    elif p[0] == 0x2f:
        why = "absolute path (paths are relative to the mount's root)"
    elif p[-1] == 0x2f:
        why = "path ends in '/'"
    elif b"//" in p:
        why = "doubled '/' in path"
    elif b"\0" in p:
        why = "NUL in path"
    elif (p[0] == 0x2e or b"/." in p) and any(c in (b".", b"..") for c in p.split(b"/")):
        why = "'.' or '..' component in path"
    if why:
        raise ValueError("%s: %r" % (why, path))
    return p


def _hint_record(path, offset=None, length=None):
    """The packed item for a whole file (offset None) or for the range [offset,
    offset + length) of it. ValueError for a malformed one."""
    p = _hint_path(path)
    n = len(p)
    if offset is None:
        hdr = _hint_file_hdrs.get(n)
        if hdr is None:
            hdr = _hint_file_hdrs[n] = _HINT_ITEM.pack(HINT_ITEM_SIZE + n + (-n) % 8, n,
                                                       HINT_FILE, 0, 0, 0)
        return hdr + p + _HINT_PAD[(-n) % 8]
    offset, length = operator.index(offset), operator.index(length)
    if offset < 0 or length <= 0 or offset + length > 1 << 64:
        raise ValueError("bad range (offset %d, length %d) of %r: offset >= 0, length > 0"
                         % (offset, length, path))
    return (_HINT_ITEM.pack(HINT_ITEM_SIZE + n + (-n) % 8, n, HINT_RANGE, 0, offset, length)
            + p + _HINT_PAD[(-n) % 8])


def _hint_records(items):
    """Records of items (paths, or (path, offset, length)); ValueError naming the first
    malformed item."""
    out = []
    append, rec, hdrs, pad = out.append, _hint_record, _hint_file_hdrs, _HINT_PAD
    for i, it in enumerate(items):
        if type(it) is str:
            # The common item, a plain relative path, without a call: what
            # _hint_path would accept, or the general way below.
            p = it.encode(_FS_ENCODING, _FS_ERRORS)
            n = len(p)
            if (0 < n <= HINT_PATH_MAX and p[0] != 0x2f and p[0] != 0x2e and p[-1] != 0x2f
                    and b"//" not in p and b"/." not in p and b"\0" not in p):
                hdr = hdrs.get(n)
                if hdr is not None:
                    append(hdr + p + pad[-n % 8])
                    continue
        try:
            if isinstance(it, (tuple, list)):
                if len(it) != 3:
                    raise ValueError("expected a path or (path, offset, length), got %r"
                                     % (it,))
                append(rec(*it))
            else:
                append(rec(it))
        except (ValueError, TypeError) as e:
            raise type(e)("hint item %d: %s" % (i, e)) from None
    return out


def _hint_fd(target):
    if isinstance(target, (str, bytes, os.PathLike)):
        raise TypeError("a hint list lives as long as the open file it was sent on: pass "
                        "an open file or descriptor on the mount, e.g. "
                        "os.open(shardfs.find_mount(path), os.O_RDONLY | os.O_DIRECTORY), "
                        "not a path")
    return _fd(target)


def _hint_cancel(fd):
    _ioctl(fd, IOC_HINT_CANCEL, bytearray(struct.pack(HINT_CANCEL_FMT, HINT_CANCEL_SIZE,
                                                      0, 0, 0)))


def _hint_send(fd, records):
    """BEGIN, APPEND records (packed items, in order) in as few batches as fit, COMMIT;
    returns the n_items COMMIT answers. No records: CANCEL, 0. On any failure after
    BEGIN the lists are cancelled (the active one too: it was the order of another
    epoch) and the error raised; OSError(E2BIG) where the list is longer than BEGIN's
    max_items, before any APPEND."""
    if not records:
        _hint_cancel(fd)
        return 0
    buf = bytearray(HINT_BEGIN_SIZE)
    struct.pack_into("=I", buf, 0, HINT_BEGIN_SIZE)
    max_items = struct.unpack(HINT_BEGIN_FMT, _ioctl(fd, IOC_HINT_BEGIN, buf))[2]
    try:
        if max_items and len(records) > max_items:
            raise OSError(errno.E2BIG, "%d hint items, the mount takes %d per list"
                          % (len(records), max_items))
        # ends[k]: bytes of records[0..k]; a batch from record a takes every record
        # that ends within HINT_BUF bytes of where a begins.
        ends = list(itertools.accumulate(map(len, records)))
        app = bytearray(HINT_APPEND_SIZE)
        zeros = bytes(HINT_BUF)
        a, base = 0, 0
        while a < len(records):
            b = bisect.bisect_right(ends, base + HINT_BUF, a)
            assert b > a  # one item takes at most 24 + 4095 + 7 bytes
            used = ends[b - 1] - base
            struct.pack_into(HINT_APPEND_HDR_FMT, app, 0, HINT_APPEND_SIZE, b - a, used,
                             0, 0, 0)
            h = HINT_APPEND_HDR_SIZE
            app[h:h + used] = b"".join(records[a:b])
            app[h + used:] = zeros[used:]
            _ioctl(fd, IOC_HINT_APPEND, app)
            a, base = b, ends[b - 1]
        buf = bytearray(HINT_COMMIT_SIZE)
        struct.pack_into("=I", buf, 0, HINT_COMMIT_SIZE)
        return struct.unpack(HINT_COMMIT_FMT, _ioctl(fd, IOC_HINT_COMMIT, buf))[2]
    except BaseException:
        try:
            _hint_cancel(fd)
        except OSError:
            pass
        raise


def hint(target, items):
    """SHARDFS_IOC_HINT_BEGIN/APPEND/COMMIT: tell the mount the order of the coming
    reads; the daemon fetches the items ahead, in that order, following the reads.

        fd = os.open(shardfs.find_mount(path), os.O_RDONLY | os.O_DIRECTORY)
        shardfs.hint(fd, ["train/a.jpg", ("shards/s0.rec", 4096, 81920), ...])

    target: an open file object or descriptor on the mount (its root directory, or
    any file); not a path: the list belongs to that open file, replaces the list it
    had, and goes away when it is closed, so keep it open while the reads go on.
    items: in reading order, each a path (str, bytes or os.PathLike, relative to the
    mount's root: no leading '/', no '.' or '..' component, no doubled '/') for the
    whole file, or (path, offset, length) for a byte range (offset >= 0, length > 0).
    Items are checked and packed before any ioctl: ValueError (TypeError) names the
    first malformed one. They go out in as few APPEND calls as fit. No items: the
    open file's list is cancelled.

    Returns the number of items in the list now active. Paths that do not exist or
    that the caller may not read do not fail the list (hint_status counts them).
    OSError: E2BIG (more than HINT_MAX_ITEMS items), ENOTTY (not on a shardfs mount,
    or a daemon without hints), EINVAL, ENOMEM; after a failure the open file has no
    list."""
    fd = _hint_fd(target)
    return _hint_send(fd, _hint_records(items))


def hint_cancel(target):
    """SHARDFS_IOC_HINT_CANCEL: drop the open file's hint lists (pending and active);
    prefetches in flight finish. target: an open file object or descriptor."""
    _hint_cancel(_hint_fd(target))


def hint_status(target):
    """SHARDFS_IOC_HINT_STATUS: a HintStatus of the open file's active list (all zero
    without one). target: an open file object or descriptor."""
    buf = bytearray(HINT_STATUS_SIZE)
    struct.pack_into("=I", buf, 0, HINT_STATUS_SIZE)
    v = struct.unpack(HINT_STATUS_FMT, _ioctl(_hint_fd(target), IOC_HINT_STATUS, buf))
    return HintStatus(bool(v[1]), *v[2:11])


def _mountinfo_fstype(dev):
    """The filesystem type of device `dev` in /proc/self/mountinfo, or None."""
    want = "%d:%d" % (os.major(dev), os.minor(dev))
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split(" ")
                if len(parts) > 2 and parts[2] == want and "-" in parts:
                    return parts[parts.index("-") + 1]
    except OSError:
        pass
    return None


def find_mount(path):
    """The mountpoint of the shardfs mount holding path (a file or directory on it):
    the highest directory above it on the same device (st_dev), symlinks resolved.
    The mount is checked to be shardfs by its type in /proc/self/mountinfo
    (fuse.shardfs), or, without mountinfo or for a plain "fuse" type, by
    SHARDFS_IOC_QUERY on its root.
    OSError(ENOTTY) when it is not one; OSError from stat for a path that cannot
    be reached."""
    cur = os.path.realpath(path)
    dev = os.stat(cur).st_dev
    while True:
        parent = os.path.dirname(cur)
        if parent == cur or os.stat(parent).st_dev != dev:
            break
        cur = parent
    fstype = _mountinfo_fstype(dev)
    if fstype in (None, "fuse"):  # no mountinfo, or a FUSE mount made without subtype
        fd = os.open(cur, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            query(fd)
            return cur
        except OSError as e:
            raise OSError(errno.ENOTTY, "%s is not on a shardfs mount (its mount at %s "
                          "answers no SHARDFS_IOC_QUERY: %s)" % (path, cur, e.strerror)) \
                from None
        finally:
            os.close(fd)
    if fstype != FSTYPE:
        raise OSError(errno.ENOTTY, "%s is not on a shardfs mount (%s mounted at %s)"
                      % (path, fstype, cur))
    return cur


# --- CUDA memory: the allocation behind a tensor -----------------------------
# The driver library is loaded only here, with dlopen, when a CUDA tensor is
# registered (a process holding one has it). libcuda.so.1, never the
# toolkit's link-time stub libcuda.so.

CudaAllocation = collections.namedtuple(
    "CudaAllocation", "ipc_handle gpu_uuid offset length alloc_size device base ptr")
CudaAllocation.__doc__ = ("A CUDA view and the cudaMalloc allocation holding it: what "
                          "register_cuda needs, plus the device ordinal, base and view pointers.")

_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_libcuda = None


def _cuda():
    global _libcuda
    if _libcuda is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise OSError(errno.EOPNOTSUPP, "no CUDA driver library (libcuda.so.1): %s" % e)
        for name, args in (("cuInit", [ctypes.c_uint]),
                           ("cuDeviceGet", [ctypes.POINTER(ctypes.c_int), ctypes.c_int]),
                           ("cuDevicePrimaryCtxRetain", [ctypes.POINTER(ctypes.c_void_p),
                                                         ctypes.c_int]),
                           ("cuDevicePrimaryCtxRelease_v2", [ctypes.c_int]),
                           ("cuCtxPushCurrent_v2", [ctypes.c_void_p]),
                           ("cuCtxPopCurrent_v2", [ctypes.POINTER(ctypes.c_void_p)]),
                           ("cuPointerGetAttribute", [ctypes.c_void_p, ctypes.c_int,
                                                      ctypes.c_uint64]),
                           ("cuMemGetAddressRange_v2", [ctypes.POINTER(ctypes.c_uint64),
                                                        ctypes.POINTER(ctypes.c_size_t),
                                                        ctypes.c_uint64]),
                           ("cuIpcGetMemHandle", [ctypes.c_char_p, ctypes.c_uint64]),
                           ("cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, ctypes.c_int
        try:
            fn = lib.cuDeviceGetUuid_v2  # CUDA >= 11.4: MIG instances get their own UUID
        except AttributeError:
            fn = lib.cuDeviceGetUuid
        fn.argtypes, fn.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
        lib.sfs_get_uuid = fn
        _libcuda = lib
    return _libcuda


_CU_ERRORS = {1: "CUDA_ERROR_INVALID_VALUE", 3: "CUDA_ERROR_NOT_INITIALIZED",
              34: "CUDA_ERROR_STUB_LIBRARY", 35: "CUDA_ERROR_INSUFFICIENT_DRIVER",
              100: "CUDA_ERROR_NO_DEVICE", 101: "CUDA_ERROR_INVALID_DEVICE",
              201: "CUDA_ERROR_INVALID_CONTEXT", 801: "CUDA_ERROR_NOT_SUPPORTED"}


def _cu_check(lib, rc, what, errno_value=errno.EINVAL, hint=""):
    if rc != 0:
        name = ctypes.c_char_p()
        if lib.cuGetErrorName(rc, ctypes.byref(name)) != 0 or not name.value:
            name.value = _CU_ERRORS.get(rc, "CUDA error").encode()
        raise OSError(errno_value, "%s: %s (%d)%s" % (what, name.value.decode(), rc, hint))


def _tensor_view(tensor):
    """(ptr, nbytes, device ordinal or None) of a contiguous CUDA tensor/array."""
    if hasattr(tensor, "data_ptr") and hasattr(tensor, "is_cuda"):  # PyTorch
        if not tensor.is_cuda:
            raise ValueError("not a CUDA tensor (device %s)" % tensor.device)
        if not tensor.is_contiguous():
            raise ValueError("tensor is not contiguous")
        return tensor.data_ptr(), tensor.numel() * tensor.element_size(), tensor.device.index
    cai = getattr(tensor, "__cuda_array_interface__", None)  # CuPy, Numba, ...
    if cai is None:
        raise TypeError("expected a PyTorch CUDA tensor or an object with "
                        "__cuda_array_interface__, got %r" % type(tensor).__name__)
    itemsize = int(cai["typestr"][2:])  # "<f4", "|u1", ...
    if cai.get("strides") is not None:
        expect, contiguous = itemsize, True
        for dim, st in zip(reversed(cai["shape"]), reversed(cai["strides"])):
            if dim != 1 and st != expect:
                contiguous = False
            expect *= dim
        if not contiguous:
            raise ValueError("array is not C-contiguous")
    n = itemsize
    for d in cai["shape"]:
        n *= d
    dev = getattr(getattr(tensor, "device", None), "id", None)  # CuPy
    return cai["data"][0], n, dev


def cuda_allocation(tensor):
    """Find the cudaMalloc allocation behind a PyTorch CUDA tensor or a CuPy (any
    __cuda_array_interface__) array: base and size with cuMemGetAddressRange, its IPC
    handle with cuIpcGetMemHandle, the GPU's UUID. Returns a CudaAllocation.

    Memory that CUDA IPC cannot export (the VMM API, cudaMallocAsync pools, PyTorch's
    expandable_segments) raises OSError(EOPNOTSUPP)."""
    ptr, nbytes, device = _tensor_view(tensor)
    if nbytes == 0:
        raise ValueError("empty tensor")
    lib = _cuda()
    _cu_check(lib, lib.cuInit(0), "cuInit", errno.EOPNOTSUPP)
    if device is None:
        ordinal = ctypes.c_int(-1)
        _cu_check(lib, lib.cuPointerGetAttribute(ctypes.byref(ordinal),
                                                 _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr),
                  "cuPointerGetAttribute(DEVICE_ORDINAL)")
        device = ordinal.value
    dev = ctypes.c_int()
    _cu_check(lib, lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet(%d)" % device)
    ctx = ctypes.c_void_p()
    # The framework's context (the device's primary context) may not be current on
    # this thread: make it so for the two calls that need one.
    _cu_check(lib, lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
              "cuDevicePrimaryCtxRetain")
    try:
        _cu_check(lib, lib.cuCtxPushCurrent_v2(ctx), "cuCtxPushCurrent")
        try:
            base, size = ctypes.c_uint64(), ctypes.c_size_t()
            _cu_check(lib, lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size),
                                                       ptr), "cuMemGetAddressRange")
            handle = ctypes.create_string_buffer(64)
            _cu_check(lib, lib.cuIpcGetMemHandle(handle, base.value), "cuIpcGetMemHandle",
                      errno.EOPNOTSUPP,
                      " - this memory cannot be exported with CUDA IPC (VMM, cudaMallocAsync "
                      "pools or PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True); allocate "
                      "the staging buffer with the default allocator")
        finally:
            lib.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
    finally:
        lib.cuDevicePrimaryCtxRelease_v2(dev)
    uuid = ctypes.create_string_buffer(16)
    _cu_check(lib, lib.sfs_get_uuid(uuid, dev), "cuDeviceGetUuid")
    offset = ptr - base.value
    if offset < 0 or offset + nbytes > size.value:
        raise ValueError("view [%#x, +%d) is outside its allocation [%#x, +%d)"
                         % (ptr, nbytes, base.value, size.value))
    return CudaAllocation(handle.raw, uuid.raw, offset, nbytes, size.value, device,
                          base.value, ptr)


def register_tensor(f, tensor):
    """Register a contiguous PyTorch CUDA tensor or CuPy array as a staging target:
    region offset 0 is the tensor's first byte, its length the tensor's bytes. Keep
    the tensor (and the allocation behind it: no torch.cuda.empty_cache() that could
    free it) alive while registered. Returns the region id."""
    a = cuda_allocation(tensor)
    return register_cuda(f, a.ipc_handle, a.gpu_uuid, a.offset, a.length, a.alloc_size)


# --- shared memory -------------------------------------------------------------

class ShmRegion:
    """A POSIX shared-memory buffer of `size` bytes, created for this process
    (/dev/shm/<name>, mode 0600, must not exist) and registered as a staging target
    of the open file `f`:

        with ShmRegion(f, 1 << 26) as r:
            placed, path = r.stage([(0, file_offset, length), ...])
            r.buf[0:length]        # the bytes (a memoryview of the mapping)

    Attributes: name ('/...'), size, region_id, map (the mmap), buf (a memoryview).
    close() (or leaving the with block) unregisters, unmaps and unlinks; a region
    still registered when the file is closed is dropped by the mount anyway.
    """

    def __init__(self, f, size, name=None):
        if size <= 0:
            raise ValueError("size must be positive")
        self.f, self.size, self.region_id = f, int(size), None
        self.name = _shm_name(name or "shardfs-%d-%s" % (os.getpid(), secrets.token_hex(6)))
        self.map = self.buf = None
        path = "/dev/shm" + self.name.decode()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        self._path = path
        try:
            os.ftruncate(fd, self.size)
            # Reserve the pages now: a full /dev/shm fails here with ENOSPC instead of
            # SIGBUS in whoever first writes to the mapping.
            try:
                os.posix_fallocate(fd, 0, self.size)
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                    raise
            self.map = mmap.mmap(fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            self.buf = memoryview(self.map)
            self.region_id = register_shm(f, self.name, 0, self.size)
        except BaseException:
            self._release()
            raise
        finally:
            os.close(fd)

    def stage(self, ranges):
        """stage() into this region; returns (placed, path)."""
        return stage(self.f, self.region_id, ranges)

    def _release(self):
        if self.buf is not None:
            try:
                self.buf.release()
            except BufferError:  # something (numpy, ...) still exports it
                pass
            self.buf = None
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # the caller still holds a view: the GC unmaps it
                pass
            self.map = None
        if self._path:
            try:
                os.unlink(self._path)
            except FileNotFoundError:
                pass
            self._path = None

    def close(self):
        """Unregister (ignoring a file already closed), unmap, unlink. Idempotent."""
        if self.region_id is not None:
            rid, self.region_id = self.region_id, None
            try:
                unregister(self.f, rid)
            except (OSError, ValueError):
                pass
        self._release()

    _path = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
