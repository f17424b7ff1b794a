/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pagecache — which opens bypass the kernel's page cache (FOPEN_DIRECT_IO),
 * the page_cache= option.
 *
 * page_cache=auto reads a file over one chunk direct_io during its first
 * epoch (the opens that overlap its first since the kernel took the inode
 * in, or since it changed; the caller tracks that per inode), and through
 * the page cache after it. A first read cannot hit the page cache, and
 * filling it costs the daemon's reply a copy into freshly allocated pages
 * that a data set read once, or larger than memory, never uses. Later opens
 * use the page cache, so a file read again while the kernel remembers it
 * is served from it from its third read on.
 *
 * Without the kernel's readahead, a direct_io reader pays a FUSE round trip
 * per read() it makes: small reads run slower direct_io than buffered,
 * while large ones run faster direct_io, at less daemon CPU per byte
 * (tools/bench/benchmarks.md). So the mount learns its readers: a direct_io
 * open that made at least SFS_PC_MIN_READS reads averaging under
 * SFS_PC_SMALL_READ scores as small (a moving share, 1/8 per open); while
 * most recent ones were small, first epochs go through the page cache too,
 * except every SFS_PC_PROBE_EVERY-th, which goes direct_io to see whether
 * the readers changed.
 *
 * Files of one chunk or less always go through the page cache: the kernel
 * reads such a file whole in one request and knows where it ends.
 *
 * Owns: the decision at each open and the mount's moving score of its
 * readers. Does not own: whether an open is in a file's first epoch (the
 * caller tracks it per inode: fs/ops/open_file.c), counting an open's
 * reads (fs/ops/file.c), the reply.
 * Threading: any thread; the policy's state is atomics (its updates may
 * race and lose one score step, which the next open makes up).
 */
#ifndef SFS_PAGECACHE_H
#define SFS_PAGECACHE_H

#include <stdbool.h>
#include <stdint.h>

#define SFS_PC_SMALL_READ  (64u << 10) /* a direct_io read under this is small */
#define SFS_PC_MIN_READS   8	       /* fewer reads in an open say nothing */
#define SFS_PC_SMALL_SHARE 128	       /* of 256: small readers dominate from here */
#define SFS_PC_PROBE_EVERY 32	       /* while they do, one first epoch in this many */

/* page_cache=: whether file data goes through the kernel's page cache. */
enum sfs_page_cache {
	SFS_PAGE_CACHE_AUTO,   /* bypassed by a big file's first epoch, used after */
	SFS_PAGE_CACHE_ALWAYS, /* every open buffered (FOPEN_DIRECT_IO never) */
	SFS_PAGE_CACHE_NEVER,  /* every open direct_io */
};

struct sfs_pc_policy {
	enum sfs_page_cache mode; /* set at start, then read-only */
	bool direct_mmap;	  /* set once the kernel answered INIT (fusedev.h) */
	uint32_t small_share;	  /* atomic: moving share of small direct readers, of 256 */
	uint32_t probes;	  /* atomic: first epochs seen while small readers dominate */
};

/* Whether an open of a file of size bytes, first_epoch as above, is
 * direct_io. direct_mmap false (a kernel that cannot map direct_io files
 * shared): auto never is. */
bool sfs_pc_open_direct(struct sfs_pc_policy *p, uint64_t size, bool first_epoch);

/* A direct_io open closed after reads read() calls asking for bytes in all
 * (the sizes asked, not served: a read at EOF asks a full buffer). */
void sfs_pc_direct_closed(struct sfs_pc_policy *p, uint64_t reads, uint64_t bytes);

/* The moving share of small direct_io readers, 0..256 (stats). */
uint32_t sfs_pc_small_share(const struct sfs_pc_policy *p);

#endif
