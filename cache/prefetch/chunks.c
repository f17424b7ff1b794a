// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/chunks — a chunk's life, its loading and its waiters: chunks
 * found, made (a buffer and the READ parts of its fetch: chunk_start),
 * evicted to make room and freed; their parts handed to the origin and
 * each part's completion (part_done); a cached chunk read from the store
 * and checked (load_chunk), on the reader's thread or by the loader threads
 * and their queue; the state a chunk ends in (chunk_finish); and the reads
 * waiting for a chunk's bytes (waiters), answered by the thread that lands
 * them.
 *
 *   chunk_start ─> LOADING ──load_chunk: checked──────────> READY
 *                     └──load_chunk: absent, short, bad──> FETCHING
 *   chunk_start ─> FETCHING ──last part_done──> READY, or FAILED (err)
 *
 * READY and FAILED are terminal. A chunk is freed only in one of them, with
 * no pin (refs 0) and no waiter on it. Every chunk LOADING or FETCHING
 * holds a reference on its file; chunk_finish gives it to the store write
 * or drops it.
 *
 * Not here: what a read does with its chunks (read.c), which chunks are
 * fetched ahead (readahead.c), their offer to the store (offer.c), their
 * buffers (buffers.c).
 *
 * Threading: callers hold file->lock where a function says so; part_done
 * runs on origin I/O threads and never blocks; load_chunk runs on a
 * reader's thread or a loader thread, without file->lock; waiters are
 * answered with no lock held. prefetch_int.h has the lock order.
 */
#include "prefetch_int.h"

/* --- finding and freeing (caller holds file->lock) --------------------------- */

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

