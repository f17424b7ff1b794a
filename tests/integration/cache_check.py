# SPDX-License-Identifier: Apache-2.0
"""The cache calls of the Python module (cache_list, cache_evict, cache_purge,
cache_key, cache_evict_keys) against a live mount with a cache, beside what
shardfs-cache says; TAP lines out.

usage: cache_check.py MOUNT TOOL PHASE   (PHASE: list | keys | evict | uid | purge)
MOUNT holds datasets /ifs/shards (shards/s0..s3), /ifs/images (images/) and
/ifs (rootfile), all cached by the caller; TOOL is shardfs-cache.
"""
import errno
import json
import os
import subprocess
import sys

import shardfs as S
import tapcheck as T

mnt, tool, phase = sys.argv[1:4]
T.prefix = "python " + phase + ": "
ok, raises = T.ok, T.raises


def tool_list():
    """shardfs-cache --json list: (document, {id: the dataset as the module names it})."""
    j = json.loads(subprocess.run([tool, "--json", "list", mnt], check=True,
                                  stdout=subprocess.PIPE).stdout)
    return j, {d["id"]: S.CacheDataset(d["name"], d["id"], d["bytes"], d["files"],
                                       d["packed_files"], d["hit_bytes"], d["miss_bytes"],
                                       d["last_use"] or 0)
               for d in j["datasets"]}


def by_name(lst):
    return {d.name: d for d in lst}


if phase == "list":
    mine = S.cache_list(mnt)
    j, theirs = tool_list()
    ok(len(mine) == len(theirs) and {d.id: d for d in mine} == theirs,
       "cache_list(mountpoint): the datasets and numbers of shardfs-cache --json list (%d)"
       % len(mine), "module: %r\ntool:   %r" % (mine, sorted(theirs.values())))
    ok(mine.capacity_bytes == j["capacity_bytes"] and mine.used_bytes == j["used_bytes"],
       "capacity_bytes %d, used_bytes %d as the tool's" % (mine.capacity_bytes, mine.used_bytes),
       "tool: %r" % ((j["capacity_bytes"], j["used_bytes"]),))
    names = by_name(mine)
    ok({"/ifs/shards", "/ifs/images", "/ifs"} <= set(names)
       and all(names[n].bytes > 0 and names[n].last_use_s > 0 for n in names if n),
       "the three datasets, each with bytes and a last use", repr(sorted(names, key=str)))
    with open(os.path.join(mnt, "rootfile"), "rb") as f:
        ok(S.cache_list(f) == mine, "cache_list on a file object of a file on the mount")
        ok(S.cache_list(f.fileno()) == mine, "... on its file descriptor")
    ok(raises(lambda: S.cache_list(os.path.dirname(mnt)), errno.ENOTTY),
       "cache_list off the mount: OSError(ENOTTY)")
elif phase == "keys":
    s3 = os.path.join(mnt, "shards", "s3")
    key = S.cache_key(s3)
    hexkey = os.getxattr(s3, S.XATTR_KEY).decode()
    ok(len(key) == 16 and key.hex() == hexkey, "cache_key: 16 bytes, the xattr's %s" % hexkey)
    with open(s3, "rb") as f:
        ok(S.cache_key(f) == key, "cache_key of a file object")
    ok(raises(lambda: S.cache_key(os.path.join(mnt, "shards")), errno.ENODATA),
       "cache_key of a directory: OSError(ENODATA)")
    before = by_name(S.cache_list(mnt))["/ifs/shards"]
    r = S.cache_evict_keys(mnt, [key])
    ok(r.objects == 1 and r.bytes == 64 << 20 and r.datasets == 0,
       "cache_evict_keys of s3's key: 1 file, 64 MiB (%r)" % (r,))
    after = by_name(S.cache_list(mnt))["/ifs/shards"]
    _, theirs = tool_list()
    ok(after.objects == before.objects - 1 and after.bytes == before.bytes - (64 << 20)
       and theirs[after.id] == after,
       "... /ifs/shards lists one file and 64 MiB less, in the module and the tool",
       "before %r\nafter %r\ntool %r" % (before, after, theirs.get(after.id)))
    r = S.cache_evict_keys(mnt, [hexkey])
    ok(r == S.Evicted(0, 0, 0, 0), "the same key again (as hex): skipped, nothing evicted")
