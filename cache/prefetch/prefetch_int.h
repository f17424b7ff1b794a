/* SPDX-License-Identifier: Apache-2.0 */
/*
 * prefetch — chunk fetching, readahead, whole-shard prefetch and the glue
 * to the store. See prefetch.h for the contract (what it owns and does not).
 * This is the module's one private header: its structures, its lock order,
 * and what each file owns (each file's header says more):
 *   prefetch.c   the pool; a file version's fetch state, its opens, its end
 *   read.c       the read plan (direct path, direct fetch, chunk path), views
 *   chunks.c     a chunk's life: made, fetched, loaded, finished, freed; waiters
 *   readahead.c  the readahead window, the shard pump, warm-ups, the pump thread
 *   offer.c      the offer of fetched chunks to the store (write-behind)
 *   vtable.c     the version table: one fetch state per version
 *   hinted.c     fetching ahead for hint lists
 *   buffers.c    chunk buffers and their budget, the direct path's scratch
 *
 *   sfs_prefetch ──buf_lock───> free list of SFS_CHUNK_BYTES buffers, and the bytes of
 *                              shorter chunks' buffers (budget: mem_bytes over both)
 *               ──files_lock─> every live sfs_pf_file (for reclaim and the pump thread)
 *   sfs_pf_file  ──lock──────> chunks[]: pf_chunk { index, state, buf, refs, parts[] }
 *                              obj: the store object of this file version (or NULL)
 *
 * Where a read's chunk comes from, in order: a chunk in memory (being
 * fetched, or fetched and not yet dropped); the store, read into a buffer
 * and checked against its XXH3-64 every time it is loaded (but a VERIFIED
 * chunk where the scrubber runs: store.h, trust_verified); else the origin.
 * Chunks from the origin go to the store (write-behind; the buffer stays
 * pinned until the write is durable). Small files and readers that jump
 * around take the direct path instead (sfs_pf_read): no chunk, the store's
 * 16 KiB blocks the read touches read and checked into a scratch buffer,
 * or without a store just the bytes asked for fetched from the origin.
 * (Splicing the cache file into /dev/fuse was tried, to save a copy: libfuse
 * 3.14's splice path gave short replies under many concurrent readers,
 * which the kernel takes for EOF, and a spliced byte is never checked. One
 * verified copy is the price.)
 *
 * A chunk is LOADING (store read) or FETCHING (origin) until it is READY
 * (bytes valid up to len) or FAILED (err). Readers pin chunks (refs) while
 * the kernel copies from them; a store write pins one too. Every chunk being
 * loaded, fetched or written holds a reference on its file, so a file closed
 * early is freed when its last operation lands; its shard pump stops at close.
 *
 * Lock order: file->lock, then files_lock (other files are then only
 * try-locked), then the store's and origin's locks (leaves, inside their
 * calls); buf_lock is a leaf.
 */
#ifndef SFS_PREFETCH_INT_H
#define SFS_PREFETCH_INT_H

#include "prefetch.h"
#include "../common/iobuf.h"
#include "../common/blocking.h"
#include "../common/hash.h"
#include "../common/htab.h"
#include "../common/log.h"

#include <assert.h>
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum chunk_state { CHUNK_LOADING, CHUNK_FETCHING, CHUNK_READY, CHUNK_FAILED };

/* Threads that read cached chunks ahead of sequential readers (the reader's
 * own chunk is read on its own thread). */
#define SFS_PF_LOADERS 2

/* 1 MiB buffers that readers' own chunks took past the budget, kept for the
 * next such chunk instead of unmapped: when cache writes hold the budget,
 * readers fetch their chunks themselves (demand), and a fresh mmap'd buffer
 * per chunk costs a page fault and a zeroed page per 4 KiB, and an munmap.
 * At most this many MiB stay past the budget (released with the pool when
 * idle). */
#define SFS_PF_OVER_BUFS 32

