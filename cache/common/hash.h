/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hash — XXH3-64, the checksum of every byte the cache keeps, computed with
 * the widest vector unit this CPU has.
 *
 * Debian's libxxhash is built for the x86-64 baseline (SSE2) and has no
 * run-time dispatch; inlined with AVX2, XXH3-64 takes a fraction of the
 * time, and it runs on every cached small file served and every chunk
 * written or loaded. The values are XXH3-64's, whichever code computes
 * them: a cache written by one CPU reads on another, and tests compare
 * against libxxhash.
 *
 * Owns: which implementation computes XXH3-64 on this CPU. Does not own what
 * is hashed or where the sums are kept (the store, the segments, the
 * namespace log).
 * Threading: any thread; the choice is made once, before main.
 */
#ifndef SFS_HASH_H
#define SFS_HASH_H

#include <stddef.h>
#include <stdint.h>

/* XXH3-64 of len bytes at p (seed 0): XXH3_64bits(p, len). */
uint64_t sfs_xxh3_64(const void *p, size_t len);

/* The code sfs_xxh3_64 runs: "avx2" or "generic" (logged at mount). */
const char *sfs_xxh3_impl(void);

#endif
