// SPDX-License-Identifier: Apache-2.0
/* hash_avx2 — XXH3-64 from libxxhash's header, built with -mavx2 (meson):
 * called only after hash.c saw the CPU has AVX2. Nothing else lives here,
 * as the compiler may use AVX2 anywhere in this file; the choice is
 * hash.c's. Threading: a pure function; any thread. */
#include "hash_int.h"

#include <stddef.h>
#include <stdint.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#ifndef __AVX2__
#error "hash_avx2.c must be built with -mavx2"
#endif

uint64_t sfs_xxh3_64_avx2(const void *p, size_t len) { return XXH3_64bits(p, len); }
