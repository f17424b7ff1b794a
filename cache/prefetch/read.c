// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/read — the read plan and the views. Each read (sfs_pf_read,
 * sfs_pf_read_async, sfs_pf_read_into) is planned once (plan_read: the
 * sequential detector, then where its bytes come from) and takes one of
 * three ways: the direct path (the store's 16 KiB sub-blocks that the read
 * touches, read and checked into a scratch buffer, or the preload started
 * at open); the direct fetch (without a store, or while the writes waiting
 * hold the budget: just the bytes asked for from the origin, answered on
 * the I/O thread when the caller takes answers there); or the chunk path
 * (its chunks claimed and pinned, readahead started, then a wait, or a
 * waiter answered by whichever thread lands the bytes, and the view filled
 * from the chunks). Views are released here (sfs_pf_view_release).
 * Not here: making, loading and freeing chunks, and answering waiters
 * (chunks.c); readahead and the shard pump (readahead.c); scratch and
 * buffers (buffers.c).
 *
 * Threading: reads run on the caller's thread and may block (an async one
 * that returns -EINPROGRESS does not); a direct fetch answered from the I/O
 * thread completes there (fetch_part_done). fill_view runs with f->lock
 * held. prefetch_int.h has the lock order.
 */
#include "prefetch_int.h"

/* --- the plan ---------------------------------------------------------------- */

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

/* Which path a read takes (see sfs_pf_read_async). */
struct read_plan {
	bool seq;	  /* the reader goes in order (track_sequential) */
	bool direct;	  /* from the store, verified, no chunk */
	bool fetch;	  /* from the origin into a scratch buffer, no chunk */
	bool fetch_async; /* from the origin, answered from the I/O thread */
	sfs_store_obj *obj;
	struct sfs_seg_aio *pre; /* direct: the preload it takes over, or NULL */
	void *pre_buf;
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
	 * own bytes only, as without a store. */
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
		file_get_locked(f);
	p.pre = NULL;
	p.pre_buf = NULL;
	if (p.direct && f->pre_aio) { /* this read takes the preload over */
		p.pre = f->pre_aio;
		p.pre_buf = f->pre_buf;
		f->pre_aio = NULL;
		f->pre_buf = NULL;
	}
	pthread_mutex_unlock(&f->lock);
	return p;
}

/* What a reader got, counted for its dataset (store.h:
 * sfs_store_dataset_read) where prefetch found the bytes: n bytes served
 * (nothing for n <= 0), cache_bytes of them from chunks loaded from the
 * store, the rest fetched from the origin. Only with a store. The direct
 * path's bytes are counted by the store itself, which finds them
 * (sfs_store_read_range). No lock held; any thread. */
void read_account(struct sfs_pf_file *f, ssize_t n, size_t cache_bytes)
{
	sfs_store *s = f->pf->conf.store;

	if (s && n > 0)
		sfs_store_dataset_read(s, f->version.dataset, cache_bytes,
				       (uint64_t)n - cache_bytes);
}

/* --- the direct path: cached bytes for small files and random readers -------- */

/*
 * Serve [off, end) straight from the store, verified by this read: only the
 * store's 16 KiB sub-blocks (SFS_STORE_SUB_SHIFT) the range touches (a whole
 * packed object for a small file) are read, into a scratch buffer taken for
 * this read; no chunk buffer, no readahead, no pins. Returns the bytes
 * served, or -1 when the chunk path must take it (not in the store, or it
 * failed its checks: the chunk path fetches it again from NFS).
 */
static ssize_t direct_read(struct sfs_pf_file *f, sfs_store_obj *obj, uint64_t off, uint64_t end,
			   struct sfs_pf_view *v, struct sfs_seg_aio *pre, void *pre_buf)
{
	const char *data;
	ssize_t n;
	void *buf;

