# SPDX-License-Identifier: Apache-2.0
"""The data sets, written once and reused by later runs: shards of random bytes,
datasets (a top-level directory of the export), ImageNet-like trees, record
files and their shuffled record tables, local-disk copies, and the readers'
list files. Each is published whole (rename() or a .complete marker written
last), so that no run sees one half made.

Does not choose sizes (the modes do). Threading: the main thread.
"""

import os
import random
import shutil
import subprocess

from .common import ARGS, BenchError, GiB, KB, MiB, log, run


def publish(path, fill):
    """Make path by fill(tmp), then rename(): a run never sees a file half
    made, by itself (interrupted) or by another run (the pid in the name)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fill(tmp)
    os.rename(tmp, path)


def random_files(d, names, mib):
    """The files names of mib MiB of /dev/urandom in directory d, each written
    unless a file of that size is there. Returns names."""
    os.makedirs(d, exist_ok=True)
    for name in names:
        path = os.path.join(d, name)
        if not (os.path.exists(path) and os.path.getsize(path) == mib * MiB):
            def fill(tmp):
                with open(tmp, "wb") as out:
                    subprocess.run(["head", "-c", str(mib * MiB), "/dev/urandom"], stdout=out,
                                   check=True)
            publish(path, fill)
    return names


def make_files(export, prefix, n, mib):
    """n shards of mib MiB in EXPORT/shards, named PREFIX-I-of-N.bin."""
    return random_files(os.path.join(export, "shards"),
                        [f"{prefix}-{i:05d}-of-{n:05d}.bin" for i in range(n)], mib)


def make_dataset(export, name, n, mib):
    """n files of mib MiB in EXPORT/name (a dataset: a top-level directory)."""
    return random_files(os.path.join(export, name), [f"{name}-{i:05d}.bin" for i in range(n)],
                        mib)


def copy_tree_once(src, dst, rels):
    """Copy the files rels from src to dst (a local-disk baseline) unless a
    complete copy is there; publishes the copy by rename()."""
    marker = os.path.join(dst, ".complete")
    if os.path.exists(marker):
        return
    tmp = dst + f".tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(dst, ignore_errors=True)
    for r in rels:
        d = os.path.join(tmp, os.path.dirname(r))
        os.makedirs(d, exist_ok=True)
        shutil.copyfile(os.path.join(src, r), os.path.join(tmp, r))
    with open(os.path.join(tmp, ".complete"), "w") as f:
        f.write("\n")
    run(["sync"])
    os.rename(tmp, dst)


def make_tree(export, name, specs, seed):
    """Write the files specs = [(relpath, size)] under export/name once, with
    bytes from one random stream seeded by seed (so: the same bytes every
    time); a .complete marker written last says it is whole."""
    top = os.path.join(export, name)
    marker = os.path.join(top, ".complete")
    if os.path.exists(marker):
        return top
    log(f"writing {len(specs)} files to {top}")
    shutil.rmtree(top, ignore_errors=True)
    rng = random.Random(seed)
    made = set()
    for rel, size in specs:
        d = os.path.dirname(rel)
        if d not in made:
            os.makedirs(os.path.join(top, d), exist_ok=True)
            made.add(d)
        with open(os.path.join(top, rel), "wb") as f:
            f.write(rng.randbytes(size))
    with open(marker, "w") as f:
        f.write(f"seed {seed} files {len(specs)}\n")
    return top


def imagenet_specs(n, dirs, seed):
    """ImageNet's train/ layout: n JPEG-sized files (100-130 KB) in dirs
    class folders. Returns [(relpath, size)] in creation order."""
    rng = random.Random(f"sizes-{seed}")
    per = -(-n // dirs)
    return [(f"n{i // per:08d}/n{i // per:08d}_{i:07d}.JPEG", rng.randint(100 * KB, 130 * KB))
            for i in range(n)]


def write_list(path, lines):
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def record_table(file_bytes, rec_kb, seed):
    """Records of rec_kb +- 10 KB laid end to end (an offset table, as in an
    MXNet .idx), then shuffled with seed. Returns [(offset, length)]."""
    rng = random.Random(f"records-{seed}")
    recs, off = [], 0
    while True:
        ln = rng.randint((rec_kb - 10) * KB, (rec_kb + 10) * KB)
        if off + ln > file_bytes:
            break
        recs.append((off, ln))
        off += ln
    random.Random(seed).shuffle(recs)
    return recs


def make_record_file(export, gib, size):
    """The record file of --random-records (and --hints): size bytes of one
    seeded random stream at the export's root, written once. Returns its name."""
    name = f"train-{gib:g}g-s{ARGS.seed}.rec"
    path = os.path.join(export, name)
    if not (os.path.exists(path) and os.path.getsize(path) == size):
        log(f"writing {path}")
        rng = random.Random(f"rec-{ARGS.seed}")

        def fill(tmp):
            with open(tmp, "wb") as f:
                for off in range(0, size, 4 * MiB):
                    f.write(rng.randbytes(min(4 * MiB, size - off)))
        publish(path, fill)
    return name


def record_setup(cluster):
    """The record file of --random-records (--rr-gib) in the export and on
    local disk, and its shuffled record list: (name, size, local_dir, list
    path, records, bytes served)."""
    size = int(ARGS.rr_gib * GiB) // MiB * MiB
    if size < MiB:
        raise BenchError("--rr-gib too small")
    name = make_record_file(cluster.export, ARGS.rr_gib, size)
    path = os.path.join(cluster.export, name)
    local_dir = os.path.join(ARGS.cache_base, "local-rr")
    os.makedirs(local_dir, exist_ok=True)
    local = os.path.join(local_dir, name)
    if not (os.path.exists(local) and os.path.getsize(local) == size):
        log(f"local-disk copy {local}")
        publish(local, lambda tmp: shutil.copyfile(path, tmp))
        run(["sync"])
    recs = record_table(size, ARGS.rr_record_kb, ARGS.seed)
    lst = os.path.join(os.path.dirname(ARGS.mnt), "rr-list")
    write_list(lst, [f"{o} {ln}" for o, ln in recs])
    return name, size, local_dir, lst, len(recs), sum(ln for _, ln in recs)


def local_shards(export, names, mib):
    """Copies of the shards on local disk (ARGS.cache_base/local): the warm
    baseline's files."""
    local = os.path.join(ARGS.cache_base, "local")
    os.makedirs(local, exist_ok=True)
    for n in names:
        dst = os.path.join(local, n)
        if not (os.path.exists(dst) and os.path.getsize(dst) == mib * MiB):
            shutil.copyfile(os.path.join(export, "shards", n), dst)
    run(["sync"])
    return local
