// SPDX-License-Identifier: Apache-2.0
/*
 * staging — target regions and the copies into them. See staging.h.
 * Shared-memory regions are mapped here; CUDA regions go through
 * staging_cuda.c (or its stub), which owns everything CUDA. Where the bytes
 * come from is the caller's source.
 *
 * Threading: as staging.h: any thread, a region used by one thread at a
 * time.
 */
#include "staging.h"
#include "staging_cuda.h"
#include "../common/fileio.h"
#include "../common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* shm_open */
#include <sys/stat.h>
#include <unistd.h>

struct sfs_staging {
	struct sfs_cuda *cuda; /* set at open; NULL without a usable runtime */
};

struct sfs_stage_region {
	sfs_staging *st; /* set at creation */
	enum sfs_stage_kind kind;
	uint64_t length;
	/* SHM: written with pwritev, never mapped: the owner may truncate the
	 * object at any time, and a store into a mapping past its end would
	 * kill the daemon with SIGBUS. */
	int fd;
	uint64_t obj_off; /* the region's first byte in the object */
	/* CUDA */
	void *dev_base; /* the import: its allocation base */
	void *dev_dst;	/* device pointer of the region's first byte */
	int device;
};

int sfs_staging_open(sfs_staging **out)
{
	sfs_staging *st = calloc(1, sizeof(*st));

	if (!st)
		return -ENOMEM;
	if (sfs_cuda_open(&st->cuda) < 0)
		st->cuda = NULL;
	unsigned n = st->cuda ? sfs_cuda_gpu_count(st->cuda) : 0;
	sfs_log(SFS_LOG_DEBUG, "staging", "%u usable GPU%s", n, n == 1 ? "" : "s");
	*out = st;
	return 0;
}

void sfs_staging_close(sfs_staging *st)
{
	if (!st)
		return;
	if (st->cuda)
		sfs_cuda_close(st->cuda);
	free(st);
}

unsigned sfs_staging_gpu_count(sfs_staging *st)
{
	return st->cuda ? sfs_cuda_gpu_count(st->cuda) : 0;
}

uint64_t sfs_staging_pinned_bytes(sfs_staging *st)
{
	return st->cuda ? sfs_cuda_pinned_bytes(st->cuda) : 0;
}

int sfs_staging_gpu_uuid(sfs_staging *st, unsigned index, uint8_t uuid[16])
{
	return st->cuda ? sfs_cuda_gpu_uuid(st->cuda, index, uuid) : -EINVAL;
}

