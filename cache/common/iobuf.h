/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iobuf — 1 MiB buffers for the cache's O_DIRECT I/O and NFS fetches, two
 * to a 2 MiB transparent huge page.
 *
 * An O_DIRECT read or write pins its buffer's pages and hands the device one
 * segment per physically contiguous run. From 4 KiB pages a 1 MiB request is
 * 256 pins and up to 256 segments; from a huge page, one run: O_DIRECT reads
 * and writes from a huge page go faster, at less CPU.
 *
 * The buffers come from one address range reserved at the first
 * sfs_iobuf_init() (address space only: a page is memory once touched),
 * advised MADV_HUGEPAGE, carved in 2 MiB regions of two buffers each. A
 * region whose two buffers are both free keeps its memory for the next get
 * until sfs_iobuf_trim() (the prefetch pool calls it once idle); a free
 * buffer whose twin is in use stays resident (up to 1 MiB per such region)
 * and is the next one handed out. Past the range, or with huge pages off,
 * buffers are plain 4 KiB-page allocations: slower I/O, same results.
 *
 * Cost: the first touch of a region zeroes 2 MiB. A cold read that fills
 * prefetch_mem pays it once per daemon, and again after the pool has been
 * idle and trimmed. On a VM whose free 2 MiB blocks the host has taken back,
 * that makes the first cold read after mounting slower than from 4 KiB
 * pages, and the cold reads after it faster; on bare metal the zeroing is
 * small beside the reads.
 *
 * Owns: the address range, its regions, and the buffers no caller holds.
 * Does not own what is read into a buffer, nor how many may be in use (the
 * prefetch pool's budget, prefetch_mem).
 * Threading: any thread; one mutex, taken once per buffer got or put.
 */
#ifndef SFS_IOBUF_H
#define SFS_IOBUF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>

#define SFS_IOBUF_BYTES (1u << 20)

/* len bytes of private anonymous memory at an address aligned to align (a
 * power of two; len and align whole pages), mmap'd with extra_flags:
 * len + align are mapped and the ends unmapped. MAP_FAILED with errno on
 * failure. Header-only, for users that do not link iobuf.c (fs/inode/inode.c). */
static inline void *sfs_map_aligned(size_t len, size_t align, int extra_flags)
{
	char *m = mmap(NULL, len + align, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | extra_flags, -1, 0);
	if (m == MAP_FAILED)
		return MAP_FAILED;
	char *a = (char *)(((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1));
	if (a > m)
		munmap(m, (size_t)(a - m));
	munmap(a + len, (size_t)(m + align - a)); /* never empty: a < m + align */
	return a;
}

/* Reserve room for max_bytes of buffers (rounded up to 2 MiB regions).
 * The first call reserves; later calls change nothing. Returns 0, or -errno
 * (then every buffer is a plain allocation). */
int sfs_iobuf_init(uint64_t max_bytes);

/* A 1 MiB buffer, 4096-aligned, contents undefined; NULL on ENOMEM. */
void *sfs_iobuf_get(void);

/* Give back a buffer from sfs_iobuf_get (NULL: nothing). */
void sfs_iobuf_put(void *buf);

/* A long-lived buffer on huge pages outside the range (the direct-read
 * scratch, the packed writer's batch): bytes rounded up to whole 2 MiB
 * pages, 2 MiB-aligned, advised MADV_HUGEPAGE (plain pages where THP is
 * off). free() it. NULL on ENOMEM. */
void *sfs_iobuf_alloc_huge(size_t bytes);

/* Give back the memory of every region with no buffer in use (a region
 * with one in use keeps both halves). Returns the bytes given back. */
uint64_t sfs_iobuf_trim(void);

/* Copy n bytes into memory the CPU will not read again soon (a buffer a
 * device reads by DMA): non-temporal stores where the CPU has them, so
 * the copy neither reads each destination line first nor evicts the
 * caller's hot lines. Any alignment; the stores are fenced on return. */
void sfs_copy_stream(void *dst, const void *src, size_t n);

struct sfs_iobuf_stats {
	uint64_t regions;    /* 2 MiB regions whose memory is held (in use, or kept) */
	uint64_t in_use;     /* buffers handed out from the huge-page range */
	uint64_t fallbacks;  /* buffers handed out as plain allocations (range full or none) */
	uint64_t kept_bytes; /* memory of the held regions not handed out (free halves) */
};
void sfs_iobuf_get_stats(struct sfs_iobuf_stats *out);

#endif
