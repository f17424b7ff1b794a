// SPDX-License-Identifier: Apache-2.0
/*
 * staging_cuda — the CUDA half of staging (see staging_cuda.h): GPUs by
 * UUID, CUDA IPC imports, and host-to-device copies through pinned buffers.
 *
 * The CUDA runtime (libcudart) is loaded with dlopen() at run time
 * (cudart_load.h) and never linked, so the one daemon binary starts where there is no GPU, no
 * driver or no CUDA library at all (that is zero GPUs, not an error). The few CUDA types and
 * constants used here are declared in cudart_load.h (the driver's two below); a build with the
 * toolkit checks them against its headers (SFS_CUDA_CHECK_TYPES, compiled by a meson check only).
 * This is the only file of the daemon that calls CUDA.
 * Does not own: regions and bounds (staging.c), the ioctl ABI (fs/).
 *
 *   struct sfs_cuda
 *     rt: libcudart functions (cudart_load.h), mem_get_address_range (libcuda)
 *                                      set at open, then read-only
 *     gpus[n_gpus]: uuid, ordinal      set at open, then read-only
 *       lock ──> ready, stopping, buf[k].{host, stream}, free ──> buf ──> buf
 *            ──> jobs ──> job ──> job     (stages with pieces left to take)
 *       workers[n_workers]              (started with the pool, joined at close)
 *     import_lock ──> buckets[hash(handle, uuid)] -> import -> import ...
 *                 ──> gpus[g].imports -> import -> ... (by GPU, via gpu_next)
 *                      import: handle, uuid, gpu, base, bytes, refs
 *                      (closed and freed when refs drops to 0)
 *
 * Threading: every function may be called from any thread once open has
 * returned. CUDA's current device is per thread, so each call that touches a
 * GPU sets it first (a worker once, at its start). Lock order: import_lock
 * and a GPU's lock are never held together. A GPU's lock is held only to
 * take or give back a buffer or a piece, never across a read, a copy or a
 * stream synchronisation; import_lock is held across cudaIpcOpenMemHandle
 * so that a handle is opened once per GPU (imports are rare: one per
 * REGISTER).
 *
 * The pipeline (sfs_cuda_stage): a stage is a job, on its caller's stack,
 * cut into pieces of up to SFS_CUDA_PIECE_MAX bytes. The caller posts it to
 * its GPU's job list and takes pieces itself; the GPU's SFS_CUDA_N_WORKERS
 * workers take pieces of the oldest job. A thread that takes piece k gets a
 * free pinned buffer, has the source read (and verify) the piece straight
 * into it, starts cudaMemcpyAsync on the buffer's own stream, and only then
 * waits for the copy of its previous piece and gives that buffer back: each
 * thread reads piece k + 1 while the copy of piece k runs, and several
 * threads read at once. Invariants: a buffer is on the free list exactly
 * when no copy from it can be running; a thread holds at most one buffer
 * with a copy in flight and, when the pool is empty, waits for that copy and
 * reuses its buffer instead of waiting for the pool (so no thread waits for
 * the pool while holding a buffer, and threads cannot wait on each other);
 * a job's pieces are all taken before it leaves the job list (or its first
 * error stops the taking), and its caller returns only when every taken
 * piece is finished (copy synchronised or failed), so the job, its spans
 * and its source are never touched after the call returns.

 * Bounds: the trainer states the size of its allocation, and a copy past
 * the end of an imported mapping could land in another trainer's memory
 * (imports share the daemon's address space). So each import's true size
 * is asked of the driver (cuMemGetAddressRange, from the libcuda that
 * libcudart has already loaded), and every copy must lie inside one import.
 *
 * Fork: CUDA does not survive fork(). Open after the daemon has forked.
 */
#include "staging_cuda.h"
#include "../common/log.h"
#include "cudart_load.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the driver API: libcudart's own part is in cudart_load.h ------------- */

typedef int sfs_cu_result;		     /* CUresult */
typedef unsigned long long sfs_cu_deviceptr; /* CUdeviceptr */

#ifdef SFS_CUDA_CHECK_TYPES
#include <cuda.h>
_Static_assert(sizeof(CUresult) == sizeof(sfs_cu_result), "CUresult");
_Static_assert(sizeof(CUdeviceptr) == sizeof(sfs_cu_deviceptr), "CUdeviceptr");
#endif

/* --- state --------------------------------------------------------------- */

#define SFS_CUDA_MIN_PIECE	(256u << 10) /* smallest piece a stage is cut into */
#define SFS_CUDA_PIECE_ALIGN	(64u << 10)  /* pieces are multiples of this */
#define SFS_CUDA_IMPORT_BUCKETS 64

struct sfs_cuda_buf {
	void *host;		   /* cudaMallocHost, SFS_CUDA_BUF_BYTES; set with the pool */
	sfs_cudart_stream stream;  /* the DMA out of host runs on this stream; set with the pool */
	struct sfs_cuda_buf *next; /* free list; protected by the GPU's lock */
};

struct cuda_job;

