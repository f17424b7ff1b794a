// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch — chunk fetching, readahead, whole-shard prefetch and the glue
 * to the store. See prefetch.h for the contract.
 *
 *   sfs_prefetch ──buf_lock───> free list of SFS_CHUNK_BYTES buffers, and the bytes of
 *                              shorter chunks' buffers (budget: mem_bytes over both)
 *               ──files_lock─> every live sfs_pf_file (for reclaim and the pump thread)
 *   sfs_pf_file  ──lock──────> chunks[]: pf_chunk { index, state, buf, refs, parts[] }
 *                              obj: the store object of this file version (or NULL)
 *
 * Where a read's chunk comes from, in order: a chunk in memory (being
 * fetched, or fetched and not yet dropped); the store, read into a buffer
 * and checked against its XXH3-64 every time it is loaded; else the origin.
 * Chunks from the origin go to the store (write-behind; the buffer stays
 * pinned until the write is durable). Small files and readers that jump
 * around take the direct path instead (sfs_pf_read): no chunk, the store's
 * 16 KiB blocks the read touches read and checked into the thread's scratch,
 * or without a store just the pages asked for fetched from the origin.
 * (Splicing the cache file into /dev/fuse was tried, to save a copy: libfuse
 * 3.14's splice path gave short replies under 32 concurrent readers here,
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
#include "prefetch.h"
#include "iobuf.h"
#include "blocking.h"
#include "hash.h"
#include "log.h"

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
 * per chunk cost 256 page faults (zeroed pages) plus an munmap each:
 * measured, 4 dd over 8 x 256 MiB with cache_dir, 711 mmaps and 173-245 k
 * page faults per 2 GiB, clear_page 10% of the daemon's CPU. At most this
 * many MiB stay past the budget (released with the pool when idle). */
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
	uint64_t shard_next; /* next chunk the pump considers */
	struct pf_chunk **chunks;
	size_t n_chunks, cap_chunks;
	struct pf_waiter *waiters;	 /* reads answered when their chunk's bytes land */
	struct sfs_pf_file *prev, *next; /* protected by pf->files_lock */
};

/* How an asynchronous read is answered: the caller's done() and its copy
 * of the caller's context (sfs_pf_read_async checked its length). */
struct pf_answer {
	sfs_pf_read_done done;
	_Alignas(max_align_t) unsigned char arg[SFS_PF_ASYNC_ARG_MAX];
};

static void answer_set(struct pf_answer *a, sfs_pf_read_done done, const void *arg, size_t len)
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
	pthread_mutex_t buf_lock;
	void **free_bufs;		   /* protected by buf_lock */
	size_t n_free, n_buffers;	   /* protected by buf_lock: pooled buffers */
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

static void count(uint64_t *c, int64_t n) { __atomic_fetch_add(c, (uint64_t)n, __ATOMIC_RELAXED); }

/* --- buffers -------------------------------------------------------------- */

/*
 * Chunk buffers. A chunk of SFS_CHUNK_BYTES gets a pooled buffer (1 MiB
 * buffers come from mmap: the pool saves a map, an unmap and 256 page
 * faults per chunk). A shorter one (a small file, a file's tail) gets a
 * buffer of its length rounded up to 4 KiB, from malloc: a 1 KiB file held
 * a 1 MiB buffer while its cache write waited, so 256 of them spent a
 * 256 MiB budget and the next small files were not cached. The budget is
 * in bytes over both kinds: max_buffers pooled buffers' worth.
 */
static uint32_t chunk_buf_bytes(uint32_t len)
{
	return len >= SFS_CHUNK_BYTES ? SFS_CHUNK_BYTES : (len + 4095u) & ~4095u;
}

/* Bytes held in buffers; caller holds buf_lock. */
static uint64_t buf_held(const sfs_prefetch *pf)
{
	return (uint64_t)pf->n_buffers * SFS_CHUNK_BYTES + pf->sized_bytes;
}

/* Bytes held in buffers in use: buf_held less the kept sized buffers,
 * which give way (sized_keep). Caller holds buf_lock. */
static uint64_t buf_in_use(const sfs_prefetch *pf) { return buf_held(pf) - pf->sized_kept_bytes; }

static uint64_t buf_budget(const sfs_prefetch *pf)
{
	return (uint64_t)pf->max_buffers * SFS_CHUNK_BYTES;
}

/* Scratch of the direct path: a direct read takes one for its view and
 * sfs_pf_view_release gives it back, so there are as many as direct reads
 * in flight, not one per thread that ever read (a worker pool of 64 kept
 * 64). Its bytes lie in a 2 MiB transparent huge page, so that its O_DIRECT
 * reads pin one page and hand the disk one segment (iobuf.h: 110 KB records
 * from the cache at 8,100-11,800 against 6,000-7,300 records/s from 4 KiB
 * pages). A read that needs at most SCRATCH_SLOT_BYTES (a small file's
 * packed object, a record's 16 KiB blocks: sfs_store_range_bytes, or a
 * direct fetch's span) takes a slot of a page shared by SCRATCH_SLOTS such
 * reads; a larger one a page of its own. A huge page is resident whole
 * from its first touch: 16 small reads in flight held 32 MiB, now 4.
 * A read that needs at most SCRATCH_TINY_BYTES (a file of up to ~16 KiB, a
 * record in one 16 KiB block) takes a tiny slot of one 2 MiB mapping of
 * plain 4 KiB pages: resident as touched, and the lowest free slot is
 * taken, so 16 reads of 1 KiB files in flight hold 64-256 KiB, not 4 MiB;
 * a 16 KiB read is 4 pages to the disk, which costs nothing measurable.
 * Whole pages, up to SCRATCH_KEEP, and slot pages are kept for reuse while
 * reads come; sfs_prefetch_release_idle frees them. The pool is the
 * process's, not a prefetch's: a view holds no reference on its file (its
 * reply may let the file go before the view is released). */
static pthread_mutex_t scratch_lock = PTHREAD_MUTEX_INITIALIZER;
static void *scratch_free[SCRATCH_KEEP]; /* protected by scratch_lock */
static unsigned n_scratch_free;		 /* protected by scratch_lock */
static struct slot_page {
	char *base;
	uint8_t taken;		  /* bit i: slot i */
} slot_pages[SCRATCH_SLOT_PAGES]; /* protected by scratch_lock */
static unsigned n_slot_pages;	  /* protected by scratch_lock */
static char *tiny_base;		  /* mapped once (first tiny read), never unmapped */
static uint64_t tiny_taken[SCRATCH_TINY_SLOTS / 64]; /* protected by scratch_lock */
static unsigned tiny_touched;	 /* protected by scratch_lock: slots [0, it) may be resident */
static uint64_t scratch_used_ms; /* protected by scratch_lock: last give (a read's end) */
static uint64_t scratch_bytes;	 /* atomic: scratch pages made and not freed */

static char *scratch_page_new(void)
{
	char *b = sfs_iobuf_alloc_huge(SCRATCH_BYTES);
	if (b)
		__atomic_fetch_add(&scratch_bytes, SCRATCH_BYTES, __ATOMIC_RELAXED);
	return b;
}

static void scratch_page_free(void *b)
{
	free(b);
	__atomic_fetch_sub(&scratch_bytes, SCRATCH_BYTES, __ATOMIC_RELAXED);
}

/* A free slot of the first slot page that has one, or of a new page while
 * there are fewer than SCRATCH_SLOT_PAGES. NULL: take a whole page. */
static void *slot_take(void)
{
	pthread_mutex_lock(&scratch_lock);
	for (unsigned p = 0; p < n_slot_pages; p++) {
		struct slot_page *sp = &slot_pages[p];
		if (sp->taken != (uint8_t)((1u << SCRATCH_SLOTS) - 1)) {
			unsigned i = (unsigned)__builtin_ctz(~(unsigned)sp->taken);
			sp->taken |= (uint8_t)(1u << i);
			pthread_mutex_unlock(&scratch_lock);
			return sp->base + (size_t)i * SCRATCH_SLOT_BYTES;
		}
	}
	bool room = n_slot_pages < SCRATCH_SLOT_PAGES;
	pthread_mutex_unlock(&scratch_lock);
	char *page = room ? scratch_page_new() : NULL;
	if (!page)
		return NULL;
	pthread_mutex_lock(&scratch_lock);
	if (n_slot_pages < SCRATCH_SLOT_PAGES)
		slot_pages[n_slot_pages++] =
		    (struct slot_page){.base = page, .taken = 1}; /* slot 0 */
	/* else others filled the table meanwhile: the page is ours whole (a
	 * whole page serves any read, and scratch_give frees or keeps it). */
	pthread_mutex_unlock(&scratch_lock);
	return page;
}

