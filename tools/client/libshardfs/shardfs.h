/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs.h — the trainer-side helper library over the ioctls of a shardfs
 * mount (installed as <shardfs/shardfs.h>, next to <shardfs/shardfs_ioctl.h>;
 * link with -lshardfs).
 *
 * Owns: filling the ioctl structs (size field, zeroed reserved words),
 * splitting a long list of ranges into as many SHARDFS_IOC_STAGE calls as
 * it takes, packing an epoch's hint list into as few SHARDFS_IOC_HINT_APPEND
 * batches as it fits in, and creating the POSIX shared-memory objects that
 * a trainer registers as targets. Does not own: the regions and hint lists
 * (they belong to the open file on the mount and die with it) or any GPU
 * memory (the caller exports its allocation with cudaIpcGetMemHandle and
 * passes the 64 bytes; this library never links CUDA).
 *
 * Threading: no state of its own; every function may be called from any
 * thread. Concurrent ioctls on one open file are serialised by the daemon.
 *
 * Every function returns 0 on success or -errno on failure (the errno values
 * of the ioctls are listed in shardfs_ioctl.h; ENOTTY means "not a file on
 * a shardfs mount, or a daemon without staging").
 */
#ifndef SHARDFS_H
#define SHARDFS_H

#include <stddef.h>
#include <stdint.h>

#include <shardfs/shardfs_ioctl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the mount behind `fd` can do: fills *out (size set, reserved zeroed
 * before the call). Returns 0 or -errno. */
int shardfs_query(int fd, struct shardfs_query *out);

/*
 * Register `length` bytes at `offset` of the shared-memory object `shm_name`
 * (as for shm_open(3); a missing leading '/' is added) as a staging target
 * of the open file `fd`. The object must belong to the caller's uid and
 * hold offset + length bytes. Sets *region_id. Returns 0, -ENAMETOOLONG for
 * a name of 255 bytes or more, or the ioctl's -errno.
 */
int shardfs_register_shm(int fd, const char *shm_name, uint64_t offset, uint64_t length,
			 uint64_t *region_id);

/*
 * Register a view of `length` bytes at `offset` inside a CUDA allocation of
 * `alloc_size` bytes: `ipc_handle64` is the 64-byte cudaIpcMemHandle_t of
 * the allocation's *base* (cudaIpcGetMemHandle / cuIpcGetMemHandle), `uuid`
 * the GPU's 16-byte UUID (cudaDeviceProp.uuid / cuDeviceGetUuid). The caller
 * must keep the allocation alive until the region is unregistered or the
 * file closed. Sets *region_id. Returns 0 or -errno (-EOPNOTSUPP where the
 * daemon has no usable GPU).
 */
int shardfs_register_cuda(int fd, const void *ipc_handle64, const uint8_t uuid[16], uint64_t offset,
			  uint64_t length, uint64_t alloc_size, uint64_t *region_id);

/*
 * Place ranges[0..n) of the open file into the region: for each range,
 * `length` bytes from `file_offset` of the file to `region_offset` of the
 * region; sets ranges[i].placed (short only at end of file). Any n: the
 * ranges go out in batches of at most SHARDFS_STAGE_MAX_RANGES; if the
 * daemon refuses a batch and its QUERY answer shows the batch was over its
 * max_ranges or max_stage_bytes, the rest is re-split to those limits
 * (a range longer than max_stage_bytes goes in several pieces). n == 0
 * places nothing and returns 0.
 *
 * Sets *bytes_placed (the sum of placed) and *path (the OR of the
 * SHARDFS_PATH_* bits of every batch); either may be NULL. On failure the
 * ranges of the batches that had succeeded keep their placed values, the
 * others read 0, and *bytes_placed counts what was placed. Returns 0 or
 * the -errno of the failing batch.
 */
int shardfs_stage(int fd, uint64_t region_id, struct shardfs_range *ranges, unsigned n,
		  uint64_t *bytes_placed, uint32_t *path);