int sfs_stage_region_shm(sfs_staging *st, const char *name, uint64_t offset, uint64_t length,
			 uid_t uid, sfs_stage_region **out)
{
	struct stat sb;
	int fd, err;

	/* A POSIX shm name: one leading '/', no other '/', not "." or "..". */
	size_t n = strnlen(name, 256);
	if (n < 2 || n > 255 || name[0] != '/' || strchr(name + 1, '/') || !strcmp(name, "/.") ||
	    !strcmp(name, "/.."))
		return -EINVAL;
	if (length == 0)
		return -EINVAL;
	fd = shm_open(name, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		return errno == EACCES ? -EPERM : -errno;
	if (fstat(fd, &sb) != 0) {
		err = -errno;
		goto err_close;
	}
	/* The daemon usually runs as root: check ownership ourselves. */
	if (sb.st_uid != uid) {
		err = -EPERM;
		goto err_close;
	}
	if (!S_ISREG(sb.st_mode)) {
		err = -EINVAL;
		goto err_close;
	}
	if (offset > (uint64_t)sb.st_size || length > (uint64_t)sb.st_size - offset) {
		err = -ERANGE;
		goto err_close;
	}
	sfs_stage_region *r = calloc(1, sizeof(*r));
	if (!r) {
		err = -ENOMEM;
		goto err_close;
	}
	r->st = st;
	r->kind = SFS_STAGE_SHM;
	r->length = length;
	r->fd = fd;
	r->obj_off = offset;
	*out = r;
	return 0;

err_close:
	close(fd);
	return err;
}

int sfs_stage_region_cuda(sfs_staging *st, const uint8_t handle[64], const uint8_t uuid[16],
			  uint64_t offset, uint64_t length, uint64_t alloc_size,
			  sfs_stage_region **out)
{
	void *base;
	int device, rc;

	if (!st->cuda || sfs_cuda_gpu_count(st->cuda) == 0)
		return -EOPNOTSUPP;
	if (length == 0 || offset > alloc_size || length > alloc_size - offset)
		return -ERANGE;
	rc = sfs_cuda_import(st->cuda, handle, uuid, &base, &device);
	if (rc < 0)
		return rc;
	sfs_stage_region *r = calloc(1, sizeof(*r));
	if (!r) {
		sfs_cuda_unimport(st->cuda, base, device);
		return -ENOMEM;
	}
	r->st = st;
	r->kind = SFS_STAGE_CUDA;
	r->dev_base = base;
	r->length = length;
	r->dev_dst = (char *)base + offset;
	r->device = device;
	*out = r;
	return 0;
}

/* SHM: write the bytes with pwritev at the region's place in the object.
 * Returns 0 or -errno (ENOSPC: a full /dev/shm, not our crash). */
static int shm_put(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov)
{
	if (n_iov > 3)
		return -EINVAL;
	return sfs_pwritev_all(r->fd, iov, n_iov, (off_t)(r->obj_off + off));
}

static void shm_release(sfs_stage_region *r) { close(r->fd); }

/* CUDA: through the pinned staging buffers; done when it returns. */
static int cuda_put(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov)
{
	return sfs_cuda_copy_to_device(r->st->cuda, r->device, (char *)r->dev_dst + off, iov,
				       n_iov);
}

/* CUDA: the pipeline (staging_cuda.c); done when it returns. */
static int cuda_fill(sfs_stage_region *r, struct sfs_stage_span *spans, unsigned n,
		     const struct sfs_stage_source *src, uint64_t *cache_bytes)
{
	return sfs_cuda_stage(r->st->cuda, r->device, r->dev_dst, spans, n, src, cache_bytes);
}

/* The last region of an import closes it: the trainer may then free. */
static void cuda_release(sfs_stage_region *r)
{
	sfs_cuda_unimport(r->st->cuda, r->dev_base, r->device);
}

/* Per target (enum sfs_stage_kind): the copy into a region, the pipelined
 * stage (NULL: the target takes bytes through put only) and the release of
 * what its constructor took. */
static const struct stage_ops {
	int (*put)(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov);
	int (*fill)(sfs_stage_region *r, struct sfs_stage_span *spans, unsigned n,
		    const struct sfs_stage_source *src, uint64_t *cache_bytes);
	void (*release)(sfs_stage_region *r);
} stage_ops[] = {
    [SFS_STAGE_SHM] = {shm_put, NULL, shm_release},
    [SFS_STAGE_CUDA] = {cuda_put, cuda_fill, cuda_release},
};
_Static_assert(sizeof(stage_ops) / sizeof(stage_ops[0]) == SFS_STAGE_KIND_COUNT,
	       "one copy row per staging target");

void sfs_stage_region_free(sfs_stage_region *r)
{
	if (!r)
		return;
	stage_ops[r->kind].release(r);
	free(r);
}

uint64_t sfs_stage_region_length(const sfs_stage_region *r) { return r->length; }

enum sfs_stage_kind sfs_stage_region_kind(const sfs_stage_region *r) { return r->kind; }

int sfs_stage_region_put(sfs_stage_region *r, uint64_t off, const struct iovec *iov, int n_iov)
{
	return stage_ops[r->kind].put(r, off, iov, n_iov);
}

int sfs_stage_region_fill(sfs_stage_region *r, struct sfs_stage_span *spans, unsigned n,
			  const struct sfs_stage_source *src, uint64_t *cache_bytes)
{
	if (!stage_ops[r->kind].fill)
		return -EOPNOTSUPP;
	return stage_ops[r->kind].fill(r, spans, n, src, cache_bytes);
}