/* The lowest free tiny slot; NULL when all are taken or without memory. */
static void *tiny_take(void)
{
	if (!__atomic_load_n(&tiny_base, __ATOMIC_ACQUIRE)) {
		char *m =
		    mmap(NULL, SCRATCH_TINY_SLOTS * SCRATCH_TINY_BYTES, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* page-aligned: enough */
		if (m == MAP_FAILED)
			return NULL;
		madvise(m, SCRATCH_TINY_SLOTS * SCRATCH_TINY_BYTES, MADV_NOHUGEPAGE);
		char *none = NULL;
		if (!__atomic_compare_exchange_n(&tiny_base, &none, m, false, __ATOMIC_ACQ_REL,
						 __ATOMIC_ACQUIRE))
			munmap(m, SCRATCH_TINY_SLOTS * SCRATCH_TINY_BYTES); /* another mapped it */
	}
	pthread_mutex_lock(&scratch_lock);
	for (unsigned w = 0; w < SCRATCH_TINY_SLOTS / 64; w++) {
		if (tiny_taken[w] == UINT64_MAX)
			continue;
		unsigned i = w * 64 + (unsigned)__builtin_ctzll(~tiny_taken[w]);
		tiny_taken[w] |= 1ull << (i % 64);
		if (i >= tiny_touched) {
			__atomic_fetch_add(&scratch_bytes,
					   (uint64_t)(i + 1 - tiny_touched) * SCRATCH_TINY_BYTES,
					   __ATOMIC_RELAXED);
			tiny_touched = i + 1;
		}
		pthread_mutex_unlock(&scratch_lock);
		return __atomic_load_n(&tiny_base, __ATOMIC_RELAXED) +
		       (size_t)i * SCRATCH_TINY_BYTES;
	}
	pthread_mutex_unlock(&scratch_lock);
	return NULL;
}

/* A buffer of at least need bytes (<= SCRATCH_BYTES), 4096-aligned: a tiny
 * slot, a slot of a huge page or a huge page; NULL without memory. */
static void *scratch_take(size_t need)
{
	void *b = NULL;

	if (need <= SCRATCH_TINY_BYTES && (b = tiny_take()))
		return b;
	if (need <= SCRATCH_SLOT_BYTES && (b = slot_take()))
		return b;
	pthread_mutex_lock(&scratch_lock);
	if (n_scratch_free)
		b = scratch_free[--n_scratch_free];
	pthread_mutex_unlock(&scratch_lock);
	return b ? b : scratch_page_new();
}

static void scratch_give(void *b)
{
	pthread_mutex_lock(&scratch_lock);
	scratch_used_ms = sfs_now_ms();
	char *tiny = __atomic_load_n(&tiny_base, __ATOMIC_ACQUIRE);
	if (tiny && (char *)b >= tiny &&
	    (char *)b < tiny + SCRATCH_TINY_SLOTS * SCRATCH_TINY_BYTES) {
		size_t i = (size_t)((char *)b - tiny) / SCRATCH_TINY_BYTES;
		tiny_taken[i / 64] &= ~(1ull << (i % 64));
		pthread_mutex_unlock(&scratch_lock);
		return;
	}
	for (unsigned p = 0; p < n_slot_pages; p++) {
		struct slot_page *sp = &slot_pages[p];
		if ((char *)b >= sp->base && (char *)b < sp->base + SCRATCH_BYTES) {
			size_t i = (size_t)((char *)b - sp->base) / SCRATCH_SLOT_BYTES;
			sp->taken &= (uint8_t) ~(1u << i);
			pthread_mutex_unlock(&scratch_lock);
			return;
		}
	}
	if (n_scratch_free < SCRATCH_KEEP) {
		scratch_free[n_scratch_free++] = b;
		b = NULL;
	}
	pthread_mutex_unlock(&scratch_lock);
	if (b)
		scratch_page_free(b);
}

/* Free the kept scratch, whole pages and slot pages with no slot taken,
 * and the tiny slots' pages when none is taken, if no read gave one back
 * for idle_ms (scratch in use is not kept, so a long read keeps its own).
 * Returns the bytes freed. */
static uint64_t scratch_release_idle(uint64_t idle_ms)
{
	void *b[SCRATCH_KEEP + SCRATCH_SLOT_PAGES];
	unsigned n = 0;
	uint64_t tiny_freed = 0;

	pthread_mutex_lock(&scratch_lock);
	if (sfs_now_ms() - scratch_used_ms >= idle_ms) {
		bool tiny_idle = true;
		for (unsigned w = 0; w < SCRATCH_TINY_SLOTS / 64; w++)
			tiny_idle &= tiny_taken[w] == 0;
		if (tiny_idle && tiny_touched) {
			/* Under the lock, so that no slot is taken meanwhile:
			 * one madvise, after 5 s without a read. */
			tiny_freed = (uint64_t)tiny_touched * SCRATCH_TINY_BYTES;
			madvise(__atomic_load_n(&tiny_base, __ATOMIC_RELAXED), tiny_freed,
				MADV_DONTNEED);
			tiny_touched = 0;
			__atomic_fetch_sub(&scratch_bytes, tiny_freed, __ATOMIC_RELAXED);
		}
		while (n_scratch_free)
			b[n++] = scratch_free[--n_scratch_free];
		for (unsigned p = 0; p < n_slot_pages;)
			if (slot_pages[p].taken == 0) {
				b[n++] = slot_pages[p].base;
				slot_pages[p] =
				    slot_pages[--n_slot_pages]; /* the last takes its place */
			} else {
				p++;
			}
	}
	pthread_mutex_unlock(&scratch_lock);
	for (unsigned i = 0; i < n; i++)
		scratch_page_free(b[i]);
	return (uint64_t)n * SCRATCH_BYTES + tiny_freed;
}

/* Moves up to max idle pooled buffers into out (they leave the pool and
 * n_buffers); returns how many. Caller holds buf_lock. */
static size_t pool_take_free(sfs_prefetch *pf, void **out, size_t max)
{
	size_t n = 0;

	while (pf->n_free && n < max) {
		out[n++] = pf->free_bufs[--pf->n_free];
		pf->n_buffers--;
	}
	return n;
}

/* Frees n 1 MiB buffers taken out of the pool (or never pooled). No lock. */
static void bufs_free(sfs_prefetch *pf, void **b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sfs_iobuf_put(b[i]);
	if (n)
		count(&pf->stats.buffer_bytes, -(int64_t)(n * SFS_CHUNK_BYTES));
}

/*
 * Sized buffers freed are kept for reuse, a LIFO stack per length (4 KiB
 * steps, linked through each buffer's first word), up to the budget /
 * SIZED_KEEP_SHARE in all. A folder of small files allocates one per file
 * (its fetch's or its chunk's buffer, 100-130 KB for ImageNet's JPEGs):
 * from malloc that was an aligned_alloc searching the arena's bins, freed
 * on another thread (perf, --small-files cold: 10-16 us per file in
 * _int_malloc, 1.8 with the stacks). Kept buffers stay in sized_bytes, so they count
 * against the budget like the pool's idle buffers, and like them give way:
 * a get that would not fit frees them first (sized_evict), and
 * buf_over_budget does not count them. sfs_prefetch_release_idle frees
 * them once buffers go unused.
 */

/* Whether b (bytes, still in sized_bytes) was kept: not while buffers hold
 * more than the budget (readers' own chunks past it). Caller holds
 * buf_lock. */
static bool sized_keep(sfs_prefetch *pf, void *b, uint32_t bytes)
{
	if (bytes / 4096 >= SIZED_CLASSES || buf_held(pf) > buf_budget(pf) ||
	    pf->sized_kept_bytes + bytes > buf_budget(pf) / SIZED_KEEP_SHARE)
		return false;
	void **head = &pf->sized_kept[bytes / 4096];
	*(void **)b = *head;
	*head = b;
	pf->sized_kept_bytes += bytes;
	return true;
}

/* A kept buffer of exactly bytes, or NULL; caller holds buf_lock. */
static void *sized_reuse(sfs_prefetch *pf, uint32_t bytes)
{
	if (bytes / 4096 >= SIZED_CLASSES)
		return NULL;
	void **head = &pf->sized_kept[bytes / 4096];
	void *b = *head;

	if (b) {
		*head = *(void **)b;
		pf->sized_kept_bytes -= bytes;
	}
	return b;
}

/* Takes kept buffers, largest first, until at least want bytes are out of
 * the budget or none is left; returns them as a list (first word: the
 * next, second: the length) for sized_free_list. Caller holds buf_lock. */
static void *sized_evict(sfs_prefetch *pf, uint64_t want)
{
	void *list = NULL;
	uint64_t got = 0;

	for (size_t k = SIZED_CLASSES; k-- > 1 && got < want && pf->sized_kept_bytes;) {
		void *b;
		while (got < want && (b = sized_reuse(pf, (uint32_t)(k * 4096)))) {
			((void **)b)[0] = list;
			((uintptr_t *)b)[1] = k * 4096;
			list = b;
			got += k * 4096;
			pf->sized_bytes -= k * 4096;
		}
	}
	return list;
}

/* Frees one sized buffer that left the budget. No lock. */
static void sized_free(sfs_prefetch *pf, void *b, uint32_t bytes)
{
	free(b);
	count(&pf->stats.buffer_bytes, -(int64_t)bytes);
	count(&pf->sized_freed, bytes);
}

/* Frees a list from sized_evict. No lock. */
static void sized_free_list(sfs_prefetch *pf, void *list)
{
	while (list) {
		void *next = ((void **)list)[0];
		sized_free(pf, list, (uint32_t)((uintptr_t *)list)[1]);
		list = next;
	}
}

/* A buffer made to size (bytes < SFS_CHUNK_BYTES), or NULL when the budget
 * is spent and !demand. Pooled buffers nobody uses are budget too: they
 * give way (a pool full of idle 1 MiB buffers refused a file's 4 KiB tail
 * for as long as the pump kept retrying, which kept the pool from ever
 * going idle). Caller holds buf_lock; returns with it released. */
static void *buf_get_sized(sfs_prefetch *pf, uint32_t bytes, bool demand)
{
	void *spare[8], *kept = NULL;
	size_t n_spare = 0;
	bool room = true;

	void *b = sized_reuse(pf, bytes); /* already in sized_bytes */
	if (b) {
		pthread_mutex_unlock(&pf->buf_lock);
		return b;
	}
	uint64_t want = buf_held(pf) + bytes, budget = buf_budget(pf);
	if (want > budget) /* kept buffers give way, even to a reader's own chunk */
		kept = sized_evict(pf, want - budget);
	if (!demand) {
		want = buf_held(pf) + bytes;
		if (want > budget) {
			uint64_t over = (want - budget + SFS_CHUNK_BYTES - 1) / SFS_CHUNK_BYTES;
			n_spare = pool_take_free(pf, spare, over < 8 ? (size_t)over : 8);
		}
		room = buf_held(pf) + bytes <= budget;
	}
	if (room)
		pf->sized_bytes += bytes;
	pthread_mutex_unlock(&pf->buf_lock);
	bufs_free(pf, spare, n_spare);
	sized_free_list(pf, kept);
	if (!room)
		return NULL;
	b = aligned_alloc(4096, bytes);
	if (!b) {
		pthread_mutex_lock(&pf->buf_lock);
		pf->sized_bytes -= bytes;
		pthread_mutex_unlock(&pf->buf_lock);
		return NULL;
	}
	count(&pf->stats.buffer_bytes, bytes);
	return b;
}

/* A buffer of `bytes` (chunk_buf_bytes), or NULL when the budget is spent
 * and !demand. A reader's own chunk (demand) may exceed the budget, after
 * idle chunks of every file were reclaimed: refusing it would stall the
 * reader. */
static void *buf_get(sfs_prefetch *pf, uint32_t bytes, bool demand)
{
	void *b = NULL;

	pthread_mutex_lock(&pf->buf_lock);
	pf->buf_used_ms = sfs_now_ms();
	if (bytes < SFS_CHUNK_BYTES)
		return buf_get_sized(pf, bytes, demand);
	if (pf->n_free) {
		b = pf->free_bufs[--pf->n_free];
	} else if (demand && pf->n_over) {
		b = pf->over_bufs[--pf->n_over];
		pf->n_buffers++;
	} else if (demand || buf_in_use(pf) + SFS_CHUNK_BYTES <= buf_budget(pf)) {
		uint64_t want = buf_held(pf) + SFS_CHUNK_BYTES, budget = buf_budget(pf);
		void *kept = want > budget ? sized_evict(pf, want - budget) : NULL;
		pf->n_buffers++;
		pthread_mutex_unlock(&pf->buf_lock);
		sized_free_list(pf, kept);
		b = sfs_iobuf_get();
		if (!b) {
			pthread_mutex_lock(&pf->buf_lock);
			pf->n_buffers--;
			pthread_mutex_unlock(&pf->buf_lock);
			return NULL;
		}
		count(&pf->stats.buffer_bytes, SFS_CHUNK_BYTES);
		return b;
	}
	pthread_mutex_unlock(&pf->buf_lock);
	return b;
}

static bool buf_over_budget(sfs_prefetch *pf)
{
	pthread_mutex_lock(&pf->buf_lock);
	bool over = pf->n_free == 0 && buf_in_use(pf) >= buf_budget(pf);
	pthread_mutex_unlock(&pf->buf_lock);
	return over;
}

static void buf_put_sized(sfs_prefetch *pf, void *b, uint32_t bytes)
{
	pthread_mutex_lock(&pf->buf_lock);
	pf->buf_used_ms = sfs_now_ms();
	bool kept = sized_keep(pf, b, bytes);
	if (!kept)
		pf->sized_bytes -= bytes;
	pthread_mutex_unlock(&pf->buf_lock);
	if (!kept)
		sized_free(pf, b, bytes);
}

static void buf_put(sfs_prefetch *pf, void *b, uint32_t bytes)
{
	if (bytes < SFS_CHUNK_BYTES) {
		buf_put_sized(pf, b, bytes);
		return;
	}
	pthread_mutex_lock(&pf->buf_lock);
	pf->buf_used_ms = sfs_now_ms();
	if (pf->n_buffers <= pf->max_buffers && pf->n_free < pf->max_buffers) {
		pf->free_bufs[pf->n_free++] = b;
		b = NULL;
	} else {
		pf->n_buffers--;
		if (pf->n_over < SFS_PF_OVER_BUFS) {
			pf->over_bufs[pf->n_over++] = b;
			b = NULL;
		}
	}
	pthread_mutex_unlock(&pf->buf_lock);
	bufs_free(pf, &b, b ? 1 : 0);
}

uint64_t sfs_prefetch_release_idle(sfs_prefetch *pf, uint64_t idle_ms)
{
	uint64_t freed = scratch_release_idle(idle_ms);

	for (;;) {
		void *batch[64];
		size_t n = 0;
		pthread_mutex_lock(&pf->buf_lock);
		bool idle = sfs_now_ms() - pf->buf_used_ms >= idle_ms;
		void *kept = NULL;
		if (idle) {
			while (pf->n_over && n < 64)
				batch[n++] = pf->over_bufs[--pf->n_over];
			n += pool_take_free(pf, batch + n, 64 - n);
			kept = sized_evict(pf, UINT64_MAX);
		}
		pthread_mutex_unlock(&pf->buf_lock);
		sized_free_list(pf, kept);
		/* What bufs_free gave iobuf, iobuf kept until now; sized
		 * buffers went back to malloc, which keeps them (memtrim.h)
		 * until the caller trims: counted so that it does. */
		if (!n)
			return idle ? freed + sfs_iobuf_trim() +
					  __atomic_exchange_n(&pf->sized_freed, 0, __ATOMIC_RELAXED)
				    : freed;
		bufs_free(pf, batch, n);
		freed += n * SFS_CHUNK_BYTES;
	}
}

/* --- chunks (caller holds file->lock) -------------------------------------- */

static struct pf_chunk *chunk_find(struct sfs_pf_file *f, uint64_t index)
{
	for (size_t i = 0; i < f->n_chunks; i++)
		if (f->chunks[i]->index == index)
			return f->chunks[i];
	return NULL;
}

static bool chunk_busy(const struct pf_chunk *c)
{
	return c->refs || c->state == CHUNK_FETCHING || c->state == CHUNK_LOADING;
}

/* Bytes of a chunk fetched from the origin that neither a reader nor the
 * cache got (sfs_prefetch_stats.undelivered_*), at its free. */
static void count_undelivered(sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (c->loaded || c->in_store || c->state != CHUNK_READY)
		return;
	uint64_t bytes = 0;
	for (uint32_t b = 0, at = 0; at < c->len; b++, at += 64 * 1024)
		if (!(c->delivered & (1u << b)))
			bytes += c->len - at < 64 * 1024 ? c->len - at : 64 * 1024;
	count(c->used ? &pf->stats.undelivered_rest_bytes : &pf->stats.undelivered_unread_bytes,
	      (int64_t)bytes);
}

static void chunk_free(struct sfs_pf_file *f, size_t slot)
{
	struct pf_chunk *c = f->chunks[slot];

	assert(!chunk_busy(c));
	if (c->readahead && !c->used && !c->in_store)
		count(&f->pf->stats.wasted_chunks, 1);
	count_undelivered(f->pf, c);
	buf_put(f->pf, c->buf, c->buf_bytes);
	free(c);
	f->chunks[slot] = f->chunks[--f->n_chunks];
}

static void chunk_free_ptr(struct sfs_pf_file *f, struct pf_chunk *c)
{
	for (size_t k = 0; k < f->n_chunks; k++)
		if (f->chunks[k] == c) {
			chunk_free(f, k);
			return;
		}
}

/* The kernel's context readahead turns random readers' reads into runs of
 * steps: a record whose neighbour is in the page cache becomes a stream of
 * reads (8 threads, 110 KB records in a 1 GiB file: runs of up to 17 steps
 * in a row). From all jumps (256) it takes 18 steps to get below 24; at 64
 * (10 steps) the readahead those runs started was 7% of the chunks fetched,
 * 60% of it never read. */
#define SEQ_MAX_RAND_SCORE 24
/* Chunks wait for a reader whose recent reads were mostly steps: the
 * kernel's readahead requests, handled by several workers, reach the
 * daemon out of order and score as jumps now and then; a reader that
 * really jumps around passes 128 after six jumps. */
#define AWAIT_MAX_RAND_SCORE 128
/* The kernel's readahead (8 MiB, fs/main.c) has up to 8 chunks of reads in
 * flight, and its reads ahead reach the daemon before the reader's own read
 * (measured: a read for chunk k after next_seq reached k + 8): unconsumed
 * chunks up to twice that far behind next_seq still wait for their reads. */
#define AWAIT_BEHIND_CHUNKS 16

/*
 * Whether chunk c is ahead of the sequential reader of f (or just behind,
 * AWAIT_BEHIND_CHUNKS) and not yet consumed: the reader asks for its bytes
 * soon, so they stay in memory, even once durable in the store, rather than
 * be dropped and read back from disk (a cold epoch reads no byte twice).
 * Readahead and the shard pump never evict such
 * a chunk to start another; only a reader's own chunk may (the budget truly
 * ran out). An open file is taken to have a reader from the start (the pump
 * starts at open, before the first read); nothing waits for a warm-up
 * (sfs_pf_file_warm) or for a reader that jumps around: written chunks go,
 * and the pump runs through the file. Caller holds f->lock.
 */
static bool chunk_awaits_reader(const struct sfs_pf_file *f, const struct pf_chunk *c)
{
	return !f->warmed && f->rand_score < AWAIT_MAX_RAND_SCORE && !c->consumed &&
	       c->index + AWAIT_BEHIND_CHUNKS >= f->next_seq;
}

/* Make room for one more chunk: drop an idle chunk behind `cur` (the reader
 * has passed it), lowest first; only a reader's own demand may also drop the
 * idle chunk farthest ahead (readahead never throws away readahead), unless
 * the chunk is safe in the store; and only a reader's own demand may drop a
 * chunk that awaits the reader, wherever it lies (chunk_awaits_reader).
 * Returns false if nothing may go. */
static bool chunk_evict_one(struct sfs_pf_file *f, uint64_t cur, bool demand)
{
	size_t best = SIZE_MAX;

	for (size_t i = 0; i < f->n_chunks; i++) {
		struct pf_chunk *c = f->chunks[i];
		if (chunk_busy(c) ||
		    (!demand && (chunk_awaits_reader(f, c) || (c->index >= cur && !c->in_store))))
			continue;
		if (best == SIZE_MAX) {
			best = i;
			continue;
		}
		struct pf_chunk *b = f->chunks[best];
		bool c_behind = c->index < cur, b_behind = b->index < cur;
		if (c_behind != b_behind ? c_behind
					 : (c_behind ? c->index < b->index : c->index > b->index))
			best = i;
	}
	if (best == SIZE_MAX)
		return false;
	chunk_free(f, best);
	return true;
}

static void part_done(struct sfs_origin_req *req);
static struct pf_waiter *waiters_ready(struct sfs_pf_file *f, struct pf_chunk *c);
static void waiters_answer(struct sfs_pf_file *f, struct pf_waiter *ready);

/* Evict idle chunks of other files until the budget has room. Caller holds
 * self->lock; other files are only try-locked (no lock order between files),
 * and files_lock keeps them from being freed meanwhile. */
static void reclaim_from_other_files(sfs_prefetch *pf, struct sfs_pf_file *self)
{
	pthread_mutex_lock(&pf->files_lock);
	for (struct sfs_pf_file *o = pf->files; o && buf_over_budget(pf); o = o->next) {
		if (o == self || pthread_mutex_trylock(&o->lock) != 0)
			continue;
		while (buf_over_budget(pf) && chunk_evict_one(o, o->next_seq, true)) {
		}
		pthread_mutex_unlock(&o->lock);
	}
	pthread_mutex_unlock(&pf->files_lock);
}

/* READ requests for [from, to) of file fh, max_read bytes each, into buf
 * (where byte `from` goes), zeroed but for op, fh, offset, count and buf.
 * Returns how many (parts_for). */
static unsigned read_parts(struct sfs_origin_req *r, const struct sfs_fh *fh, uint64_t from,
			   uint64_t to, uint32_t max_read, char *buf)
{
	unsigned n = 0;

	for (uint64_t at = from; at < to; at += max_read, n++) {
		memset(&r[n], 0, sizeof(r[n]));
		r[n].op = SFS_ORIGIN_READ;
		r[n].fh = *fh;
		r[n].offset = at;
		r[n].count = (uint32_t)(to - at < max_read ? to - at : max_read);
		r[n].buf = buf + (at - from);
	}
	return n;
}

/* Whether buf_bytes more of writes waiting would hold more than limit. */
static bool write_behind_over(sfs_prefetch *pf, uint32_t buf_bytes, uint64_t limit)
{
	uint64_t pinned = __atomic_load_n(&pf->stats.write_pinned_bytes, __ATOMIC_RELAXED);
	return pinned + buf_bytes > limit;
}

/* The bytes the writes waiting may hold for chunk c to be offered to the
 * store (see write_admitted). Caller holds the chunk's file lock. */
static uint64_t write_limit(const sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (c->file->warmed)
		return UINT64_MAX;
	return c->readahead ? pf->conf.mem_bytes / 2 : pf->conf.mem_bytes;
}

/*
 * Place a piece of a part's reply in its chunk: copied, and every 16 KiB
 * sub-block that the piece holds whole hashed right after its copy, while
 * its bytes are in the CPU's cache, for the store's record (the writer
 * hashed the chunk again from memory later: measured here, copy then hash
 * 0.09 ms per MiB, copy and hash per 16 KiB 0.06). A sub-block split
 * between pieces or parts (an rsize that is no multiple of 16 KiB, a short
 * reply) is left to the writer. An I/O thread; parts of one chunk may
 * land at once on several, each setting its own bits.
 */
static void chunk_place(struct sfs_origin_req *r, void *dst, const void *src, uint32_t n)
{
	struct pf_chunk *c = r->arg;
	const uint32_t sub = 1u << SFS_STORE_SUB_SHIFT;
	char *d = dst;
	const char *s = src;
	uint64_t from = (uint64_t)(d - c->buf), to = from + n, at = from, known = 0;

	for (uint64_t k = (from + sub - 1) >> SFS_STORE_SUB_SHIFT;; k++) {
		uint64_t b0 = k << SFS_STORE_SUB_SHIFT;
		uint64_t b1 = b0 + sub < c->fetch_len ? b0 + sub : c->fetch_len;
		if (b0 >= c->fetch_len || b1 > to)
			break;
		memcpy(d + (at - from), s + (at - from), b1 - at); /* a head before b0 too */
		c->sub_xxh64[k] = sfs_xxh3_64(d + (b0 - from), b1 - b0);
		known |= 1ull << k;
		at = b1;
	}
	if (to > at)
		memcpy(d + (at - from), s + (at - from), to - at);
	if (known)
		__atomic_fetch_or(&c->sub_known, known, __ATOMIC_RELEASE);
}

/* Whether chunk c's sub-blocks are hashed as they land (chunk_place): only
 * for the store's per-file layout (objects of one chunk or less are packed,
 * with one checksum of their own), and only while the chunk would be
 * offered (write_admitted) and taken (pin full, a chunk present). Caller
 * holds the chunk's file lock. */
static bool hash_as_landed(const struct pf_chunk *c)
{
	const struct sfs_pf_file *f = c->file;

	return f->obj && f->size > SFS_CHUNK_BYTES &&
	       !write_behind_over(f->pf, c->buf_bytes, write_limit(f->pf, c)) &&
	       sfs_store_would_take(f->obj, (uint32_t)c->index, c->fetch_len);
}

/* Origin requests for [from, to) of chunk c, appended to c->parts from slot
 * *n; their completions go to part_done, their bytes through chunk_place
 * when hash. */
static void chunk_add_parts(struct pf_chunk *c, uint64_t from, uint64_t to, uint32_t max_read,
			    bool hash, unsigned *n)
{
	uint64_t start = c->index << SFS_CHUNK_SHIFT;
	unsigned k =
	    read_parts(&c->parts[*n], &c->file->fh, from, to, max_read, c->buf + (from - start));

	for (unsigned i = *n; i < *n + k; i++) {
		c->parts[i].done = part_done;
		c->parts[i].arg = c;
		c->parts[i].place = hash ? chunk_place : NULL;
	}
	*n += k;
}

/* The origin's READ size, at most a chunk (0: the origin did not say). */
static uint32_t pf_max_read(sfs_prefetch *pf)
{
	uint32_t max_read = sfs_origin_max_read(pf->origin);

	return max_read == 0 || max_read > SFS_CHUNK_BYTES ? SFS_CHUNK_BYTES : max_read;
}

static unsigned parts_for(uint64_t from, uint64_t to, uint32_t max_read)
{
	return to > from ? (unsigned)((to - from + max_read - 1) / max_read) : 0;
}

/* Make room (chunk limit and memory budget) for one more chunk of f.
 * Returns false when there is none and the chunk is not a reader's own. */
static bool chunk_make_room(struct sfs_pf_file *f, uint64_t cur, bool demand)
{
	sfs_prefetch *pf = f->pf;
	/* Room for the window ahead of the newest request, the kernel's own
	 * readahead requests in flight (8 MiB, out of order), and chunks
	 * behind the reader not yet released. Too tight, and a reader's own
	 * chunk evicts readahead that is about to be asked for (measured: 5%
	 * of chunks fetched twice at window + 12). The memory budget is the
	 * real bound. */
	size_t limit = 2 * (size_t)pf->conf.window_chunks + 16;

	while (f->n_chunks >= limit)
		if (!chunk_evict_one(f, cur, demand))
			break;
	if (f->n_chunks >= limit && !demand)
		return false;
	/* Over the memory budget: give back this file's idle chunks first,
	 * then (for a reader's own chunk) other files' idle chunks. */
	while (buf_over_budget(pf) && chunk_evict_one(f, cur, demand)) {
	}
	if (demand && buf_over_budget(pf))
		reclaim_from_other_files(pf, f);
	if (f->n_chunks == f->cap_chunks) {
		size_t cap = f->cap_chunks ? f->cap_chunks * 2 : 16;
		struct pf_chunk **n = realloc(f->chunks, cap * sizeof(*n));
		if (!n)
			return false;
		f->chunks = n;
		f->cap_chunks = cap;
	}
	return true;
}

/*
 * Create chunk `index`, FETCHING (parts ready; the caller submits them after
 * dropping file->lock) or LOADING (the caller reads it from the store).
 * [head_from, head_to) (absolute offsets; empty: none) is what a reader that
 * jumps around asked for: its 64 KiB blocks become the first parts, so that
 * the reader waits for them only (fill_view), and the rest of the chunk
 * follows in later parts, so that the whole chunk still reaches the store
 * (every byte fetched once per epoch). Returns NULL when there is no buffer
 * or, for readahead (!demand), no room.
 */
static struct pf_chunk *chunk_start(struct sfs_pf_file *f, uint64_t index, uint64_t cur,
				    bool demand, bool loading, uint64_t head_from, uint64_t head_to)
{
	sfs_prefetch *pf = f->pf;
	uint64_t start = index << SFS_CHUNK_SHIFT;
	uint32_t len =
	    (uint32_t)(f->size - start < SFS_CHUNK_BYTES ? f->size - start : SFS_CHUNK_BYTES);
	uint64_t end = start + len;
	uint32_t max_read = pf_max_read(pf);

	/* The head, on 64 KiB blocks, inside the chunk; none if it is all of it. */
	uint64_t h0 = head_from > start ? head_from & ~(uint64_t)0xffff : start;
	uint64_t h1 = ((head_to + 0xffff) & ~(uint64_t)0xffff);
	h1 = h1 < end ? h1 : end;
	bool split = head_to > head_from && h1 > h0 && (h0 > start || h1 < end);
	unsigned n_parts = split ? parts_for(h0, h1, max_read) + parts_for(h1, end, max_read) +
				       parts_for(start, h0, max_read)
				 : parts_for(start, end, max_read);
	if (n_parts > 64) { /* tiny rsize: one piece, as before */
		split = false;
		n_parts = parts_for(start, end, max_read);
	}
	if (!chunk_make_room(f, cur, demand))
		return NULL;
	/* sfs_store_read_chunk fills a whole chunk's buffer (O_DIRECT, packed
	 * records): a load gets a pooled one. */
	uint32_t buf_bytes = loading ? SFS_CHUNK_BYTES : chunk_buf_bytes(len);
	void *buf = buf_get(pf, buf_bytes, demand);
	if (!buf)
		return NULL;
	struct pf_chunk *c = calloc(1, sizeof(*c) + n_parts * sizeof(c->parts[0]));
	if (!c) {
		buf_put(pf, buf, buf_bytes);
		return NULL;
	}
	c->buf_bytes = buf_bytes;
	c->file = f;
	c->index = index;
	c->state = loading ? CHUNK_LOADING : CHUNK_FETCHING;
	if (loading) {
		c->obj = f->obj;
		sfs_store_obj_ref(c->obj);
	}
	c->len = c->fetch_len = len;
	c->buf = buf;
	c->readahead = !demand;
	c->n_parts = n_parts;
	c->parts_pending = n_parts;
	unsigned n = 0;
	bool hash = !loading && hash_as_landed(c);
	if (split) {
		chunk_add_parts(c, h0, h1, max_read, hash, &n);
		chunk_add_parts(c, h1, end, max_read, hash, &n);
		chunk_add_parts(c, start, h0, max_read, hash, &n);
	} else {
		chunk_add_parts(c, start, end, max_read, hash, &n);
	}
	assert(n == n_parts);
	f->chunks[f->n_chunks++] = c;
	f->refs++; /* the fetch holds the file */
	if (!loading)
		count(&pf->stats.inflight_bytes, len);
	if (!demand)
		count(&pf->stats.readahead_chunks, 1);
	return c;
}

static void file_free(struct sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

	pthread_mutex_lock(&pf->files_lock);
	if (f->prev)
		f->prev->next = f->next;
	else
		pf->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	pthread_mutex_unlock(&pf->files_lock);
	while (f->n_chunks)
		chunk_free(f, f->n_chunks - 1);
	if (f->obj)
		sfs_store_obj_put(f->obj);
	free(f->chunks);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static enum sfs_chunk_state store_state(struct sfs_pf_file *f, uint64_t index)
{
	return f->obj ? sfs_store_chunk_state(f->obj, (uint32_t)index) : SFS_CHUNK_ABSENT;
}

/* Queue more of a whole-file fetch: every chunk the store lacks, in order,
 * while the budget and the file's chunk limit allow. Caller holds lock;
 * chunks to submit are appended to started[*n] (room for cap). */
static void shard_pump(struct sfs_pf_file *f, struct pf_chunk **started, size_t *n, size_t cap)
{
	uint64_t last = f->size ? (f->size - 1) >> SFS_CHUNK_SHIFT : 0;

	while (f->shard && f->size && f->shard_next <= last && *n < cap) {
		uint64_t ci = f->shard_next;
		if (chunk_find(f, ci) || store_state(f, ci) != SFS_CHUNK_ABSENT) {
			f->shard_next++;
			continue;
		}
		struct pf_chunk *c = chunk_start(f, ci, f->next_seq, false, false, 0, 0);
		if (!c)
			return; /* budget or room: resumed by a completion or the pump thread */
		started[(*n)++] = c;
		f->shard_next++;
	}
	if (f->shard && f->shard_next > last)
		f->shard = false; /* every chunk is queued, fetched or cached */
}

static void write_done(void *arg, int err);
static void submit_chunks(struct sfs_pf_file *f, struct pf_chunk **started, size_t n);

/* Whether a reader's own chunk of bytes fetched now would be refused by
 * write_admitted: the writes waiting hold the budget. */
static bool write_behind_full(sfs_prefetch *pf, uint32_t buf_bytes)
{
	return write_behind_over(pf, buf_bytes, pf->conf.mem_bytes);
}

/*
 * Whether a fetched chunk may be offered to the cache. Its buffer stays
 * pinned until the write is durable, so when the cache disk is slower than
 * the network the writes waiting would hold memory without bound (measured:
 * 1.9 GB of a 256 MiB budget behind a 100 MB/s disk).
 *
 * A chunk fetched ahead (readahead, the pump) is offered while the writes
 * waiting hold at most half the budget; past that it serves its reader from
 * memory and is not cached this time (counted). The other half keeps the
 * fetch ahead of the readers, so they go on at network speed and the cache
 * takes what its disk can write meanwhile. (When every such chunk was
 * offered, the writes held the whole budget behind a slow disk, the pump
 * and readahead stopped, and readers fetched their own chunks one at a
 * time: a cold epoch with cache_dir ran at the disk's pace.) A reader's own
 * chunk is offered while the writes hold less than the whole budget; past
 * it, it is not cached and its buffer goes once read. A warm-up
 * (sfs_pf_file_warm) is there to fill the cache: its chunks are always
 * offered, and its pump waits for the budget, so it goes at disk speed.
 * write_limit says which. Caller holds the chunk's file lock.
 */
static bool write_admitted(sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (!write_behind_over(pf, c->buf_bytes, write_limit(pf, c)))
		return true;
	count(&pf->stats.write_skipped_bytes, c->len);
	return false;
}

/* Whether READY chunk c holds what the store may take: all of a chunk
 * fetched from the origin, not yet durable there. Caller holds lock. */
static bool chunk_storable(const struct sfs_pf_file *f, const struct pf_chunk *c)
{
	return !c->err && f->obj && c->len == c->fetch_len && !c->loaded && !c->in_store;
}

/* Queue c's bytes for the store. Returns true if queued: the write pins c
 * until write_done and holds a file reference, which the caller gives it.
 * False when the store refuses (present or being written, pin full,
 * offline). Caller holds lock. */
static bool chunk_offer(struct sfs_pf_file *f, struct pf_chunk *c)
{
	uint64_t known = __atomic_load_n(&c->sub_known, __ATOMIC_ACQUIRE);
	if (sfs_store_write_chunk_hashed(f->obj, (uint32_t)c->index, c->buf, c->len, c->sub_xxh64,
					 known, write_done, c) != 0)
		return false;
	c->refs++; /* the writer reads the buffer until done */
	count(&f->pf->stats.write_pinned_bytes, c->buf_bytes);
	return true;
}

/* A chunk's bytes are final (READY or FAILED): wake readers, offer the bytes
 * to the store. Caller holds lock. Returns true if the file's last
 * reference went (the caller frees it after unlocking). */
static bool chunk_finish(struct sfs_pf_file *f, struct pf_chunk *c, bool from_origin)
{
	if (from_origin)
		count(&f->pf->stats.inflight_bytes, -(int64_t)c->fetch_len);
	c->state = c->err ? CHUNK_FAILED : CHUNK_READY;
	pthread_cond_broadcast(&f->cond);
	if (from_origin && chunk_storable(f, c) && write_admitted(f->pf, c) && chunk_offer(f, c))
		return false; /* the fetch's file reference passes to the write */
	/* Not admitted (no store, full, offline): it stays in memory for a
	 * reader until evicted; the chunk limit and budget bound how many. */
	return --f->refs == 0;
}

/* Store write completion: runs on the store's writer thread. */
static void write_done(void *arg, int err)
{
	struct pf_chunk *c = arg;
	struct sfs_pf_file *f = c->file;
	struct pf_chunk *started[SFS_PF_MAX_WINDOW];
	size_t n_started = 0;

	count(&f->pf->stats.write_pinned_bytes, -(int64_t)c->buf_bytes);
	pthread_mutex_lock(&f->lock);
	c->refs--;
	c->in_store = err == 0;
	/* Bytes durable in the store need no memory: drop the buffer unless a
	 * reader pins it, used it and has not finished it, or is still to
	 * come to it (chunk_awaits_reader). */
	if (c->in_store && !chunk_busy(c) && (c->consumed || !c->used) &&
	    !chunk_awaits_reader(f, c))
		chunk_free_ptr(f, c);
	pthread_cond_broadcast(&f->cond);
	shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
	bool last = --f->refs == 0; /* chunks just started hold their own refs */
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	if (last)
		file_free(f);
}

/*
 * Hand the parts of freshly started chunks to the origin. A chunk may finish
 * and be freed by another thread as soon as its last part is submitted, so
 * never touch a chunk after that: read its part count and array first.
 * Chunks not yet submitted are FETCHING and cannot be evicted.
 */
static void submit_chunks(struct sfs_pf_file *f, struct pf_chunk **started, size_t n)
{
	struct sfs_origin_req *batch[64];
	size_t n_batch = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned n_parts = started[i]->n_parts;
		struct sfs_origin_req *parts = started[i]->parts;
		for (unsigned p = 0; p < n_parts; p++) {
			batch[n_batch++] = &parts[p];
			if (n_batch == sizeof(batch) / sizeof(batch[0])) {
				sfs_origin_submit_batch(f->pf->origin, batch, n_batch);
				n_batch = 0;
			}
		}
	}
	if (n_batch)
		sfs_origin_submit_batch(f->pf->origin, batch, n_batch);
}

static bool same_version(const struct sfs_file_version *v, const struct sfs_attr *a)
{
	return v->size == a->size && v->mtime_s == a->mtime.tv_sec &&
	       v->mtime_ns == (uint32_t)a->mtime.tv_nsec && v->ctime_s == a->ctime.tv_sec &&
	       v->ctime_ns == (uint32_t)a->ctime.tv_nsec;
}

/* Origin completion of one part: runs on an I/O thread. */
static void part_done(struct sfs_origin_req *req)
{
	struct pf_chunk *c = req->arg;
	struct sfs_pf_file *f = c->file;
	struct pf_chunk *started[SFS_PF_MAX_WINDOW];
	size_t n_started = 0;
	bool free_file = false;

	pthread_mutex_lock(&f->lock);
	if (req->result < 0) {
		c->err = req->result;
	} else if (f->check_version && req->have_attr && !same_version(&f->version, &req->attr)) {
		/* The file changed on the server since this open: these bytes
		 * belong to another version. Never mix them in. */
		c->err = -ESTALE;
		count(&f->pf->stats.stale_errors, 1);
	} else if ((uint32_t)req->result < req->count) {
		/* The file is shorter than its attributes said: end the chunk. */
		uint32_t end =
		    (uint32_t)(req->offset - (c->index << SFS_CHUNK_SHIFT)) + (uint32_t)req->result;
		if (end < c->len)
			c->len = end;
	}
	if (req->result > 0)
		count(&f->pf->stats.fetched_bytes, req->result);
	c->parts_done |= 1ull << (req - c->parts);
	if (c->parts_pending > 1 && c->used)
		pthread_cond_broadcast(&f->cond); /* a reader may wait for this part only */
	if (--c->parts_pending == 0) {
		free_file = chunk_finish(f, c, true);
		shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
	}
	struct pf_waiter *ready = waiters_ready(f, c);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	waiters_answer(f, ready); /* before file_free: waiters hold f, so !free_file */
	if (free_file)
		file_free(f);
}

/* Restart shard pumps that stalled on the memory budget with nothing in
 * flight (so no completion would restart them). */
static void *pump_main(void *arg)
{
	sfs_prefetch *pf = arg;
	pthread_setname_np(pthread_self(), "sfs-pump");

	pthread_mutex_lock(&pf->files_lock);
	while (!pf->stopping) {
		struct timespec ts = sfs_deadline(CLOCK_REALTIME, 100 * 1000u);
		pthread_cond_timedwait(&pf->pump_cond, &pf->files_lock, &ts);
		for (struct sfs_pf_file *f = pf->files; f && !pf->stopping; f = f->next) {
			struct pf_chunk *started[SFS_PF_MAX_WINDOW];
			size_t n = 0;
			if (pthread_mutex_trylock(&f->lock) != 0)
				continue;
			if (f->shard) {
				f->refs++; /* keep it across the unlocks below */
				shard_pump(f, started, &n, SFS_PF_MAX_WINDOW);
			} else {
				pthread_mutex_unlock(&f->lock);
				continue;
			}
			pthread_mutex_unlock(&f->lock);
			pthread_mutex_unlock(&pf->files_lock);
			submit_chunks(f, started, n);
			pthread_mutex_lock(&f->lock);
			bool last = --f->refs == 0;
			pthread_mutex_unlock(&f->lock);
			if (last)
				file_free(f); /* takes files_lock: not held here */
			pthread_mutex_lock(&pf->files_lock);
			break; /* the list may have changed; next round */
		}
	}
	pthread_mutex_unlock(&pf->files_lock);
	return NULL;
}

/* --- loaders ---------------------------------------------------------------- */

static void load_chunk(struct sfs_pf_file *f, struct pf_chunk *c);

/* Hand LOADING chunks to the loader threads. Without loaders (no store) the
 * caller never makes any. The queue grows as needed: each entry already
 * holds a buffer within the budget, so it is bounded by it. */
static void loader_queue(sfs_prefetch *pf, struct pf_chunk **c, size_t n)
{
	if (!n)
		return;
	pthread_mutex_lock(&pf->load_lock);
	if (pf->load_len + n > pf->load_cap) {
		size_t cap = (pf->load_len + n) * 2;
		struct pf_chunk **q = malloc(cap * sizeof(*q));
		if (!q) {
			pthread_mutex_unlock(&pf->load_lock);
			for (size_t i = 0; i < n; i++)
				load_chunk(c[i]->file, c[i]); /* no memory: load here */
			return;
		}
		for (size_t i = 0; i < pf->load_len; i++)
			q[i] = pf->load_q[(pf->load_head + i) % pf->load_cap];
		free(pf->load_q);
		pf->load_q = q;
		pf->load_head = 0;
		pf->load_cap = cap;
	}
	for (size_t i = 0; i < n; i++)
		pf->load_q[(pf->load_head + pf->load_len++) % pf->load_cap] = c[i];
	pthread_cond_broadcast(&pf->load_cond);
	pthread_mutex_unlock(&pf->load_lock);
}

static void *loader_main(void *arg)
{
	sfs_prefetch *pf = arg;
	pthread_setname_np(pthread_self(), "sfs-load");

	pthread_mutex_lock(&pf->load_lock);
	for (;;) {
		while (!pf->load_len && !pf->load_stop)
			pthread_cond_wait(&pf->load_cond, &pf->load_lock);
		if (!pf->load_len)
			break; /* stopping, and nothing left: every queued load runs */
		struct pf_chunk *c = pf->load_q[pf->load_head];
		pf->load_head = (pf->load_head + 1) % pf->load_cap;
		pf->load_len--;
		pthread_mutex_unlock(&pf->load_lock);
		load_chunk(c->file, c);
		pthread_mutex_lock(&pf->load_lock);
	}
	pthread_mutex_unlock(&pf->load_lock);
	return NULL;
}

/* --- public API ----------------------------------------------------------- */

int sfs_prefetch_open(const struct sfs_prefetch_conf *conf, sfs_origin *origin, sfs_prefetch **out)
{
	sfs_prefetch *pf = calloc(1, sizeof(*pf));

	if (!pf)
		return -ENOMEM;
	pf->origin = origin;
	pf->conf = *conf;
	if (pf->conf.window_chunks == 0)
		pf->conf.window_chunks = 16;
	if (pf->conf.window_chunks > SFS_PF_MAX_WINDOW)
		pf->conf.window_chunks = SFS_PF_MAX_WINDOW;
	pf->max_buffers = conf->mem_bytes / SFS_CHUNK_BYTES;
	if (pf->max_buffers < 2)
		pf->max_buffers = 2;
	/* Huge-page room for the budget, the buffers kept past it and a
	 * reader's own chunk per FUSE worker beyond it; more are plain pages. */
	int rc =
	    sfs_iobuf_init(((uint64_t)pf->max_buffers + SFS_PF_OVER_BUFS + 64) * SFS_CHUNK_BYTES);
	if (rc < 0)
		sfs_log(SFS_LOG_WARN, "prefetch", "no huge-page range for chunk buffers: %s",
			strerror(-rc));
	pf->free_bufs = calloc(pf->max_buffers, sizeof(void *));
	if (!pf->free_bufs) {
		free(pf);
		return -ENOMEM;
	}
	pthread_mutex_init(&pf->buf_lock, NULL);
	pthread_mutex_init(&pf->files_lock, NULL);
	pthread_cond_init(&pf->pump_cond, NULL);
	pthread_mutex_init(&pf->load_lock, NULL);
	pthread_cond_init(&pf->load_cond, NULL);
	/* With a store, cached chunks ahead of a reader are queued for the
	 * loaders and stalled pumps wait for the pump thread: without them a
	 * reader would wait forever, so a thread that cannot start fails the
	 * open (the mount says why) rather than leave a trap. */
	rc = 0;
	if (pf->conf.store) {
		rc = -pthread_create(&pf->pump, NULL, pump_main, pf);
		pf->pump_started = rc == 0;
	}
	for (unsigned i = 0; rc == 0 && pf->conf.store && i < SFS_PF_LOADERS; i++)
		if ((rc = -pthread_create(&pf->loaders[pf->n_loaders], NULL, loader_main, pf)) == 0)
			pf->n_loaders++;
	if (rc) {
		sfs_prefetch_close(pf);
		return rc;
	}
	*out = pf;
	return 0;
}

void sfs_prefetch_stop(sfs_prefetch *pf)
{
	if (!pf)
		return;
	if (pf->pump_started) {
		pthread_mutex_lock(&pf->files_lock);
		pf->stopping = true;
		pthread_cond_signal(&pf->pump_cond);
		pthread_mutex_unlock(&pf->files_lock);
		pthread_join(pf->pump, NULL);
		pf->pump_started = false;
	}
	pthread_mutex_lock(&pf->load_lock);
	pf->load_stop = true;
	pthread_cond_broadcast(&pf->load_cond);
	pthread_mutex_unlock(&pf->load_lock);
	for (unsigned i = 0; i < pf->n_loaders; i++)
		pthread_join(pf->loaders[i], NULL);
	pf->n_loaders = 0;
}

void sfs_prefetch_close(sfs_prefetch *pf)
{
	if (!pf)
		return;
	sfs_prefetch_stop(pf);
	free(pf->load_q);
	pthread_mutex_destroy(&pf->load_lock);
	pthread_cond_destroy(&pf->load_cond);
	for (size_t i = 0; i < pf->n_free; i++)
		sfs_iobuf_put(pf->free_bufs[i]);
	for (size_t i = 0; i < pf->n_over; i++)
		sfs_iobuf_put(pf->over_bufs[i]);
	sized_free_list(pf, sized_evict(pf, UINT64_MAX));
	free(pf->free_bufs);
	pthread_mutex_destroy(&pf->buf_lock);
	pthread_mutex_destroy(&pf->files_lock);
	pthread_cond_destroy(&pf->pump_cond);
	free(pf);
}

void sfs_prefetch_get_stats(sfs_prefetch *pf, struct sfs_prefetch_stats *out)
{
#define LOAD(x) out->x = __atomic_load_n(&pf->stats.x, __ATOMIC_RELAXED)
	LOAD(inflight_bytes);
	LOAD(buffer_bytes);
	LOAD(fetched_bytes);
	LOAD(readahead_chunks);
	LOAD(wasted_chunks);
	LOAD(files_opened);
	LOAD(shard_files);
	LOAD(hit_bytes);
	LOAD(miss_bytes);
	LOAD(stale_errors);
	LOAD(direct_reads);
	out->direct_scratch_bytes = __atomic_load_n(&scratch_bytes, __ATOMIC_RELAXED);
	LOAD(direct_fetches);
	LOAD(write_pinned_bytes);
	LOAD(undelivered_unread_bytes);
	LOAD(undelivered_rest_bytes);
	LOAD(write_skipped_bytes);
#undef LOAD
	pthread_mutex_lock(&pf->buf_lock);
	out->over_budget_bytes = (uint64_t)pf->n_over * SFS_CHUNK_BYTES;
	pthread_mutex_unlock(&pf->buf_lock);
}

int sfs_pf_file_open_version(sfs_prefetch *pf, const struct sfs_fh *fh,
			     const struct sfs_file_version *v, sfs_pf_file **out)
{
	struct sfs_pf_file *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->pf = pf;
	f->fh = *fh;
	f->size = v->size;
	f->version = *v;
	f->check_version = true;
	f->refs = 1;
	if (pf->conf.store && !(f->obj = sfs_store_obj_get(pf->conf.store, v))) {
		free(f);
		return -ENOMEM;
	}
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	pthread_mutex_lock(&pf->files_lock);
	f->next = pf->files;
	if (pf->files)
		pf->files->prev = f;
	pf->files = f;
	pthread_mutex_unlock(&pf->files_lock);
	count(&pf->stats.files_opened, 1);
	*out = f;
	return 0;
}

int sfs_pf_file_open(sfs_prefetch *pf, const struct sfs_fh *fh, uint64_t size, sfs_pf_file **out)
{
	struct sfs_file_version v = {.size = size};
	int rc = sfs_pf_file_open_version(pf, fh, &v, out);

	if (rc == 0)
		(*out)->check_version = false;
	return rc;
}

void sfs_pf_file_ref(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	f->refs++;
	pthread_mutex_unlock(&f->lock);
}

void sfs_pf_file_unref(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	bool last = --f->refs == 0;
	pthread_mutex_unlock(&f->lock);
	if (last)
		file_free(f);
}

/* Start the whole-file fetch, or with rescan, go over the file again from
 * its first chunk even while a fetch runs. */
static void start_shard(struct sfs_pf_file *f, bool rescan)
{
	struct pf_chunk *started[SFS_PF_MAX_WINDOW];
	size_t n = 0;

	pthread_mutex_lock(&f->lock);
	if (!f->shard || rescan) {
		if (!f->shard)
			count(&f->pf->stats.shard_files, 1);
		f->shard = true;
		f->shard_next = 0;
	}
	shard_pump(f, started, &n, SFS_PF_MAX_WINDOW);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n);
}