/*
 * A staging target that outlives a restart of the mount's serving process
 * (shardfs(8), CRASHES AND RESTARTS: a registration goes with the process
 * that took it, and STAGE then answers -EOWNERDEAD). The caller keeps the
 * struct (the library keeps no state): it holds the REGISTER arguments and,
 * in region.region_id, the id the mount knows now.
 * shardfs_target_shm / _cuda register as shardfs_register_shm / _cuda do;
 * shardfs_target_stage stages as shardfs_stage does and, on -EOWNERDEAD,
 * registers again (region.region_id changes) and stages again. Unregister
 * with shardfs_unregister(fd, t->region.region_id). Return 0 or -errno.
 */
struct shardfs_target {
	struct shardfs_region region;
};
int shardfs_target_shm(int fd, const char *shm_name, uint64_t offset, uint64_t length,
		       struct shardfs_target *t);
int shardfs_target_cuda(int fd, const void *ipc_handle64, const uint8_t uuid[16], uint64_t offset,
			uint64_t length, uint64_t alloc_size, struct shardfs_target *t);
int shardfs_target_stage(int fd, struct shardfs_target *t, struct shardfs_range *ranges, unsigned n,
			 uint64_t *bytes_placed, uint32_t *path);

/* Drop a region of the open file `fd`. Returns 0 or -errno (-ENOENT: no such
 * region on this open file). */
int shardfs_unregister(int fd, uint64_t region_id);

/* Start (first call) or poll fetching the whole file into the mount's local
 * cache; fills *st. Returns 0 or -errno (-ENOTSUP: the mount has no cache).
 * A background fetch (warm_share, warm_rate): open fd with O_NONBLOCK so
 * that the open starts no reader's prefetch. */
int shardfs_warm(int fd, struct shardfs_warm *st);

/*
 * Epoch hints (SHARDFS_IOC_HINT_*, rules in shardfs_ioctl.h): the order in
 * which the caller will read, which the daemon fetches ahead. A list
 * belongs to the open file `fd` (the mount's root directory opened
 * O_RDONLY | O_DIRECTORY, or any file of the mount), replaces the list it
 * had, and goes away when that open file is closed.
 */
struct shardfs_hint_spec {
	const char *path; /* relative to the mount's root: no leading '/', no
			     "." or ".." component, no doubled '/'; 1..4095 bytes */
	uint64_t offset;  /* first byte of the range; 0 with length 0 */
	uint64_t length;  /* bytes of the range; 0: the whole file */
};

/*
 * Send items[0..n) as the open file's list, in that order: BEGIN, as many
 * APPEND batches as they take (each filled as far as the next item allows),
 * COMMIT. Every item is checked before the first ioctl: -EINVAL for a
 * malformed one (path rules above, a NULL path, offset without length, a
 * range past 2^64). n == 0 cancels the open file's list. If BEGIN reports
 * fewer max_items than n, or an APPEND or COMMIT is refused, the lists are
 * cancelled (the active one too) and the -errno returned (-E2BIG for the
 * former). Sets *n_committed (may be NULL) to the items the active list now
 * holds, 0 on failure. The batch buffer (16 KiB) is on the caller's stack.
 * Returns 0 or -errno (-ENOTTY: not a shardfs mount, or a daemon without
 * hints).
 */
int shardfs_hint(int fd, const struct shardfs_hint_spec *items, size_t n, uint64_t *n_committed);

/* Drop the open file's hint lists, pending and active. Returns 0 or -errno. */
int shardfs_hint_cancel(int fd);

/* Progress of the open file's active hint list (all zero without one): fills
 * *out (size set, reserved zeroed before the call). Returns 0 or -errno. */
int shardfs_hint_status(int fd, struct shardfs_hint_status *out);

/*
 * Create the shared-memory object `name` (as for shm_open(3); a missing
 * leading '/' is added) of `bytes` bytes, mode 0600, failing if it exists,
 * and map it read-write shared into *map (unless map is NULL). The object
 * outlives the process until shardfs_shm_destroy or shm_unlink. Returns 0,
 * -EEXIST, -ENAMETOOLONG, -EINVAL (bytes == 0) or another -errno; on
 * failure nothing is left behind.
 */
int shardfs_shm_create(const char *name, size_t bytes, void **map);

/* Unmap `map` (of `bytes` bytes; NULL: nothing to unmap) and unlink the
 * object `name`. Returns 0 or the -errno of shm_unlink. */
int shardfs_shm_destroy(const char *name, void *map, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
