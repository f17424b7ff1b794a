#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Python module's copy of the ioctl ABI against the C compiler's: runs
# abi_dump (sizes, offsets, ioctl numbers and constants of
# include/shardfs/shardfs_ioctl.h as JSON) and compares every entry with what
# tools/client/python/shardfs computes with struct.calcsize. TAP; exit 77 without
# python3.
#   test_python_abi.sh PATH/TO/abi_dump
set -u
SRC_ROOT=${SFS_SRC_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DUMP=${1:-$SRC_ROOT/build/tests/unit/abi_dump}
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 77; }
[ -x "$DUMP" ] || { echo "Bail out! abi_dump not built: $DUMP"; exit 1; }
json=$("$DUMP") || { echo "Bail out! abi_dump failed"; exit 1; }

PYTHONPATH=$SRC_ROOT/tools/client/python${PYTHONPATH:+:$PYTHONPATH} python3 - "$json" <<'PY'
import json
import sys

c = json.loads(sys.argv[1])
n = failed = 0


def ok(cond, what, detail=""):
    global n, failed
    n += 1
    print("%sok %d - %s" % ("" if cond else "not ", n, what))
    if not cond:
        failed += 1
        for line in str(detail).splitlines():
            print("#   " + line)


try:
    import shardfs
except Exception as e:  # the module itself is broken: one failure, the reason
    print("not ok 1 - import shardfs from tools/client/python: %r" % e)
    print("1..1")
    sys.exit(1)
ok(True, "import shardfs (no torch/cupy/CUDA needed)")

py = shardfs.abi_layout()
ok(sorted(py) == sorted(c["structs"]), "the same structs in C and Python",
   "C: %s\nPython: %s" % (sorted(c["structs"]), sorted(py)))
for name, cs in sorted(c["structs"].items()):
    ps = py.get(name, {"size": None, "fields": {}})
    ok(ps["size"] == cs["size"], "struct %s: sizeof %d" % (name, cs["size"]),
       "Python computes %s" % ps["size"])
    diff = ["%s: C %s, Python %s" % (f, cs["fields"].get(f), ps["fields"].get(f))
            for f in sorted(set(cs["fields"]) | set(ps["fields"]))
            if cs["fields"].get(f) != ps["fields"].get(f)]
    ok(not diff, "struct %s: every field at the same [offset, size]" % name, "\n".join(diff))
    ok(cs["size"] % 8 == 0 and cs["size"] <= 16383,
       "struct %s: a multiple of 8 bytes, within the FUSE ioctl limit" % name)

for name, v in sorted(c["ioctls"].items()):
    ok(shardfs.IOCTLS.get(name) == v, "%s = %#x" % (name, v),
       "Python computes %s" % (hex(shardfs.IOCTLS[name]) if name in shardfs.IOCTLS else None))
ok(sorted(shardfs.IOCTLS) == sorted(c["ioctls"]), "the same ioctls in C and Python")

consts = {"SHARDFS_IOC_MAGIC": shardfs.IOC_MAGIC, "SHARDFS_ABI_VERSION": shardfs.ABI_VERSION,
          "SHARDFS_CAP_SHM": shardfs.CAP_SHM, "SHARDFS_CAP_CUDA_IPC": shardfs.CAP_CUDA_IPC,
          "SHARDFS_CAP_WARM": shardfs.CAP_WARM, "SHARDFS_MAX_GPUS": shardfs.MAX_GPUS,
          "SHARDFS_REGION_SHM": shardfs.REGION_SHM, "SHARDFS_REGION_CUDA": shardfs.REGION_CUDA,
          "SHARDFS_STAGE_MAX_RANGES": shardfs.STAGE_MAX_RANGES,
          "SHARDFS_PATH_CACHE": shardfs.PATH_CACHE, "SHARDFS_PATH_NFS": shardfs.PATH_NFS,
          "SHARDFS_PATH_SHM_COPY": shardfs.PATH_SHM_COPY,
          "SHARDFS_PATH_CUDA_PINNED": shardfs.PATH_CUDA_PINNED,
          "SHARDFS_WARM_ACTIVE": shardfs.WARM_ACTIVE,
          "SHARDFS_CACHE_LIST_BUF": shardfs.CACHE_LIST_BUF,
          "SHARDFS_EVICT_ALL": shardfs.EVICT_ALL,
          "SHARDFS_EVICT_MOUNT_PATH": shardfs.EVICT_MOUNT_PATH,
          "SHARDFS_CACHE_EVICT_KEYS_MAX": shardfs.CACHE_EVICT_KEYS_MAX,
          "SHARDFS_HINT_MAX_ITEMS": shardfs.HINT_MAX_ITEMS, "SHARDFS_HINT_BUF": shardfs.HINT_BUF,
          "SHARDFS_HINT_FILE": shardfs.HINT_FILE, "SHARDFS_HINT_RANGE": shardfs.HINT_RANGE}