void sfs_pf_file_opened(sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

	pthread_mutex_lock(&f->lock);
	if (f->openers++ == 0 && pf->conf.store && !f->obj)
		f->obj = sfs_store_obj_get(pf->conf.store, &f->version); /* NULL: uncached */
	pthread_mutex_unlock(&f->lock);
	/* Only with a store: without one, fetched chunks would have nowhere
	 * to go but memory, and the readahead window does that job. */
	if (pf->conf.mode == SFS_PREFETCH_SHARD && pf->conf.store &&
	    f->size <= pf->conf.shard_max_bytes && f->size > SFS_CHUNK_BYTES)
		start_shard(f, false);
}

int sfs_pf_file_warm(sfs_pf_file *f, bool *active)
{
	pthread_mutex_lock(&f->lock);
	if (!f->obj) {
		pthread_mutex_unlock(&f->lock);
		return -ENOTSUP;
	}
	bool first = !f->warmed;
	f->warmed = true;
	/* Chunks fetched before the warm-up and not cached (write_admitted)
	 * go to the store now, and the pump goes over the file again for
	 * those that left memory. */
	for (size_t i = 0; first && i < f->n_chunks; i++) {
		struct pf_chunk *c = f->chunks[i];
		if (c->state == CHUNK_READY && chunk_storable(f, c) && chunk_offer(f, c))
			f->refs++; /* the write's */
	}
	pthread_mutex_unlock(&f->lock);
	if (first)
		start_shard(f, true);
	pthread_mutex_lock(&f->lock);
	bool busy = f->shard;
	for (size_t i = 0; i < f->n_chunks && !busy; i++)
		busy = chunk_busy(f->chunks[i]);
	pthread_mutex_unlock(&f->lock);
	*active = busy;
	return 0;
}

