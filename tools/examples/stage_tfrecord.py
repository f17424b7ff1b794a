#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""stage_tfrecord.py: stage the records of a TFRecord shard on a shardfs mount into GPU
memory (PyTorch or CuPy), or into a shared-memory buffer where there is no GPU.

    stage_tfrecord.py [--target auto|cuda|shm] [--batch-mib N] [--verify K] SHARD
    stage_tfrecord.py --make-sample OUT [--records N] [--max-kib K] [--seed S]

The shard is walked reading only the record headers with os.pread: every record is
  uint64 length | uint32 masked crc32c(length) | data[length] | uint32 masked crc32c(data)
(little-endian), and the length CRC of every header is checked. The records' data ranges
are then packed into batches of up to --batch-mib MiB and placed by the mount (ioctl
SHARDFS_IOC_STAGE, bytes verified against the local cache's checksums, fetched from NFS
first where missing) into one staging buffer: a CUDA tensor registered with its IPC
handle, or a /dev/shm buffer. K records spread over the shard (first and last included)
are checked against os.pread and their data CRC.

--make-sample writes a valid TFRecord file of random records (to put in a test export).
Exit status: 0 all placed and verified, 1 a failure, 2 bad usage, 77 SHARD is not on a
shardfs mount with staging.

Owns: the walk of the shard, the batches and the staging buffer it allocates. Does not
own: the bytes' placement and their checks (the mount's), the ioctl layout (the shardfs
module). Threading: one thread.
"""
import argparse
import errno
import os
import random
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client", "python"))
import shardfs  # noqa: E402  (tools/client/python in the tree, or installed)

MIB = 1 << 20

# --- TFRecord framing: masked CRC-32C --------------------------------------------------

try:
    from crc32c import crc32c as _crc32c  # the `crc32c` package, when installed
except ImportError:
    _crc32c = None
_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _TABLE.append(_c)


def crc32c(data):
    if _crc32c:
        return _crc32c(data)
    crc, table = 0xFFFFFFFF, _TABLE
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def walk(fd, size):
    """[(data_offset, length)] of every record, from the headers alone."""
    records, off = [], 0
    while off < size:
        head = os.pread(fd, 12, off)
        if len(head) < 12:
            raise ValueError("truncated record header at offset %d" % off)
        length, lcrc = struct.unpack("<QI", head)
        if masked_crc(head[:8]) != lcrc:
            raise ValueError("not a TFRecord: bad length CRC at offset %d" % off)
        if off + 12 + length + 4 > size:
            raise ValueError("record at offset %d runs past the end of the file" % off)
        records.append((off + 12, length))
        off += 12 + length + 4
    return records


def make_sample(path, n, max_kib, seed):
    rnd = random.Random(seed)
    tmp = path + ".tmp"
    total = 0
    with open(tmp, "wb") as out:
        for _ in range(n):
            data = rnd.randbytes(rnd.randint(1, max_kib << 10))
            head = struct.pack("<Q", len(data))
            out.write(head + struct.pack("<I", masked_crc(head)) + data
                      + struct.pack("<I", masked_crc(data)))
            total += len(data)
    os.rename(tmp, path)
    print("%s: %d records, %d data bytes" % (path, n, total))


# --- staging targets -------------------------------------------------------------------

class ShmTarget:
    name = "shm"

    def __init__(self, f, nbytes):
        self.region = shardfs.ShmRegion(f, nbytes)
        self.region_id = self.region.region_id

    def read(self, off, n):
        return bytes(self.region.buf[off:off + n])

    def close(self):
        self.region.close()


class CudaTarget:
    """A uint8 CUDA buffer from PyTorch (or CuPy), registered with the mount."""

    def __init__(self, f, nbytes, q):
        try:
            import torch
            if not torch.cuda.is_available():
                raise ImportError("PyTorch sees no GPU")
            self.buf = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            self.name = "cuda (PyTorch, %s)" % torch.cuda.get_device_name(self.buf.device)
            self._host = lambda t: t.cpu().numpy().tobytes()
        except ImportError:
            import cupy  # raises ImportError if neither is there
            self.buf = cupy.empty(nbytes, dtype=cupy.uint8)
            self.name = "cuda (CuPy, device %d)" % self.buf.device.id
            self._host = lambda a: cupy.asnumpy(a).tobytes()
        alloc = shardfs.cuda_allocation(self.buf)
        if alloc.gpu_uuid not in q.gpu_uuids:
            raise OSError(errno.EINVAL, "the mount's daemon cannot see this GPU")
        self.region_id = shardfs.register_cuda(f, alloc.ipc_handle, alloc.gpu_uuid,
                                               alloc.offset, alloc.length, alloc.alloc_size)
        self.f = f

    def read(self, off, n):
        return self._host(self.buf[off:off + n])

    def close(self):
        try:
            shardfs.unregister(self.f, self.region_id)
        finally:
            del self.buf


def open_target(kind, f, nbytes, q):
    if kind in ("auto", "cuda"):
        why = None
        if not q.caps & shardfs.CAP_CUDA_IPC or q.n_gpus == 0:
            why = "the mount has no usable GPU"
        else:
            try:
                return CudaTarget(f, nbytes, q)
            except (ImportError, OSError) as e:
                why = str(e) or type(e).__name__
        if kind == "cuda":
            raise SystemExit("stage_tfrecord: --target cuda: %s" % why)
        print("# no GPU target (%s): staging into shared memory" % why)
    if not q.caps & shardfs.CAP_SHM:
        raise SystemExit("stage_tfrecord: the mount cannot stage into shared memory")
    return ShmTarget(f, nbytes)


# --- main ------------------------------------------------------------------------------

def stage_shard(a):
    with open(a.shard, "rb") as f:
        fd = f.fileno()
        try:
            q = shardfs.query(f)
        except OSError as e:
            if e.errno == errno.ENOTTY:
                print("stage_tfrecord: %s is not on a shardfs mount with staging" % a.shard,
                      file=sys.stderr)
                return 77
            raise
        size = os.fstat(fd).st_size
        t0 = time.monotonic()
        records = walk(fd, size)
        t_walk = time.monotonic() - t0
        if not records:
            print("%s: no records" % a.shard)
            return 0
        biggest = max(n for _, n in records)
        buf_bytes = max(a.batch_mib * MIB, biggest)
        # Records to check: K spread over the shard, the first and the last among them.
        k = min(a.verify, len(records))
        check = {round(i * (len(records) - 1) / max(k - 1, 1)) for i in range(k)}

        target = open_target(a.target, f, buf_bytes, q)
        print("%s: %d records, %d data bytes (largest %d), headers walked in %.3f s; "
              "target %s, buffer %d bytes" % (a.shard, len(records), sum(n for _, n in records),
                                              biggest, t_walk, target.name, buf_bytes))
        staged = batches = 0
        paths = 0
        bad = []
        t_stage = 0.0
        try:
            i = 0
            while i < len(records):
                ranges, first, used = [], i, 0  # pack records into the buffer
                while i < len(records) and used + records[i][1] <= buf_bytes:
                    ranges.append((used, records[i][0], records[i][1]))
                    used += records[i][1]
                    i += 1
                t1 = time.monotonic()
                placed, path = shardfs.stage(f, target.region_id, ranges)
                t_stage += time.monotonic() - t1
                batches += 1
                paths |= path
                staged += sum(placed)
                for j, ((ro, fo, n), p) in enumerate(zip(ranges, placed)):
                    if p != n:
                        bad.append("record %d: %d of %d bytes placed" % (first + j, p, n))
                    elif first + j in check:
                        got = target.read(ro, n)
                        crc = struct.unpack("<I", os.pread(fd, 4, fo + n))[0]
                        if got != os.pread(fd, n, fo):
                            bad.append("record %d: staged bytes differ from pread" % (first + j))
                        elif masked_crc(got) != crc:
                            bad.append("record %d: data CRC mismatch" % (first + j))
                # ... a trainer would decode / augment the batch on the GPU here ...
        finally:
            target.close()
        print("staged %d bytes in %d batches in %.3f s: %.0f MB/s, path %s"
              % (staged, batches, t_stage, staged / 1e6 / t_stage if t_stage else 0,
                 shardfs.path_names(paths)))
        for b in bad:
            print("stage_tfrecord: " + b, file=sys.stderr)
        if bad:
            return 1
        print("%d records verified against pread and their CRC" % len(check))
        return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("shard", nargs="?", help="a TFRecord file on a shardfs mount")
    ap.add_argument("--target", choices=("auto", "cuda", "shm"), default="auto",
                    help="where to stage (auto: a GPU if the mount and PyTorch/CuPy have one)")
    ap.add_argument("--batch-mib", type=int, default=64, help="staging buffer size (MiB)")
    ap.add_argument("--verify", type=int, default=8, metavar="K",
                    help="records checked against pread (default 8)")
    ap.add_argument("--make-sample", metavar="OUT", help="write a sample TFRecord file")
    ap.add_argument("--records", type=int, default=256, help="--make-sample: records")
    ap.add_argument("--max-kib", type=int, default=256, help="--make-sample: largest record")
    ap.add_argument("--seed", type=int, default=1, help="--make-sample: random seed")
    a = ap.parse_args()
    if a.make_sample:
        make_sample(a.make_sample, a.records, a.max_kib, a.seed)
        return 0
    if not a.shard:
        ap.error("no shard given")
    if a.batch_mib < 1:
        ap.error("--batch-mib must be at least 1")
    try:
        return stage_shard(a)
    except (OSError, ValueError) as e:
        print("stage_tfrecord: %s: %s" % (a.shard, e), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