elif phase == "evict":
    before = by_name(S.cache_list(mnt))
    r = S.cache_evict(mnt, "/ifs/shards")
    b = before["/ifs/shards"]
    ok(r.datasets == 1 and r.objects == b.objects and r.bytes == b.bytes,
       "cache_evict /ifs/shards: 1 dataset, %d files, %d bytes (%r)" % (b.objects, b.bytes, r))
    j, theirs = tool_list()
    after = by_name(S.cache_list(mnt))
    ok("/ifs/shards" not in after and "/ifs/shards" not in [d["name"] for d in j["datasets"]],
       "/ifs/shards is gone from cache_list and from shardfs-cache --json list")
    img = before["/ifs/images"]
    ok(after.get("/ifs/images") == img and theirs.get(img.id) == img,
       "/ifs/images is untouched (module and tool)")
    r = S.cache_evict(mnt, "/ifs/shards")
    ok(r.datasets == 1 and r.objects == 0 and r.bytes == 0,
       "evicting it again: the name still matches, nothing evicted (%r)" % (r,))
    ok(raises(lambda: S.cache_evict(mnt, "/ifs/nothing"), errno.ENOENT),
       "a dataset nobody cached: OSError(ENOENT)")
    r = S.cache_evict(os.path.join(mnt, "images"), "images/", mount_path=True)
    ok(r.datasets == 1 and r.objects == img.objects and r.bytes == img.bytes,
       "cache_evict('images/', mount_path=True), issued on a directory: /ifs/images (%r)"
       % (r,))
    ok("/ifs/images" not in by_name(S.cache_list(mnt)), "/ifs/images is gone too")
    ok("/ifs/images" in by_name(S.cache_list(mnt, idle=True)),
       "cache_list(idle=True) still names it, with nothing cached")
elif phase == "uid":
    # The mount is allow_other: another uid reaches it, and is refused its cache.
    key = S.cache_key(os.path.join(mnt, "rootfile"))
    calls = (("cache_list", lambda: S.cache_list(mnt)),
             ("cache_evict", lambda: S.cache_evict(mnt, "/ifs")),
             ("cache_purge", lambda: S.cache_purge(mnt)),
             ("cache_evict_keys", lambda: S.cache_evict_keys(mnt, [key])))
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the errno of each call, 0 for none
        os.close(rfd)
        res = []
        try:
            os.setgid(65534)
            os.setuid(65534)
            for _, fn in calls:
                try:
                    fn()
                    res.append(0)
                except OSError as e:
                    res.append(e.errno)
        except Exception as e:
            print("# second uid:", e, flush=True)
        os.write(wfd, bytes(res))
        os._exit(0)
    os.close(wfd)
    got = list(os.read(rfd, 16))
    os.waitpid(pid, 0)
    ok(got == [errno.EPERM] * len(calls),
       "another uid: OSError(EPERM) from %s" % ", ".join(n for n, _ in calls),
       "errnos: %s" % ", ".join("%s %s" % (n, errno.errorcode.get(e, e))
                                 for (n, _), e in zip(calls, got)))
    ok(by_name(S.cache_list(mnt)).get("/ifs") is not None, "... and /ifs is still cached")
elif phase == "purge":
    before = S.cache_list(mnt)
    r = S.cache_purge(mnt)
    ok(r.objects == sum(d.objects for d in before) and r.bytes == sum(d.bytes for d in before),
       "cache_purge: every cached file (%r)" % (r,), repr(before))
    after = S.cache_list(mnt)
    j, _ = tool_list()
    # A purge names no dataset: the datasets' hit and miss counters stay, so one
    # may still be listed, with nothing cached.
    ok(not [d for d in after if d.bytes or d.objects] and after.used_bytes == 0
       and j["used_bytes"] == 0 and not [d for d in j["datasets"] if d["bytes"]],
       "after it nothing is cached, used_bytes 0 (module and tool)", repr(after))
else:
    print("usage: cache_check.py MOUNT TOOL list|keys|evict|uid|purge", file=sys.stderr)
    sys.exit(2)
T.done()
