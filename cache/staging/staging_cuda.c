// SPDX-License-Identifier: Apache-2.0
/*
 * staging_cuda — the CUDA half of staging (see staging_cuda.h): GPUs by
 * UUID, CUDA IPC imports, and host-to-device copies through pinned buffers.
 *
 * The CUDA runtime (libcudart) is loaded with dlopen() at run time
 * (cudart_load.h) and never linked, so the one daemon binary starts where there is no GPU, no
 * driver or no CUDA library at all (that is zero GPUs, not an error). The few CUDA types and
 * constants used here are declared below; a build with the toolkit checks them against its headers
 * (SFS_CUDA_CHECK_TYPES, compiled by a meson check only). This is the only file that calls CUDA.
 * Does not own: regions and bounds (staging.c), the ioctl ABI (fs/).
 *
 *   struct sfs_cuda
 *     rt: libcudart functions, mem_get_address_range (libcuda)
 *                                      set at open, then read-only
 *     gpus[n_gpus]: uuid, ordinal      set at open, then read-only
 *       lock ──> ready, buf[k].{host, stream, busy}     (one copy at a time)
 *     import_lock ──> buckets[hash(handle, uuid)] -> import -> import ...
 *                 ──> gpus[g].imports -> import -> ... (by GPU, via gpu_next)
 *                      import: handle, uuid, gpu, base, bytes, refs
 *                      (closed and freed when refs drops to 0)
 *
 * Threading: every function may be called from any thread once open has
 * returned. CUDA's current device is per thread, so each call that touches a
 * GPU sets it first. Lock order: import_lock and a GPU's lock are never held
 * together. A GPU's lock is held for a whole copy (pinned buffers and
 * streams are per GPU); import_lock is held across cudaIpcOpenMemHandle so
 * that a handle is opened once per GPU (imports are rare: one per REGISTER).
 *
 * Copies: the bytes of the iovecs are cut into pieces; piece k is copied by
 * the CPU into pinned buffer k % SFS_CUDA_N_BUF and sent with
 * cudaMemcpyAsync on that buffer's stream, so the CPU fills one buffer while
 * the DMA of the others runs. A buffer is refilled only after its stream has
 * finished; every stream is synchronised before the call returns.
 *
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

/* --- the part of the CUDA runtime API used here -------------------------- */

typedef int sfs_cudart_err;			     /* cudaError_t (an int-sized enum) */
typedef struct sfs_cudart_stream *sfs_cudart_stream; /* cudaStream_t */
struct sfs_cudart_ipc_handle {			     /* cudaIpcMemHandle_t */
	char reserved[64];
};

#define SFS_CUDART_SUCCESS			0
#define SFS_CUDART_ERR_INVALID_VALUE		1
#define SFS_CUDART_ERR_MEMORY_ALLOCATION	2
#define SFS_CUDART_ERR_INVALID_DEVICE_POINTER	17
#define SFS_CUDART_ERR_INVALID_DEVICE		101
#define SFS_CUDART_ERR_DEVICE_UNINITIALIZED	201
#define SFS_CUDART_ERR_MAP_BUFFER_OBJECT_FAILED 205
#define SFS_CUDART_ERR_INVALID_RESOURCE_HANDLE	400
#define SFS_CUDART_ERR_NOT_SUPPORTED		801
#define SFS_CUDART_MEMCPY_H2D			1    /* cudaMemcpyHostToDevice */
#define SFS_CUDART_IPC_LAZY_PEER		0x1u /* cudaIpcMemLazyEnablePeerAccess */
#define SFS_CUDART_STREAM_NON_BLOCKING		0x1u /* cudaStreamNonBlocking */
/* struct cudaDeviceProp starts with char name[256], then the 16-byte UUID,
 * in every version; its size changes between versions (1032 bytes in 12.x),
 * so it is received into a buffer much larger than any of them. */
#define SFS_CUDART_PROP_UUID_OFFSET 256
#define SFS_CUDART_PROP_BYTES	    8192

typedef int sfs_cu_result;		     /* CUresult (driver API) */
typedef unsigned long long sfs_cu_deviceptr; /* CUdeviceptr */

