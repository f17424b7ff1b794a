// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/chunks — one file's chunks: found, made (a buffer and the READ
 * parts of its fetch), evicted and freed; their bytes placed and hashed as
 * they land (chunk_place) and each part's completion (part_done), which
 * finishes the chunk, answers its waiters (direct.c) and moves the shard
 * pump on; the write-behind to the store (admission, offer, write_done);
 * the shard pump and the thread that restarts pumps stalled on the budget;
 * the queue and the threads that load cached chunks ahead of sequential
 * readers (the load itself is load_chunk, prefetch.c).
 * Not here: reads and readahead (direct.c), buffers (buffers.c).
 *
 * Threading: callers hold file->lock where a function says so;
 * part_done runs on origin I/O threads, write_done on the store's writer
 * thread, neither blocks. prefetch_int.h has the lock order.
 */
#include "prefetch_int.h"

#include <sched.h>

/* --- chunks (caller holds file->lock) -------------------------------------- */

struct pf_chunk *chunk_find(struct sfs_pf_file *f, uint64_t index)
{
	for (size_t i = 0; i < f->n_chunks; i++)
		if (f->chunks[i]->index == index)
			return f->chunks[i];
	return NULL;
}

bool chunk_busy(const struct pf_chunk *c)
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

void chunk_free(struct sfs_pf_file *f, size_t slot)
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

void chunk_free_ptr(struct sfs_pf_file *f, struct pf_chunk *c)
{
	for (size_t k = 0; k < f->n_chunks; k++)
		if (f->chunks[k] == c) {
			chunk_free(f, k);
			return;
		}
}

/* Chunks wait for a reader whose recent reads were mostly steps: the
 * kernel's readahead requests, handled by several workers, reach the
 * daemon out of order and score as jumps now and then; a reader that
 * really jumps around passes 128 after six jumps. */
#define AWAIT_MAX_RAND_SCORE 128
/* The kernel's readahead (8 MiB, fs/main.c) has up to 8 chunks of reads in
 * flight, and its reads ahead reach the daemon before the reader's own read,
 * so next_seq may be as far past a chunk whose read is still to come:
 * unconsumed chunks up to twice that far behind next_seq still wait for
 * their reads. */
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

/* Evict idle chunks of other files until the budget has room. Caller holds
 * self->lock; other files are only try-locked (no lock order between files),
 * and files_lock keeps them from being freed meanwhile. */