uint64_t sfs_pf_file_cached_bytes(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock); /* then the store's lock: the lock order */
	uint64_t n = f->obj ? sfs_store_obj_cached_bytes(f->obj) : 0;
	pthread_mutex_unlock(&f->lock);
	return n;
}

/* Read a PRESENT chunk from the store and check it; on failure fetch it from
 * the origin instead. Called without the file lock, on LOADING chunks. */
static void load_chunk(struct sfs_pf_file *f, struct pf_chunk *c)
{
	/* c->obj: the store object, referenced when the load was started (the
	 * file may be closed, and its f->obj dropped, before a queued load runs). */
	ssize_t n = sfs_store_read_chunk(c->obj, (uint32_t)c->index, c->buf);
	bool free_file = false;

	sfs_store_obj_put(c->obj);
	c->obj = NULL;

	pthread_mutex_lock(&f->lock);
	if (n == (ssize_t)c->fetch_len) {
		c->in_store = c->loaded = true;
		free_file = chunk_finish(f, c, false);
		struct pf_waiter *ready = waiters_ready(f, c);
		pthread_mutex_unlock(&f->lock);
		waiters_answer(f, ready);
	} else {
		/* Missing, short or failed its checksum: a miss, never an error. */
		c->state = CHUNK_FETCHING;
		count(&f->pf->stats.inflight_bytes, c->fetch_len);
		pthread_mutex_unlock(&f->lock);
		submit_chunks(f, &c, 1);
	}
	if (free_file)
		file_free(f);
}

