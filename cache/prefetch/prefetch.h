/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch — per-file fetch of 1 MiB chunks: from the local store when it
 * has them (verified), else from the origin pool; whole-shard prefetch and a
 * readahead window that keep every node busy ahead of the reader; fetched
 * chunks are offered to the store.
 *
 * Owns: the chunk buffers in memory (bounded by prefetch_mem), the per-file
 * chunk table, sequential detection, the readahead window, the shard pump
 * (every chunk of a file queued, bounded), and the check that bytes from
 * the origin still belong to the file version being read.
 * Does not own: the connections (origin), chunk files and checksums (store),
 * FUSE replies (fs).
 *
 * Threading: all functions may be called from any thread except where noted.
 * sfs_pf_read() and sfs_pf_read_into() block until the chunks they need are
 * fetched or loaded; sfs_pf_read_async() blocks the same way unless it
 * returns -EINPROGRESS; sfs_pf_file_fetch_ahead() waits up to its wait_ms.
 * Fetch completions run on origin I/O threads and never block. Each file has
 * one mutex; the buffer pool has one, a leaf, which may be taken with a
 * file's held (chunk_start) but never the other way round.
 */
#ifndef SFS_PREFETCH_H
#define SFS_PREFETCH_H

#include "../nfs/origin.h"
#include "../store/store.h"

#include <stdint.h>
#include <sys/uio.h>

#define SFS_CHUNK_SHIFT	  20
#define SFS_CHUNK_BYTES	  (1u << SFS_CHUNK_SHIFT)
#define SFS_PF_MAX_WINDOW 64 /* chunks of readahead per file, at most */

enum sfs_prefetch_mode {
	SFS_PREFETCH_READAHEAD, /* a sliding window ahead of sequential readers */
	SFS_PREFETCH_SHARD,	/* open() of a file <= prefetch_max fetches it whole */
	SFS_PREFETCH_OFF,	/* only what readers ask for */
};

struct sfs_prefetch_conf {
	uint64_t mem_bytes;	/* budget for chunk buffers (readahead stops at it) */
	unsigned window_chunks; /* readahead depth for a sequential reader; 0 = auto */
	enum sfs_prefetch_mode mode;
	uint64_t shard_max_bytes; /* SHARD: files up to this size are fetched whole */
	sfs_store *store;	  /* NULL: no local cache */
};

typedef struct sfs_prefetch sfs_prefetch;
typedef struct sfs_pf_file sfs_pf_file;

/* Counters for the stats file (atomic reads). */
struct sfs_prefetch_stats {
	uint64_t inflight_bytes;    /* chunk bytes being fetched now */
	uint64_t buffer_bytes;	    /* chunk buffers allocated */
	uint64_t over_budget_bytes; /* of those, idle 1 MiB buffers kept past mem_bytes
				       for readers' own chunks (an eighth of the budget, 2..32; read
				       from the pool, not counted) */
	uint64_t fetched_bytes;	    /* total bytes fetched from the origin */
	uint64_t readahead_chunks;  /* chunks fetched before anyone asked */
	uint64_t wasted_chunks;	    /* readahead chunks dropped unread */
	uint64_t files_opened;
	uint64_t shard_files;	       /* files fetched whole (shard prefetch or warm) */
	uint64_t hit_bytes;	       /* bytes read from the store */
	uint64_t miss_bytes;	       /* bytes readers needed that came from the origin */
	uint64_t stale_errors;	       /* reads refused: the file changed under an open */
	uint64_t direct_reads;	       /* reads served straight from the store (small files,
					  random readers), no chunk buffer */
	uint64_t preloads;	       /* small versions read from the store at open */
	uint64_t preload_misses;       /* of those, reads that did not check (fetched again) */
	uint64_t preload_unread;       /* of those, dropped at the last close unread */
	uint64_t direct_scratch_bytes; /* scratch of those reads: in flight, and kept */
	uint64_t direct_fetches;       /* reads of random readers without a store served
					  straight from the origin (their bytes only) */
	uint64_t write_pinned_bytes;   /* chunk buffers waiting for their cache write */
	/* Bytes fetched from the origin that no reader got and no cache kept,
	 * by cause: chunks read ahead and never read, and the rest of chunks
	 * that readers read only in part (a small read, a file in the page
	 * cache, a reader that stopped). Counted per 64 KiB block when the
	 * chunk is freed. */
	uint64_t undelivered_unread_bytes;
	uint64_t undelivered_rest_bytes;
	uint64_t write_skipped_bytes; /* chunks not offered to the cache: the writes
					 waiting already held their share of the budget */
};