struct sfs_cuda_gpu {
	uint8_t uuid[16];    /* set at open, then read-only */
	int ordinal;	     /* the runtime's device number; set at open, then read-only */
	unsigned index;	     /* in cu->gpus; set at open, then read-only */
	struct sfs_cuda *cu; /* set at open, then read-only */
	pthread_mutex_t lock;
	pthread_cond_t work; /* a job was posted, or stopping; with lock */
	pthread_cond_t idle; /* a buffer came back, or a piece finished; with lock */
	bool ready;	     /* protected by lock: buf[], streams and workers made */
	bool stopping;	     /* protected by lock: workers exit once the job list is empty */
	struct sfs_cuda_buf buf[SFS_CUDA_N_BUF]; /* host, stream: set while ready */
	struct sfs_cuda_buf *free;		 /* protected by lock */
	struct cuda_job *jobs, **jobs_tail;	 /* protected by lock: FIFO */
	pthread_t workers[SFS_CUDA_N_WORKERS];
	unsigned n_workers;		 /* protected by lock (read-only while ready) */
	struct sfs_cuda_import *imports; /* protected by cu->import_lock */
};

/* Fields other than the links are set before the import is published. */
struct sfs_cuda_import {
	struct sfs_cuda_import *next;	  /* bucket chain; protected by cu->import_lock */
	struct sfs_cuda_import *gpu_next; /* gpus[gpu].imports; protected by cu->import_lock */
	struct sfs_cudart_ipc_handle handle;
	uint8_t uuid[16];
	unsigned gpu;  /* index in cu->gpus */
	void *base;    /* cudaIpcOpenMemHandle's pointer: the allocation base */
	size_t bytes;  /* the allocation's size, as the driver has it */
	unsigned refs; /* imports not yet unimported; protected by cu->import_lock */
};

struct sfs_cuda {
	struct sfs_cudart rt; /* set at open, then read-only */
	/* From libcuda (dlopen'ed too, never linked): an allocation's extent.
	 * Set at open, then read-only. */
	sfs_cu_result (*mem_get_address_range)(sfs_cu_deviceptr *base, size_t *size,
					       sfs_cu_deviceptr ptr);
	unsigned n_gpus;	   /* set at open, then read-only */
	struct sfs_cuda_gpu *gpus; /* [n_gpus]; see struct sfs_cuda_gpu */
	pthread_mutex_t import_lock;
	struct sfs_cuda_import *buckets[SFS_CUDA_IMPORT_BUCKETS]; /* protected by import_lock */
	struct sfs_log_ratelimit warn_rl;			  /* atomic */
	uint64_t pinned_bytes; /* atomic: host memory of the GPUs' pinned buffers */
};

/* --- helpers ------------------------------------------------------------- */

static const char *cuda_strerror(struct sfs_cuda *cu, sfs_cudart_err e)
{
	const char *s = cu->rt.get_error_string(e);
	return s ? s : "unknown CUDA error";
}

/* -errno for a CUDA error: -EINVAL for what a bad handle, pointer or device
 * gives, -ENOMEM, -EOPNOTSUPP, else -EIO. */
static int cuda_errno(sfs_cudart_err e)
{
	switch (e) {
	case SFS_CUDART_SUCCESS:
		return 0;
	case SFS_CUDART_ERR_INVALID_VALUE:
	case SFS_CUDART_ERR_INVALID_DEVICE_POINTER:
	case SFS_CUDART_ERR_INVALID_DEVICE:
	case SFS_CUDART_ERR_DEVICE_UNINITIALIZED:
	case SFS_CUDART_ERR_MAP_BUFFER_OBJECT_FAILED:
	case SFS_CUDART_ERR_INVALID_RESOURCE_HANDLE:
		return -EINVAL;
	case SFS_CUDART_ERR_MEMORY_ALLOCATION:
		return -ENOMEM;
	case SFS_CUDART_ERR_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	default:
		return -EIO;
	}
}

/* Log a failed call (warning, rate-limited: these follow requests) and
 * return its -errno. */
static int cuda_fail(struct sfs_cuda *cu, const char *what, unsigned gpu, sfs_cudart_err e)
{
	if (sfs_log_ratelimit(&cu->warn_rl, 10000))
		sfs_log(SFS_LOG_WARN, "staging", "GPU %u: %s: %s (CUDA error %d)", gpu, what,
			cuda_strerror(cu, e), e);
	return cuda_errno(e);
}

/* dlopen the runtime and resolve every symbol. Returns 0, or -ENOTSUP with
 * nothing loaded. */
static int load_runtime(struct sfs_cuda *cu)
{
	char why[256];
	int rc = sfs_cudart_open(&cu->rt, why, sizeof(why));

	if (rc == -ENOENT)
		sfs_log(SFS_LOG_INFO, "staging", "no CUDA runtime (%s): 0 GPUs", why);
	else if (rc < 0)
		sfs_log(SFS_LOG_WARN, "staging", "CUDA runtime unusable (%s): 0 GPUs", why);
	return rc < 0 ? -ENOTSUP : 0;
}

/* cuMemGetAddressRange from the driver library, which a successful
 * cudaGetDeviceCount has loaded. Returns 0, or -ENOTSUP (then no GPU is
 * used: copies could not be bounded). */
