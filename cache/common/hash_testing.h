/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash_testing — FOR UNIT TESTS ONLY: each XXH3-64 implementation of hash.c
 * by name, for tests/unit/test_hash to compare with libxxhash.
 * hash_testing.c is built into the test (with hash.c's SFS_HAVE_XXH3_AVX2),
 * never into the hash library or the daemon. It owns nothing: it names
 * what hash.c holds.
 *
 * Threading: any thread.
 */
#ifndef SFS_HASH_TESTING_H
#define SFS_HASH_TESTING_H

#include "hash.h"
#include "hash_int.h"

/* "generic" or "avx2": that implementation, or NULL where this build or
 * this CPU has none. */
sfs_xxh3_fn sfs_xxh3_by_name(const char *name);

#endif
