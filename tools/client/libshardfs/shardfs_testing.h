/* SPDX-License-Identifier: Apache-2.0 */
/*
 * shardfs_testing — FOR UNIT TESTS ONLY: the hint packer of shardfs.c, for
 * tests/unit/test_libshardfs to check without a daemon. Defined in
 * shardfs.c with hidden visibility: in the static library the test links,
 * never exported by libshardfs.so; nothing but shardfs.c and the test
 * includes this header.
 *
 * Threading: no state; any thread.
 */
#ifndef SHARDFS_TESTING_H
#define SHARDFS_TESTING_H

#include <stddef.h>
#include <stdint.h>

#include "shardfs.h"

#define SHARDFS_HIDDEN __attribute__((visibility("hidden")))

/* The bytes `it` takes packed (fixed part, path, zeros up to a multiple of
 * 8), or -EINVAL where shardfs_hint would refuse it. */
SHARDFS_HIDDEN int shardfs_hint_item_bytes(const struct shardfs_hint_spec *it);

/*
 * Pack items[0..n), each of which shardfs_hint_item_bytes accepts, in order
 * into buf (buf_bytes bytes) as the ABI lays them out, as many as fit; the
 * rest of buf is zeroed. Sets *used to the bytes they take. Returns how many
 * were packed: 0 only when n == 0 or the first does not fit.
 */
SHARDFS_HIDDEN size_t shardfs_hint_pack(const struct shardfs_hint_spec *items, size_t n,
					uint8_t *buf, size_t buf_bytes, uint32_t *used);

#endif
