// SPDX-License-Identifier: Apache-2.0
/*
 * hash.c against libxxhash: every implementation this CPU runs gives
 * XXH3_64bits' value for every length 0..4160 (each of XXH3's length
 * classes and stripe and block boundaries), for lengths around 16 KiB,
 * 110 KB and 1 MiB (a sub-block, a small file, a chunk) and at every
 * alignment 0..63, on random bytes. A cache written by one CPU is read on
 * another, so a value that differs by implementation is a checksum
 * mismatch on every load.
 */
#include "../../cache/common/hash_testing.h"
#include "tap.h"

#include <stdint.h>
#include <xxhash.h>

static uint8_t buf[(1u << 20) + 4096 + 64];

/* Lengths [from, to) at offset `at`: the count of mismatches. */
static unsigned mismatches(sfs_xxh3_fn fn, size_t from, size_t to, size_t at)
{
	unsigned bad = 0;
	for (size_t n = from; n < to; n++)
		bad += fn(buf + at, n) != XXH3_64bits(buf + at, n);
	return bad;
}

int main(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (size_t i = 0; i < sizeof(buf); i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		buf[i] = (uint8_t)x;
	}
	const char *names[] = {"generic", "avx2"};
	diag("sfs_xxh3_64 runs %s", sfs_xxh3_impl());
	ok(sfs_xxh3_by_name(sfs_xxh3_impl()) != NULL,
	   "the implementation in use is one of those tested");
	for (unsigned k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
		sfs_xxh3_fn fn = sfs_xxh3_by_name(names[k]);
		if (!fn) {
			diag("%s: not in this build or not on this CPU", names[k]);
			continue;
		}
		ok(mismatches(fn, 0, 4161, 0) == 0, "%s: lengths 0..4160 as XXH3_64bits", names[k]);
		unsigned bad = 0;
		for (size_t at = 1; at < 64; at++)
			bad +=
			    mismatches(fn, 0, 300, at) + mismatches(fn, 16384 - 70, 16384 + 70, at);
		ok(bad == 0, "%s: alignments 1..63, short lengths and around 16 KiB", names[k]);
		ok(mismatches(fn, 112640 - 3, 112640 + 3, 5) == 0 &&
		       mismatches(fn, (1u << 20) - 2, (1u << 20) + 3, 0) == 0,
		   "%s: around 110 KB and 1 MiB", names[k]);
	}
	ok(sfs_xxh3_64(buf, 1u << 20) == XXH3_64bits(buf, 1u << 20), "sfs_xxh3_64 of 1 MiB");
	ok(sfs_xxh3_by_name("no-such") == NULL, "an unknown name: NULL");
	return tap_done();
}