struct pf_chunk {
	struct sfs_pf_file *file; /* set at creation */
	uint64_t index;		  /* set at creation */
	/* protected by file->lock */
	enum chunk_state state;
	int err;
	uint32_t len;	    /* valid bytes once READY */
	uint32_t fetch_len; /* bytes asked for */
	unsigned refs;	    /* views pinning the buffer, plus a store write */
	unsigned parts_pending;
	uint64_t parts_done; /* bit p: parts[p] landed (chunks of <= 64 parts) */
	bool used;	     /* a reader asked for it */
	uint16_t delivered;  /* bit b: a reader got bytes of 64 KiB block b */
	bool consumed;	     /* a read ended at its last byte: the reader moved on */
	bool readahead;	     /* started before anyone asked */
	bool background;     /* its parts were submitted as background (origin.h) */
	bool in_store;	     /* its bytes are durable in the store */
	bool loaded;	     /* its bytes were read from the store */
	sfs_store_obj *obj;  /* LOADING: the store object, referenced */
	char *buf;
	uint32_t buf_bytes; /* set at creation: buf's size (chunk_buf_bytes) */
	/* For the store, filled as the bytes land (chunk_place): bit k of
	 * sub_known (atomic) says sub_xxh64[k] is XXH3-64 of sub-block k. */
	uint64_t sub_known;
	uint64_t sub_xxh64[SFS_CHUNK_BYTES >> SFS_STORE_SUB_SHIFT];
	unsigned n_parts;
	struct sfs_origin_req parts[]; /* owned by origin while FETCHING */
};

struct sfs_pf_file {
	sfs_prefetch *pf;		 /* set at open */
	struct sfs_fh fh;		 /* set at open */
	uint64_t size;			 /* set at open */
	struct sfs_file_version version; /* set at open (size only if unknown) */
	bool check_version;		 /* set at open */
	/* protected by lock: the store object, referenced (taken when f is made
	 * and at an open that finds none, dropped at the last close); NULL
	 * without a store or while nobody has f open. Chunks being loaded hold their own
	 * reference (c->obj), writes theirs. */
	sfs_store_obj *obj;
	pthread_mutex_t lock;
	pthread_cond_t cond; /* a chunk finished, or a pin was dropped */
	/* protected by lock */
	unsigned refs;	     /* openers + chunks in flight or being written */
	unsigned openers;    /* sfs_pf_file_opened() minus closes (drop_idle) */
	uint64_t next_seq;   /* chunk a sequential reader asks for next */
	unsigned seq_run;    /* reads in a row that started at next_seq or just after */
	int rand_score;	     /* recent share of reads that were not steps, 0..256 */
	bool shard;	     /* the pump fetches every chunk the store lacks */
	bool warmed;	     /* sfs_pf_file_warm() started a whole-file fetch */
	bool read_seen;	     /* a read came through the chunk path: fetches are a reader's */
	uint64_t shard_next; /* next chunk the pump considers */
	struct pf_chunk **chunks;
	size_t n_chunks, cap_chunks;
	struct pf_waiter *waiters; /* reads answered when their chunk's bytes land */
	/* Holds of hint lists (sfs_pf_file_hint_hold), each also an opener;
	 * written under lock, read without it on the read path (atomic). */
	unsigned hint_holds;
	/* protected by lock: the whole version being read from the store ahead
	 * of its first read (sfs_pf_file_preload): the read and its scratch,
	 * taken by that read or finished at the last close. */
	struct sfs_seg_aio *pre_aio;
	void *pre_buf;
	bool pre_busy;			 /* a preload is being started, lock not held */
	struct sfs_pf_file *prev, *next; /* protected by pf->files_lock */
	struct sfs_pf_file *vnext;	 /* protected by pf->files_lock: version table chain */
	unsigned vpins; /* atomic: vtable_find between files_lock and f->lock; file_free waits */
};

/*
 * The invariants of chunks and files, stated as asserts at every change
 * (as SQLite's pcache1 does); all of them with the file's lock held.
 *
 * A chunk's state changes only through chunk_move, which asserts where it
 * comes from: LOADING -> READY (checked in the store), LOADING -> FETCHING
 * (a miss), FETCHING -> READY or FAILED (its last part landed). READY and
 * FAILED are terminal. A chunk's pins (refs: views, waiters, a store write)
 * go through chunk_pin and chunk_unpin and never below zero; a file's
 * references (openers' and holds' callers, chunks in flight, writes, views,
 * waiters, fetches) through file_get_locked and file_put_locked, never
 * taken on a file whose count reached zero (it is being freed). chunk_free
 * asserts a terminal state, no pin and no waiter; file_free no reference,
 * no waiter and no hint hold.
 */
