// SPDX-License-Identifier: Apache-2.0
/*
 * iobuf — see iobuf.h.
 *
 * Region r is arena + r * REGION; its buffers are halves 0 and 1. used[r]
 * has bit h set while half h is handed out. Regions below n_made have been
 * handed out at least once; of those, `partial` lists (with O(1) removal
 * through part_pos) the ones with exactly one half in use, `kept` the ones
 * with none whose memory is still there, `dropped` the ones with none whose
 * pages were given back (sfs_iobuf_trim). All under lock.
 */
#include "iobuf.h"
#include "log.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define REGION	   (2u * SFS_IOBUF_BYTES)
#define NOT_LISTED UINT32_MAX

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *arena;	   /* NULL: not reserved (every buffer a plain allocation) */
static uint32_t n_max;	   /* regions in the range */
static uint32_t n_made;	   /* regions handed out at least once: [0, n_made) */
static uint8_t *used;	   /* [n_max] halves in use, bits 0 and 1 */
static uint32_t *partial;  /* [n_max] regions with one half in use */
static uint32_t *part_pos; /* [n_max] index in partial, or NOT_LISTED */
static uint32_t n_partial;
static uint32_t *kept;	  /* [n_max] no half in use, memory kept */
static uint32_t *dropped; /* [n_max] no half in use, pages given back */
static uint32_t n_kept, n_dropped;
static uint64_t in_use, fallbacks;

int sfs_iobuf_init(uint64_t max_bytes)
{
	pthread_mutex_lock(&lock);
	if (arena) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	uint64_t n = (max_bytes + REGION - 1) / REGION;
	if (n == 0 || n > UINT32_MAX / 2) {
		pthread_mutex_unlock(&lock);
		return -EINVAL;
	}
	used = calloc(n, 1);
	partial = calloc(n, sizeof(*partial));
	part_pos = malloc(n * sizeof(*part_pos));
	kept = calloc(n, sizeof(*kept));
	dropped = calloc(n, sizeof(*dropped));
	size_t len = (size_t)n * REGION;
	char *start = used && partial && part_pos && kept && dropped
			  ? sfs_map_aligned(len, REGION, MAP_NORESERVE)
			  : MAP_FAILED;
	if (start == MAP_FAILED) {
		int rc = used && partial && part_pos && kept && dropped ? -errno : -ENOMEM;
		free(used), free(partial), free(part_pos), free(kept), free(dropped);
		used = NULL, partial = part_pos = kept = dropped = NULL;
		pthread_mutex_unlock(&lock);
		return rc;
	}
	if (madvise(start, len, MADV_HUGEPAGE) != 0) /* THP off in this kernel: 4 KiB pages */
		sfs_log(SFS_LOG_INFO, "iobuf", "no transparent huge pages for I/O buffers: %m");
	for (uint64_t r = 0; r < n; r++)
		part_pos[r] = NOT_LISTED;
	arena = start;
	n_max = (uint32_t)n;
	pthread_mutex_unlock(&lock);
	return 0;
}

static void partial_add(uint32_t r)
{
	part_pos[r] = n_partial;
	partial[n_partial++] = r;
}

static void partial_remove(uint32_t r)
{
	uint32_t at = part_pos[r], last = partial[--n_partial];
	partial[at] = last;
	part_pos[last] = at;
	part_pos[r] = NOT_LISTED;
}

void *sfs_iobuf_get(void)
{
	uint32_t r;
	unsigned half;

	pthread_mutex_lock(&lock);
	if (n_partial) { /* fill half-used regions first: no new memory */
		r = partial[n_partial - 1];
		partial_remove(r);
		half = used[r] & 1u ? 1 : 0;
	} else if (n_kept || n_dropped || n_made < n_max) {
		r = n_kept ? kept[--n_kept] : n_dropped ? dropped[--n_dropped] : n_made++;
		half = 0;
		partial_add(r);
	} else {
		fallbacks++;
		pthread_mutex_unlock(&lock);
		return aligned_alloc(4096, SFS_IOBUF_BYTES);
	}
	used[r] |= (uint8_t)(1u << half);
	in_use++;
	pthread_mutex_unlock(&lock);
	return arena + (size_t)r * REGION + (size_t)half * SFS_IOBUF_BYTES;
}

void sfs_iobuf_put(void *buf)
{
	char *b = buf;

	if (!b)
		return;
	/* arena and n_max are set once, before any buffer of the range exists. */
	if (!arena || b < arena || b >= arena + (size_t)n_max * REGION) {
		pthread_mutex_lock(&lock);
		fallbacks--;
		pthread_mutex_unlock(&lock);
		free(b);
		return;
	}
	size_t off = (size_t)(b - arena);
	uint32_t r = (uint32_t)(off / REGION);
	unsigned half = (unsigned)(off % REGION) / SFS_IOBUF_BYTES;

	pthread_mutex_lock(&lock);
	used[r] &= (uint8_t) ~(1u << half);
	in_use--;
	if (used[r]) {
		partial_add(r);
	} else {
		/* Both free: kept for the next get until sfs_iobuf_trim. Given
		 * back at once, every buffer the prefetch pool frees and gets
		 * again would be a fresh huge page, zeroed on its first touch. */
		partial_remove(r);
		kept[n_kept++] = r;
	}
	pthread_mutex_unlock(&lock);
}

void *sfs_iobuf_alloc_huge(size_t bytes)
{
	size_t len = (bytes + REGION - 1) / REGION * REGION;
	void *b = aligned_alloc(REGION, len);
	if (b)
		madvise(b, len, MADV_HUGEPAGE); /* not fatal: 4 KiB pages */
	return b;
}

uint64_t sfs_iobuf_trim(void)
{
	uint64_t freed = 0;

	pthread_mutex_lock(&lock);
	while (n_kept) {
		uint32_t r = kept[--n_kept];
		madvise(arena + (size_t)r * REGION, REGION, MADV_DONTNEED);
		dropped[n_dropped++] = r;
		freed += REGION;
	}
	pthread_mutex_unlock(&lock);
	return freed;
}

void sfs_iobuf_get_stats(struct sfs_iobuf_stats *out)
{
	pthread_mutex_lock(&lock);
	out->regions = n_made - n_dropped;
	out->in_use = in_use;
	out->fallbacks = fallbacks;
	out->kept_bytes = (out->regions * 2 - in_use) * SFS_IOBUF_BYTES;
	pthread_mutex_unlock(&lock);
}

void sfs_copy_stream(void *dst, const void *src, size_t n)
{
#if defined(__SSE2__)
	char *d = dst;
	const char *s = src;
	size_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (n < 4096 || head >= n) {
		memcpy(d, s, n);
		return;
	}
	memcpy(d, s, head);
	d += head;
	s += head;
	n -= head;
	for (; n >= 64; n -= 64, d += 64, s += 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	_mm_sfence();
#else
	memcpy(dst, src, n);
#endif
}