static void reclaim_from_other_files(sfs_prefetch *pf, struct sfs_pf_file *self)
{
	pthread_mutex_lock(&pf->files_lock);
	for (struct sfs_pf_file *o = pf->files; o && buf_over_budget(pf); o = o->next) {
		/* A hinted file's chunks are what the next items need. */
		if (o == self || __atomic_load_n(&o->hint_holds, __ATOMIC_RELAXED) ||
		    pthread_mutex_trylock(&o->lock) != 0)
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
unsigned read_parts(struct sfs_origin_req *r, const struct sfs_fh *fh, uint64_t from, uint64_t to,
		    uint32_t max_read, char *buf)
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
 * its bytes are in the CPU's cache, for the store's record (cheaper than the
 * writer hashing the chunk again from memory later). A sub-block split
 * between pieces or parts (an rsize that is no multiple of 16 KiB, a short
 * reply) is left to the writer. An I/O thread; parts of one chunk may
 * land at once on several, each setting its own bits.
 */
void chunk_place(struct sfs_origin_req *r, void *dst, const void *src, uint32_t n)
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

void chunk_promote(struct pf_chunk *c)
{
	if (!c->background || c->state != CHUNK_FETCHING)
		return;
	c->background = false;
	for (unsigned p = 0; p < c->n_parts; p++)
		if (!(c->parts_done & (1ull << p)))
			sfs_origin_promote(c->file->pf->origin, &c->parts[p]);
}

void chunk_demote(struct pf_chunk *c)
{
	if (c->background || c->state != CHUNK_FETCHING)
		return;
	c->background = true;
	for (unsigned p = 0; p < c->n_parts; p++)
		if (!(c->parts_done & (1ull << p)))
			sfs_origin_demote(c->file->pf->origin, &c->parts[p]);
}

/* The origin's READ size, at most a chunk (0: the origin did not say). */
uint32_t pf_max_read(sfs_prefetch *pf)
{
	uint32_t max_read = sfs_origin_max_read(pf->origin);

	return max_read == 0 || max_read > SFS_CHUNK_BYTES ? SFS_CHUNK_BYTES : max_read;
}

unsigned parts_for(uint64_t from, uint64_t to, uint32_t max_read)
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
	 * chunk evicts readahead that is about to be asked for, which is then
	 * fetched twice. The memory budget is the real bound. */
	size_t limit = 2 * (size_t)pf->conf.window_chunks + 16;
	if (f->hint_holds) /* items of a hint list: the budget alone bounds them */
		limit = SIZE_MAX;

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
struct pf_chunk *chunk_start(struct sfs_pf_file *f, uint64_t index, uint64_t cur, bool demand,
			     bool loading, uint64_t head_from, uint64_t head_to)
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
	/* A warm-up's own fetches yield to readers (origin.h); a reader that
	 * comes to wait for one promotes it (chunk_promote). */
	c->background = !demand && !loading && f->warmed && !f->read_seen;
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
	for (unsigned p = 0; p < n_parts; p++)
		c->parts[p].background = c->background;
	f->chunks[f->n_chunks++] = c;
	f->refs++; /* the fetch holds the file */
	if (!loading)
		count(&pf->stats.inflight_bytes, len);
	if (!demand)
		count(&pf->stats.readahead_chunks, 1);
	return c;
}

void file_free(struct sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

	pthread_mutex_lock(&pf->files_lock);
	if (f->prev)
		f->prev->next = f->next;
	else
		pf->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	vtable_remove(pf, f);
	pthread_mutex_unlock(&pf->files_lock);
	/* Unlinked: no new pin; one taken before may still look at f. */
	while (__atomic_load_n(&f->vpins, __ATOMIC_ACQUIRE))
		sched_yield();
	while (f->n_chunks)
		chunk_free(f, f->n_chunks - 1);
	if (f->obj)
		sfs_store_obj_put(f->obj);
	free(f->chunks);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

enum sfs_chunk_state store_state(struct sfs_pf_file *f, uint64_t index)
{
	return f->obj ? sfs_store_chunk_state(f->obj, (uint32_t)index) : SFS_CHUNK_ABSENT;
}

/* Queue more of a whole-file fetch: every chunk the store lacks, in order,
 * while the budget and the file's chunk limit allow. Caller holds lock;
 * chunks to submit are appended to started[*n] (room for cap). */
void shard_pump(struct sfs_pf_file *f, struct pf_chunk **started, size_t *n, size_t cap)
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

/* Whether a reader's own chunk of bytes fetched now would be refused by
 * write_admitted: the writes waiting hold the budget. */
bool write_behind_full(sfs_prefetch *pf, uint32_t buf_bytes)
{
	return write_behind_over(pf, buf_bytes, pf->conf.mem_bytes);
}

/*
 * Whether a fetched chunk may be offered to the cache. Its buffer stays
 * pinned until the write is durable, so when the cache disk is slower than
 * the network the writes waiting would hold memory without bound, many
 * times the budget.
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
bool write_admitted(sfs_prefetch *pf, const struct pf_chunk *c)
{
	if (!write_behind_over(pf, c->buf_bytes, write_limit(pf, c)))
		return true;
	count(&pf->stats.write_skipped_bytes, c->len);
	return false;
}

/* Whether READY chunk c holds what the store may take: all of a chunk
 * fetched from the origin, not yet durable there. Caller holds lock. */
bool chunk_storable(const struct sfs_pf_file *f, const struct pf_chunk *c)
{
	return !c->err && f->obj && c->len == c->fetch_len && !c->loaded && !c->in_store;
}

/* Queue c's bytes for the store. Returns true if queued: the write pins c
 * until write_done and holds a file reference, which the caller gives it.
 * False when the store refuses (present or being written, pin full,
 * offline). Caller holds lock. */
bool chunk_offer(struct sfs_pf_file *f, struct pf_chunk *c)
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
bool chunk_finish(struct sfs_pf_file *f, struct pf_chunk *c, bool from_origin)
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
void submit_chunks(struct sfs_pf_file *f, struct pf_chunk **started, size_t n)
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

bool same_version(const struct sfs_file_version *v, const struct sfs_attr *a)
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
	bool hinted_done = false;
	if (--c->parts_pending == 0) {
		free_file = chunk_finish(f, c, true);
		shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
		hinted_done = f->hint_holds && f->pf->fetch_observer;
		if (hinted_done)
			f->refs++; /* for the observer: a hold may go meanwhile */
	}
	struct pf_waiter *ready = waiters_ready(f, c);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	waiters_answer(f, ready); /* before file_free: waiters hold f, so !free_file */
	if (hinted_done) {
		f->pf->fetch_observer(f->pf->observer_arg, f);
		sfs_pf_file_unref(f);
	}
	if (free_file)
		file_free(f);
}

/* Restart shard pumps that stalled on the memory budget with nothing in
 * flight (so no completion would restart them). */
void *pump_main(void *arg)
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

/* Hand LOADING chunks to the loader threads. Without loaders (no store) the
 * caller never makes any. The queue grows as needed: each entry already
 * holds a buffer within the budget, so it is bounded by it. */
void loader_queue(sfs_prefetch *pf, struct pf_chunk **c, size_t n)
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

void *loader_main(void *arg)
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