static int load_driver_range(struct sfs_cuda *cu)
{
	void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	const char *e = drv ? NULL : dlerror();
	void *sym = drv ? dlsym(drv, "cuMemGetAddressRange_v2") : NULL;

	if (!sym) {
		sfs_log(SFS_LOG_WARN, "staging",
			"CUDA driver without cuMemGetAddressRange_v2 (%s): 0 GPUs",
			e ? e : "no such symbol");
		if (drv)
			dlclose(drv);
		return -ENOTSUP;
	}
	memcpy(&cu->mem_get_address_range, &sym, sizeof(sym));
	dlclose(drv); /* NODELETE, and libcudart holds it anyway */
	return 0;
}

static unsigned import_bucket(const uint8_t handle[64], const uint8_t uuid[16])
{
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

	for (int i = 0; i < 64; i++)
		h = (h ^ handle[i]) * 0x100000001b3ull;
	for (int i = 0; i < 16; i++)
		h = (h ^ uuid[i]) * 0x100000001b3ull;
	return (unsigned)(h % SFS_CUDA_IMPORT_BUCKETS);
}

/* Index in cu->gpus of the GPU `uuid`, or -1. */
static int find_gpu(struct sfs_cuda *cu, const uint8_t uuid[16])
{
	for (unsigned i = 0; i < cu->n_gpus; i++)
		if (!memcmp(cu->gpus[i].uuid, uuid, 16))
			return (int)i;
	return -1;
}

/* Free what exists of g->buf[]. Caller holds g->lock and has set the
 * device; no worker runs and no copy is in flight. */
static void gpu_free_buffers(struct sfs_cuda *cu, struct sfs_cuda_gpu *g)
{
	if (g->ready)
		__atomic_fetch_sub(&cu->pinned_bytes, (uint64_t)SFS_CUDA_N_BUF * SFS_CUDA_BUF_BYTES,
				   __ATOMIC_RELAXED);
	for (int k = 0; k < SFS_CUDA_N_BUF; k++) {
		struct sfs_cuda_buf *b = &g->buf[k];
		if (b->stream) {
			cu->rt.stream_synchronize(b->stream);
			cu->rt.stream_destroy(b->stream);
		}
		if (b->host)
			cu->rt.free_host(b->host);
		memset(b, 0, sizeof(*b));
	}
	g->free = NULL;
	g->ready = false;
}

static void *gpu_worker(void *arg);

/* Create the pinned buffers, their streams and the workers of GPU g on
 * first use. Caller holds g->lock and has set the device. A worker that
 * does not start leaves fewer (the callers read themselves). Returns 0 or
 * -errno. */
static int gpu_make_buffers(struct sfs_cuda *cu, struct sfs_cuda_gpu *g)
{
	sfs_cudart_err e;
	int err;

	if (g->ready)
		return 0;
	for (int k = 0; k < SFS_CUDA_N_BUF; k++) {
		struct sfs_cuda_buf *b = &g->buf[k];
		if ((e = cu->rt.malloc_host(&b->host, SFS_CUDA_BUF_BYTES))) {
			b->host = NULL;
			err = cuda_fail(cu, "cudaMallocHost", g->index, e);
			goto err_free;
		}
		if ((e = cu->rt.stream_create_with_flags(&b->stream,
							 SFS_CUDART_STREAM_NON_BLOCKING))) {
			b->stream = NULL;
			err = cuda_fail(cu, "cudaStreamCreateWithFlags", g->index, e);
			goto err_free;
		}
		b->next = g->free;
		g->free = b;
	}
	g->ready = true;
	__atomic_fetch_add(&cu->pinned_bytes, (uint64_t)SFS_CUDA_N_BUF * SFS_CUDA_BUF_BYTES,
			   __ATOMIC_RELAXED);
	while (g->n_workers < SFS_CUDA_N_WORKERS &&
	       pthread_create(&g->workers[g->n_workers], NULL, gpu_worker, g) == 0)
		g->n_workers++;
	if (g->n_workers < SFS_CUDA_N_WORKERS)
		sfs_log(SFS_LOG_WARN, "staging", "GPU %u: %u of %u staging workers started",
			g->index, g->n_workers, SFS_CUDA_N_WORKERS);
	return 0;

err_free:
	gpu_free_buffers(cu, g);
	return err;
}

/* Stop and join the workers of g (they finish the jobs listed first).
 * No lock held. */
static void gpu_stop_workers(struct sfs_cuda_gpu *g)
{
	pthread_mutex_lock(&g->lock);
	g->stopping = true;
	pthread_cond_broadcast(&g->work);
	unsigned n = g->n_workers;
	pthread_mutex_unlock(&g->lock);
	for (unsigned i = 0; i < n; i++)
		pthread_join(g->workers[i], NULL);
	g->n_workers = 0;
}

/* --- API ----------------------------------------------------------------- */

/* See staging_cuda.h. Initialises the CUDA driver (cuInit) when there is
 * one, which does not survive fork(): call it in the process that will use
 * it. Slow (up to seconds with several GPUs); creates no GPU context. */