int sfs_prefetch_open(const struct sfs_prefetch_conf *conf, sfs_origin *origin, sfs_prefetch **out);
/* Stop the helper threads (shard pump, cache loaders) after they finish
 * what is queued; call while the origin and the store are still open. */
void sfs_prefetch_stop(sfs_prefetch *pf);
void sfs_prefetch_close(sfs_prefetch *pf);
void sfs_prefetch_get_stats(sfs_prefetch *pf, struct sfs_prefetch_stats *out);

/* Free the pooled chunk buffers (kept for reuse, up to mem_bytes, plus up
 * to an eighth of it, 32 MiB at most, that readers' own chunks took past it) when no
 * buffer was taken or given back for idle_ms: a daemon gone quiet after a
 * burst gives them back to the system instead of holding up to mem_bytes
 * resident. Buffers in use stay. Returns the bytes freed, counting the
 * buffers made to size (small files) that went back to malloc since the
 * last idle call: malloc keeps those until the caller's malloc_trim (the
 * daemon's memtrim, which trims when this returns non-zero). Any thread. */
uint64_t sfs_prefetch_release_idle(sfs_prefetch *pf, uint64_t idle_ms);

/*
 * Fetch state of one version of a file (shared by every open of it): reads
 * are clamped to v->size, chunks are looked up in and written to the store
 * under its key, and origin replies whose attributes show another version
 * fail with -ESTALE instead of mixing bytes. Returns 0 or -ENOMEM. The
 * caller holds one reference; drop it with sfs_pf_file_unref().
 */
int sfs_pf_file_open_version(sfs_prefetch *pf, const struct sfs_fh *fh,
			     const struct sfs_file_version *v, sfs_pf_file **out);

/* An open of f: in SHARD mode a file up to shard_max_bytes starts its
 * whole-file fetch. */
void sfs_pf_file_opened(sfs_pf_file *f);
/* The same without the whole-file fetch: an open by a tool that says what
 * it wants by ioctl (a warm-up's fetches must go as background ones), or
 * one the kernel reads from the cache itself (passthrough). */
void sfs_pf_file_opened_no_prefetch(sfs_pf_file *f);
/* The whole-file fetch sfs_pf_file_opened starts (after
 * sfs_pf_file_opened_no_prefetch, for an open that turned out to need it). */
void sfs_pf_file_prefetch_whole(sfs_pf_file *f);

/* A new read-only fd of f's cached data file for a passthrough open
 * (sfs_store_obj_backing_fd: whole and verified versions only), after
 * an open of f. Returns the fd, -ENOENT (no store object, not wholly
 * cached), -EAGAIN (not verified yet) or -errno. */
int sfs_pf_file_backing_fd(sfs_pf_file *f);
/* The same answer without opening anything (0: it would give an fd). */
int sfs_pf_file_backing_check(sfs_pf_file *f);

/*
 * An open after which the kernel will read f (its page cache holds none of
 * it): a small version that the store holds packed starts its disk read
 * now, so that the read overlaps the OPEN's reply and the READ that follows;
 * the first read of it takes the bytes (sfs_pf_read_async's direct path), or
 * the last close drops them. Nothing otherwise. Any thread; the caller holds
 * an open of f (sfs_pf_file_opened).
 */
void sfs_pf_file_preload(sfs_pf_file *f);

