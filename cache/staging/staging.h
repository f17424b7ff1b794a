/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staging — placing verified file bytes into a trainer's memory: a POSIX
 * shared-memory object, or GPU memory exported with CUDA IPC.
 *
 * Owns: target regions (mapping a shm object after checking its owner;
 * importing a CUDA IPC handle once per handle and GPU), the copies into
 * them, and the CUDA runtime, which is optional at build time (meson feature
 * `cuda`) and at run time (loaded with dlopen; no GPU, no driver or no
 * library at all just means zero GPUs). staging_cuda.c is the only file
 * that knows CUDA; builds without it compile staging_cuda_stub.c.
 * Does not own: where the bytes come from (prefetch), the ioctl ABI (fs).
 *
 * Threading: sfs_staging_* may be called from any thread. A region is used
 * by one thread at a time (the fs layer serialises per open file); many
 * regions (several trainers) stage at once. A CUDA stage runs on the
 * caller's thread and on the GPU's staging workers (sfs_stage_region_fill),
 * which call the caller's source concurrently.
 */
#ifndef SFS_STAGING_H
#define SFS_STAGING_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

typedef struct sfs_staging sfs_staging;
typedef struct sfs_stage_region sfs_stage_region;

/* The staging targets: the one enum, also the index of fs/ops/ioctl.c's target
 * table (ABI bits, stats names) and of staging.c's copy table. A new target
 * is a value here, a constructor (sfs_stage_region_<target>), a row in each
 * of those two tables, and its copy function. */
enum sfs_stage_kind { SFS_STAGE_SHM, SFS_STAGE_CUDA, SFS_STAGE_KIND_COUNT };

/* Probe CUDA (if built in) and set up. Never fails for lack of a GPU.
 * Returns 0 or -ENOMEM. */
int sfs_staging_open(sfs_staging **out);
void sfs_staging_close(sfs_staging *st);

/* Usable GPUs (0 without CUDA) and their UUIDs. */
unsigned sfs_staging_gpu_count(sfs_staging *st);
int sfs_staging_gpu_uuid(sfs_staging *st, unsigned index, uint8_t uuid[16]);
/* Host memory in pinned GPU staging buffers (a fixed pool per GPU staged
 * to, made on its first stage and kept until close). */
uint64_t sfs_staging_pinned_bytes(sfs_staging *st);

/*
 * A region of `length` bytes at `offset` inside the shm object `name`
 * (as for shm_open). The object must belong to `uid` (else -EPERM) and
 * hold offset + length bytes (else -ERANGE); -ENOENT if it does not exist,
 * -EINVAL for a bad name.
 */
int sfs_stage_region_shm(sfs_staging *st, const char *name, uint64_t offset, uint64_t length,
			 uid_t uid, sfs_stage_region **out);

/*
 * A region of `length` bytes at `offset` inside the CUDA allocation of
 * `alloc_size` bytes exported as `handle` on the GPU `uuid`. -EOPNOTSUPP
 * without CUDA, -EINVAL for an unknown GPU or a bad handle, -ERANGE if the
 * view is outside the allocation.
 */
int sfs_stage_region_cuda(sfs_staging *st, const uint8_t handle[64], const uint8_t uuid[16],
			  uint64_t offset, uint64_t length, uint64_t alloc_size,
			  sfs_stage_region **out);

void sfs_stage_region_free(sfs_stage_region *r);
uint64_t sfs_stage_region_length(const sfs_stage_region *r);
enum sfs_stage_kind sfs_stage_region_kind(const sfs_stage_region *r);

/*
 * Copy the bytes of iov[0..n) to offset `off` of the region (the caller
 * checked the bounds). Returns 0 or -errno. For CUDA the copy has finished
 * (device memory written) when this returns.
 */
int sfs_stage_region_put(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov);

/* A source's reads may place bytes up to this far past (off % 16 KiB) + len
 * in the buffer they are given (whole verification blocks, O_DIRECT). */
#define SFS_STAGE_READ_SLACK (64u << 10)

/*
 * Where a pipelined stage gets its bytes. read() puts [pos, pos + len) of
 * the file into buf (buf_len >= len + SFS_STAGE_READ_SLACK bytes, 4096-
 * aligned), contiguous, and points *data at them inside buf; *cache_bytes:
 * how many came from the local cache. It returns the bytes (short only at
 * end of file) or -errno. It is called from several threads at once, for
 * disjoint ranges, in no fixed order, and only until
 * sfs_stage_region_fill returns.
 */
struct sfs_stage_source {
	ssize_t (*read)(void *arg, uint64_t pos, size_t len, void *buf, size_t buf_len,
			const char **data, size_t *cache_bytes);
	void *arg;
};

/* One range of a pipelined stage: len bytes of the source at src_off to
 * the region's dst_off (the caller checked the bounds). placed (out): the
 * bytes that landed, short only at end of file. */
struct sfs_stage_span {
	uint64_t src_off, dst_off, len;
	uint64_t placed;
};

/*
 * Place spans[0..n) into the region, reading them from src on the caller's
 * thread and on helper threads while earlier pieces are being copied (the
 * CUDA pipeline: reads into pinned buffers overlap host-to-device copies).
 * *cache_bytes adds what came from the local cache. Returns 0 when every
 * piece landed (device memory written), -EOPNOTSUPP for a target that
 * takes bytes only through sfs_stage_region_put (shm), or the first -errno
 * of a read or copy (then the spans' bytes are undefined, nothing else is
 * touched, and every buffer and helper is free again when it returns).
 */
int sfs_stage_region_fill(sfs_stage_region *r, struct sfs_stage_span *spans, unsigned n,
			  const struct sfs_stage_source *src, uint64_t *cache_bytes);

#endif
