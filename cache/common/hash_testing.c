// SPDX-License-Identifier: Apache-2.0
/* hash_testing — see hash_testing.h. For unit tests only. */
#include "hash_testing.h"

#include <string.h>

sfs_xxh3_fn sfs_xxh3_by_name(const char *name)
{
	if (strcmp(name, "generic") == 0)
		return sfs_xxh3_64_generic;
#if defined(__x86_64__) && defined(SFS_HAVE_XXH3_AVX2)
	/* hash.c chose it only on a CPU with AVX2. */
	if (strcmp(name, "avx2") == 0 && strcmp(sfs_xxh3_impl(), "avx2") == 0)
		return sfs_xxh3_64_avx2;
#endif
	return NULL;
}
