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

int sfs_cudart_load(const struct sfs_cudart_sym *syms, size_t n, void *fns, void **lib, char *why,
		    size_t why_len)
{
	void *h = NULL;

	snprintf(why, why_len, "libcudart not found");
	for (size_t i = 0; i < sizeof(cudart_paths) / sizeof(cudart_paths[0]) && !h; i++) {
		h = dlopen(cudart_paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		const char *e = h ? NULL : dlerror();
		if (i == 0 && e) /* the next dlopen() reuses dlerror()'s buffer */
			snprintf(why, why_len, "%s", e);
	}
	*lib = h;
	if (!h)
		return -ENOENT;
	for (size_t i = 0; i < n; i++) {
		void *sym = NULL;
		for (int j = 0; j < 2 && !sym && syms[i].names[j]; j++)
			sym = dlsym(h, syms[i].names[j]);
		if (!sym) {
			snprintf(why, why_len, "libcudart has no %s", syms[i].names[0]);
			dlclose(h);
			*lib = NULL;
			return -ENOTSUP;
		}
		/* POSIX: a function's address from dlsym() fits a function pointer. */
		memcpy((char *)fns + syms[i].off, &sym, sizeof(sym));
	}
	return 0;
}
