// SPDX-License-Identifier: Apache-2.0
/* hash — see hash.h. The generic code is libxxhash's header inlined for the
 * build's baseline (faster than a call into the library, whose code cannot
 * be inlined); hash_avx2.c is the same header built with -mavx2. */
#include "hash.h"
#include "hash_int.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__x86_64__) && defined(SFS_HAVE_XXH3_AVX2)
#define HAVE_AVX2 1
#else
#define HAVE_AVX2 0
#endif

uint64_t sfs_xxh3_64_generic(const void *p, size_t len) { return XXH3_64bits(p, len); }

static sfs_xxh3_fn impl = sfs_xxh3_64_generic;
static const char *impl_name = "generic";

/* Before main: no thread can call sfs_xxh3_64 yet. */
__attribute__((constructor)) static void choose_impl(void)
{
#if HAVE_AVX2
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx2")) {
		impl = sfs_xxh3_64_avx2;
		impl_name = "avx2";
	}
#endif
}

uint64_t sfs_xxh3_64(const void *p, size_t len) { return impl(p, len); }

const char *sfs_xxh3_impl(void) { return impl_name; }
