// SPDX-License-Identifier: Apache-2.0
/* cudart_load — see cudart_load.h. */
#include "cudart_load.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Tried in this order: the sonames through the loader's search path, then
 * the toolkit's default place. */
static const char *const cudart_paths[] = {
    "libcudart.so.13",
    "libcudart.so.12",
    "libcudart.so",
    "/usr/local/cuda/lib64/libcudart.so.13",
    "/usr/local/cuda/lib64/libcudart.so.12",
    "/usr/local/cuda/lib64/libcudart.so",
};

/* Each function of struct sfs_cudart: the first of names[] that the library
 * exports (names[1] may be NULL), and where in the struct its address goes. */
static const struct cudart_sym {
	const char *names[2];
	size_t off;
} cudart_syms[] = {
    {{"cudaGetDeviceCount"}, offsetof(struct sfs_cudart, get_device_count)},
    {{"cudaGetDeviceProperties_v2", "cudaGetDeviceProperties"},
     offsetof(struct sfs_cudart, get_device_properties)},
    {{"cudaSetDevice"}, offsetof(struct sfs_cudart, set_device)},
    {{"cudaGetErrorString"}, offsetof(struct sfs_cudart, get_error_string)},
    {{"cudaRuntimeGetVersion"}, offsetof(struct sfs_cudart, runtime_get_version)},
    {{"cudaDriverGetVersion"}, offsetof(struct sfs_cudart, driver_get_version)},
    {{"cudaMalloc"}, offsetof(struct sfs_cudart, malloc)},
    {{"cudaFree"}, offsetof(struct sfs_cudart, free)},
    {{"cudaMallocHost"}, offsetof(struct sfs_cudart, malloc_host)},
    {{"cudaFreeHost"}, offsetof(struct sfs_cudart, free_host)},
    {{"cudaMemset"}, offsetof(struct sfs_cudart, memset)},
    {{"cudaMemcpy"}, offsetof(struct sfs_cudart, memcpy)},
    {{"cudaDeviceSynchronize"}, offsetof(struct sfs_cudart, device_synchronize)},
    {{"cudaIpcGetMemHandle"}, offsetof(struct sfs_cudart, ipc_get_mem_handle)},
    {{"cudaIpcOpenMemHandle"}, offsetof(struct sfs_cudart, ipc_open_mem_handle)},
    {{"cudaIpcCloseMemHandle"}, offsetof(struct sfs_cudart, ipc_close_mem_handle)},
    {{"cudaStreamCreateWithFlags"}, offsetof(struct sfs_cudart, stream_create_with_flags)},
    {{"cudaStreamDestroy"}, offsetof(struct sfs_cudart, stream_destroy)},
    {{"cudaMemcpyAsync"}, offsetof(struct sfs_cudart, memcpy_async)},
    {{"cudaStreamSynchronize"}, offsetof(struct sfs_cudart, stream_synchronize)},
};

/* Every function pointer of struct sfs_cudart is in cudart_syms. */
_Static_assert(sizeof(cudart_syms) / sizeof(cudart_syms[0]) ==
		   (sizeof(struct sfs_cudart) - sizeof(void *)) / sizeof(void (*)(void)),
	       "struct sfs_cudart and cudart_syms list the same functions");

int sfs_cudart_open(struct sfs_cudart *rt, char *why, size_t why_len)
{
	void *h = NULL;

	snprintf(why, why_len, "libcudart not found");
	for (size_t i = 0; i < sizeof(cudart_paths) / sizeof(cudart_paths[0]) && !h; i++) {
		h = dlopen(cudart_paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		const char *e = h ? NULL : dlerror();
		if (i == 0 && e) /* the next dlopen() reuses dlerror()'s buffer */
			snprintf(why, why_len, "%s", e);
	}
	rt->lib = h;
	if (!h)
		return -ENOENT;
	for (size_t i = 0; i < sizeof(cudart_syms) / sizeof(cudart_syms[0]); i++) {
		const struct cudart_sym *s = &cudart_syms[i];
		void *sym = NULL;
		for (int j = 0; j < 2 && !sym && s->names[j]; j++)
			sym = dlsym(h, s->names[j]);
		if (!sym) {
			snprintf(why, why_len, "libcudart has no %s", s->names[0]);
			sfs_cudart_close(rt);
			return -ENOTSUP;
		}
		/* POSIX: a function's address from dlsym() fits a function pointer. */
		memcpy((char *)rt + s->off, &sym, sizeof(sym));
	}
	return 0;
}

void sfs_cudart_close(struct sfs_cudart *rt)
{
	if (rt->lib)
		dlclose(rt->lib);
	rt->lib = NULL;
}
