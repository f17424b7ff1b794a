/* SPDX-License-Identifier: Apache-2.0 */
/*
 * iobuf — 1 MiB buffers for the cache's O_DIRECT I/O and NFS fetches, two
 * to a 2 MiB transparent huge page.
 *
 * An O_DIRECT read or write pins its buffer's pages and hands the device one
 * segment per physically contiguous run. From 4 KiB pages a 1 MiB request is
 * 256 pins and up to 256 segments; from a huge page, one run. Measured on
 * the 2-core VM (virtio disk, queue depth 1): O_DIRECT 1 MiB reads 1.16-1.20
 * GB/s from 4 KiB pages against 2.24-2.78 GB/s from a huge page, writes 2.7
 * against 3.4-3.7 GB/s, at half the CPU; 128 KiB reads 0.70 against 1.1 GB/s.
 *
 * The buffers come from one address range reserved at the first
 * sfs_iobuf_init() (address space only: a page is memory once touched),
 * advised MADV_HUGEPAGE, carved in 2 MiB regions of two buffers each. A
 * region whose two buffers are both free gives its memory back at once
 * (MADV_DONTNEED); a free buffer whose twin is in use stays resident (up to
 * 1 MiB per such region) and is the next one handed out. Past the range, or
 * with huge pages off, buffers are plain 4 KiB-page allocations: slower
 * I/O, same results. Pooling for reuse is the caller's (prefetch.c).
 *
 * Threading: any thread; one mutex, taken once per buffer got or put.
 */
#ifndef SFS_IOBUF_H
#define SFS_IOBUF_H

#include <stddef.h>
#include <stdint.h>

#define SFS_IOBUF_BYTES (1u << 20)

/* Reserve room for max_bytes of buffers (rounded up to 2 MiB regions).
 * The first call reserves; later calls change nothing. Returns 0, or -errno
 * (then every buffer is a plain allocation). */
int sfs_iobuf_init(uint64_t max_bytes);

/* A 1 MiB buffer, 4096-aligned, contents undefined; NULL on ENOMEM. */
void *sfs_iobuf_get(void);

/* Give back a buffer from sfs_iobuf_get (NULL: nothing). */
void sfs_iobuf_put(void *buf);

struct sfs_iobuf_stats {
	uint64_t regions;   /* 2 MiB regions holding at least one buffer in use or kept */
	uint64_t in_use;    /* buffers handed out from the huge-page range */
	uint64_t fallbacks; /* buffers handed out as plain allocations (range full or none) */
};
void sfs_iobuf_get_stats(struct sfs_iobuf_stats *out);

#endif
