/* SPDX-License-Identifier: Apache-2.0 */
/*
 * staging_cuda.h — private to cache/staging*.c: the CUDA half of staging.
 * Implemented by staging_cuda.c (CUDA runtime loaded with dlopen at run
 * time) or staging_cuda_stub.c (builds without CUDA: no GPU, -EOPNOTSUPP).
 * Owns the runtime, the GPUs, the IPC imports and the pinned buffers; not
 * the regions and their bounds (staging.c).
 *
 * Threading: any thread once sfs_cuda_open has returned (staging_cuda.c
 * has the locks).
 */
#ifndef SFS_STAGING_CUDA_H
#define SFS_STAGING_CUDA_H

#include "staging.h"

#include <stdint.h>
#include <sys/uio.h>

struct sfs_cuda;

/* Per GPU staged to: SFS_CUDA_N_BUF pinned buffers of SFS_CUDA_BUF_BYTES
 * (each with its own stream: up to that many copies in flight) and
 * SFS_CUDA_N_WORKERS threads that read pieces besides the callers (two
 * buffers per thread lets each read one piece while its last one is
 * copied). Pieces are at most SFS_CUDA_PIECE_MAX bytes. */
#define SFS_CUDA_N_WORKERS 4
#define SFS_CUDA_N_BUF	   16
#define SFS_CUDA_PIECE_MAX (2u << 20)
#define SFS_CUDA_BUF_BYTES (SFS_CUDA_PIECE_MAX + SFS_STAGE_READ_SLACK)

/* Load the runtime and list GPUs. Returns 0 with *out set (possibly with
 * zero GPUs), or -ENOTSUP when there is no usable runtime (*out NULL). */
int sfs_cuda_open(struct sfs_cuda **out);
void sfs_cuda_close(struct sfs_cuda *cu);
unsigned sfs_cuda_gpu_count(struct sfs_cuda *cu);
/* Host memory held in pinned staging buffers: the pool of SFS_CUDA_N_BUF
 * buffers of SFS_CUDA_BUF_BYTES (staging_cuda.c) for each GPU staged to since
 * open (made on its first copy, kept until close; pinned memory cannot come
 * from the prefetch budget's pageable buffers). */
uint64_t sfs_cuda_pinned_bytes(struct sfs_cuda *cu);
int sfs_cuda_gpu_uuid(struct sfs_cuda *cu, unsigned index, uint8_t uuid[16]);

/* Open an IPC handle on the GPU `uuid` (cached: one open per handle and
 * GPU while any import of it is held, as CUDA allows one per process).
 * Sets the device pointer of the allocation base. Each successful import
 * holds a reference until sfs_cuda_unimport. Returns 0 or -errno. */
int sfs_cuda_import(struct sfs_cuda *cu, const uint8_t handle[64], const uint8_t uuid[16],
		    void **base, int *device);

/* Drop the reference of one sfs_cuda_import (base and device as it set
 * them); the last one closes the handle, so that the exporter may free the
 * memory. No copy to it may be running. */
void sfs_cuda_unimport(struct sfs_cuda *cu, void *base, int device);

/* Copy host iovecs to device memory dst on `device` through pinned staging
 * buffers with overlapping transfers; returns when the copy is complete.
 * Returns 0 or -errno. */
int sfs_cuda_copy_to_device(struct sfs_cuda *cu, int device, void *dst, const struct iovec *iov,
			    int n_iov);

/* The pipelined stage of sfs_stage_region_fill (staging.h) into device
 * memory dst (the region's first byte) on `device`: the spans are cut into
 * pieces that the caller's thread and the GPU's staging workers read from
 * src into pinned buffers and copy with cudaMemcpyAsync, each thread reading
 * its next piece while its last one's copy runs. Returns when every copy has
 * finished: 0, or the first -errno (-ERANGE: a span not inside one import
 * on that GPU, nothing copied; -ENOMEM: no pinned pool; a read's error;
 * -EIO: a failed copy). Concurrent calls share the GPU's pool fairly
 * (workers take pieces of the oldest call first). */
int sfs_cuda_stage(struct sfs_cuda *cu, int device, void *dst, struct sfs_stage_span *spans,
		   unsigned n, const struct sfs_stage_source *src, uint64_t *cache_bytes);

/* For tests: pinned buffers of `device`'s pool that are free now (all of
 * them whenever no stage runs), or 0 before its first stage. */
unsigned sfs_cuda_pool_free(struct sfs_cuda *cu, int device);

#endif