for name, v in sorted(c["constants"].items()):
    ok(consts.get(name) == v, "%s = %d" % (name, v), "Python has %s" % consts.get(name))
ok(shardfs.XATTR_CACHED == c["xattr_cached"], "SHARDFS_XATTR_CACHED = %s" % c["xattr_cached"])
ok(shardfs.XATTR_KEY == c["xattr_key"], "SHARDFS_XATTR_KEY = %s" % c["xattr_key"])

# What the module sends: packed structs of exactly the C size, size field first.
import struct
for fmt, size in ((shardfs.QUERY_FMT, c["structs"]["shardfs_query"]["size"]),
                  (shardfs.REGION_FMT, c["structs"]["shardfs_region"]["size"]),
                  (shardfs.STAGE_FMT, c["structs"]["shardfs_stage"]["size"]),
                  (shardfs.UNREGISTER_FMT, c["structs"]["shardfs_unregister"]["size"]),
                  (shardfs.WARM_FMT, c["structs"]["shardfs_warm"]["size"]),
                  (shardfs.CACHE_ENTRY_FMT, c["structs"]["shardfs_cache_entry"]["size"]),
                  (shardfs.CACHE_LIST_FMT, c["structs"]["shardfs_cache_list"]["size"]),
                  (shardfs.CACHE_EVICT_FMT, c["structs"]["shardfs_cache_evict"]["size"]),
                  (shardfs.CACHE_EVICT_KEYS_FMT,
                   c["structs"]["shardfs_cache_evict_keys"]["size"]),
                  (shardfs.HINT_ITEM_FMT, c["structs"]["shardfs_hint_item"]["size"]),
                  (shardfs.HINT_BEGIN_FMT, c["structs"]["shardfs_hint_begin"]["size"]),
                  (shardfs.HINT_APPEND_FMT, c["structs"]["shardfs_hint_append"]["size"]),
                  (shardfs.HINT_COMMIT_FMT, c["structs"]["shardfs_hint_commit"]["size"]),
                  (shardfs.HINT_CANCEL_FMT, c["structs"]["shardfs_hint_cancel"]["size"]),
                  (shardfs.HINT_STATUS_FMT, c["structs"]["shardfs_hint_status"]["size"])):
    ok(struct.calcsize(fmt) == size and fmt.startswith("="),
       "format %s... packs %d bytes with no implicit padding" % (fmt[:12], size))
ok(shardfs.STAGE_HDR_SIZE == c["structs"]["shardfs_stage"]["fields"]["ranges"][0],
   "stage header ends where ranges[] begins")
ok(shardfs.CACHE_LIST_HDR_SIZE == c["structs"]["shardfs_cache_list"]["fields"]["buf"][0],
   "cache list header ends where buf[] begins")
ok(shardfs.CACHE_ENTRY_SIZE == c["structs"]["shardfs_cache_entry"]["fields"]["name"][0],
   "a cache entry's name follows its fixed part (sizeof == offsetof(name))")
ok(shardfs.HINT_ITEM_SIZE == c["structs"]["shardfs_hint_item"]["fields"]["path"][0],
   "a hint item's path follows its fixed part (sizeof == offsetof(path))")
ok(shardfs.HINT_APPEND_HDR_SIZE == c["structs"]["shardfs_hint_append"]["fields"]["buf"][0],
   "hint append header ends where buf[] begins")

# The cache calls against a faked mount that writes and reads the structs at
# the C compiler's offsets: paging, deduplication by id, idle datasets, names,
# what evict and evict_keys send.
L, E = c["structs"]["shardfs_cache_list"]["fields"], c["structs"]["shardfs_cache_entry"]
EV, K = c["structs"]["shardfs_cache_evict"]["fields"], c["structs"]["shardfs_cache_evict_keys"]


def put(buf, fields, name, fmt, v, base=0):
    struct.pack_into("=" + fmt, buf, base + fields[name][0], v)