static inline bool chunk_terminal(enum chunk_state s)
{
	return s == CHUNK_READY || s == CHUNK_FAILED;
}

static inline void chunk_move(struct pf_chunk *c, enum chunk_state from, enum chunk_state to)
{
	assert(c->state == from);
	assert((from == CHUNK_LOADING && (to == CHUNK_READY || to == CHUNK_FETCHING)) ||
	       (from == CHUNK_FETCHING && chunk_terminal(to)));
	c->state = to;
}

static inline void chunk_pin(struct pf_chunk *c)
{
	c->refs++;
	assert(c->refs != 0);
}

static inline void chunk_unpin(struct pf_chunk *c)
{
	assert(c->refs > 0);
	c->refs--;
}

static inline void file_get_locked(struct sfs_pf_file *f)
{
	assert(f->refs > 0);
	f->refs++;
}

/* Returns whether that was the last reference: the caller frees f
 * (file_free) once it has let go of f->lock. */
static inline bool file_put_locked(struct sfs_pf_file *f)
{
	assert(f->refs > 0);
	return --f->refs == 0;
}

/* The version table's bucket of (fsid, fileid): the low bits of this. */
static inline uint64_t vtable_hash(uint64_t fsid, uint64_t fileid)
{
	return ((fileid ^ (fsid * 0x9E3779B97F4A7C15ull)) * 0xC2B2AE3D27D4EB4Full) >> 32;
}

static inline uint64_t vtable_file_hash(const struct sfs_pf_file *f)
{
	return vtable_hash(f->version.fsid, f->version.fileid);
}

SFS_HTAB_DEFINE(pf_vtable, struct sfs_pf_file, vnext, vtable_file_hash, 1);

/* How an asynchronous read is answered: the caller's done() and its copy
 * of the caller's context (sfs_pf_read_async checked its length). */
struct pf_answer {
	sfs_pf_read_done done;
	_Alignas(max_align_t) unsigned char arg[SFS_PF_ASYNC_ARG_MAX];
};

static inline void answer_set(struct pf_answer *a, sfs_pf_read_done done, const void *arg,
			      size_t len)
{
	a->done = done;
	memcpy(a->arg, arg, len);
}

/* A read of one chunk's range answered from the thread that completes the
 * range (sfs_pf_read_async): it pins its chunk and holds a reference on its
 * file until answered. Linked on f->waiters, protected by f->lock. */
struct pf_waiter {
	struct pf_waiter *next;
	struct pf_chunk *c;
	uint64_t off, end;
	struct pf_answer answer;
};

#define SCRATCH_BYTES	   (2u << 20)	/* a direct read's buffer: one huge page */
#define SCRATCH_KEEP	   16		/* of them kept for reuse */
#define SCRATCH_SLOT_BYTES (256u << 10) /* or a slot of one, for a small read */
#define SCRATCH_SLOTS	   (SCRATCH_BYTES / SCRATCH_SLOT_BYTES) /* 8: bits of a uint8_t */
#define SCRATCH_SLOT_PAGES 16	       /* pages cut in slots: 128 small reads in flight */
#define SCRATCH_TINY_BYTES (16u << 10) /* or a tiny slot, for a tiny read */
#define SCRATCH_TINY_SLOTS 128	       /* of them: two uint64_t of bits */
_Static_assert(SCRATCH_SLOTS == 8, "a slot page's taken is a byte");
_Static_assert(SFS_STORE_RANGE_BUF_BYTES <= SCRATCH_BYTES, "the scratch holds a range read");
_Static_assert(SFS_CHUNK_BYTES == SFS_IOBUF_BYTES, "a chunk buffer is an iobuf");
#define SIZED_CLASSES	 (SFS_CHUNK_BYTES / 4096) /* a sized buffer is k x 4 KiB, k below this */
#define SIZED_KEEP_SHARE 16 /* kept sized buffers hold at most the budget / this */

