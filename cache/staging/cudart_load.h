/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cudart_load — the CUDA runtime (libcudart) opened with dlopen() at run
 * time and its functions looked up, for the programs that call CUDA without
 * linking it (so that they build without the toolkit and start without a
 * GPU): staging_cuda.c in the daemon, tests/unit/test_staging_cuda and
 * tools/bench/shardfs-stage-bench. Each caller declares the functions it uses, as
 * a table of names and of where each address goes; this module owns which
 * libraries are tried, in which order, and how they are opened. It does not
 * log (the caller says what a missing runtime means to it).
 *
 * Threading: any thread (dlerror() is per thread); the caller keeps two
 * threads from loading into the same struct at once.
 */
#ifndef SFS_CUDART_LOAD_H
#define SFS_CUDART_LOAD_H

#include <stddef.h>

/* One function: the first of names[] that the library exports is used (the
 * runtime renamed some, e.g. cudaGetDeviceProperties_v2 in CUDA 12); its
 * address is stored at byte `off` of the caller's struct of function
 * pointers (offsetof). names[1] may be NULL. */
struct sfs_cudart_sym {
	const char *names[2];
	size_t off;
};

/*
 * dlopen() the first libcudart that loads (the sonames of CUDA 13, 12 and
 * the unversioned name through the loader's search path, then the same
 * under /usr/local/cuda/lib64), with RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE
 * (the runtime registers exit-time handlers: it must never be unloaded
 * under them), and store the address of each of the n functions of syms
 * into fns. Returns 0 with *lib set to the handle; -ENOENT when no library
 * loads, with why (why_len bytes) holding the first dlopen()'s error (the
 * others only repeat it); -ENOTSUP when the library lacks one of the
 * functions, with why naming it (the library is closed, *lib is NULL and
 * fns may be partly written).
 */
int sfs_cudart_load(const struct sfs_cudart_sym *syms, size_t n, void *fns, void **lib, char *why,
		    size_t why_len);

#endif