#ifdef SFS_CUDA_CHECK_TYPES
#include <cuda_runtime_api.h>
_Static_assert(sizeof(cudaError_t) == sizeof(sfs_cudart_err), "cudaError_t");
_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(struct sfs_cudart_ipc_handle), "IPC handle");
_Static_assert(sizeof(cudaStream_t) == sizeof(sfs_cudart_stream), "cudaStream_t");
_Static_assert(cudaSuccess == SFS_CUDART_SUCCESS, "cudaSuccess");
_Static_assert(cudaErrorInvalidValue == SFS_CUDART_ERR_INVALID_VALUE, "errors");
_Static_assert(cudaErrorMemoryAllocation == SFS_CUDART_ERR_MEMORY_ALLOCATION, "errors");
_Static_assert(cudaErrorInvalidDevicePointer == SFS_CUDART_ERR_INVALID_DEVICE_POINTER, "errors");
_Static_assert(cudaErrorInvalidDevice == SFS_CUDART_ERR_INVALID_DEVICE, "errors");
_Static_assert(cudaErrorDeviceUninitialized == SFS_CUDART_ERR_DEVICE_UNINITIALIZED, "errors");
_Static_assert(cudaErrorMapBufferObjectFailed == SFS_CUDART_ERR_MAP_BUFFER_OBJECT_FAILED, "errors");
_Static_assert(cudaErrorInvalidResourceHandle == SFS_CUDART_ERR_INVALID_RESOURCE_HANDLE, "errors");
_Static_assert(cudaErrorNotSupported == SFS_CUDART_ERR_NOT_SUPPORTED, "errors");
_Static_assert(cudaMemcpyHostToDevice == SFS_CUDART_MEMCPY_H2D, "cudaMemcpyKind");
_Static_assert(cudaIpcMemLazyEnablePeerAccess == SFS_CUDART_IPC_LAZY_PEER, "IPC flag");
_Static_assert(cudaStreamNonBlocking == SFS_CUDART_STREAM_NON_BLOCKING, "stream flag");
_Static_assert(offsetof(struct cudaDeviceProp, uuid) == SFS_CUDART_PROP_UUID_OFFSET, "prop uuid");
_Static_assert(sizeof(((struct cudaDeviceProp *)0)->uuid) == 16, "prop uuid");
_Static_assert(sizeof(struct cudaDeviceProp) <= SFS_CUDART_PROP_BYTES, "prop size");
#include <cuda.h>
_Static_assert(sizeof(CUresult) == sizeof(sfs_cu_result), "CUresult");
_Static_assert(sizeof(CUdeviceptr) == sizeof(sfs_cu_deviceptr), "CUdeviceptr");
#endif

/* The runtime's functions; all set at open, then read-only. */
struct sfs_cudart {
	sfs_cudart_err (*get_device_count)(int *count);
	sfs_cudart_err (*get_device_properties)(void *prop, int device);
	sfs_cudart_err (*set_device)(int device);
	sfs_cudart_err (*ipc_open_mem_handle)(void **ptr, struct sfs_cudart_ipc_handle handle,
					      unsigned flags);
	sfs_cudart_err (*ipc_close_mem_handle)(void *ptr);
	sfs_cudart_err (*malloc_host)(void **ptr, size_t size);
	sfs_cudart_err (*free_host)(void *ptr);
	sfs_cudart_err (*stream_create_with_flags)(sfs_cudart_stream *stream, unsigned flags);
	sfs_cudart_err (*stream_destroy)(sfs_cudart_stream stream);
	sfs_cudart_err (*memcpy_async)(void *dst, const void *src, size_t n, int kind,
				       sfs_cudart_stream stream);
	sfs_cudart_err (*stream_synchronize)(sfs_cudart_stream stream);
	const char *(*get_error_string)(sfs_cudart_err err);
	sfs_cudart_err (*runtime_get_version)(int *version);
	sfs_cudart_err (*driver_get_version)(int *version);
	/* From libcuda (dlopen'ed too, never linked): an allocation's extent. */
	sfs_cu_result (*mem_get_address_range)(sfs_cu_deviceptr *base, size_t *size,
					       sfs_cu_deviceptr ptr);
};

/* Symbol names: the first one the library has is used. CUDA 12 keeps the
 * 11.x cudaDeviceProp layout under the old name and exports _v2; 13 has
 * only the plain name (both put the UUID at the same offset). */