	if (pre) { /* read ahead at open: its bytes, or a miss (the entry is dropped) */
		buf = pre_buf;
		n = sfs_store_read_finish(obj, pre, off, (size_t)(end - off), &data);
		if (n <= 0)
			count(&f->pf->stats.preload_misses, 1);
	} else {
		size_t need = sfs_store_range_bytes(obj, off, (size_t)(end - off));
		buf = need <= SCRATCH_BYTES ? scratch_take(need) : NULL;
		n = buf ? sfs_store_read_range(obj, off, (size_t)(end - off), buf, need, &data)
			: -ENOMEM;
	}
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

void sfs_pf_file_preload(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	sfs_store_obj *obj = f->obj; /* kept while the caller's open lasts */
	bool go = obj && f->size && f->size <= SFS_CHUNK_BYTES && !f->pre_aio && !f->pre_busy &&
		  !f->n_chunks;
	f->pre_busy = go;
	pthread_mutex_unlock(&f->lock);
	if (!go)
		return;
	size_t need = sfs_store_range_bytes(obj, 0, (size_t)f->size);
	void *buf = need <= SCRATCH_BYTES ? scratch_take(need) : NULL;
	struct sfs_seg_aio *a = NULL;
	if (buf && sfs_store_read_start(obj, buf, need, &a) < 0) {
		scratch_give(buf);
		buf = NULL;
		a = NULL;
	}
	pthread_mutex_lock(&f->lock);
	f->pre_busy = false;
	f->pre_aio = a;
	f->pre_buf = buf;
	pthread_mutex_unlock(&f->lock);
	if (a)
		count(&f->pf->stats.preloads, 1);
}

/* --- the direct fetch: the bytes asked for, from the origin ------------------ */

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
	read_account(f, (ssize_t)v->bytes, 0);
	return (ssize_t)v->bytes;
}

/* What a direct fetch of [off, end) asks for: those bytes, up to the file's
 * end, in n READs of max_read. Not rounded out to pages: nothing else reads
 * them (no store, or one that would refuse them), and the origin would
 * serve bytes nobody reads. */
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

/*
 * Without a store, a reader that jumps around gets exactly what it asked
 * for straight from the origin into a scratch buffer: a whole chunk per
 * record would fetch many times the record's bytes, and nothing would keep
 * the rest. Returns the bytes served, 0 at end of file, -errno (-ESTALE: the
 * file changed since open), or -1 when the chunk path must take it (no
 * scratch, a tiny rsize).
 */
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

/* --- the chunk path ---------------------------------------------------------- */

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
			if ((c = chunk_find(f, ci))) {
				chunk_promote(c); /* a warm-up's: a reader waits now */
				break;
			}
			/* In the store: read it, checked as the store checks a load
			 * (every time, but a VERIFIED chunk under trust_verified). */
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
		chunk_pin(c);
		c->used = true;
		want[n_want++] = c;
	}
	return n_want;
}

/*
 * Step 3: wait for the wanted chunks and point v at [off, end) in them.
 * Returns the bytes, or the first failed chunk's error (then nothing stays
 * pinned, and failed chunks are dropped so that the next read retries).
 * Caller holds f->lock.
 */
ssize_t fill_view(struct sfs_pf_file *f, uint64_t off, uint64_t end, struct pf_chunk **want,
		  int n_want, struct sfs_pf_view *v)
{
	ssize_t ret = 0;

	for (int i = 0; i < n_want; i++) {
		assert(want[i]->refs > 0); /* pinned: claim_chunks, or a waiter */
		while (!chunk_range_ready(want[i], off, end))
			pf_wait(f);
	}
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
			chunk_unpin(v->pins[i]);
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
	f->read_seen = true;
	int n_want = claim_chunks(f, off, end, seq, want, started, &n_started, loads, &n_loads);
	if (seq && f->pf->conf.mode != SFS_PREFETCH_OFF)
		start_readahead(f, c0, c1, started, &n_started, ahead_loads, &n_ahead_loads);
	shard_pump(f, started, &n_started, SFS_PF_MAX_WINDOW);
	/* Registered before the parts are submitted: none can land unseen. */
	bool waiting = done && (!seq || f->size <= SFS_CHUNK_BYTES) && n_want == 1 &&
		       n_loads == 0 && !chunk_range_ready(want[0], off, end) &&
		       waiter_add(f, want[0], off, end, done, arg, arg_len);
	/* Once the waiter is registered another thread may answer it at once,
	 * and the kernel may then close the file and drop its last open before
	 * this thread is done with f below: hold f until then. */
	if (waiting)
		file_get_locked(f);
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);
	loader_queue(f->pf, ahead_loads, n_ahead_loads);
	for (size_t i = 0; i < n_loads; i++)
		load_chunk(f, loads[i]);
	if (waiting) {
		sfs_pf_file_unref(f);
		return -EINPROGRESS;
	}

	pthread_mutex_lock(&f->lock);
	ssize_t ret = fill_view(f, off, end, want, n_want, v);
	/* A view holds its file: the kernel may see the reply and close the
	 * file (and the last open may drop f) before the view is released. */
	if (v->n_pins)
		file_get_locked(f);
	pthread_mutex_unlock(&f->lock);
	read_account(f, ret, v->cache_bytes);
	return ret;
}