/* --- the direct path: cached bytes for small files and random readers ---- */

/*
 * Whether the reader of f reads sequentially: this read starts within two
 * chunks of where the last one ended (the kernel's readahead requests are
 * in flight together and may arrive out of order), for the second time in
 * a row (one such step happens by chance among random readers; two rarely
 * do), and most recent reads were such steps (rand_score: a moving share of
 * reads that were not, in 1/256, below SEQ_MAX_RAND_SCORE; the first read
 * of a file is not scored). The first read at the start of a file counts
 * too (shards are read from 0). Updates the detector. Caller holds f->lock.
 */
static bool track_sequential(struct sfs_pf_file *f, uint64_t c0, uint64_t c1)
{
	bool first = f->next_seq == 0; /* no read yet: no history to score */
	bool step = c0 + 2 >= f->next_seq && c0 <= f->next_seq + 2;

	f->seq_run = step ? f->seq_run + 1 : 0;
	if (!first)
		f->rand_score += ((step ? 0 : 256) - (int)f->rand_score) / 8;
	f->next_seq = c1 + 1;
	return (c0 == 0 || f->seq_run >= 2) && f->rand_score < SEQ_MAX_RAND_SCORE;
}

/*
 * Serve [off, end) straight from the store, verified by this read: only the
 * 64 KiB blocks the range touches (a whole packed object for a small file)
 * are read, into this thread's scratch; no chunk buffer, no readahead, no
 * pins. Returns the bytes served, or -1 when the chunk path must take it
 * (not in the store, or it failed its checks: the chunk path fetches it
 * again from NFS).
 */