/* Fetch every chunk of f that the store lacks (warm-up), whatever its size;
 * only the first call starts it. Reports whether chunks are still being
 * fetched or written. Returns 0, or -ENOTSUP without a store. */
int sfs_pf_file_warm(sfs_pf_file *f, bool *active);

/* Bytes of f in the store (0 without a store). */
uint64_t sfs_pf_file_cached_bytes(sfs_pf_file *f);
void sfs_pf_file_ref(sfs_pf_file *f);
void sfs_pf_file_unref(sfs_pf_file *f);

/* One open of f ended (pairs with sfs_pf_file_opened). When none is left,
 * its shard pump stops and every chunk nobody pins or fetches is freed;
 * fetches in flight finish and are freed with the file. */
void sfs_pf_file_drop_idle(sfs_pf_file *f);

/* --- Hints (fs/hints/hints.c): fetching ahead of a reader that told its order ---
 *
 * A hint list holds each file version it fetches ahead with
 * sfs_pf_file_hint_hold() (an open of its own: the file's chunks stay for
 * the reader, its store object stays, other files' demand does not evict
 * them), starts the fetch of an item's range with sfs_pf_file_fetch_ahead()
 * and lets go with sfs_pf_file_hint_release() once the reader read the item
 * or passed it. Reads of a held file are reported to the observer.
 */

/* Called after each read of a file a hint list holds, on the reader's
 * thread, with no prefetch lock held: [off, end) of f was asked for. */
typedef void (*sfs_pf_read_observer)(void *arg, sfs_pf_file *f, uint64_t off, uint64_t end);
/* Called when a chunk of a file a hint list holds has been fetched (its
 * bytes are in memory, or it failed), on the I/O thread that got them,
 * with no prefetch lock held. */
typedef void (*sfs_pf_fetch_observer)(void *arg, sfs_pf_file *f);
/* Set once, before any read. */
void sfs_prefetch_set_observers(sfs_prefetch *pf, sfs_pf_read_observer read,
				sfs_pf_fetch_observer fetched, void *arg);

/* The file of f: (fsid, fileid) of its version. Any thread, no lock. */
void sfs_pf_file_id(const sfs_pf_file *f, uint64_t *fsid, uint64_t *fileid);

/* Whether a chunk of [off, end) of f is still being fetched or loaded. */
bool sfs_pf_file_range_busy(sfs_pf_file *f, uint64_t off, uint64_t end);

void sfs_pf_file_hint_hold(sfs_pf_file *f);
/* Pairs with sfs_pf_file_hint_hold. Unlike sfs_pf_file_drop_idle, chunks
 * of a file other opens still hold stay (they may be other items'); with
 * no open left they go as at a last close. */
void sfs_pf_file_hint_release(sfs_pf_file *f);

/* What sfs_pf_file_fetch_ahead found or did for [off, end). */
struct sfs_pf_ahead {
	uint64_t started_bytes; /* chunk bytes it asked the origin for */
	unsigned pending;	/* chunks it could not start yet (the budget) */
	bool cached;		/* every chunk of the range is in the store */
	bool busy;		/* chunks of the range are still being fetched or loaded */
};

/*
 * Start fetching the chunks of [off, end) that are neither in memory nor in
 * the store, as readahead (never a reader's demand), the range's own blocks
 * first; then wait up to wait_ms for none of its chunks to be on its way.
 * Chunks the budget has no room for are counted in out->pending: call
 * again later. Returns 0, or -EINVAL for a range past the end of f. f must
 * be held (sfs_pf_file_hint_hold).
 */
int sfs_pf_file_fetch_ahead(sfs_pf_file *f, uint64_t off, uint64_t end, unsigned wait_ms,
			    struct sfs_pf_ahead *out);

/* Bytes of a read, as up to three pieces of pinned chunk buffers, or one
 * piece of a scratch buffer the view holds (the direct path: no pins). */
