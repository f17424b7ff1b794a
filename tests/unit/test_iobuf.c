// SPDX-License-Identifier: Apache-2.0
/*
 * iobuf.c alone: buffers are 1 MiB, 4096-aligned, distinct and writable;
 * two fill one 2 MiB region before another is started; a region whose two
 * buffers are back keeps its memory until a trim, and is reused; past the reserved range buffers
 * are plain allocations and go back as such; a put of NULL is nothing; and,
 * where the kernel has transparent huge pages, a touched region is one.
 */
#include "../../cache/common/iobuf.h"
#include "tap.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define N 6 /* range: 3 regions */

/* AnonHugePages of the region holding p, in KiB, from /proc/self/smaps; -1
 * when smaps cannot be read. */
static long huge_kib(const void *p)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	long kib = -1;
	bool in = false;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;
		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
			in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
		else if (in && sscanf(line, "AnonHugePages: %ld kB", &kib) == 1)
			break;
	}
	fclose(f);
	return kib;
}

/* sfs_copy_stream against memcpy: sizes around its thresholds and every
 * source and destination misalignment mod 16, guard bytes around the
 * destination untouched. Returns the failures. */
static int copy_stream_failures(void)
{
	static const size_t sizes[] = {0,    1,	   15,	 63,	     64,
				       4095, 4096, 4097, 65536 + 17, 116 * 1024 + 5};
	enum { MAXN = 116 * 1024 + 5, PAD = 64 };
	static unsigned char src[MAXN + 32], dst[MAXN + 2 * PAD + 32];
	int bad = 0;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (unsigned char)(i * 131 + 7);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
		for (unsigned so = 0; so < 16; so += 5)
			for (unsigned d_o = 0; d_o < 16; d_o++) {
				size_t n = sizes[k];
				memset(dst, 0xa5, sizeof(dst));
				sfs_copy_stream(dst + PAD + d_o, src + so, n);
				bool same = memcmp(dst + PAD + d_o, src + so, n) == 0;
				for (size_t g = 0; g < PAD + d_o; g++)
					same &= dst[g] == 0xa5;
				for (size_t g = PAD + d_o + n; g < sizeof(dst); g++)
					same &= dst[g] == 0xa5;
				bad += !same;
			}
	return bad;
}

int main(void)
{
	struct sfs_iobuf_stats st;
	void *b[N + 2];

	ok(sfs_iobuf_init((uint64_t)N * SFS_IOBUF_BYTES) == 0, "reserve 3 regions");
	ok(sfs_iobuf_init(1ull << 40) == 0, "a second init changes nothing");
	bool aligned = true, apart = true;
	for (int i = 0; i < N + 2; i++) {
		b[i] = sfs_iobuf_get();
		aligned &= b[i] && ((uintptr_t)b[i] & 4095) == 0;
		if (b[i])
			memset(b[i], i + 1, SFS_IOBUF_BYTES);
	}
	for (int i = 0; i < N + 2; i++)
		apart &= b[i] && ((unsigned char *)b[i])[0] == i + 1 &&
			 ((unsigned char *)b[i])[SFS_IOBUF_BYTES - 1] == i + 1;
	ok(aligned, "8 buffers, each 4096-aligned");
	ok(apart, "each keeps its own bytes (no two overlap)");
	ok((char *)b[1] - (char *)b[0] == SFS_IOBUF_BYTES &&
	       ((uintptr_t)b[0] & ((2u << 20) - 1)) == 0,
	   "the first two are the halves of one 2 MiB-aligned region");
	sfs_iobuf_get_stats(&st);
	ok(st.regions == 3 && st.in_use == 6 && st.fallbacks == 2,
	   "6 from 3 regions, 2 past the range as plain allocations (%llu, %llu, %llu)",
	   (unsigned long long)st.regions, (unsigned long long)st.in_use,
	   (unsigned long long)st.fallbacks);
	long kib = huge_kib(b[0]);
	if (kib < 0)
		diag("no /proc/self/smaps: huge pages not checked");
	else if (kib == 0)
		diag(
		    "the region is not a huge page (THP off, or no free huge page): not a failure");
	else
		ok(kib >= 2048, "a touched region is a huge page (%ld KiB)", kib);

	sfs_iobuf_put(b[N]);
	sfs_iobuf_put(b[N + 1]);
	sfs_iobuf_put(NULL);
	sfs_iobuf_put(b[2]); /* region 1 now half used */
	sfs_iobuf_get_stats(&st);
	ok(st.regions == 3 && st.in_use == 5 && st.fallbacks == 0, "plain ones go back as such");
	void *again = sfs_iobuf_get();
	ok(again == b[2], "the free half of a half-used region is handed out first");
	sfs_iobuf_put(again);
	sfs_iobuf_put(b[3]);
	sfs_iobuf_get_stats(&st);
	ok(st.regions == 3 && st.in_use == 4 && st.kept_bytes == (2u << 20),
	   "a region with both halves back keeps its memory");
	ok(sfs_iobuf_trim() == (2u << 20), "until a trim gives its 2 MiB back");
	sfs_iobuf_get_stats(&st);
	ok(st.regions == 2 && st.in_use == 4, "then it holds none");
	void *r = sfs_iobuf_get();
	ok(r == b[2] || r == b[3], "a released region is reused");
	((char *)r)[0] = 7;
	sfs_iobuf_put(r);
	for (int i = 0; i < N; i++)
		if (i != 2 && i != 3)
			sfs_iobuf_put(b[i]);
	ok(sfs_iobuf_trim() == (6u << 20), "all back, a trim gives back all three regions");
	sfs_iobuf_get_stats(&st);
	ok(st.regions == 0 && st.in_use == 0 && st.fallbacks == 0 && st.kept_bytes == 0,
	   "nothing held");
	void *h = sfs_iobuf_alloc_huge((3u << 20) + 1);
	ok(h && ((uintptr_t)h & ((2u << 20) - 1)) == 0,
	   "a long-lived huge buffer is 2 MiB-aligned");
	if (h)
		memset(h, 1, 4u << 20); /* rounded up to two huge pages */
	free(h);
	int bad = copy_stream_failures();
	ok(bad == 0,
	   "sfs_copy_stream copies like memcpy at 10 sizes and 64 alignments, nothing "
	   "outside (%d wrong)",
	   bad);
	return tap_done();
}