static ssize_t direct_read(struct sfs_pf_file *f, sfs_store_obj *obj, uint64_t off, uint64_t end,
			   struct sfs_pf_view *v)
{
	size_t need = sfs_store_range_bytes(obj, off, (size_t)(end - off));
	void *buf = need <= SCRATCH_BYTES ? scratch_take(need) : NULL;
	const char *data;
	ssize_t n =
	    buf ? sfs_store_read_range(obj, off, (size_t)(end - off), buf, need, &data) : -ENOMEM;
	if (n <= 0) {
		if (buf)
			scratch_give(buf);
		return -1;
	}
	v->scratch = buf;
	v->iov[0].iov_base = (void *)data;
	v->iov[0].iov_len = (size_t)n;
	v->n_iov = 1;
	v->bytes = (size_t)n;
	v->cache_bytes = (size_t)n;
	count(&f->pf->stats.hit_bytes, n);
	count(&f->pf->stats.direct_reads, 1);
	return n;
}

#define DIRECT_FETCH_REQS 4

/* The outcome of a direct fetch's n READs of [a0, ...) into buf, for the
 * reader's [off, end): v points into buf (or, for one READ, at its data,
 * which may be lent: then v is valid in its completion only). Returns the
 * bytes served, 0 at end of file, or -errno (-ESTALE: the file changed
 * since open). */
static ssize_t fetch_result(struct sfs_pf_file *f, const struct sfs_origin_req *reqs, unsigned n,
			    char *buf, uint64_t a0, uint64_t off, uint64_t end,
			    struct sfs_pf_view *v)
{
	sfs_prefetch *pf = f->pf;
	uint64_t got = a0; /* bytes from a0 on that landed, in order */

	for (unsigned i = 0; i < n; i++) {
		const struct sfs_origin_req *r = &reqs[i];
		if (r->result < 0)
			return r->result;
		if (f->check_version && r->have_attr && !same_version(&f->version, &r->attr)) {
			count(&pf->stats.stale_errors, 1);
			return -ESTALE;
		}
		count(&pf->stats.fetched_bytes, r->result);
		if (got == r->offset)
			got += (uint64_t)r->result; /* a short reply ends the file */
	}
	uint64_t to = end < got ? end : got;
	if (to <= off)
		return 0;
	const char *base = n == 1 ? reqs[0].data : buf; /* lent or placed */
	v->iov[0].iov_base = (void *)(base + (off - a0));
	v->iov[0].iov_len = (size_t)(to - off);
	v->n_iov = 1;
	v->bytes = (size_t)(to - off);
	count(&pf->stats.direct_fetches, 1);
	return (ssize_t)v->bytes;
}

