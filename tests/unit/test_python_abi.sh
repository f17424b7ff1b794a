#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Python module's copy of the ioctl ABI against the C compiler's: runs
# abi_dump (sizes, offsets, ioctl numbers and constants of
# fs/shardfs_ioctl.h as JSON) and compares every entry with what
# tools/python/shardfs computes with struct.calcsize. TAP; exit 77 without
# python3.
#   test_python_abi.sh PATH/TO/abi_dump
set -u
SRC_ROOT=${SFS_SRC_ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DUMP=${1:-$SRC_ROOT/build/tests/unit/abi_dump}
command -v python3 >/dev/null || { echo "1..0 # SKIP no python3"; exit 77; }
[ -x "$DUMP" ] || { echo "Bail out! abi_dump not built: $DUMP"; exit 1; }
json=$("$DUMP") || { echo "Bail out! abi_dump failed"; exit 1; }

PYTHONPATH=$SRC_ROOT/tools/python${PYTHONPATH:+:$PYTHONPATH} python3 - "$json" <<'PY'
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
    print("not ok 1 - import shardfs from tools/python: %r" % e)
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
          "SHARDFS_CACHE_EVICT_KEYS_MAX": shardfs.CACHE_EVICT_KEYS_MAX}
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
                   c["structs"]["shardfs_cache_evict_keys"]["size"])):
    ok(struct.calcsize(fmt) == size and fmt.startswith("="),
       "format %s... packs %d bytes with no implicit padding" % (fmt[:12], size))
ok(shardfs.STAGE_HDR_SIZE == c["structs"]["shardfs_stage"]["fields"]["ranges"][0],
   "stage header ends where ranges[] begins")
ok(shardfs.CACHE_LIST_HDR_SIZE == c["structs"]["shardfs_cache_list"]["fields"]["buf"][0],
   "cache list header ends where buf[] begins")
ok(shardfs.CACHE_ENTRY_SIZE == c["structs"]["shardfs_cache_entry"]["fields"]["name"][0],
   "a cache entry's name follows its fixed part (sizeof == offsetof(name))")

print("1..%d" % n)
if failed:
    print("# %d of %d failed" % (failed, n))
sys.exit(1 if failed else 0)
PY