struct sfs_pf_view {
	struct iovec iov[3];
	int n_iov;
	size_t bytes;
	size_t cache_bytes; /* of bytes: served from the local cache (per-job accounting) */
	void *pins[3];	    /* private: chunks (and their file) held until sfs_pf_view_release() */
	int n_pins;
	void *scratch; /* private: a direct read's buffer, given back by sfs_pf_view_release() */
};

/*
 * Make [off, off + len) available (len <= 2 MiB), fetching what is missing
 * and starting readahead. Fills v with pointers into chunk buffers, pinned
 * until sfs_pf_view_release(), or, for a file of one chunk or less and for
 * a reader that jumps around, into a scratch buffer with bytes read and
 * verified from the store for this call, also held until
 * sfs_pf_view_release(). Returns bytes available (short only at end of file)
 * or -errno (-EIO when no node could serve). Blocks.
 */
ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v);

/*
 * sfs_pf_read into the caller's buffer, for callers whose buffer is special
 * (pinned for DMA): [off, off + len) (len <= 1 MiB, crossing at most one
 * chunk boundary) lands in buf, contiguous, at *data. When the store has the
 * range and no chunk of it is in memory, the store reads and verifies it
 * straight into buf (no other copy): buf must then be 4096-aligned, and
 * *data is buf + (off % 16 KiB) (SFS_STORE_SUB_SHIFT), or elsewhere in buf
 * for a file of one chunk or less (its packed record is read whole). Else
 * the bytes come as for sfs_pf_read (fetched when missing, a checksum
 * failure is a miss) and are copied to buf + (off % 16 KiB). buf_len must
 * hold (off % 16 KiB) + len + 20 KiB, and a packed record (else -EINVAL).
 * *cache_bytes: how many came from the local cache. Returns bytes (short
 * only at end of file) or -errno. Blocks; any thread, several at once.
 */
ssize_t sfs_pf_read_into(sfs_pf_file *f, uint64_t off, size_t len, void *buf, size_t buf_len,
			 const char **data, size_t *cache_bytes);

/* Called once with the outcome of an asynchronous read: n bytes (0 at end
 * of file) in v, or -errno. arg is the fetch's copy of the caller's context
 * (arg_len bytes, max-aligned); it and the bytes are valid only during the
 * call. */
typedef void (*sfs_pf_read_done)(void *arg, ssize_t n, const struct sfs_pf_view *v);

/*
 * sfs_pf_read, except that a read whose bytes are not at hand is answered
 * from the thread that gets them: one that must come from the origin
 * without a chunk (no store: a reader that jumps around, or a file of one
 * chunk or less) from the I/O thread that gets the reply, one that waits
 * for a chunk being fetched or loaded from the thread that completes it.
 * Then it returns -EINPROGRESS and done(copy, ...) runs once, later, on
 * that thread (or before it returns when the pool is closing). Any other return is as
 * sfs_pf_read's, and done is not called. The fetch holds the file until
 * done has returned; its view pins nothing (no sfs_pf_view_release).
 */
ssize_t sfs_pf_read_async(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v,
			  sfs_pf_read_done done, const void *arg, size_t arg_len);

/*
 * sfs_pf_read_async whose outcome always goes to done: at once, on this
 * thread, when the bytes are at hand (their view released here after done
 * returns), else later as sfs_pf_read_async says. The caller's read is
 * answered without another call into prefetch. arg_len as for
 * sfs_pf_read_async (done gets the caller's arg when it runs here).
 */
void sfs_pf_read_answer(sfs_pf_file *f, uint64_t off, size_t len, sfs_pf_read_done done, void *arg,
			size_t arg_len);

/* arg_len at most this (a longer one is answered as sfs_pf_read would):
 * sfs_pf_read_async keeps a copy of the caller's context with the fetch (no
 * allocation of the caller's own per read). */
#define SFS_PF_ASYNC_ARG_MAX 64
void sfs_pf_view_release(sfs_pf_file *f, struct sfs_pf_view *v);

#endif
