// SPDX-License-Identifier: Apache-2.0
/*
 * staging_cuda_stub — the CUDA half of staging for builds without CUDA
 * (meson -Dcuda=disabled, or no toolkit under auto): no runtime, no GPU.
 * sfs_cuda_open() fails with -ENOTSUP, so staging.c never holds a
 * struct sfs_cuda; the other functions answer as for zero GPUs in case they
 * are called anyway. Stateless, so safe from any thread.
 */
#include "staging_cuda.h"

#include <errno.h>
#include <stddef.h>

/* Returns -ENOTSUP: this build has no CUDA. */
int sfs_cuda_open(struct sfs_cuda **out)
{
	*out = NULL;
	return -ENOTSUP;
}

void sfs_cuda_close(struct sfs_cuda *cu) { (void)cu; }

uint64_t sfs_cuda_pinned_bytes(struct sfs_cuda *cu)
{
	(void)cu;
	return 0;
}

unsigned sfs_cuda_gpu_count(struct sfs_cuda *cu)
{
	(void)cu;
	return 0;
}

/* Returns -EINVAL: there is no GPU of any index. */
int sfs_cuda_gpu_uuid(struct sfs_cuda *cu, unsigned index, uint8_t uuid[16])
{
	(void)cu, (void)index, (void)uuid;
	return -EINVAL;
}

/* Returns -EOPNOTSUPP. */
int sfs_cuda_import(struct sfs_cuda *cu, const uint8_t handle[64], const uint8_t uuid[16],
		    void **base, int *device)
{
	(void)cu, (void)handle, (void)uuid, (void)base, (void)device;
	return -EOPNOTSUPP;
}

void sfs_cuda_unimport(struct sfs_cuda *cu, void *base, int device)
{
	(void)cu, (void)base, (void)device;
}

/* Returns -EOPNOTSUPP. */
int sfs_cuda_copy_to_device(struct sfs_cuda *cu, int device, void *dst, const struct iovec *iov,
			    int n_iov)
{
	(void)cu, (void)device, (void)dst, (void)iov, (void)n_iov;
	return -EOPNOTSUPP;
}

/* Returns -EOPNOTSUPP. */
int sfs_cuda_stage(struct sfs_cuda *cu, int device, void *dst, struct sfs_stage_span *spans,
		   unsigned n, const struct sfs_stage_source *src, uint64_t *cache_bytes)
{
	(void)cu, (void)device, (void)dst, (void)spans, (void)n, (void)src, (void)cache_bytes;
	return -EOPNOTSUPP;
}

unsigned sfs_cuda_pool_free(struct sfs_cuda *cu, int device)
{
	(void)cu, (void)device;
	return 0;
}