struct sfs_prefetch {
	sfs_origin *origin;	       /* set at open */
	struct sfs_prefetch_conf conf; /* set at open */
	size_t max_buffers;	       /* mem_bytes / SFS_CHUNK_BYTES, at least 2 */
	pthread_mutex_t files_lock;    /* taken with a file's lock held; then only trylock */
	struct sfs_pf_file *files;     /* protected by files_lock: every live file */
	/* protected by files_lock: every live file by (fsid, fileid), chained
	 * on vnext, so that every open of one version shares one fetch state
	 * (a hint list's and the reader's); no bucket array until the first. */
	struct pf_vtable vtable;
	sfs_pf_read_observer observer;	      /* set before reads start: hinted reads */
	sfs_pf_fetch_observer fetch_observer; /* ... and hinted chunks fetched */
	void *observer_arg;
	pthread_mutex_t buf_lock;
	void **free_bufs;	  /* protected by buf_lock */
	size_t n_free, n_buffers; /* protected by buf_lock: pooled buffers */
	size_t over_max; /* set at open: over_bufs kept, an eighth of max_buffers (2..32) */
	void *over_bufs[SFS_PF_OVER_BUFS]; /* protected by buf_lock: past the budget, */
	size_t n_over;			   /* not in n_buffers; for demand only */
	uint64_t sized_bytes;		   /* protected by buf_lock: buffers made to size */
	void *sized_kept[SIZED_CLASSES];   /* protected by buf_lock: see sized_keep */
	uint64_t sized_kept_bytes;	   /* protected by buf_lock: their bytes, in sized_bytes */
	uint64_t sized_freed; /* atomic: their bytes freed since the last idle release */
	uint64_t buf_used_ms; /* protected by buf_lock: last get or put */
	pthread_t pump;	      /* restarts shard pumps stalled on the budget */
	pthread_t loaders[SFS_PF_LOADERS]; /* read cached chunks ahead of readers */
	unsigned n_loaders;
	pthread_mutex_t load_lock; /* leaf */
	pthread_cond_t load_cond;
	struct pf_chunk **load_q; /* protected by load_lock: LOADING chunks, a FIFO ring */
	size_t load_head, load_len, load_cap;
	bool load_stop; /* protected by load_lock */
	bool pump_started;
	bool stopping;			 /* protected by files_lock */
	pthread_cond_t pump_cond;	 /* with files_lock */
	struct sfs_prefetch_stats stats; /* atomic */
};

/* The kernel's context readahead turns random readers' reads into runs of
 * steps: a record whose neighbour is in the page cache becomes a stream of
 * reads. The bound is low enough that such a run does not pass for a
 * sequential reader: from all jumps (256) it takes 20 steps in a row to get
 * below 24 (track_sequential's integer eighths). A higher bound let those
 * runs start readahead that was mostly never read. */
#define SEQ_MAX_RAND_SCORE 24

/* buffers.c: scratch pages made and not freed (atomic). */
extern uint64_t scratch_bytes;
extern unsigned scratch_keep;

static inline void count(uint64_t *c, int64_t n)
{
	__atomic_fetch_add(c, (uint64_t)n, __ATOMIC_RELAXED);
}

/* --- Shared by the files of this module (prefetch); not for other modules. */

/* prefetch.c: a fetch state freed with its last reference (no lock held). */
void file_free(struct sfs_pf_file *f);

/* buffers.c: chunk buffers within the budget, and the direct path's scratch. */
uint32_t chunk_buf_bytes(uint32_t len);
void *scratch_take(size_t need);
void scratch_give(void *b);
bool sized_keep(sfs_prefetch *pf, void *b, uint32_t bytes);
void *sized_evict(sfs_prefetch *pf, uint64_t want);
void sized_free_list(sfs_prefetch *pf, void *list);
void *buf_get_sized(sfs_prefetch *pf, uint32_t bytes, bool demand);
void *buf_get(sfs_prefetch *pf, uint32_t bytes, bool demand);
bool buf_over_budget(sfs_prefetch *pf);
void buf_put_sized(sfs_prefetch *pf, void *b, uint32_t bytes);
void buf_put(sfs_prefetch *pf, void *b, uint32_t bytes);

/* read.c: wait for the wanted chunks (pinned) and point v at [off, end) in
 * them. Caller holds f->lock. */
ssize_t fill_view(struct sfs_pf_file *f, uint64_t off, uint64_t end, struct pf_chunk **want,
		  int n_want, struct sfs_pf_view *v);