def get(buf, fields, name, fmt):
    return struct.unpack_from("=" + fmt, buf, fields[name][0])[0]


# (id, name, bytes, objects, packed, hit, miss, last_use_s); id 2 is idle
DS = [(1, b"/ifs/shards", 4 << 26, 4, 0, 10, 20, 1700000000),
      (2, b"/ifs/old", 0, 0, 0, 0, 0, 1600000000),
      (3, b"/ifs/images", 21 << 20, 220, 220, 5, 0, 1700000001),
      (0, None, 5000, 1, 1, 0, 0, 0)]
calls = []


def fake_ioctl(f, cmd, buf):
    calls.append((cmd, bytes(buf)))
    if cmd == shardfs.IOC_CACHE_LIST:
        assert len(buf) == c["structs"]["shardfs_cache_list"]["size"]
        start = get(buf, L, "start", "I")
        # two per page; the second page repeats id 3 (a dataset registered between calls)
        page = DS[start:start + 2] if start == 0 else [DS[2]] + DS[start:start + 2]
        at = L["buf"][0]
        for d in page:
            name = d[1] or b""
            eb = (E["size"] + len(name) + 1 + 7) & ~7
            for (k, fmt), v in zip((("entry_bytes", "H"), ("name_len", "H"), ("id", "I"),
                                    ("bytes", "Q"), ("objects", "Q"),
                                    ("packed_objects", "Q"), ("hit_bytes", "Q"),
                                    ("miss_bytes", "Q"), ("last_use_s", "q")),
                                   (eb, len(name)) + d[:1] + d[2:]):
                put(buf, E["fields"], k, fmt, v, at)
            buf[at + E["fields"]["name"][0]:at + E["fields"]["name"][0] + len(name)] = name
            at += eb
        put(buf, L, "n_entries", "I", len(page))
        put(buf, L, "total", "I", len(DS) + (1 if start else 0))
        put(buf, L, "capacity_bytes", "Q", 2 << 30)
        put(buf, L, "used_bytes", "Q", 12345)
    elif cmd == shardfs.IOC_CACHE_EVICT:
        assert len(buf) == c["structs"]["shardfs_cache_evict"]["size"]
        put(buf, EV, "datasets", "I", 1)
        put(buf, EV, "objects", "Q", 4)
        put(buf, EV, "bytes", "Q", 4 << 26)
        put(buf, EV, "disk_bytes", "Q", 4 << 26)
    elif cmd == shardfs.IOC_CACHE_EVICT_KEYS:
        assert len(buf) == K["size"]
        nk = get(buf, K["fields"], "n_keys", "I")
        put(buf, K["fields"], "objects", "Q", nk)
        put(buf, K["fields"], "bytes", "Q", 100 * nk)
        put(buf, K["fields"], "disk_bytes", "Q", 0)
    else:
        raise OSError(25, "unexpected ioctl %#x" % cmd)
    return buf