int sfs_cuda_open(struct sfs_cuda **out)
{
	struct sfs_cuda *cu;
	unsigned char *prop = NULL;
	int n = 0, err, rtv = 0, drv = 0;
	sfs_cudart_err e;

	*out = NULL;
	cu = calloc(1, sizeof(*cu));
	if (!cu)
		return -ENOMEM;
	if ((err = load_runtime(cu)) < 0)
		goto err_free;
	pthread_mutex_init(&cu->import_lock, NULL);

	/* Any error here (no driver: cudaErrorInsufficientDriver; no device;
	 * a driver older than the runtime) means zero GPUs. */
	if ((e = cu->rt.get_device_count(&n)) != SFS_CUDART_SUCCESS) {
		sfs_log(SFS_LOG_INFO, "staging",
			"no usable GPU: cudaGetDeviceCount: %s (CUDA error %d)",
			cuda_strerror(cu, e), e);
		n = 0;
	}
	if (n > 0 && load_driver_range(cu) < 0)
		n = 0;
	if (n > 0) {
		err = -ENOMEM;
		cu->gpus = calloc((size_t)n, sizeof(*cu->gpus));
		prop = malloc(SFS_CUDART_PROP_BYTES);
		if (!cu->gpus || !prop)
			goto err_unload;
	}
	for (int d = 0; d < n; d++) {
		memset(prop, 0, SFS_CUDART_PROP_BYTES);
		if ((e = cu->rt.get_device_properties(prop, d)) != SFS_CUDART_SUCCESS) {
			sfs_log(SFS_LOG_WARN, "staging",
				"CUDA device %d skipped: %s (CUDA error %d)", d,
				cuda_strerror(cu, e), e);
			continue;
		}
		struct sfs_cuda_gpu *g = &cu->gpus[cu->n_gpus];
		memcpy(g->uuid, prop + SFS_CUDART_PROP_UUID_OFFSET, 16);
		g->ordinal = d;
		g->index = cu->n_gpus++;
		g->cu = cu;
		g->jobs_tail = &g->jobs;
		pthread_mutex_init(&g->lock, NULL);
		pthread_cond_init(&g->work, NULL);
		pthread_cond_init(&g->idle, NULL);
		prop[255] = 0;
		const uint8_t *u = g->uuid;
		sfs_log(
		    SFS_LOG_INFO, "staging",
		    "GPU %u: %s, CUDA device %d, GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
		    "%02x%02x%02x%02x%02x%02x",
		    cu->n_gpus - 1, (const char *)prop, d, u[0], u[1], u[2], u[3], u[4], u[5], u[6],
		    u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
	}
	free(prop);
	cu->rt.runtime_get_version(&rtv);
	cu->rt.driver_get_version(&drv);
	sfs_log(SFS_LOG_DEBUG, "staging", "CUDA runtime %d.%d, driver %d.%d: %u GPU%s", rtv / 1000,
		rtv % 1000 / 10, drv / 1000, drv % 1000 / 10, cu->n_gpus,
		cu->n_gpus == 1 ? "" : "s");
	*out = cu;
	return 0;

err_unload:
	free(prop);
	free(cu->gpus);
	pthread_mutex_destroy(&cu->import_lock);
	sfs_cudart_close(&cu->rt);
err_free:
	free(cu);
	return err;
}

/* Stops the workers, closes every import and frees the buffers. No other
 * call may be running. */
void sfs_cuda_close(struct sfs_cuda *cu)
{
	if (!cu)
		return;
	for (unsigned i = 0; i < cu->n_gpus; i++)
		gpu_stop_workers(&cu->gpus[i]);
	for (unsigned b = 0; b < SFS_CUDA_IMPORT_BUCKETS; b++) {
		struct sfs_cuda_import *im = cu->buckets[b], *next;
		for (; im; im = next) {
			next = im->next;
			if (cu->rt.set_device(cu->gpus[im->gpu].ordinal) == SFS_CUDART_SUCCESS)
				cu->rt.ipc_close_mem_handle(im->base);
			free(im);
		}
	}
	for (unsigned i = 0; i < cu->n_gpus; i++) {
		struct sfs_cuda_gpu *g = &cu->gpus[i];
		if (g->ready && cu->rt.set_device(g->ordinal) == SFS_CUDART_SUCCESS)
			gpu_free_buffers(cu, g);
		pthread_cond_destroy(&g->work);
		pthread_cond_destroy(&g->idle);
		pthread_mutex_destroy(&g->lock);
	}
	free(cu->gpus);
	pthread_mutex_destroy(&cu->import_lock);
	sfs_cudart_close(&cu->rt);
	free(cu);
}

uint64_t sfs_cuda_pinned_bytes(struct sfs_cuda *cu)
{
	return __atomic_load_n(&cu->pinned_bytes, __ATOMIC_RELAXED);
}

unsigned sfs_cuda_gpu_count(struct sfs_cuda *cu) { return cu ? cu->n_gpus : 0; }

/* Returns 0, or -EINVAL for an index >= the GPU count. */
int sfs_cuda_gpu_uuid(struct sfs_cuda *cu, unsigned index, uint8_t uuid[16])
{
	if (!cu || index >= cu->n_gpus)
		return -EINVAL;
	memcpy(uuid, cu->gpus[index].uuid, 16);
	return 0;
}

/*
 * Looks the (handle, uuid) pair up; on a miss opens the handle on that GPU.
 * Takes a reference (sfs_cuda_unimport drops it). *device is the GPU's index (as for
 * sfs_cuda_gpu_uuid), the `device` of sfs_cuda_copy_to_device. Returns 0,
 * -EINVAL for an unknown GPU or a handle CUDA refuses, -ENOMEM, -EOPNOTSUPP
 * or -EIO. Takes import_lock; the first import on a GPU also creates its
 * CUDA context (slow: hundreds of ms).
 */
int sfs_cuda_import(struct sfs_cuda *cu, const uint8_t handle[64], const uint8_t uuid[16],
		    void **base, int *device)
{
	struct sfs_cuda_import *im;
	sfs_cudart_err e;
	int gi, err;

	if (!cu || (gi = find_gpu(cu, uuid)) < 0)
		return -EINVAL;
	unsigned b = import_bucket(handle, uuid);
	pthread_mutex_lock(&cu->import_lock);
	for (im = cu->buckets[b]; im; im = im->next)
		if (!memcmp(im->handle.reserved, handle, 64) && !memcmp(im->uuid, uuid, 16))
			break;
	if (im) {
		im->refs++;
		*base = im->base;
		*device = (int)im->gpu;
		pthread_mutex_unlock(&cu->import_lock);
		return 0;
	}

	err = -ENOMEM;
	im = calloc(1, sizeof(*im));
	if (!im)
		goto err_unlock;
	memcpy(im->handle.reserved, handle, 64);
	memcpy(im->uuid, uuid, 16);
	im->gpu = (unsigned)gi;
	if ((e = cu->rt.set_device(cu->gpus[gi].ordinal))) {
		err = cuda_fail(cu, "cudaSetDevice", (unsigned)gi, e);
		goto err_free;
	}
	if ((e = cu->rt.ipc_open_mem_handle(&im->base, im->handle, SFS_CUDART_IPC_LAZY_PEER))) {
		err = cuda_fail(cu, "cudaIpcOpenMemHandle", (unsigned)gi, e);
		goto err_free;
	}
	sfs_cu_deviceptr abase = 0;
	sfs_cu_result r =
	    cu->mem_get_address_range(&abase, &im->bytes, (sfs_cu_deviceptr)(uintptr_t)im->base);
	if (r || abase != (sfs_cu_deviceptr)(uintptr_t)im->base || im->bytes == 0) {
		if (sfs_log_ratelimit(&cu->warn_rl, 10000))
			sfs_log(SFS_LOG_WARN, "staging",
				"GPU %d: cuMemGetAddressRange of an IPC mapping: CUresult %d", gi,
				r);
		err = -EIO;
		goto err_close;
	}
	im->refs = 1;
	im->next = cu->buckets[b];
	cu->buckets[b] = im;
	im->gpu_next = cu->gpus[gi].imports;
	cu->gpus[gi].imports = im;
	sfs_log(SFS_LOG_DEBUG, "staging",
		"GPU %d: opened IPC handle %02x%02x%02x%02x%02x%02x%02x%02x..., %zu bytes", gi,
		handle[0], handle[1], handle[2], handle[3], handle[4], handle[5], handle[6],
		handle[7], im->bytes);
	*base = im->base;
	*device = gi;
	pthread_mutex_unlock(&cu->import_lock);
	return 0;

err_close:
	cu->rt.ipc_close_mem_handle(im->base);
err_free:
	free(im);
err_unlock:
	pthread_mutex_unlock(&cu->import_lock);
	return err;
}

/*
 * Drops a reference taken by sfs_cuda_import; the last one closes the IPC
 * handle (under import_lock, so that no import of the same handle can open
 * it meanwhile). Unknown (base, device) pairs are ignored with a warning.
 */
void sfs_cuda_unimport(struct sfs_cuda *cu, void *base, int device)
{
	struct sfs_cuda_import **gp, **bp, *im;

	if (!cu || device < 0 || (unsigned)device >= cu->n_gpus)
		return;
	pthread_mutex_lock(&cu->import_lock);
	for (gp = &cu->gpus[device].imports; *gp && (*gp)->base != base; gp = &(*gp)->gpu_next)
		;
	if (!(im = *gp)) {
		pthread_mutex_unlock(&cu->import_lock);
		if (sfs_log_ratelimit(&cu->warn_rl, 10000))
			sfs_log(SFS_LOG_WARN, "staging",
				"GPU %d: unimport of an unknown mapping %p", device, base);
		return;
	}
	if (--im->refs > 0) {
		pthread_mutex_unlock(&cu->import_lock);
		return;
	}
	*gp = im->gpu_next;
	for (bp = &cu->buckets[import_bucket((const uint8_t *)im->handle.reserved, im->uuid)];
	     *bp != im; bp = &(*bp)->next)
		;
	*bp = im->next;
	sfs_cudart_err e = cu->rt.set_device(cu->gpus[device].ordinal);
	if (!e)
		e = cu->rt.ipc_close_mem_handle(im->base);
	pthread_mutex_unlock(&cu->import_lock);
	if (e)
		cuda_fail(cu, "cudaIpcCloseMemHandle", (unsigned)device, e);
	sfs_log(SFS_LOG_DEBUG, "staging", "GPU %d: closed IPC handle of %p", device, base);
	free(im);
}

/* Whether [dst, dst + n) lies inside one allocation imported on GPU gi.
 * Takes import_lock. */
static bool inside_import(struct sfs_cuda *cu, unsigned gi, const void *dst, size_t n)
{
	uintptr_t d = (uintptr_t)dst;
	bool ok = false;

	pthread_mutex_lock(&cu->import_lock);
	for (struct sfs_cuda_import *im = cu->gpus[gi].imports; im && !ok; im = im->gpu_next) {
		uintptr_t b = (uintptr_t)im->base;
		ok = d >= b && d - b <= im->bytes && n <= im->bytes - (d - b);
	}
	pthread_mutex_unlock(&cu->import_lock);
	return ok;
}

/* --- the pipeline --------------------------------------------------------- */

/* One sfs_cuda_stage call; lives on its caller's stack. */
struct cuda_job {
	struct sfs_cuda_gpu *g;		    /* set before posting, then read-only */
	char *dst;			    /* device: the region's first byte; same */
	struct sfs_stage_span *spans;	    /* same; .placed protected by g->lock */
	unsigned n_spans;		    /* same */
	const struct sfs_stage_source *src; /* same */
	size_t piece;			    /* bytes per piece; same */
	uint64_t n_pieces;		    /* same */
	uint64_t next_piece;		    /* protected by g->lock: the next to take */
	uint64_t finished;		    /* protected by g->lock: taken and over */
	uint64_t cache_bytes;		    /* protected by g->lock */
	int err;			    /* protected by g->lock: the first error */
	bool listed;			    /* protected by g->lock: on g->jobs */
	struct cuda_job *next;		    /* protected by g->lock */
};

/* A thread's copy in flight: buf's stream copies piece bytes of job. */
struct cuda_inflight {
	struct sfs_cuda_buf *buf; /* NULL: none */
	struct cuda_job *job;
};

/* Bytes per piece for a stage of `total` bytes: spread over the workers and
 * the caller, so that even 1 MiB is read by several threads, within
 * [SFS_CUDA_MIN_PIECE, SFS_CUDA_PIECE_MAX]. */
static size_t piece_bytes(uint64_t total)
{
	uint64_t p = total / (SFS_CUDA_N_WORKERS + 1);

	p = (p + SFS_CUDA_PIECE_ALIGN - 1) / SFS_CUDA_PIECE_ALIGN * SFS_CUDA_PIECE_ALIGN;
	if (p < SFS_CUDA_MIN_PIECE)
		p = SFS_CUDA_MIN_PIECE;
	if (p > SFS_CUDA_PIECE_MAX)
		p = SFS_CUDA_PIECE_MAX;
	return (size_t)p;
}

/* Take the next piece of j into *k. Returns false when none is left (or j
 * failed); then j is off the job list. Caller holds g->lock. */
static bool job_take(struct cuda_job *j, uint64_t *k)
{
	struct sfs_cuda_gpu *g = j->g;

	if (j->err || j->next_piece == j->n_pieces) {
		if (j->listed) {
			struct cuda_job **p = &g->jobs;
			while (*p != j)
				p = &(*p)->next;
			*p = j->next;
			if (g->jobs_tail == &j->next)
				g->jobs_tail = p;
			j->listed = false;
		}
		return false;
	}
	*k = j->next_piece++;
	return true;
}

/* Account a taken piece as over, with its error (0: none). Caller holds
 * g->lock; j may be gone once it is let go. */
static void job_piece_over(struct cuda_job *j, int err)
{
	if (err && !j->err)
		j->err = err;
	j->finished++;
	pthread_cond_broadcast(&j->g->idle);
}

/* Wait for the copy in flight of *fl, account its piece and, if give_back,
 * return its buffer to the pool. No lock held. */
static void inflight_retire(struct cuda_inflight *fl, bool give_back)
{
	struct sfs_cuda_gpu *g = fl->job->g;
	struct sfs_cuda *cu = g->cu;
	sfs_cudart_err e = cu->rt.stream_synchronize(fl->buf->stream);
	int err = e ? cuda_fail(cu, "cudaStreamSynchronize", g->index, e) : 0;

	pthread_mutex_lock(&g->lock);
	if (give_back) {
		fl->buf->next = g->free;
		g->free = fl->buf;
	}
	job_piece_over(fl->job, err ? -EIO : 0); /* the device bytes are undefined */
	pthread_mutex_unlock(&g->lock);
	fl->buf = NULL;
	fl->job = NULL;
}

/* A pinned buffer for the calling thread: a free one, or, when the pool is
 * empty and the thread has a copy in flight, that copy's buffer once it is
 * over (never waits for the pool while holding a buffer). No lock held. */
static struct sfs_cuda_buf *buf_take(struct sfs_cuda_gpu *g, struct cuda_inflight *fl)
{
	pthread_mutex_lock(&g->lock);
	while (!g->free && !fl->buf)
		pthread_cond_wait(&g->idle, &g->lock);
	struct sfs_cuda_buf *b = g->free;
	if (b)
		g->free = b->next;
	pthread_mutex_unlock(&g->lock);
	if (!b) {
		b = fl->buf;
		inflight_retire(fl, false);
	}
	return b;
}

/* Where piece k of j is: its span, and its offset in it. */
static struct sfs_stage_span *piece_span(const struct cuda_job *j, uint64_t k, uint64_t *in_span)
{
	for (unsigned i = 0;; i++) {
		uint64_t n = (j->spans[i].len + j->piece - 1) / j->piece;
		if (k < n) {
			*in_span = k * j->piece;
			return &j->spans[i];
		}
		k -= n;
	}
}

/*
 * Piece k of j on the calling thread: read into a pinned buffer, copy
 * started; then the thread's previous copy waited for (its buffer given
 * back), and this one becomes *fl. A piece that fails or is empty is over
 * at once. Steps: 1 buffer, 2 read, 3 copy, 4 account, 5 retire the last.
 */
static void run_piece(struct cuda_job *j, uint64_t k, struct cuda_inflight *fl)
{
	struct sfs_cuda_gpu *g = j->g;
	struct sfs_cuda *cu = g->cu;
	uint64_t in_span;
	struct sfs_stage_span *sp = piece_span(j, k, &in_span);
	size_t len = sp->len - in_span < j->piece ? (size_t)(sp->len - in_span) : j->piece;

	/* 1, 2: the source reads (and verifies) straight into pinned memory. */
	struct sfs_cuda_buf *b = buf_take(g, fl);
	const char *data = b->host, *host = b->host;
	size_t cache_bytes = 0;
	ssize_t n = j->src->read(j->src->arg, sp->src_off + in_span, len, b->host,
				 SFS_CUDA_BUF_BYTES, &data, &cache_bytes);
	int err = n < 0 ? (int)n : 0;
	if (n > 0 && (data < host || (size_t)(data - host) > SFS_CUDA_BUF_BYTES - (size_t)n))
		err = -EIO; /* outside the pinned buffer: the source broke its contract */
	/* 3 */
	if (!err && n > 0) {
		sfs_cudart_err e = cu->rt.memcpy_async(j->dst + sp->dst_off + in_span, data,
						       (size_t)n, SFS_CUDART_MEMCPY_H2D, b->stream);
		if (e)
			err = cuda_fail(cu, "cudaMemcpyAsync", g->index, e) == -EINVAL
				  ? -EIO
				  : cuda_errno(e);
	}
	/* 4: a short read is the end of the file: the span ends there. */
	pthread_mutex_lock(&g->lock);
	j->cache_bytes += cache_bytes;
	if (!err && (size_t)n < len && in_span + (uint64_t)n < sp->placed)
		sp->placed = in_span + (uint64_t)n;
	bool over = err || n == 0;
	if (over) {
		b->next = g->free; /* nothing was started on its stream */
		g->free = b;
		job_piece_over(j, err);
	}
	pthread_mutex_unlock(&g->lock);
	/* 5 */
	if (over)
		return;
	if (fl->buf)
		inflight_retire(fl, true);
	fl->buf = b;
	fl->job = j;
}

/* A GPU's staging worker: takes pieces of the oldest listed job until
 * stopping is set and the list is empty. */
static void *gpu_worker(void *arg)
{
	struct sfs_cuda_gpu *g = arg;
	struct cuda_inflight fl = {0};
	sfs_cudart_err e = g->cu->rt.set_device(g->ordinal);

	if (e) {
		cuda_fail(g->cu, "cudaSetDevice (staging worker)", g->index, e);
		return NULL; /* the callers do its share */
	}
	pthread_mutex_lock(&g->lock);
	for (;;) {
		struct cuda_job *j = g->jobs;
		uint64_t k;
		if (!j) {
			if (fl.buf) { /* its caller waits for it: finish it first */
				pthread_mutex_unlock(&g->lock);
				inflight_retire(&fl, true);
				pthread_mutex_lock(&g->lock);
				continue;
			}
			if (g->stopping)
				break;
			pthread_cond_wait(&g->work, &g->lock);
			continue;
		}
		if (!job_take(j, &k))
			continue;
		pthread_mutex_unlock(&g->lock);
		if (fl.buf && fl.job != j)
			inflight_retire(&fl, true); /* another job's: do not keep it waiting */
		run_piece(j, k, &fl);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	return NULL;
}

/* Checks of sfs_cuda_stage's arguments: -EINVAL for a bad device or an
 * overflow, -ERANGE for a span not inside one import; *total: bytes. */
static int stage_check(struct sfs_cuda *cu, int device, const char *dst,
		       const struct sfs_stage_span *spans, unsigned n, uint64_t *total)
{
	*total = 0;
	if (!cu || device < 0 || (unsigned)device >= cu->n_gpus || (n && !spans))
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		if (spans[i].len > UINT64_MAX / 2 - *total ||
		    spans[i].dst_off > UINTPTR_MAX - (uintptr_t)dst)
			return -EINVAL;
		*total += spans[i].len;
		if (spans[i].len &&
		    !inside_import(cu, (unsigned)device, dst + spans[i].dst_off, spans[i].len))
			return -ERANGE;
	}
	return 0;
}

/*
 * See staging_cuda.h. Steps: 1 check and cut, 2 make the pool (first
 * stage on the GPU), 3 post the job, 4 take pieces until none is left,
 * 5 wait for the pieces of the other threads.
 */
int sfs_cuda_stage(struct sfs_cuda *cu, int device, void *dst, struct sfs_stage_span *spans,
		   unsigned n, const struct sfs_stage_source *src, uint64_t *cache_bytes)
{
	struct cuda_job j = {.dst = dst, .spans = spans, .n_spans = n, .src = src};
	uint64_t total, k;
	sfs_cudart_err e;
	int err;

	/* 1 */
	if ((err = stage_check(cu, device, dst, spans, n, &total)) < 0)
		return err;
	j.g = &cu->gpus[device];
	j.piece = piece_bytes(total);
	for (unsigned i = 0; i < n; i++) {
		spans[i].placed = spans[i].len; /* lowered by a short read */
		j.n_pieces += (spans[i].len + j.piece - 1) / j.piece;
	}
	if (j.n_pieces == 0)
		return 0;
	/* 2 */
	struct sfs_cuda_gpu *g = j.g;
	if ((e = cu->rt.set_device(g->ordinal)))
		return cuda_fail(cu, "cudaSetDevice", (unsigned)device, e);
	pthread_mutex_lock(&g->lock);
	if ((err = gpu_make_buffers(cu, g)) < 0) {
		pthread_mutex_unlock(&g->lock);
		return err;
	}
	/* 3 */
	j.listed = true;
	*g->jobs_tail = &j;
	g->jobs_tail = &j.next;
	pthread_cond_broadcast(&g->work);
	/* 4 */
	struct cuda_inflight fl = {0};
	while (job_take(&j, &k)) {
		pthread_mutex_unlock(&g->lock);
		run_piece(&j, k, &fl);
		pthread_mutex_lock(&g->lock);
	}
	pthread_mutex_unlock(&g->lock);
	if (fl.buf)
		inflight_retire(&fl, true);
	/* 5 */
	pthread_mutex_lock(&g->lock);
	while (j.listed || j.finished < j.next_piece)
		pthread_cond_wait(&g->idle, &g->lock);
	pthread_mutex_unlock(&g->lock);
	*cache_bytes += j.cache_bytes;
	return j.err;
}

/* The source of sfs_cuda_copy_to_device: its iovecs as one byte string. */
struct iov_source {
	const struct iovec *iov;
	int n_iov;
};

static ssize_t iov_read(void *arg, uint64_t pos, size_t len, void *buf, size_t buf_len,
			const char **data, size_t *cache_bytes)
{
	const struct iov_source *is = arg;
	size_t done = 0;
	int i = 0;

	(void)buf_len;
	*data = buf;
	*cache_bytes = 0;
	while (i < is->n_iov && pos >= is->iov[i].iov_len)
		pos -= is->iov[i++].iov_len;
	for (; i < is->n_iov && done < len; i++, pos = 0) {
		size_t take = is->iov[i].iov_len - (size_t)pos;
		if (take > len - done)
			take = len - done;
		memcpy((char *)buf + done, (const char *)is->iov[i].iov_base + pos, take);
		done += take;
	}
	return (ssize_t)done;
}

/*
 * Copies the iovecs, in order, to [dst, dst + their total) on GPU `device`
 * (an index as for sfs_cuda_gpu_uuid), through the pipeline (the "read" is a
 * memcpy into the pinned buffers). Blocks until the device memory is
 * written. Returns 0, -EINVAL (bad device or arguments), -ERANGE (not
 * inside one allocation imported on that GPU), -ENOMEM (no pinned buffers)
 * or -EIO (a failed copy; the device memory is then undefined).
 */
int sfs_cuda_copy_to_device(struct sfs_cuda *cu, int device, void *dst, const struct iovec *iov,
			    int n_iov)
{
	struct iov_source is = {iov, n_iov};
	struct sfs_stage_source src = {iov_read, &is};
	struct sfs_stage_span span = {0};
	uint64_t cache_bytes = 0;

	if (n_iov < 0 || (n_iov && !iov))
		return -EINVAL;
	for (int i = 0; i < n_iov; i++) {
		if (iov[i].iov_len > SIZE_MAX / 2 - span.len)
			return -EINVAL;
		span.len += iov[i].iov_len;
	}
	if (!cu || device < 0 || (unsigned)device >= cu->n_gpus)
		return -EINVAL;
	return sfs_cuda_stage(cu, device, dst, &span, 1, &src, &cache_bytes);
}

unsigned sfs_cuda_pool_free(struct sfs_cuda *cu, int device)
{
	unsigned n = 0;

	if (!cu || device < 0 || (unsigned)device >= cu->n_gpus)
		return 0;
	struct sfs_cuda_gpu *g = &cu->gpus[device];
	pthread_mutex_lock(&g->lock);
	for (struct sfs_cuda_buf *b = g->free; b; b = b->next)
		n++;
	pthread_mutex_unlock(&g->lock);
	return n;
}