/* read.c: count a read's bytes for its dataset. No lock held. */
void read_account(struct sfs_pf_file *f, ssize_t n, size_t cache_bytes);

/* chunks.c: a chunk's life (caller holds file->lock unless said). */
struct pf_chunk *chunk_find(struct sfs_pf_file *f, uint64_t index);
bool chunk_busy(const struct pf_chunk *c);
enum sfs_chunk_state store_state(struct sfs_pf_file *f, uint64_t index);
void chunk_free(struct sfs_pf_file *f, size_t slot);
void chunk_free_ptr(struct sfs_pf_file *f, struct pf_chunk *c);
bool chunk_awaits_reader(const struct sfs_pf_file *f, const struct pf_chunk *c);
unsigned read_parts(struct sfs_origin_req *r, const struct sfs_fh *fh, uint64_t from, uint64_t to,
		    uint32_t max_read, char *buf);
uint32_t pf_max_read(sfs_prefetch *pf);
unsigned parts_for(uint64_t from, uint64_t to, uint32_t max_read);
struct pf_chunk *chunk_start(struct sfs_pf_file *f, uint64_t index, uint64_t cur, bool demand,
			     bool loading, uint64_t head_from, uint64_t head_to);
/* A reader waits for c: if it is a warm-up's background fetch, its parts
 * not yet landed go ahead of the rest of the warm-up (sfs_origin_promote). */
void chunk_promote(struct pf_chunk *c);
/* c, fetched for nobody yet, becomes a warm-up's (sfs_origin_demote). */
void chunk_demote(struct pf_chunk *c);
/* No lock held. */
void submit_chunks(struct sfs_pf_file *f, struct pf_chunk **started, size_t n);
bool same_version(const struct sfs_file_version *v, const struct sfs_attr *a);
bool chunk_finish(struct sfs_pf_file *f, struct pf_chunk *c, bool from_origin);
/* No lock held. */
void load_chunk(struct sfs_pf_file *f, struct pf_chunk *c);
void loader_queue(sfs_prefetch *pf, struct pf_chunk **c, size_t n);
void *loader_main(void *arg);
bool chunk_range_ready(const struct pf_chunk *c, uint64_t off, uint64_t end);
bool waiter_add(struct sfs_pf_file *f, struct pf_chunk *c, uint64_t off, uint64_t end,
		sfs_pf_read_done done, const void *arg, size_t arg_len);
struct pf_waiter *waiters_ready(struct sfs_pf_file *f, struct pf_chunk *c);
/* No lock held. */
void waiters_answer(struct sfs_pf_file *f, struct pf_waiter *ready);

/* readahead.c (caller holds file->lock, submits what they start). */
void start_readahead(struct sfs_pf_file *f, uint64_t c0, uint64_t c1, struct pf_chunk **started,
		     size_t *n_started, struct pf_chunk **ahead_loads, size_t *n_ahead_loads);
void shard_pump(struct sfs_pf_file *f, struct pf_chunk **started, size_t *n, size_t cap);
void *pump_main(void *arg);

/* offer.c: the offer to the store (caller holds the chunk's file lock). */
bool write_behind_full(sfs_prefetch *pf, uint32_t buf_bytes);
bool write_admitted(sfs_prefetch *pf, const struct pf_chunk *c);
bool hash_as_landed(const struct pf_chunk *c);
/* An origin I/O thread, no lock (origin.h: place). */
void chunk_place(struct sfs_origin_req *r, void *dst, const void *src, uint32_t n);
bool chunk_storable(const struct sfs_pf_file *f, const struct pf_chunk *c);
bool chunk_offer(struct sfs_pf_file *f, struct pf_chunk *c);

/* vtable.c: the version table (insert and remove: caller holds files_lock). */
void vtable_insert(sfs_prefetch *pf, struct sfs_pf_file *f);
void vtable_remove(sfs_prefetch *pf, struct sfs_pf_file *f);
/* A live file of version v with handle fh, referenced for the caller, or
 * NULL. Takes files_lock, then (not under it) the file's lock. */
struct sfs_pf_file *vtable_find(sfs_prefetch *pf, const struct sfs_fh *fh,
				const struct sfs_file_version *v);

#endif /* SFS_PREFETCH_INT_H */
