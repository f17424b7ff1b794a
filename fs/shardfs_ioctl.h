/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs_ioctl.h — the ioctl ABI of a shardfs mount (installed as
 * <shardfs/shardfs_ioctl.h>). Issue an ioctl on a file opened on the mount.
 *
 * Rules of this ABI (FUSE allows only "restricted" ioctls): fixed-width
 * fields, 8-byte alignment, no pointers and no file descriptors inside, a
 * size field first so the struct can grow, reserved words that must be
 * zero. Refusals come back as errno values, never ENOSYS.
 */
#ifndef SHARDFS_IOCTL_H
#define SHARDFS_IOCTL_H

#include <linux/ioctl.h>
#include <stdint.h>

#define SHARDFS_IOC_MAGIC 'S'

/* SHARDFS_IOC_WARM: fetch the whole file into the local cache (whatever
 * prefetch_max says) and report progress. The first call starts the fetch;
 * every call returns immediately with the state so far, so a caller polls
 * until cached_bytes == file_bytes or SHARDFS_WARM_ACTIVE clears.
 * Errors: ENOTSUP (the mount has no cache_dir), EINVAL (bad size field or
 * reserved words not zero). */
struct shardfs_warm {
	uint32_t size;	       /* in: sizeof(struct shardfs_warm) */
	uint32_t flags;	       /* out: SHARDFS_WARM_* */
	uint64_t file_bytes;   /* out: size of the file version being cached */
	uint64_t cached_bytes; /* out: bytes of it in the cache now */
	uint64_t reserved[4];  /* in: zero */
};
#define SHARDFS_WARM_ACTIVE 0x1u /* chunks are still being fetched or written */

#define SHARDFS_IOC_WARM _IOWR(SHARDFS_IOC_MAGIC, 0x10, struct shardfs_warm)

/* The extended attribute every file on the mount answers with the bytes of
 * it in the local cache, as a decimal string. */
#define SHARDFS_XATTR_CACHED "user.shardfs.cached"

#endif