/*
 * Without a store, a reader that jumps around gets exactly what it asked
 * for straight from the origin into this thread's
 * scratch: a 1 MiB chunk per record would fetch ~9x the bytes of 110 KB
 * records and nothing would keep the rest. Returns the bytes served, 0 at
 * end of file, -errno (-ESTALE: the file changed since open), or -1 when the
 * chunk path must take it (no scratch, a tiny rsize).
 */
/* What a direct fetch of [off, end) asks for: those bytes, up to the file's
 * end, in n READs of max_read. Not rounded out to pages: nothing else reads
 * them (no store, or one that would refuse them), and a 110 KB record would
 * cost the origin 4% more bytes (measured: NFS bytes 1.037 -> 1.000 x the
 * file for shuffled records). */
struct fetch_span {
	uint64_t a0, a1;
	uint32_t max_read;
	unsigned n;
};

/* The span of [off, end), or false when a direct fetch cannot take it (more
 * than DIRECT_FETCH_REQS READs: a tiny rsize; more than a scratch). */
static bool fetch_span(const struct sfs_pf_file *f, uint64_t off, uint64_t end,
		       struct fetch_span *sp)
{
	sp->a0 = off;
	sp->a1 = end < f->size ? end : f->size;
	sp->max_read = pf_max_read(f->pf);
	sp->n = parts_for(sp->a0, sp->a1, sp->max_read);
	return sp->n <= DIRECT_FETCH_REQS && sp->a1 - sp->a0 <= SFS_STORE_RANGE_BUF_BYTES;
}

static ssize_t direct_fetch(struct sfs_pf_file *f, uint64_t off, uint64_t end,
			    struct sfs_pf_view *v)
{
	sfs_prefetch *pf = f->pf;
	struct sfs_origin_req reqs[DIRECT_FETCH_REQS], *batch[DIRECT_FETCH_REQS];
	struct fetch_span sp;

	if (!fetch_span(f, off, end, &sp))
		return -1;
	char *buf = scratch_take((size_t)(sp.a1 - sp.a0));
	if (!buf)
		return -1;
	read_parts(reqs, &f->fh, sp.a0, sp.a1, sp.max_read, buf);
	for (unsigned i = 0; i < sp.n; i++)
		batch[i] = &reqs[i];
	sfs_origin_call_batch(pf->origin, batch, sp.n);
	ssize_t n = fetch_result(f, reqs, sp.n, buf, sp.a0, off, end, v);
	if (n > 0)
		v->scratch = buf;
	else
		scratch_give(buf);
	return n;
}

/* --- the direct fetch, answered from the I/O thread ------------------------ */

/* A direct fetch in flight for sfs_pf_read_async: its READs, its buffer (a
 * sized buffer of the budget, counted in buffer_bytes) and the caller's
 * completion. Holds a reference on its file. */
struct pf_fetch {
	struct sfs_pf_file *f;
	uint64_t a0, off, end;
	char *buf;
	uint32_t buf_bytes;
	unsigned n, pending; /* pending: atomic, READs not yet done */
	struct sfs_origin_req reqs[DIRECT_FETCH_REQS];
	struct pf_answer answer;
};

/* Each READ's completion, on an I/O thread (or in sfs_origin_submit_batch
 * when the pool is closing); the last one answers the caller, then frees
 * the buffer: the caller's done() must have copied or sent the bytes. */
static void fetch_part_done(struct sfs_origin_req *r)
{
	struct pf_fetch *x = r->arg;

	if (__atomic_sub_fetch(&x->pending, 1, __ATOMIC_ACQ_REL))
		return;
	struct sfs_pf_file *f = x->f;
	struct sfs_pf_view v = {0};
	ssize_t n = fetch_result(f, x->reqs, x->n, x->buf, x->a0, x->off, x->end, &v);
	x->answer.done(x->answer.arg, n, &v);
	buf_put_sized(f->pf, x->buf, x->buf_bytes);
	free(x);
	sfs_pf_file_unref(f);
}

/* Start [off, end) as READs answered through done(); the caller took a
 * reference on f for it. Returns false, having started nothing, when the
 * synchronous paths must take it (a tiny rsize, no memory). */
static bool fetch_start(struct sfs_pf_file *f, uint64_t off, uint64_t end, sfs_pf_read_done done,
			const void *arg, size_t arg_len)
{
	sfs_prefetch *pf = f->pf;
	struct sfs_origin_req *batch[DIRECT_FETCH_REQS];
	struct fetch_span sp;

	if (!fetch_span(f, off, end, &sp))
		return false;
	struct pf_fetch *x = malloc(sizeof(*x));
	if (!x)
		return false;
	*x = (struct pf_fetch){
	    .f = f, .a0 = sp.a0, .off = off, .end = end, .n = sp.n, .pending = sp.n};
	answer_set(&x->answer, done, arg, arg_len);
	x->buf_bytes = (uint32_t)((sp.a1 - sp.a0 + 4095) & ~(uint64_t)4095);
	pthread_mutex_lock(&pf->buf_lock);
	x->buf = buf_get_sized(pf, x->buf_bytes, true);
	if (!x->buf) {
		free(x);
		return false;
	}
	read_parts(x->reqs, &f->fh, sp.a0, sp.a1, sp.max_read, x->buf);
	/* One READ is answered from the reply itself (fetch_part_done runs in
	 * its completion): buf only catches a reply that comes in pieces. */
	x->reqs[0].lend = sp.n == 1;
	for (unsigned i = 0; i < sp.n; i++) {
		x->reqs[i].done = fetch_part_done;
		x->reqs[i].arg = x;
		batch[i] = &x->reqs[i];
	}
	sfs_origin_submit_batch(pf->origin, batch, sp.n);
	return true;
}

/* Wait on f->cond (a chunk landed, a pin was dropped), saying so
 * (blocking.h). Caller holds f->lock. */
static void pf_wait(struct sfs_pf_file *f)
{
	sfs_blocking_begin();
	pthread_cond_wait(&f->cond, &f->lock);
	sfs_blocking_end();
}

/*
 * Step 1 of a chunk-path read: find or start every chunk of [c0, c1),
 * pinned for the reader, as want[]. Chunks to fetch go to started[], cached
 * chunks to load on this thread to loads[]. Waits (on f->cond) while there
 * is no buffer or room. Caller holds f->lock. Returns how many were wanted.
 */
static int claim_chunks(struct sfs_pf_file *f, uint64_t off, uint64_t end, bool seq,
			struct pf_chunk **want, struct pf_chunk **started, size_t *n_started,
			struct pf_chunk **loads, size_t *n_loads)
{
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;
	int n_want = 0;

	for (uint64_t ci = c0; ci <= c1; ci++) {
		struct pf_chunk *c;
		for (;;) {
			if ((c = chunk_find(f, ci)))
				break;
			/* In the store: read and check it (every chunk is verified
			 * each time it is loaded: XXH3 costs far less than the read). */
			enum sfs_chunk_state st = store_state(f, ci);
			bool load = st == SFS_CHUNK_PRESENT || st == SFS_CHUNK_VERIFIED;
			/* A sequential reader wants the whole chunk anyway; one that
			 * jumps around waits only for its own blocks. */
			if ((c = chunk_start(f, ci, c0, true, load, seq ? 0 : off,
					     seq ? 0 : end))) {
				if (load)
					loads[(*n_loads)++] = c;
				else
					started[(*n_started)++] = c;
				break;
			}
			/* Out of memory or room: wait for a pin or fetch to end. */
			pf_wait(f);
		}
		c->refs++;
		c->used = true;
		want[n_want++] = c;
	}
	return n_want;
}

/*
 * Step 2: the readahead window after c1 for a sequential reader: chunks the
 * store lacks are fetched (started[]), cached ones loaded by the loader
 * threads (ahead_loads[]). Caller holds f->lock.
 */
static void start_readahead(struct sfs_pf_file *f, uint64_t c0, uint64_t c1,
			    struct pf_chunk **started, size_t *n_started,
			    struct pf_chunk **ahead_loads, size_t *n_ahead_loads)
{
	uint64_t last = (f->size - 1) >> SFS_CHUNK_SHIFT;

	for (uint64_t ci = c1 + 1; ci <= c1 + f->pf->conf.window_chunks && ci <= last; ci++) {
		if (chunk_find(f, ci))
			continue;
		enum sfs_chunk_state st = store_state(f, ci);
		bool cached = st == SFS_CHUNK_PRESENT || st == SFS_CHUNK_VERIFIED;
		if (st == SFS_CHUNK_WRITING || (cached && *n_ahead_loads == SFS_PF_MAX_WINDOW))
			continue;
		struct pf_chunk *c = chunk_start(f, ci, c0, false, cached, 0, 0);
		if (!c)
			break;
		if (cached)
			ahead_loads[(*n_ahead_loads)++] = c; /* read ahead from the cache too */
		else
			started[(*n_started)++] = c;
	}
}

/*
 * Whether a reader of [off, end) may use chunk c now: it is READY or FAILED,
 * or still FETCHING without an error and every part that overlaps the range
 * has landed (a split fetch, chunk_start). A chunk with a failed part is
 * waited for until it is FAILED, so that the reader's -EIO drops it and its
 * retry starts a new fetch (never a second -EIO from the same fetch).
 * Caller holds f->lock.
 */
static bool chunk_range_ready(const struct pf_chunk *c, uint64_t off, uint64_t end)
{
	if (c->state == CHUNK_READY || c->state == CHUNK_FAILED)
		return true;
	if (c->state == CHUNK_LOADING || c->err)
		return false;
	for (unsigned p = 0; p < c->n_parts; p++) {
		const struct sfs_origin_req *r = &c->parts[p];
		if (r->offset < end && r->offset + r->count > off && !(c->parts_done & (1ull << p)))
			return false;
	}
	return true;
}

/*
 * Step 3: wait for the wanted chunks and point v at [off, end) in them.
 * Returns the bytes, or the first failed chunk's error (then nothing stays
 * pinned, and failed chunks are dropped so that the next read retries).
 * Caller holds f->lock.
 */