static const struct sfs_cudart_sym cudart_syms[] = {
    {{"cudaGetDeviceCount"}, offsetof(struct sfs_cudart, get_device_count)},
    {{"cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"},
     offsetof(struct sfs_cudart, get_device_properties)},
    {{"cudaSetDevice"}, offsetof(struct sfs_cudart, set_device)},
    {{"cudaIpcOpenMemHandle"}, offsetof(struct sfs_cudart, ipc_open_mem_handle)},
    {{"cudaIpcCloseMemHandle"}, offsetof(struct sfs_cudart, ipc_close_mem_handle)},
    {{"cudaMallocHost"}, offsetof(struct sfs_cudart, malloc_host)},
    {{"cudaFreeHost"}, offsetof(struct sfs_cudart, free_host)},
    {{"cudaStreamCreateWithFlags"}, offsetof(struct sfs_cudart, stream_create_with_flags)},
    {{"cudaStreamDestroy"}, offsetof(struct sfs_cudart, stream_destroy)},
    {{"cudaMemcpyAsync"}, offsetof(struct sfs_cudart, memcpy_async)},
    {{"cudaStreamSynchronize"}, offsetof(struct sfs_cudart, stream_synchronize)},
    {{"cudaGetErrorString"}, offsetof(struct sfs_cudart, get_error_string)},
    {{"cudaRuntimeGetVersion"}, offsetof(struct sfs_cudart, runtime_get_version)},
    {{"cudaDriverGetVersion"}, offsetof(struct sfs_cudart, driver_get_version)},
};

/* --- state --------------------------------------------------------------- */

#define SFS_CUDA_N_BUF		4	     /* pinned staging buffers per GPU */
#define SFS_CUDA_BUF_BYTES	(4u << 20)   /* bytes of each */
#define SFS_CUDA_MIN_PIECE	(256u << 10) /* smallest piece a copy is cut into */
#define SFS_CUDA_PIECE_ALIGN	(64u << 10)
#define SFS_CUDA_IMPORT_BUCKETS 64

struct sfs_cuda_buf {
	void *host;		  /* cudaMallocHost, SFS_CUDA_BUF_BYTES */
	sfs_cudart_stream stream; /* the DMA out of host runs on this stream */
	bool busy;		  /* a DMA may still read host */
};

struct sfs_cuda_gpu {
	uint8_t uuid[16]; /* set at open, then read-only */
	int ordinal;	  /* the runtime's device number; set at open, then read-only */
	pthread_mutex_t lock;
	bool ready;				 /* protected by lock: buf[] created */
	struct sfs_cuda_buf buf[SFS_CUDA_N_BUF]; /* protected by lock */
	struct sfs_cuda_import *imports;	 /* protected by cu->import_lock */
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
	void *lib;		   /* dlopen handle; set at open, then read-only */
	struct sfs_cudart rt;	   /* set at open, then read-only */
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
	int rc = sfs_cudart_load(cudart_syms, sizeof(cudart_syms) / sizeof(cudart_syms[0]), &cu->rt,
				 &cu->lib, why, sizeof(why));

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
	memcpy(&cu->rt.mem_get_address_range, &sym, sizeof(sym));
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

/* Free what exists of g->buf[]. Caller holds g->lock and has set the device. */
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
	g->ready = false;
}

/* Create the pinned buffers and streams of GPU `gi` on first use. Caller
 * holds its lock and has set the device. Returns 0 or -errno. */
static int gpu_make_buffers(struct sfs_cuda *cu, unsigned gi)
{
	struct sfs_cuda_gpu *g = &cu->gpus[gi];
	sfs_cudart_err e;
	int err;

	if (g->ready)
		return 0;
	for (int k = 0; k < SFS_CUDA_N_BUF; k++) {
		struct sfs_cuda_buf *b = &g->buf[k];
		if ((e = cu->rt.malloc_host(&b->host, SFS_CUDA_BUF_BYTES))) {
			b->host = NULL;
			err = cuda_fail(cu, "cudaMallocHost", gi, e);
			goto err_free;
		}
		if ((e = cu->rt.stream_create_with_flags(&b->stream,
							 SFS_CUDART_STREAM_NON_BLOCKING))) {
			b->stream = NULL;
			err = cuda_fail(cu, "cudaStreamCreateWithFlags", gi, e);
			goto err_free;
		}
	}
	g->ready = true;
	__atomic_fetch_add(&cu->pinned_bytes, (uint64_t)SFS_CUDA_N_BUF * SFS_CUDA_BUF_BYTES,
			   __ATOMIC_RELAXED);
	return 0;

err_free:
	gpu_free_buffers(cu, g);
	return err;
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
		struct sfs_cuda_gpu *g = &cu->gpus[cu->n_gpus++];
		memcpy(g->uuid, prop + SFS_CUDART_PROP_UUID_OFFSET, 16);
		g->ordinal = d;
		pthread_mutex_init(&g->lock, NULL);
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
	dlclose(cu->lib); /* RTLD_NODELETE: stays mapped */
err_free:
	free(cu);
	return err;
}

/* Closes every import and frees the buffers. No other call may be running. */
void sfs_cuda_close(struct sfs_cuda *cu)
{
	if (!cu)
		return;
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
		pthread_mutex_destroy(&g->lock);
	}
	free(cu->gpus);
	pthread_mutex_destroy(&cu->import_lock);
	dlclose(cu->lib); /* RTLD_NODELETE: stays mapped */
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
	    cu->rt.mem_get_address_range(&abase, &im->bytes, (sfs_cu_deviceptr)(uintptr_t)im->base);
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

