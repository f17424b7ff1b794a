// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/buffers — the chunk buffers of the prefetch pool (1 MiB from
 * iobuf's huge-page arena, shorter ones made to size and kept for reuse),
 * their budget (prefetch_mem), the direct path's scratch (one per read in
 * flight), and giving all of them back once idle (sfs_prefetch_release_idle).
 * Not here: what is read into them (chunks.c, read.c).
 *
 * Threading: any thread. See prefetch_int.h for the data structures and the
 * lock order; buf_lock and scratch_lock are leaves.
 */
#include "prefetch_int.h"

/* --- buffers -------------------------------------------------------------- */

/*
 * Chunk buffers. A chunk of SFS_CHUNK_BYTES gets a pooled buffer (1 MiB
 * buffers come from iobuf's huge-page arena, common/iobuf.h: the pool
 * saves taking and giving one back, and the page faults of a fresh one). A shorter one (a small
 * file, a file's tail) gets a buffer of its length rounded up to 4 KiB, from malloc: a 1 KiB file
 * held a 1 MiB buffer while its cache write waited, so 256 of them spent a 256 MiB budget and the
 * next small files were not cached. The budget is in bytes over both kinds: max_buffers pooled
 * buffers' worth.
 */
uint32_t chunk_buf_bytes(uint32_t len)
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
 * in flight, not one per thread that ever read (a pool of 64 workers would
 * keep 64). Its bytes lie in a 2 MiB transparent huge page, so that its
 * O_DIRECT reads pin one page and hand the disk one segment (iobuf.h), not
 * one per 4 KiB page. A read that needs
 * at most SCRATCH_SLOT_BYTES (a small file's packed object, a record's
 * 16 KiB blocks: sfs_store_range_bytes, or a direct fetch's span) takes a
 * slot of a page shared by SCRATCH_SLOTS such reads; a larger one a page of
 * its own. A huge page is resident whole from its first touch: 16 small
 * reads in flight hold two pages (4 MiB), not 16 (32 MiB).
 * A read that needs at most SCRATCH_TINY_BYTES (a file of up to ~16 KiB, a
 * record in one 16 KiB block) takes a tiny slot of one 2 MiB mapping of
 * plain 4 KiB pages: resident as touched, and the lowest free slot is
 * taken, so 16 reads of 1 KiB files in flight hold 64-256 KiB, not 4 MiB;
 * a read of at most 16 KiB is at most 4 pages to the disk, so a huge page
 * would save it little.
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
uint64_t scratch_bytes;		 /* atomic: scratch pages made and not freed */
/* atomic: whole scratch pages kept, at most SCRATCH_KEEP; an eighth of the
 * last pool's budget (sfs_prefetch_open) */
unsigned scratch_keep = SCRATCH_KEEP;

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
void *scratch_take(size_t need)
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

void scratch_give(void *b)
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
	if (n_scratch_free < __atomic_load_n(&scratch_keep, __ATOMIC_RELAXED)) {
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
 * (its fetch's or its chunk's buffer, the file's size rounded up to 4 KiB):
 * from malloc that is an aligned_alloc that searches the arena's bins, per
 * file, freed on another thread; from a stack, a pop. Kept buffers stay in
 * sized_bytes, so they count against the budget like the pool's idle
 * buffers, and like them give way:
 * a get that would not fit frees them first (sized_evict), and
 * buf_over_budget does not count them. sfs_prefetch_release_idle frees
 * them once buffers go unused.
 */

/* Whether b (bytes, still in sized_bytes) was kept: not while buffers hold
 * more than the budget (readers' own chunks past it). Caller holds
 * buf_lock. */
bool sized_keep(sfs_prefetch *pf, void *b, uint32_t bytes)
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
void *sized_evict(sfs_prefetch *pf, uint64_t want)
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
void sized_free_list(sfs_prefetch *pf, void *list)
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
void *buf_get_sized(sfs_prefetch *pf, uint32_t bytes, bool demand)
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
void *buf_get(sfs_prefetch *pf, uint32_t bytes, bool demand)
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

bool buf_over_budget(sfs_prefetch *pf)
{
	pthread_mutex_lock(&pf->buf_lock);
	bool over = pf->n_free == 0 && buf_in_use(pf) >= buf_budget(pf);
	pthread_mutex_unlock(&pf->buf_lock);
	return over;
}

void buf_put_sized(sfs_prefetch *pf, void *b, uint32_t bytes)
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

void buf_put(sfs_prefetch *pf, void *b, uint32_t bytes)
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
		if (pf->n_over < pf->over_max) {
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
