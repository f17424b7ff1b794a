/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_int — private to cache/common: the implementations of XXH3-64 that
 * hash.c chooses between at start (hash.h), each equal to XXH3_64bits.
 * Included by hash.c, hash_avx2.c and the tests' hash_testing.c; the
 * choice itself is hash.c's.
 *
 * Threading: pure functions; any thread.
 */
#ifndef SFS_HASH_INT_H
#define SFS_HASH_INT_H

#include <stddef.h>
#include <stdint.h>

typedef uint64_t (*sfs_xxh3_fn)(const void *p, size_t len);

/* libxxhash's header inlined for the build's baseline (hash.c). */
uint64_t sfs_xxh3_64_generic(const void *p, size_t len);

/* The same built with -mavx2 (hash_avx2.c): exists only where meson built
 * it (SFS_HAVE_XXH3_AVX2), and may run only on a CPU with AVX2. */
uint64_t sfs_xxh3_64_avx2(const void *p, size_t len);

#endif