/* Bytes per piece for a copy of `total` bytes: about a quarter of it, so
 * that even a 1 MiB copy overlaps CPU copies with DMA, within
 * [SFS_CUDA_MIN_PIECE, SFS_CUDA_BUF_BYTES]. */
static size_t piece_bytes(size_t total)
{
	size_t p = total / SFS_CUDA_N_BUF;

	p = (p + SFS_CUDA_PIECE_ALIGN - 1) / SFS_CUDA_PIECE_ALIGN * SFS_CUDA_PIECE_ALIGN;
	if (p < SFS_CUDA_MIN_PIECE)
		p = SFS_CUDA_MIN_PIECE;
	if (p > SFS_CUDA_BUF_BYTES)
		p = SFS_CUDA_BUF_BYTES;
	return p;
}

/*
 * Copies the iovecs, in order, to [dst, dst + their total) on GPU `device`
 * (an index as for sfs_cuda_gpu_uuid). Blocks until the device memory is
 * written. Returns 0, -EINVAL (bad device or arguments), -ERANGE (not
 * inside one allocation imported on that GPU), -ENOMEM (no pinned buffers)
 * or -EIO (a failed copy; the device memory is then undefined).
 * Takes the GPU's lock: copies to one GPU run one at a time.
 */
int sfs_cuda_copy_to_device(struct sfs_cuda *cu, int device, void *dst, const struct iovec *iov,
			    int n_iov)
{
	size_t total = 0;
	sfs_cudart_err e;
	int err;

	if (!cu || device < 0 || (unsigned)device >= cu->n_gpus || n_iov < 0 || (n_iov && !iov))
		return -EINVAL;
	for (int i = 0; i < n_iov; i++) {
		if (iov[i].iov_len > SIZE_MAX - total)
			return -EINVAL;
		total += iov[i].iov_len;
	}
	if (total == 0)
		return 0;
	if (!inside_import(cu, (unsigned)device, dst, total))
		return -ERANGE;

	struct sfs_cuda_gpu *g = &cu->gpus[device];
	pthread_mutex_lock(&g->lock);
	if ((e = cu->rt.set_device(g->ordinal))) {
		err = cuda_fail(cu, "cudaSetDevice", (unsigned)device, e);
		goto out_unlock;
	}
	if ((err = gpu_make_buffers(cu, (unsigned)device)) < 0)
		goto out_unlock;

	size_t piece = piece_bytes(total), done = 0, iov_off = 0;
	int i = 0, k = 0;
	while (done < total) {
		struct sfs_cuda_buf *b = &g->buf[k];
		if (b->busy) {
			b->busy = false;
			if ((e = cu->rt.stream_synchronize(b->stream))) {
				err = cuda_fail(cu, "cudaStreamSynchronize", (unsigned)device, e);
				goto out_drain;
			}
		}
		/* Fill buffer k with the next piece of the iovecs. */
		size_t n = 0;
		while (n < piece && done + n < total) {
			size_t take = iov[i].iov_len - iov_off;
			if (take > piece - n)
				take = piece - n;
			memcpy((char *)b->host + n, (const char *)iov[i].iov_base + iov_off, take);
			n += take;
			iov_off += take;
			if (iov_off == iov[i].iov_len) {
				i++;
				iov_off = 0;
			}
		}
		if ((e = cu->rt.memcpy_async((char *)dst + done, b->host, n, SFS_CUDART_MEMCPY_H2D,
					     b->stream))) {
			err = cuda_fail(cu, "cudaMemcpyAsync", (unsigned)device, e);
			goto out_drain;
		}
		b->busy = true;
		done += n;
		k = (k + 1) % SFS_CUDA_N_BUF;
	}
	err = 0;

out_drain:
	/* Every DMA out of the buffers ends before the lock is let go. */
	for (k = 0; k < SFS_CUDA_N_BUF; k++) {
		struct sfs_cuda_buf *b = &g->buf[k];
		if (!b->busy)
			continue;
		b->busy = false;
		if ((e = cu->rt.stream_synchronize(b->stream)) && !err)
			err = cuda_fail(cu, "cudaStreamSynchronize", (unsigned)device, e);
	}
	if (err == -EINVAL)
		err = -EIO; /* a rejected pointer mid-copy: the device memory is undefined */
out_unlock:
	pthread_mutex_unlock(&g->lock);
	return err;
}