static ssize_t fill_view(struct sfs_pf_file *f, uint64_t off, uint64_t end, struct pf_chunk **want,
			 int n_want, struct sfs_pf_view *v)
{
	ssize_t ret = 0;

	for (int i = 0; i < n_want; i++)
		while (!chunk_range_ready(want[i], off, end))
			pf_wait(f);
	for (int i = 0; i < n_want; i++) {
		struct pf_chunk *c = want[i];
		uint64_t cstart = c->index << SFS_CHUNK_SHIFT;
		if (c->state == CHUNK_FAILED) {
			ret = c->err;
			break;
		}
		uint64_t from = off > cstart ? off : cstart;
		uint64_t to = end < cstart + c->len ? end : cstart + c->len;
		if (to <= from)
			break; /* file ended early */
		/* Hit: the bytes come from the cache; miss: they came from NFS. */
		if (c->loaded)
			count(&f->pf->stats.hit_bytes, (int64_t)(to - from));
		else if (f->obj)
			count(&f->pf->stats.miss_bytes, (int64_t)(to - from));
		if (to == cstart + c->len)
			c->consumed = true;
		unsigned b0 = (unsigned)((from - cstart) >> 16),
			 b1 = (unsigned)((to - 1 - cstart) >> 16);
		c->delivered |= (uint16_t)(((1u << (b1 - b0 + 1)) - 1) << b0);
		v->iov[v->n_iov].iov_base = c->buf + (from - cstart);
		v->iov[v->n_iov].iov_len = (size_t)(to - from);
		v->n_iov++;
		v->bytes += (size_t)(to - from);
		v->cache_bytes += c->loaded ? (size_t)(to - from) : 0;
		if (to < cstart + SFS_CHUNK_BYTES && to < end)
			break; /* short chunk: end of file */
	}
	for (int i = 0; i < n_want; i++)
		v->pins[v->n_pins++] = want[i];
	if (ret < 0) {
		for (int i = 0; i < v->n_pins; i++)
			((struct pf_chunk *)v->pins[i])->refs--;
		v->n_pins = 0;
		v->n_iov = 0;
		v->bytes = 0;
		for (size_t i = 0; i < f->n_chunks;)
			if (f->chunks[i]->state == CHUNK_FAILED && f->chunks[i]->refs == 0)
				chunk_free(f, i);
			else
				i++;
		pthread_cond_broadcast(&f->cond);
	}
	return ret < 0 ? ret : (ssize_t)v->bytes;
}

/* Waiters of chunk c whose range is ready, unlinked. Caller holds f->lock. */
static struct pf_waiter *waiters_ready(struct sfs_pf_file *f, struct pf_chunk *c)
{
	struct pf_waiter *ready = NULL, **p = &f->waiters;

	while (*p) {
		struct pf_waiter *w = *p;
		if (w->c == c && chunk_range_ready(c, w->off, w->end)) {
			*p = w->next;
			w->next = ready;
			ready = w;
		} else {
			p = &w->next;
		}
	}
	return ready;
}

/* Answer waiters whose range is ready (from waiters_ready), without the
 * lock held: each reply goes out from this thread. */
static void waiters_answer(struct sfs_pf_file *f, struct pf_waiter *ready)
{
	while (ready) {
		struct pf_waiter *w = ready;
		struct sfs_pf_view v = {0};
		ready = w->next;
		pthread_mutex_lock(&f->lock);
		ssize_t n = fill_view(f, w->off, w->end, &w->c, 1, &v); /* ready: no wait */
		f->refs += v.n_pins ? 1 : 0; /* the view's reference, as in chunk_read */
		pthread_mutex_unlock(&f->lock);
		w->answer.done(w->answer.arg, n, &v);
		sfs_pf_view_release(f, &v);
		free(w);
		sfs_pf_file_unref(f); /* the waiter's reference */
	}
}

/* Register an answer of [off, end) in chunk c (pinned by claim_chunks) for
 * when its bytes land. Caller holds f->lock and has checked that they have
 * not. Returns false (nothing registered) without memory. */
static bool waiter_add(struct sfs_pf_file *f, struct pf_chunk *c, uint64_t off, uint64_t end,
		       sfs_pf_read_done done, const void *arg, size_t arg_len)
{
	struct pf_waiter *w = malloc(sizeof(*w));

	if (!w)
		return false;
	*w = (struct pf_waiter){.next = f->waiters, .c = c, .off = off, .end = end};
	answer_set(&w->answer, done, arg, arg_len);
	f->waiters = w;
	f->refs++;
	return true;
}

/* The chunk path of a read: claim the chunks, start readahead, load or
 * fetch, wait, fill the view. A read of one chunk that is not a sequential
 * reader's (a small file, a random record) does not wait when the caller
 * takes answers from the I/O thread (done): it returns -EINPROGRESS and is
 * answered by whichever thread lands its bytes. */
static ssize_t chunk_read(struct sfs_pf_file *f, uint64_t off, uint64_t end, bool seq,
			  struct sfs_pf_view *v, sfs_pf_read_done done, const void *arg,
			  size_t arg_len)
{
	struct pf_chunk *want[3], *started[SFS_PF_MAX_WINDOW * 2 + 3], *loads[3];
	struct pf_chunk *ahead_loads[SFS_PF_MAX_WINDOW];
	size_t n_started = 0, n_loads = 0, n_ahead_loads = 0;
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;

	pthread_mutex_lock(&f->lock);
	int n_want = claim_chunks(f, off, end, seq, want, started, &n_started, loads, &n_loads);
	if (seq && f->pf->conf.mode != SFS_PREFETCH_OFF)
		start_readahead(f, c0, c1, started, &n_started, ahead_loads, &n_ahead_loads);
	shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
	/* Registered before the parts are submitted: none can land unseen. */
	bool waiting = done && (!seq || f->size <= SFS_CHUNK_BYTES) && n_want == 1 &&
		       n_loads == 0 && !chunk_range_ready(want[0], off, end) &&
		       waiter_add(f, want[0], off, end, done, arg, arg_len);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	loader_queue(f->pf, ahead_loads, n_ahead_loads);
	for (size_t i = 0; i < n_loads; i++)
		load_chunk(f, loads[i]);
	if (waiting)
		return -EINPROGRESS;

	pthread_mutex_lock(&f->lock);
	ssize_t ret = fill_view(f, off, end, want, n_want, v);
	/* A view holds its file: the kernel may see the reply and close the
	 * file (and the last open may drop f) before the view is released. */
	if (v->n_pins)
		f->refs++;
	pthread_mutex_unlock(&f->lock);
	return ret;
}

/* Which path a read takes (see sfs_pf_read_async). */
struct read_plan {
	bool seq;	  /* the reader goes in order (track_sequential) */
	bool direct;	  /* from the store, verified, no chunk */
	bool fetch;	  /* from the origin into the thread's scratch, no chunk */
	bool fetch_async; /* from the origin, answered from the I/O thread */
	sfs_store_obj *obj;
};

/* Classify a read of [off, end): track_sequential runs once per read. A
 * fetch_async plan holds a reference on f for fetch_start. */
static struct read_plan plan_read(struct sfs_pf_file *f, uint64_t off, uint64_t end, bool async)
{
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;
	struct read_plan p;

	pthread_mutex_lock(&f->lock);
	p.seq = track_sequential(f, c0, c1);
	/* f->obj is dropped only when the last open ends; a reader holds one. */
	p.obj = f->obj;
	/* Up to a chunk, none of it in memory: the chunk path gains nothing. */
	bool off_chunks =
	    end - off <= SFS_CHUNK_BYTES && !chunk_find(f, c0) && (c1 == c0 || !chunk_find(f, c1));
	bool small = f->size <= SFS_CHUNK_BYTES;
	p.direct = p.obj && off_chunks && (small || !p.seq);
	/* With a store, a random reader's chunk that the store lacks is
	 * fetched whole so that the store gets it; but while the writes
	 * waiting hold the budget it would be dropped uncached (write_admitted)
	 * and its other ~9 records fetched whole again later: then the reader's
	 * own bytes only, as without a store (measured, 3 GiB of shuffled
	 * records behind this VM's disk: NFS bytes 1.09 x the file, 263 MiB of
	 * writes skipped). */
	bool uncachable = p.obj && off_chunks && !p.seq && !small &&
			  write_behind_full(f->pf, SFS_CHUNK_BYTES) &&
			  store_state(f, c0) == SFS_CHUNK_ABSENT &&
			  (c1 == c0 || store_state(f, c1) == SFS_CHUNK_ABSENT);
	/* Without a store: a random reader's own bytes only. Waiting for them
	 * on this thread, a file of one chunk or less is read whole by the
	 * chunk path; answered from the I/O thread, it is fetched as asked. */
	p.fetch = (!p.obj && off_chunks && !p.seq && !small) || uncachable;
	p.fetch_async = async && off_chunks && ((!p.obj && (!p.seq || small)) || uncachable);
	if (p.fetch_async)
		f->refs++;
	pthread_mutex_unlock(&f->lock);
	return p;
}

/*
 * Where a read's bytes come from: a file of one chunk or less (read whole,
 * once) and a reader that jumps around (a chunk loaded for one record would
 * be dropped before its other records are asked for) take the direct path
 * when the store has the range and no chunk of it is in memory; without a
 * store, they are fetched as asked, from the I/O thread where the caller
 * takes answers there. Everything else takes the chunk path.
 */
ssize_t sfs_pf_read_async(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v,
			  sfs_pf_read_done done, const void *arg, size_t arg_len)
{
	v->n_iov = 0;
	v->n_pins = 0;
	v->scratch = NULL;
	v->bytes = 0;
	v->cache_bytes = 0;
	if (off >= f->size || len == 0)
		return 0;
	uint64_t end = off + len < f->size ? off + len : f->size;
	if (((end - 1) >> SFS_CHUNK_SHIFT) - (off >> SFS_CHUNK_SHIFT) >= 3)
		return -EINVAL;

	if (arg_len > SFS_PF_ASYNC_ARG_MAX)
		done = NULL; /* no room for the caller's context: answered here */
	struct read_plan p = plan_read(f, off, end, done != NULL);
	if (p.fetch_async) {
		if (fetch_start(f, off, end, done, arg, arg_len))
			return -EINPROGRESS;
		sfs_pf_file_unref(f); /* not the last: the caller's open holds one */
	}
	if (p.direct) {
		ssize_t n = direct_read(f, p.obj, off, end, v);
		if (n > 0)
			return n;
	}
	if (p.fetch) {
		ssize_t n = direct_fetch(f, off, end, v);
		if (n != -1)
			return n;
	}
	return chunk_read(f, off, end, p.seq, v, done, arg, arg_len);
}

ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v)
{
	return sfs_pf_read_async(f, off, len, v, NULL, NULL, 0);
}

void sfs_pf_view_release(sfs_pf_file *f, struct sfs_pf_view *v)
{
	if (v->scratch) { /* before f: the reply may have let f go */
		scratch_give(v->scratch);
		v->scratch = NULL;
	}
	if (!v->n_pins)
		return;
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < v->n_pins; i++) {
		struct pf_chunk *c = v->pins[i];
		c->refs--;
		/* A sequential reader (and the kernel's page cache) will not ask
		 * for a chunk read to its end again: free it now, not at eviction,
		 * so finished chunks never hold the memory budget. */
		if (!chunk_busy(c) && c->consumed && c->state == CHUNK_READY)
			chunk_free_ptr(f, c);
	}
	v->n_pins = 0;
	pthread_cond_broadcast(&f->cond);
	bool last = --f->refs == 0; /* the view's reference */
	pthread_mutex_unlock(&f->lock);
	if (last)
		file_free(f);
}

void sfs_pf_file_drop_idle(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	if (f->openers)
		f->openers--;
	sfs_store_obj *put = NULL;
	if (f->openers == 0) {
		f->shard = false; /* a file closed early does not keep the pool busy */
		/* A closed file must not keep its cache object from eviction
		 * (the inode keeps f until the kernel forgets it). Store writes
		 * in flight hold their own reference. */
		put = f->obj;
		f->obj = NULL;
	}
	for (size_t i = 0; i < f->n_chunks;)
		if (!chunk_busy(f->chunks[i]))
			chunk_free(f, i);
		else
			i++;
	pthread_mutex_unlock(&f->lock);
	if (put)
		sfs_store_obj_put(put);
}