/* --- the entry points and views ---------------------------------------------- */

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

	if (__atomic_load_n(&f->hint_holds, __ATOMIC_RELAXED) && f->pf->observer)
		f->pf->observer(f->pf->observer_arg, f, off, end);
	if (arg_len > SFS_PF_ASYNC_ARG_MAX)
		done = NULL; /* no room for the caller's context: answered here */
	struct read_plan p = plan_read(f, off, end, done != NULL);
	if (p.fetch_async) {
		if (fetch_start(f, off, end, done, arg, arg_len))
			return -EINPROGRESS;
		sfs_pf_file_unref(f); /* not the last: the caller's open holds one */
	}
	if (p.direct) {
		ssize_t n = direct_read(f, p.obj, off, end, v, p.pre, p.pre_buf);
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

void sfs_pf_read_answer(sfs_pf_file *f, uint64_t off, size_t len, sfs_pf_read_done done, void *arg,
			size_t arg_len)
{
	struct sfs_pf_view v;
	ssize_t n = sfs_pf_read_async(f, off, len, &v, done, arg, arg_len);

	if (n == -EINPROGRESS)
		return; /* done runs on the thread that lands the bytes */
	done(arg, n, &v);
	sfs_pf_view_release(f, &v);
}

ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v)
{
	return sfs_pf_read_async(f, off, len, v, NULL, NULL, 0);
}

/* The bytes of a view copied to out (buf_len bytes from buf). Returns n, or
 * -EINVAL when they do not fit. */
static ssize_t view_copy(const struct sfs_pf_view *v, ssize_t n, char *out, const char *buf,
			 size_t buf_len)
{
	if ((size_t)(out - buf) + (size_t)n > buf_len)
		return -EINVAL;
	for (int i = 0; i < v->n_iov; i++) {
		memcpy(out, v->iov[i].iov_base, v->iov[i].iov_len);
		out += v->iov[i].iov_len;
	}
	return n;
}

ssize_t sfs_pf_read_into(sfs_pf_file *f, uint64_t off, size_t len, void *buf, size_t buf_len,
			 const char **data, size_t *cache_bytes)
{
	char *out = (char *)buf + (off & ((1u << SFS_STORE_SUB_SHIFT) - 1));

	*data = out;
	*cache_bytes = 0;
	if (off >= f->size || len == 0)
		return 0;
	uint64_t end = off + len < f->size ? off + len : f->size;
	if (end - off > SFS_CHUNK_BYTES)
		return -EINVAL;
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;

	pthread_mutex_lock(&f->lock);
	sfs_store_obj *obj = f->obj; /* held while the file is open (plan_read) */
	bool in_mem = chunk_find(f, c0) || (c1 != c0 && chunk_find(f, c1));
	pthread_mutex_unlock(&f->lock);
	if (obj && !in_mem && sfs_store_range_bytes(obj, off, (size_t)(end - off)) <= buf_len) {
		if (__atomic_load_n(&f->hint_holds, __ATOMIC_RELAXED) && f->pf->observer)
			f->pf->observer(f->pf->observer_arg, f, off, end);
		ssize_t n = sfs_store_read_range(obj, off, (size_t)(end - off), buf, buf_len, data);
		if (n > 0) {
			*cache_bytes = (size_t)n;
			count(&f->pf->stats.hit_bytes, n);
			count(&f->pf->stats.direct_reads, 1);
			return n;
		}
		*data = out; /* not in the store, or it failed its check: a miss */
	}
	struct sfs_pf_view v;
	ssize_t n = sfs_pf_read(f, off, (size_t)(end - off), &v);
	if (n > 0) {
		*cache_bytes = v.cache_bytes;
		n = view_copy(&v, n, out, buf, buf_len);
	}
	sfs_pf_view_release(f, &v);
	return n;
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
		chunk_unpin(c);
		/* A sequential reader (and the kernel's page cache) will not ask
		 * for a chunk read to its end again: free it now, not at eviction,
		 * so finished chunks never hold the memory budget. */
		if (!chunk_busy(c) && c->consumed && c->state == CHUNK_READY)
			chunk_free_ptr(f, c);
	}
	v->n_pins = 0;
	pthread_cond_broadcast(&f->cond);
	bool last = file_put_locked(f); /* the view's reference */
	pthread_mutex_unlock(&f->lock);
	if (last)
		file_free(f);
}