real_ioctl, shardfs._ioctl = shardfs._ioctl, fake_ioctl
try:
    lst = shardfs.cache_list(7)
    ok([d.id for d in lst] == [1, 3, 0] and lst[0].name == "/ifs/shards"
       and lst[2].name is None and lst[1] == shardfs.CacheDataset("/ifs/images", *DS[2][:1],
                                                                  *DS[2][2:]),
       "cache_list: every page read, each dataset once, idle ones left out", repr(lst))
    ok(lst.capacity_bytes == 2 << 30 and lst.used_bytes == 12345
       and all(get(b, L, "size", "I") == c["structs"]["shardfs_cache_list"]["size"]
               for _, b in calls) and [get(b, L, "start", "I") for _, b in calls] == [0, 2],
       "cache_list: size field, start per page, capacity and used bytes",
       "%r %r" % (lst, [get(b, L, "start", "I") for _, b in calls]))
    ok([d.id for d in shardfs.cache_list(7, idle=True)] == [1, 2, 3, 0],
       "cache_list(idle=True) keeps idle datasets")
    del calls[:]
    r = shardfs.cache_evict(7, "/ifs/shards")
    b = calls[0][1]
    ok(r == shardfs.Evicted(1, 4, 4 << 26, 4 << 26) and get(b, EV, "flags", "I") == 0
       and b[EV["prefix"][0]:EV["prefix"][0] + 12] == b"/ifs/shards\0"
       and get(b, EV, "size", "I") == c["structs"]["shardfs_cache_evict"]["size"],
       "cache_evict: the name in prefix, flags 0; Evicted from the answer", repr(r))
    del calls[:]
    shardfs.cache_evict(7, "imagenet/", mount_path=True)
    shardfs.cache_purge(7)
    ok([get(b, EV, "flags", "I") for _, b in calls] == [shardfs.EVICT_MOUNT_PATH,
                                                         shardfs.EVICT_ALL]
       and calls[0][1][EV["prefix"][0]:EV["prefix"][0] + 10] == b"imagenet/\0"
       and calls[1][1][EV["prefix"][0]] == 0,
       "cache_evict(mount_path=True) and cache_purge: their flags")
    bad = 0
    for args in (("shards",), ("/a\0b",), ("/" + "x" * 4096,)):
        try:
            shardfs.cache_evict(7, *args)
        except ValueError:
            bad += 1
    ok(bad == 3, "cache_evict: relative, NUL, too long names raise ValueError")
    del calls[:]
    keys = [bytes([i % 256]) * 16 for i in range(2500)]
    keys[1] = keys[1].hex()  # hex digits are keys too
    r = shardfs.cache_evict_keys(7, keys)
    kf = K["fields"]
    ok(r == shardfs.Evicted(0, 2500, 250000, 0)
       and [get(b, kf, "n_keys", "I") for _, b in calls] == [1000, 1000, 500]
       and calls[0][1][kf["keys"][0] + 16:kf["keys"][0] + 32] == b"\x01" * 16
       and calls[2][1][kf["keys"][0]:kf["keys"][0] + 16] == bytes([2000 % 256]) * 16,
       "cache_evict_keys: batches of CACHE_EVICT_KEYS_MAX at keys[], sums", repr(r))
    del calls[:]
    ok(shardfs.cache_evict_keys(7, []) == shardfs.Evicted(0, 0, 0, 0) and not calls,
       "cache_evict_keys of no keys: no ioctl")
finally:
    shardfs._ioctl = real_ioctl

# hint(): what goes out, read back at the C compiler's offsets by a faked mount
# that keeps the pending list as a daemon would and checks each batch.
HS = c["structs"]
HI, HA = HS["shardfs_hint_item"], HS["shardfs_hint_append"]["fields"]
hint_log = []  # (ioctl name, detail)
hint_mount = {"pending": None, "active": [], "max_items": shardfs.HINT_MAX_ITEMS,
              "fail_append": 0, "appends": 0, "decode": True}
HNAME = {shardfs.IOC_HINT_BEGIN: "BEGIN", shardfs.IOC_HINT_APPEND: "APPEND",
         shardfs.IOC_HINT_COMMIT: "COMMIT", shardfs.IOC_HINT_CANCEL: "CANCEL",
         shardfs.IOC_HINT_STATUS: "STATUS"}


def reserved_zero(buf, name):
    f = HS[name]["fields"]
    for k in f:
        if k.startswith("reserved") and any(buf[f[k][0]:f[k][0] + f[k][1]]):
            return False
    return True


def decode_batch(buf):
    """[(path, kind, offset, length)] of one APPEND; AssertionError when malformed."""
    items, at = [], HA["buf"][0]
    n, used = get(buf, HA, "n_items", "I"), get(buf, HA, "used", "I")
    end = at + used
    assert used <= HA["buf"][1] and used % 8 == 0, used
    for _ in range(n):
        f = HI["fields"]
        ib = struct.unpack_from("=H", buf, at + f["item_bytes"][0])[0]
        pl = struct.unpack_from("=H", buf, at + f["path_len"][0])[0]
        kind = struct.unpack_from("=H", buf, at + f["kind"][0])[0]
        r0 = struct.unpack_from("=H", buf, at + f["reserved0"][0])[0]
        off = struct.unpack_from("=Q", buf, at + f["offset"][0])[0]
        ln = struct.unpack_from("=Q", buf, at + f["length"][0])[0]
        p0 = at + f["path"][0]
        assert ib % 8 == 0 and ib == (HI["size"] + pl + 7) & ~7 and at + ib <= end, (ib, pl)
        assert r0 == 0 and 1 <= pl <= 4095 and not any(buf[p0 + pl:at + ib])
        assert (kind == 0 and off == 0 and ln == 0) or (kind == 1 and ln > 0), (kind, off, ln)
        items.append((bytes(buf[p0:p0 + pl]).decode(), kind, off, ln))
        at += ib
    assert at == end, (at, end)
    return items