enum sfs_chunk_state store_state(struct sfs_pf_file *f, uint64_t index)
{
	return f->obj ? sfs_store_chunk_state(f->obj, (uint32_t)index) : SFS_CHUNK_ABSENT;
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

/* Whether a waiter waits on c. Caller holds f->lock. */
static bool chunk_has_waiter(const struct sfs_pf_file *f, const struct pf_chunk *c)
{
	for (const struct pf_waiter *w = f->waiters; w; w = w->next)
		if (w->c == c)
			return true;
	return false;
}

void chunk_free(struct sfs_pf_file *f, size_t slot)
{
	struct pf_chunk *c = f->chunks[slot];

	assert(slot < f->n_chunks);
	assert(chunk_terminal(c->state) && c->refs == 0); /* !chunk_busy */
	assert(!c->obj);				  /* a load gave its object back */
	assert(!chunk_has_waiter(f, c));
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

/* --- making room (caller holds file->lock) ----------------------------------- */

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
bool chunk_awaits_reader(const struct sfs_pf_file *f, const struct pf_chunk *c)
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

/* --- a chunk and the parts of its fetch -------------------------------------- */

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

static void part_done(struct sfs_origin_req *req);

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

/* The READ parts of a chunk's fetch (chunk_start): [start, end) of the
 * file, and the head [h0, h1) a reader that jumps around asked for, which
 * goes first when split. */
struct chunk_parts {
	uint64_t start, end, h0, h1;
	uint32_t len, max_read;
	bool split;
	unsigned n_parts; /* 1 .. 64: a bit each in parts_done */
};

/* Plan the parts of chunk `index` of f for a head of [head_from, head_to)
 * (absolute offsets; empty: none), on 64 KiB blocks inside the chunk; no
 * head if it is all of the chunk, or if its pieces would pass 64 parts (a
 * tiny rsize: one piece, as before). */
static void chunk_plan_parts(const struct sfs_pf_file *f, uint64_t index, uint64_t head_from,
			     uint64_t head_to, struct chunk_parts *pp)
{
	uint64_t start = index << SFS_CHUNK_SHIFT;

	assert(start < f->size);
	pp->start = start;
	pp->len = (uint32_t)(f->size - start < SFS_CHUNK_BYTES ? f->size - start : SFS_CHUNK_BYTES);
	pp->end = start + pp->len;
	pp->max_read = pf_max_read(f->pf);
	pp->h0 = head_from > start ? head_from & ~(uint64_t)0xffff : start;
	pp->h1 = ((head_to + 0xffff) & ~(uint64_t)0xffff);
	pp->h1 = pp->h1 < pp->end ? pp->h1 : pp->end;
	pp->split = head_to > head_from && pp->h1 > pp->h0 && (pp->h0 > start || pp->h1 < pp->end);
	pp->n_parts = pp->split ? parts_for(pp->h0, pp->h1, pp->max_read) +
				      parts_for(pp->h1, pp->end, pp->max_read) +
				      parts_for(start, pp->h0, pp->max_read)
				: parts_for(start, pp->end, pp->max_read);
	if (pp->n_parts > 64) {
		pp->split = false;
		pp->n_parts = parts_for(start, pp->end, pp->max_read);
	}
	assert(pp->n_parts >= 1 && pp->n_parts <= 64);
}

/* Fill c->parts as planned: the head first when split, then the rest of
 * the chunk after it, then what lies before it. */
static void chunk_fill_parts(struct pf_chunk *c, const struct chunk_parts *pp, bool hash)
{
	unsigned n = 0;

	if (pp->split) {
		chunk_add_parts(c, pp->h0, pp->h1, pp->max_read, hash, &n);
		chunk_add_parts(c, pp->h1, pp->end, pp->max_read, hash, &n);
		chunk_add_parts(c, pp->start, pp->h0, pp->max_read, hash, &n);
	} else {
		chunk_add_parts(c, pp->start, pp->end, pp->max_read, hash, &n);
	}
	assert(n == pp->n_parts);
	for (unsigned p = 0; p < pp->n_parts; p++)
		c->parts[p].background = c->background;
}

/*
 * Create chunk `index`, FETCHING (parts ready; the caller submits them after
 * dropping file->lock) or LOADING (the caller reads it from the store).
 * [head_from, head_to) (absolute offsets; empty: none) is what a reader that
 * jumps around asked for: its 64 KiB blocks become the first parts, so that
 * the reader waits for them only (fill_view), and the rest of the chunk
 * follows in later parts, so that the whole chunk still reaches the store
 * (every byte fetched once per epoch). Returns NULL when there is no buffer
 * or, for readahead (!demand), no room. Caller holds f->lock.
 */
struct pf_chunk *chunk_start(struct sfs_pf_file *f, uint64_t index, uint64_t cur, bool demand,
			     bool loading, uint64_t head_from, uint64_t head_to)
{
	sfs_prefetch *pf = f->pf;
	struct chunk_parts pp;

	assert(!chunk_find(f, index));
	assert(!loading || f->obj);
	chunk_plan_parts(f, index, head_from, head_to, &pp);
	if (!chunk_make_room(f, cur, demand))
		return NULL;
	assert(f->n_chunks < f->cap_chunks);
	/* sfs_store_read_chunk fills a whole chunk's buffer (O_DIRECT, packed
	 * records): a load gets a pooled one. */
	uint32_t buf_bytes = loading ? SFS_CHUNK_BYTES : chunk_buf_bytes(pp.len);
	void *buf = buf_get(pf, buf_bytes, demand);
	if (!buf)
		return NULL;
	struct pf_chunk *c = calloc(1, sizeof(*c) + pp.n_parts * sizeof(c->parts[0]));
	if (!c) {
		buf_put(pf, buf, buf_bytes);
		return NULL;
	}
	c->buf_bytes = buf_bytes;
	c->file = f;
	c->index = index;
	c->state = loading ? CHUNK_LOADING : CHUNK_FETCHING; /* born; chunk_move from now on */
	if (loading) {
		c->obj = f->obj;
		sfs_store_obj_ref(c->obj);
	}
	c->len = c->fetch_len = pp.len;
	c->buf = buf;
	c->readahead = !demand;
	/* A warm-up's own fetches yield to readers (origin.h); a reader that
	 * comes to wait for one promotes it (chunk_promote). */
	c->background = !demand && !loading && f->warmed && !f->read_seen;
	c->n_parts = pp.n_parts;
	c->parts_pending = pp.n_parts;
	chunk_fill_parts(c, &pp, !loading && hash_as_landed(c));
	f->chunks[f->n_chunks++] = c;
	file_get_locked(f); /* the fetch holds the file */
	if (!loading)
		count(&pf->stats.inflight_bytes, pp.len);
	if (!demand)
		count(&pf->stats.readahead_chunks, 1);
	return c;
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

/* --- landing ----------------------------------------------------------------- */

bool same_version(const struct sfs_file_version *v, const struct sfs_attr *a)
{
	return v->size == a->size && v->mtime_s == a->mtime.tv_sec &&
	       v->mtime_ns == (uint32_t)a->mtime.tv_nsec && v->ctime_s == a->ctime.tv_sec &&
	       v->ctime_ns == (uint32_t)a->ctime.tv_nsec;
}

/* A chunk's bytes are final: a load that checked (LOADING -> READY) or the
 * last part of a fetch (FETCHING -> READY, or FAILED with c->err). Wakes
 * readers, offers fetched bytes to the store. Caller holds lock. Returns
 * true if the file's last reference went (the caller frees it after
 * unlocking). */
bool chunk_finish(struct sfs_pf_file *f, struct pf_chunk *c, bool from_origin)
{
	if (from_origin) {
		assert(c->parts_pending == 0);
		count(&f->pf->stats.inflight_bytes, -(int64_t)c->fetch_len);
		chunk_move(c, CHUNK_FETCHING, c->err ? CHUNK_FAILED : CHUNK_READY);
	} else {
		assert(!c->err && c->loaded && c->in_store);
		chunk_move(c, CHUNK_LOADING, CHUNK_READY);
	}
	pthread_cond_broadcast(&f->cond);
	if (from_origin && chunk_storable(f, c) && write_admitted(f->pf, c) && chunk_offer(f, c))
		return false; /* the fetch's file reference passes to the write */
	/* Not admitted (no store, full, offline): it stays in memory for a
	 * reader until evicted; the chunk limit and budget bound how many. */
	return file_put_locked(f);
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
	assert(c->state == CHUNK_FETCHING && c->parts_pending > 0);
	assert(req >= c->parts && req < c->parts + c->n_parts);
	assert(!(c->parts_done & (1ull << (req - c->parts)))); /* each part lands once */
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
			file_get_locked(f); /* for the observer: a hold may go meanwhile */
	}
	struct pf_waiter *ready = waiters_ready(f, c);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	assert(!ready || !free_file);
	waiters_answer(f, ready); /* before file_free: waiters hold f, so !free_file */
	if (hinted_done) {
		f->pf->fetch_observer(f->pf->observer_arg, f);
		sfs_pf_file_unref(f);
	}
	if (free_file)
		file_free(f);
}

/* --- loading ----------------------------------------------------------------- */

/* Read a PRESENT chunk from the store and check it; on failure fetch it from
 * the origin instead. Called without the file lock, on LOADING chunks. */
void load_chunk(struct sfs_pf_file *f, struct pf_chunk *c)
{
	/* c->obj: the store object, referenced when the load was started (the
	 * file may be closed, and its f->obj dropped, before a queued load runs).
	 * Only this load touches c->obj and c->buf while c is LOADING. */
	assert(c->obj);
	ssize_t n = sfs_store_read_chunk(c->obj, (uint32_t)c->index, c->buf);
	bool free_file = false;

	sfs_store_obj_put(c->obj);
	c->obj = NULL;

	pthread_mutex_lock(&f->lock);
	assert(c->state == CHUNK_LOADING && f->refs > 0); /* the load holds f */
	if (n == (ssize_t)c->fetch_len) {
		c->in_store = c->loaded = true;
		free_file = chunk_finish(f, c, false);
		struct pf_waiter *ready = waiters_ready(f, c);
		pthread_mutex_unlock(&f->lock);
		waiters_answer(f, ready);
	} else {
		/* Missing, short or failed its checksum: a miss, never an error. */
		chunk_move(c, CHUNK_LOADING, CHUNK_FETCHING);
		count(&f->pf->stats.inflight_bytes, c->fetch_len);
		pthread_mutex_unlock(&f->lock);
		submit_chunks(f, &c, 1);
	}
	if (free_file)
		file_free(f);
}

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

/* --- waiters ----------------------------------------------------------------- */

/*
 * Whether a reader of [off, end) may use chunk c now: it is READY or FAILED,
 * or still FETCHING without an error and every part that overlaps the range
 * has landed (a split fetch, chunk_start). A chunk with a failed part is
 * waited for until it is FAILED, so that the reader's -EIO drops it and its
 * retry starts a new fetch (never a second -EIO from the same fetch).
 * Caller holds f->lock.
 */
bool chunk_range_ready(const struct pf_chunk *c, uint64_t off, uint64_t end)
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

/* Register an answer of [off, end) in chunk c (pinned by claim_chunks) for
 * when its bytes land. Caller holds f->lock and has checked that they have
 * not. Returns false (nothing registered) without memory. */
bool waiter_add(struct sfs_pf_file *f, struct pf_chunk *c, uint64_t off, uint64_t end,
		sfs_pf_read_done done, const void *arg, size_t arg_len)
{
	struct pf_waiter *w = malloc(sizeof(*w));

	assert(c->refs > 0 && !chunk_range_ready(c, off, end));
	if (!w)
		return false;
	*w = (struct pf_waiter){.next = f->waiters, .c = c, .off = off, .end = end};
	answer_set(&w->answer, done, arg, arg_len);
	f->waiters = w;
	file_get_locked(f);
	return true;
}

/* Waiters of chunk c whose range is ready, unlinked. Caller holds f->lock. */
struct pf_waiter *waiters_ready(struct sfs_pf_file *f, struct pf_chunk *c)
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
void waiters_answer(struct sfs_pf_file *f, struct pf_waiter *ready)
{
	while (ready) {
		struct pf_waiter *w = ready;
		struct sfs_pf_view v = {0};
		ready = w->next;
		pthread_mutex_lock(&f->lock);
		assert(w->c->refs > 0 && chunk_range_ready(w->c, w->off, w->end));
		ssize_t n = fill_view(f, w->off, w->end, &w->c, 1, &v); /* ready: no wait */
		if (v.n_pins)
			file_get_locked(f); /* the view's reference, as in chunk_read */
		pthread_mutex_unlock(&f->lock);
		read_account(f, n, v.cache_bytes);
		w->answer.done(w->answer.arg, n, &v);
		sfs_pf_view_release(f, &v);
		free(w);
		sfs_pf_file_unref(f); /* the waiter's reference */
	}
}
