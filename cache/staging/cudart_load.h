/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudart_load — the CUDA runtime (libcudart) as shardfs calls it, opened
 * with dlopen() at run time, for the programs that call CUDA without
 * linking it (so that they build without the toolkit and start without a
 * GPU): staging_cuda.c in the daemon, tests/unit/test_staging_cuda,
 * tests/integration/stage_cuda_check and tools/bench/shardfs-stage-bench.
 *
 * Owns: the one list of the runtime's functions these programs call (struct
 * sfs_cudart), the few CUDA types and constants they pass (declared here,
 * checked against the toolkit's headers where a build has them:
 * SFS_CUDA_CHECK_TYPES, compiled by a meson check only), which libraries
 * are tried, in which order, and how they are opened. Does not own: the
 * driver library (libcuda; staging_cuda.c looks up the one function it
 * takes from there), what a missing runtime means to a caller (this does
 * not log).
 *
 * Threading: any thread (dlerror() is per thread); the caller keeps two
 * threads from opening into the same struct at once. The functions loaded
 * are CUDA's, with CUDA's rules (the current device is per thread).
 */
#ifndef SFS_CUDART_LOAD_H
#define SFS_CUDART_LOAD_H

#include <stddef.h>

/* --- the part of the CUDA runtime API shardfs uses ------------------------ */

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
#define SFS_CUDART_MEMCPY_D2H			2    /* cudaMemcpyDeviceToHost */
#define SFS_CUDART_IPC_LAZY_PEER		0x1u /* cudaIpcMemLazyEnablePeerAccess */
#define SFS_CUDART_STREAM_NON_BLOCKING		0x1u /* cudaStreamNonBlocking */
/* struct cudaDeviceProp starts with char name[256], then the 16-byte UUID,
 * in every version; its size changes between versions, so it is received
 * into a buffer much larger than any of them. */
#define SFS_CUDART_PROP_UUID_OFFSET 256
#define SFS_CUDART_PROP_BYTES	    8192

/*
 * The runtime's functions, each named for its CUDA function (cudaX ->
 * x in snake case); all set by sfs_cudart_open, then read-only. A
 * function any of the programs calls is listed here, and every program
 * loads all of them: one list, and one answer to whether a runtime will do.
 */
struct sfs_cudart {
	void *lib; /* the dlopen() handle */
	sfs_cudart_err (*get_device_count)(int *count);
	/* cudaGetDeviceProperties_v2 where the runtime has it (CUDA 12 keeps the
	 * 11.x layout under the old name), else the plain name (CUDA 13); the
	 * UUID is at the same offset in both. prop: SFS_CUDART_PROP_BYTES. */
	sfs_cudart_err (*get_device_properties)(void *prop, int device);
	sfs_cudart_err (*set_device)(int device);
	const char *(*get_error_string)(sfs_cudart_err err);
	sfs_cudart_err (*runtime_get_version)(int *version);
	sfs_cudart_err (*driver_get_version)(int *version);
	sfs_cudart_err (*malloc)(void **ptr, size_t size);
	sfs_cudart_err (*free)(void *ptr);
	sfs_cudart_err (*malloc_host)(void **ptr, size_t size);
	sfs_cudart_err (*free_host)(void *ptr);
	sfs_cudart_err (*memset)(void *ptr, int value, size_t n);
	sfs_cudart_err (*memcpy)(void *dst, const void *src, size_t n, int kind);
	sfs_cudart_err (*device_synchronize)(void);
	/* handle: a struct sfs_cudart_ipc_handle (64 bytes) to fill */
	sfs_cudart_err (*ipc_get_mem_handle)(void *handle, void *ptr);
	sfs_cudart_err (*ipc_open_mem_handle)(void **ptr, struct sfs_cudart_ipc_handle handle,
					      unsigned flags);
	sfs_cudart_err (*ipc_close_mem_handle)(void *ptr);
	sfs_cudart_err (*stream_create_with_flags)(sfs_cudart_stream *stream, unsigned flags);
	sfs_cudart_err (*stream_destroy)(sfs_cudart_stream stream);
	sfs_cudart_err (*memcpy_async)(void *dst, const void *src, size_t n, int kind,
				       sfs_cudart_stream stream);
	sfs_cudart_err (*stream_synchronize)(sfs_cudart_stream stream);
};

/*
 * dlopen() the first libcudart that loads (the sonames of CUDA 13, 12 and
 * the unversioned name through the loader's search path, then the same
 * under /usr/local/cuda/lib64), with RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE
 * (the runtime registers exit-time handlers: it must never be unloaded
 * under them), and fill rt with every function of struct sfs_cudart.
 * Returns 0; -ENOENT when no library loads, with why (why_len bytes)
 * holding the first dlopen()'s error (the others only repeat it); -ENOTSUP
 * when the library lacks one of the functions, with why naming it (the
 * library is closed, rt->lib is NULL and the functions may be partly set).
 */
int sfs_cudart_open(struct sfs_cudart *rt, char *why, size_t why_len);

/* dlclose() what sfs_cudart_open opened (it stays mapped: RTLD_NODELETE)
 * and forget it; the functions must not be called after. */
void sfs_cudart_close(struct sfs_cudart *rt);

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
_Static_assert(cudaMemcpyDeviceToHost == SFS_CUDART_MEMCPY_D2H, "cudaMemcpyKind");
_Static_assert(cudaIpcMemLazyEnablePeerAccess == SFS_CUDART_IPC_LAZY_PEER, "IPC flag");
_Static_assert(cudaStreamNonBlocking == SFS_CUDART_STREAM_NON_BLOCKING, "stream flag");
_Static_assert(offsetof(struct cudaDeviceProp, uuid) == SFS_CUDART_PROP_UUID_OFFSET, "prop uuid");
_Static_assert(sizeof(((struct cudaDeviceProp *)0)->uuid) == 16, "prop uuid");
_Static_assert(sizeof(struct cudaDeviceProp) <= SFS_CUDART_PROP_BYTES, "prop size");
#endif

#endif