def fake_hint_ioctl(f, cmd, buf):
    name = HNAME.get(cmd)
    assert name, "unexpected ioctl %#x" % cmd
    st = {"BEGIN": "shardfs_hint_begin", "APPEND": "shardfs_hint_append",
          "COMMIT": "shardfs_hint_commit", "CANCEL": "shardfs_hint_cancel",
          "STATUS": "shardfs_hint_status"}[name]
    assert len(buf) == HS[st]["size"] and get(buf, HS[st]["fields"], "size", "I") == len(buf)
    assert reserved_zero(buf, st), name
    hm = hint_mount
    if name == "BEGIN":
        hm["pending"] = []
        put(buf, HS[st]["fields"], "max_items", "Q", hm["max_items"])
        put(buf, HS[st]["fields"], "window", "Q", 1024)
        hint_log.append((name, None))
    elif name == "APPEND":
        if hm["pending"] is None:
            raise OSError(errno.EINVAL, "APPEND without BEGIN")
        hm["appends"] += 1
        if hm["appends"] == hm["fail_append"]:
            raise OSError(errno.ENOMEM, "fake")
        if hm["decode"]:
            got = decode_batch(buf)
        else:
            got = [None] * get(buf, HA, "n_items", "I")
        hm["pending"] += got
        hint_log.append((name, (len(got), get(buf, HA, "used", "I"))))
    elif name == "COMMIT":
        if hm["pending"] is None:
            raise OSError(errno.EINVAL, "COMMIT without BEGIN")
        hm["active"], hm["pending"] = hm["pending"], None
        put(buf, HS[st]["fields"], "n_items", "Q", len(hm["active"]))
        hint_log.append((name, len(hm["active"])))
    elif name == "CANCEL":
        hm["active"], hm["pending"] = [], None
        hint_log.append((name, None))
    else:
        put(buf, HS[st]["fields"], "active", "I", 1)
        for k, fld in enumerate(("n_items", "position", "fetched_items", "fetched_bytes",
                                 "read_items", "wasted_bytes", "cached_items",
                                 "unknown_items", "denied_items")):
            put(buf, HS[st]["fields"], fld, "Q", 100 + k)
    return buf


import errno
import os
import pathlib
import tempfile
import time

