# SPDX-License-Identifier: Apache-2.0
"""Staging ioctls end to end (shm path) against a live mount; TAP lines out.

usage: stage_check.py MOUNT EXPORT PHASE   (PHASE: cold | warm | uid)
Uses the trainer-side module tools/client/python/shardfs, so it tests that too.
"""
import errno
import fcntl
import multiprocessing.shared_memory as msm
import os
import struct
import threading
import sys

import shardfs as S
import tapcheck as T

mnt, exp, phase = sys.argv[1:4]
T.prefix = phase + ": "
ok, raises = T.ok, T.raises


ref = open(os.path.join(exp, "big"), "rb").read()
small = open(os.path.join(exp, "small"), "rb").read()


def exact(buf, rng, placed, data):
    return all(bytes(buf[ro:ro + p]) == data[fo:fo + p] for (ro, fo, _), p in zip(rng, placed))


if phase in ("cold", "warm"):
    with open(os.path.join(mnt, "big"), "rb") as f:
        q = S.query(f)
        ok(q.abi_version == S.ABI_VERSION and q.caps & S.CAP_SHM, "QUERY: ABI %d, caps %#x" % (q.abi_version, q.caps))
        ok(q.n_gpus == len(q.gpu_uuids), "QUERY: %d GPUs" % q.n_gpus)
        with S.ShmRegion(f, 8 << 20) as r:
            rng = [(0, 0, 1 << 20),                      # aligned, one chunk
                   (1 << 20, 1, 100),                    # unaligned
                   (2 << 20, (1 << 20) - 7, 20),         # across a chunk boundary
                   (3 << 20, (3 << 20) + 5, 3 << 20),    # several chunks
                   (7 << 20, len(ref) - 10, 1000)]       # end of file
            placed, path = r.stage(rng)
            ok(placed == [1 << 20, 100, 20, 3 << 20, 10], "placed %r (short only at EOF)" % (placed,))
            ok(exact(r.buf, rng, placed, ref), "bytes exact: aligned, unaligned, crossing chunks, EOF")
            want = S.PATH_NFS if phase == "cold" else S.PATH_CACHE
            ok(path & want and path & S.PATH_SHM_COPY, "path %s" % (S.path_names(path),))
            ok(r.stage([(0, len(ref) + 100, 10)])[0] == [0], "a range past EOF places 0")
            if phase == "warm":
                # Another reader fetches an uncached file from NFS meanwhile:
                # each STAGE's path comes from its own bytes, all cached.
                done = threading.Event()

                def read_other():
                    with open(os.path.join(mnt, "other"), "rb", buffering=0) as o:
                        while o.read(1 << 20):
                            pass
                    done.set()
                t = threading.Thread(target=read_other)
                t.start()
                paths = []
                while not done.is_set() or not paths:
                    paths.append(r.stage([(0, (len(paths) % 16) << 20, 1 << 20)])[1])
                t.join()
                ok(all(p & S.PATH_CACHE and not p & S.PATH_NFS for p in paths),
                   "%d STAGEs of cached bytes beside a reader fetching from NFS: all 'cache' (%s)"
                   % (len(paths), sorted(set(S.path_names(p) for p in paths))))
            many = [(i * 1000, i * 7777, 1000) for i in range(200)]
            placed, _ = r.stage(many)
            ok(placed == [1000] * 200 and exact(r.buf, many, placed, ref), "a batch of 200 ranges (several ioctls)")
            ok(raises(lambda: r.stage([((8 << 20) - 5, 0, 10)]), errno.ERANGE), "ERANGE: range outside the region")
            ok(raises(lambda: S.stage(f, 999, [(0, 0, 1)]), errno.ENOENT), "ENOENT: no such region")
            with open(os.path.join(mnt, "big"), "rb") as g:
                ok(raises(lambda: S.stage(g, r.region_id, [(0, 0, 1)]), errno.ENOENT),
                   "ENOENT: a region belongs to the open file that registered it")
            rid = r.region_id
        ok(raises(lambda: S.stage(f, rid, [(0, 0, 1)]), errno.ENOENT), "ENOENT after unregister")
        m = msm.SharedMemory(create=True, size=1 << 20)
        try:
            rid = S.register_shm(f, m.name, 4096, 65536)
            placed, _ = S.stage(f, rid, [(0, 12345, 65536)])
            ok(placed == [65536] and bytes(m.buf[4096:4096 + 65536]) == ref[12345:12345 + 65536],
               "a multiprocessing.SharedMemory object at offset 4096")
            ok(raises(lambda: S.register_shm(f, m.name, 0, 2 << 20), errno.ERANGE), "ERANGE: region outside its object")
            # The owner shrinks its object under a region: an error or a
            # grown object, never a dead daemon.
            os.ftruncate(m._fd, 0)
            try:
                S.stage(f, rid, [(0, 0, 4096)])
            except OSError:
                pass
            ok(os.path.exists(os.path.join(mnt, ".shardfs", "stats")), "a shrunk shm object does not hurt the daemon")
        finally:
            m.close()
            m.unlink()
        ok(raises(lambda: S.register_shm(f, "/no-such-shardfs-object", 0, 10), errno.ENOENT), "ENOENT: no such shm object")
        # (the module checks names itself; send a bad one raw)
        ok(raises(lambda: S._register(f, S.REGION_SHM, 0, 10, shm_name=b"/a/b"), errno.EINVAL),
           "EINVAL: bad shm name")
        ok(raises(lambda: S.register_cuda(f, b"\0" * 64, b"\1" * 16, 0, 10, 10), errno.EOPNOTSUPP)
           if q.n_gpus == 0 else True, "EOPNOTSUPP: CUDA region without a GPU")
        other = "/dev/shm/shardfs-check-other-%d" % os.getpid()
        fd = os.open(other, os.O_RDWR | os.O_CREAT, 0o600)
        os.ftruncate(fd, 4096)
        os.fchown(fd, 65534, 65534)
        os.close(fd)
        try:
            ok(raises(lambda: S.register_shm(f, os.path.basename(other), 0, 4096), errno.EPERM),
               "EPERM: another uid's shm object")
        finally:
            os.unlink(other)
        # Garbage structs, straight through fcntl.
        ioc = S.IOC_QUERY
        size = struct.calcsize(S.QUERY_FMT) if hasattr(S, "QUERY_FMT") else (ioc >> 16) & 0x3FFF
        bad = bytearray(size)
        struct.pack_into("=I", bad, 0, size + 8)
        ok(raises(lambda: fcntl.ioctl(f.fileno(), ioc, bad, True), errno.EINVAL), "EINVAL: wrong size field")
        bad = bytearray(size)
        struct.pack_into("=I", bad, 0, size)
        bad[-1] = 1
        ok(raises(lambda: fcntl.ioctl(f.fileno(), ioc, bad, True), errno.EINVAL), "EINVAL: reserved words not zero")
        ok(raises(lambda: fcntl.ioctl(f.fileno(), (3 << 30) | (64 << 16) | (ord("S") << 8) | 0x7F,
                                      bytearray(64), True), errno.ENOTTY), "ENOTTY: unknown ioctl")
    with open(os.path.join(mnt, "small"), "rb") as f:
        with S.ShmRegion(f, 1 << 16) as r:
            placed, _ = r.stage([(0, 0, 1 << 16)])
            ok(placed == [len(small)] and bytes(r.buf[:len(small)]) == small, "a small file: short at EOF, exact")
            regs = []
            try:
                for _ in range(q.max_regions + 1):
                    regs.append(S.register_shm(f, r.name, 0, 16))
                ok(False, "ENOSPC after max_regions")
            except OSError as e:
                ok(e.errno == errno.ENOSPC, "ENOSPC after %d regions" % (len(regs) + 1))
    try:
        S.query(open(os.path.join(mnt, ".shardfs/stats"), "rb"))
        ok(False, "ENOTTY on the stats file")
    except OSError as e:
        ok(e.errno == errno.ENOTTY, "ENOTTY on the stats file")
elif phase == "uid":
    # Root registers a region; a process of another uid (sharing the open
    # file) may not use it, and may register and use its own object.
    f = open(os.path.join(mnt, "big"), "rb")
    with S.ShmRegion(f, 1 << 20) as r:
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            res = []
            os.setgid(65534)
            os.setuid(65534)
            res.append(raises(lambda: S.stage(f, r.region_id, [(0, 0, 10)]), errno.EPERM))
            try:
                with S.ShmRegion(f, 1 << 20) as mine:
                    placed, _ = mine.stage([(0, 777, 4096)])
                    res.append(placed == [4096] and bytes(mine.buf[:4096]) == ref[777:777 + 4096])
            except OSError as e:
                print("# second uid:", e, flush=True)
                res.append(False)
            os.write(wfd, bytes(int(x) for x in res))
            os._exit(0)
        os.close(wfd)
        got = os.read(rfd, 16)
        os.waitpid(pid, 0)
        ok(len(got) == 2 and got[0] == 1, "EPERM: a second uid cannot use root's region")
        ok(len(got) == 2 and got[1] == 1, "a second uid stages into its own shm object")
    f.close()
T.done()
