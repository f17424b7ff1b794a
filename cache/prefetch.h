/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch — per-file fetch of 1 MiB chunks from the origin pool, with a
 * readahead window that keeps every node busy behind one sequential reader.
 *
 * Owns: the chunk buffers in memory (bounded by prefetch_mem), the per-file
 * chunk table, sequential detection and the readahead window.
 * Does not own: the connections (origin), the local NVMe store (store; a
 * later layer between this and origin), FUSE replies (fs).
 *
 * Threading: all functions may be called from any thread except where noted.
 * sfs_prefetch_read() blocks until the chunks it needs are fetched; fetch
 * completions run on origin I/O threads and never block. Each file has one
 * mutex (leaf lock); the buffer pool has one (leaf, never held with a file's).
 */
#ifndef SFS_PREFETCH_H
#define SFS_PREFETCH_H

#include "origin.h"

#include <stdint.h>
#include <sys/uio.h>

#define SFS_CHUNK_SHIFT 20
#define SFS_CHUNK_BYTES (1u << SFS_CHUNK_SHIFT)
#define SFS_PF_MAX_WINDOW 64 /* chunks of readahead per file, at most */

struct sfs_prefetch_conf {
	uint64_t mem_bytes;	 /* budget for chunk buffers (readahead stops at it) */
	unsigned window_chunks;	 /* readahead depth for a sequential reader; 0 = auto */
};

typedef struct sfs_prefetch sfs_prefetch;
typedef struct sfs_pf_file sfs_pf_file;

/* Counters for the stats file (atomic reads). */
struct sfs_prefetch_stats {
	uint64_t inflight_bytes;  /* chunk bytes being fetched now */
	uint64_t buffer_bytes;	  /* chunk buffers allocated */
	uint64_t fetched_bytes;	  /* total bytes fetched from the origin */
	uint64_t readahead_chunks; /* chunks fetched before anyone asked */
	uint64_t wasted_chunks;	  /* readahead chunks dropped unread */
	uint64_t files_opened;
};

int sfs_prefetch_open(const struct sfs_prefetch_conf *conf, sfs_origin *origin,
		      sfs_prefetch **out);
void sfs_prefetch_close(sfs_prefetch *pf);
void sfs_prefetch_get_stats(sfs_prefetch *pf, struct sfs_prefetch_stats *out);

/*
 * Fetch state of one file (shared by every open of it). size is the file
 * size at open; reads are clamped to it. Returns 0 or -ENOMEM. The caller
 * holds one reference; drop it with sfs_pf_file_unref().
 */
int sfs_pf_file_open(sfs_prefetch *pf, const struct sfs_fh *fh, uint64_t size, sfs_pf_file **out);
void sfs_pf_file_ref(sfs_pf_file *f);
void sfs_pf_file_unref(sfs_pf_file *f);

/* Free every chunk of f that nobody pins and nobody is fetching (the last
 * opener closed it; fetches in flight finish and are freed with the file). */
void sfs_pf_file_drop_idle(sfs_pf_file *f);

/* Bytes of a read, as up to three pieces of pinned chunk buffers. */
struct sfs_pf_view {
	struct iovec iov[3];
	int n_iov;
	size_t bytes;
	void *pins[3]; /* private: chunks held until sfs_pf_view_release() */
	int n_pins;
};

/*
 * Make [off, off + len) available (len <= 2 MiB), fetching what is missing
 * and starting readahead. Fills v with pointers into chunk buffers, pinned
 * until sfs_pf_view_release(). Returns bytes available (short only at end
 * of file) or -errno (-EIO when no node could serve). Blocks.
 */
ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v);
void sfs_pf_view_release(sfs_pf_file *f, struct sfs_pf_view *v);

#endif