shardfs._ioctl = fake_hint_ioctl
try:
    items = ["train/n01/a.JPEG", b"train/n01/b.JPEG", pathlib.PurePosixPath("x/.hidden/c"),
             ("shards/s0.rec", 0, 4096), ("shards/s0.rec", 1 << 40, 1), "..a/b..", "a" * 4095]
    want = [("train/n01/a.JPEG", 0, 0, 0), ("train/n01/b.JPEG", 0, 0, 0),
            ("x/.hidden/c", 0, 0, 0), ("shards/s0.rec", 1, 0, 4096),
            ("shards/s0.rec", 1, 1 << 40, 1), ("..a/b..", 0, 0, 0), ("a" * 4095, 0, 0, 0)]
    r = shardfs.hint(7, items)
    ok(r == len(items) and hint_mount["active"] == want
       and [x[0] for x in hint_log] == ["BEGIN", "APPEND", "COMMIT"],
       "hint: BEGIN, one APPEND, COMMIT; files and ranges at the C offsets, in order",
       "%r\n%r" % (hint_log, hint_mount["active"]))

    # Many items of varied path lengths: every one back in order, each batch as
    # full as the next item allows (as few APPENDs as fit).
    del hint_log[:]
    many = ["d%d/%s.jpg" % (i % 1000, "x" * (i * 7919 % 200)) for i in range(20000)]
    many[5::7] = [(p, i, 1 + i) for i, p in enumerate(many[5::7])]
    r = shardfs.hint(7, many)
    back = [x[0] if x[1] == 0 else (x[0], x[2], x[3]) for x in hint_mount["active"]]
    sizes = [(24 + len(p if isinstance(p, str) else p[0]) + 7) & ~7 for p in many]
    expect, fill = 1, 0
    for sz in sizes:
        if fill + sz > shardfs.HINT_BUF:
            expect, fill = expect + 1, 0
        fill += sz
    appends = [d for nm, d in hint_log if nm == "APPEND"]
    ok(r == 20000 and back == many, "hint: 20000 items back in order (files and ranges)")
    ok(len(appends) == expect and sum(u for _, u in appends) == sum(sizes),
       "hint: %d APPENDs, each batch filled greedily" % expect, "%d APPENDs" % len(appends))

    # Malformed items: ValueError / TypeError before any ioctl.
    del hint_log[:]
    bad = 0
    cases = ["/abs/a.jpg", "a/../b", "../a", "a/..", "./a", "a/./b", ".", "", "a//b", "a/",
             "a\0b", "x" * 4096, ("a", -1, 10), ("a", 0, 0), ("a", 5, -3), ("a", 1),
             ("a", 2 ** 64 - 1, 2), ("/a", 0, 1), 3.5, ("a", 1.5, 2)]
    for it in cases:
        try:
            shardfs.hint(7, ["ok/first.jpg", it])
        except (ValueError, TypeError) as e:
            bad += "hint item 1" in str(e)
    ok(bad == len(cases) and not hint_log,
       "hint: malformed items (absolute, '.', '..', empty, '//', trailing '/', NUL, too long, "
       "bad ranges, not a path) raise naming the item, no ioctl sent",
       "%d of %d; %r" % (bad, len(cases), hint_log))
    try:
        shardfs.hint("/mnt/x", ["a"])
        ok(False, "hint on a path raises TypeError")
    except TypeError:
        ok(not hint_log, "hint on a path raises TypeError (the list lives with an open file)")

    # A refused APPEND: CANCEL, the error raised, no list left.
    hint_mount.update(fail_append=hint_mount["appends"] + 2)
    try:
        shardfs.hint(7, many)
        ok(False, "hint: a refused APPEND raises")
    except OSError as e:
        ok(e.errno == errno.ENOMEM and [x[0] for x in hint_log] ==
           ["BEGIN", "APPEND", "CANCEL"] and hint_mount["active"] == []
           and hint_mount["pending"] is None,
           "hint: APPEND refused -> CANCEL, OSError(ENOMEM), no list", repr(hint_log))
    hint_mount.update(fail_append=0)

    # More items than BEGIN's max_items: E2BIG before any APPEND.
    del hint_log[:]
    hint_mount["max_items"] = 5
    try:
        shardfs.hint(7, many[:6])
        ok(False, "hint: over max_items raises")
    except OSError as e:
        ok(e.errno == errno.E2BIG and [x[0] for x in hint_log] == ["BEGIN", "CANCEL"],
           "hint: over BEGIN's max_items -> OSError(E2BIG), CANCEL, no APPEND", repr(hint_log))
    hint_mount["max_items"] = shardfs.HINT_MAX_ITEMS

    del hint_log[:]
    ok(shardfs.hint(7, []) == 0 and [x[0] for x in hint_log] == ["CANCEL"],
       "hint of no items: CANCEL, 0")
    s = shardfs.hint_status(7)
    ok(s == shardfs.HintStatus(True, *range(100, 109)), "hint_status: every field", repr(s))

    # Speed: an ImageNet-sized epoch (1.28 M files) packed and sent.
    hint_mount["decode"] = False
    paths = ["train/n%08d/n%08d_%d.JPEG" % (i % 1000, i % 1000, i) for i in range(1281167)]
    t0 = time.monotonic()
    r = shardfs.hint(7, paths)
    dt = time.monotonic() - t0
    print("# 1281167 items packed and sent in %.2f s" % dt)
    ok(r == 1281167 and dt < 20, "hint: 1.28 M items within seconds", "%.1f s" % dt)
finally:
    shardfs._ioctl = real_ioctl

# find_mount: the real walk and check, on mounts that are not shardfs.
with tempfile.TemporaryDirectory() as d:
    fm = []
    for p in (d, "/proc/self/status"):
        try:
            shardfs.find_mount(p)
        except OSError as e:
            fm.append(e.errno == errno.ENOTTY and "not on a shardfs mount" in str(e))
    ok(fm == [True, True], "find_mount: a temp dir and /proc are not shardfs (ENOTTY)", repr(fm))
    ok(shardfs._mountinfo_fstype(os.stat("/proc").st_dev) == "proc",
       "find_mount reads the type of a device from /proc/self/mountinfo")

print("1..%d" % n)
if failed:
    print("# %d of %d failed" % (failed, n))
sys.exit(1 if failed else 0)
PY
