// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch — chunk fetching and readahead over the origin pool. See
 * prefetch.h for the contract.
 *
 *   sfs_prefetch ──buf_lock──> free list of SFS_CHUNK_BYTES buffers (budget: mem_bytes)
 *   sfs_pf_file  ──lock──────> chunks[]: pf_chunk { index, state, buf, refs, parts[] }
 *
 * A chunk is FETCHING from the moment its parts are queued at the origin
 * until the last part completes; then READY (bytes valid up to len) or
 * FAILED (err). Readers pin chunks (refs) while the kernel copies from them.
 * Every chunk in flight holds a reference on its file, so a file closed
 * early is freed when its last fetch lands, and no new readahead starts.
 *
 * Lock order: file->lock, then files_lock (other files are then only
 * try-locked), then origin's pool lock (inside submit); buf_lock is a leaf.
 */
#include "prefetch.h"
#include "log.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum chunk_state { CHUNK_FETCHING, CHUNK_READY, CHUNK_FAILED };

struct pf_chunk {
	struct sfs_pf_file *file; /* set at creation */
	uint64_t index;		  /* set at creation */
	/* protected by file->lock */
	enum chunk_state state;
	int err;
	uint32_t len;		  /* valid bytes once READY */
	uint32_t fetch_len;	  /* bytes asked for */
	unsigned refs;		  /* views pinning the buffer */
	unsigned parts_pending;
	bool used;		  /* a reader asked for it */
	bool consumed;		  /* a read ended at its last byte: the reader moved on */
	bool readahead;		  /* started before anyone asked */
	char *buf;
	unsigned n_parts;
	struct sfs_origin_req parts[]; /* owned by origin while FETCHING */
};

struct sfs_pf_file {
	sfs_prefetch *pf;     /* set at open */
	struct sfs_fh fh;     /* set at open */
	uint64_t size;	      /* set at open */
	pthread_mutex_t lock;
	pthread_cond_t cond;  /* a chunk finished, or a pin was dropped */
	/* protected by lock */
	unsigned refs;	      /* openers + chunks in flight */
	uint64_t next_seq;    /* chunk a sequential reader asks for next */
	bool sequential;
	struct pf_chunk **chunks;
	size_t n_chunks, cap_chunks;
	struct sfs_pf_file *prev, *next; /* protected by pf->files_lock */
};

struct sfs_prefetch {
	sfs_origin *origin;	   /* set at open */
	struct sfs_prefetch_conf conf; /* set at open */
	size_t max_buffers;	   /* mem_bytes / SFS_CHUNK_BYTES */
	pthread_mutex_t files_lock; /* taken with a file's lock held; then only trylock */
	struct sfs_pf_file *files;  /* protected by files_lock: every live file */
	pthread_mutex_t buf_lock;
	void **free_bufs;	   /* protected by buf_lock */
	size_t n_free, n_buffers;  /* protected by buf_lock */
	struct sfs_prefetch_stats stats; /* atomic */
};

static void count(uint64_t *c, int64_t n)
{
	__atomic_fetch_add(c, (uint64_t)n, __ATOMIC_RELAXED);
}

/* --- buffers -------------------------------------------------------------- */

/* A chunk buffer, or NULL when the budget is spent and !demand. A reader's
 * own chunk (demand) may exceed the budget: it is bounded by the number of
 * concurrent readers, and refusing it would stall the reader. */
static void *buf_get(sfs_prefetch *pf, bool demand)
{
	void *b = NULL;

	pthread_mutex_lock(&pf->buf_lock);
	if (pf->n_free) {
		b = pf->free_bufs[--pf->n_free];
	} else if (demand || pf->n_buffers < pf->max_buffers) {
		pf->n_buffers++;
		pthread_mutex_unlock(&pf->buf_lock);
		b = aligned_alloc(4096, SFS_CHUNK_BYTES);
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
	bool over = pf->n_free == 0 && pf->n_buffers >= pf->max_buffers;
	pthread_mutex_unlock(&pf->buf_lock);
	return over;
}

static void buf_put(sfs_prefetch *pf, void *b)
{
	pthread_mutex_lock(&pf->buf_lock);
	if (pf->n_buffers <= pf->max_buffers && pf->n_free < pf->max_buffers) {
		pf->free_bufs[pf->n_free++] = b;
		b = NULL;
	} else {
		pf->n_buffers--;
	}
	pthread_mutex_unlock(&pf->buf_lock);
	if (b) {
		free(b);
		count(&pf->stats.buffer_bytes, -(int64_t)SFS_CHUNK_BYTES);
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

static void chunk_free(struct sfs_pf_file *f, size_t slot)
{
	struct pf_chunk *c = f->chunks[slot];

	assert(c->refs == 0 && c->state != CHUNK_FETCHING);
	if (c->readahead && !c->used)
		count(&f->pf->stats.wasted_chunks, 1);
	buf_put(f->pf, c->buf);
	free(c);
	f->chunks[slot] = f->chunks[--f->n_chunks];
}

/* Make room for one more chunk: drop an idle chunk behind `cur` (the reader
 * has passed it), lowest first; only a reader's own demand may also drop the
 * idle chunk farthest ahead (readahead never throws away readahead). Returns
 * false if nothing may go. */
static bool chunk_evict_one(struct sfs_pf_file *f, uint64_t cur, bool demand)
{
	size_t best = SIZE_MAX;

	for (size_t i = 0; i < f->n_chunks; i++) {
		struct pf_chunk *c = f->chunks[i];
		if (c->refs || c->state == CHUNK_FETCHING || (!demand && c->index >= cur))
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
		if (o == self || pthread_mutex_trylock(&o->lock) != 0)
			continue;
		while (buf_over_budget(pf) && chunk_evict_one(o, o->next_seq, true)) {
		}
		pthread_mutex_unlock(&o->lock);
	}
	pthread_mutex_unlock(&pf->files_lock);
}

/*
 * Create chunk `index` in FETCHING state with its parts ready to submit
 * (the caller submits them after dropping file->lock). Returns NULL when
 * there is no buffer or, for readahead (!demand), no room.
 */
static struct pf_chunk *chunk_start(struct sfs_pf_file *f, uint64_t index, uint64_t cur,
				    bool demand)
{
	sfs_prefetch *pf = f->pf;
	/* Room for the window, the kernel's own readahead requests in flight
	 * (8 MiB) and a few chunks behind the reader. */
	size_t limit = pf->conf.window_chunks + 12;
	uint64_t start = index << SFS_CHUNK_SHIFT;
	uint32_t len = (uint32_t)(f->size - start < SFS_CHUNK_BYTES ? f->size - start : SFS_CHUNK_BYTES);
	uint32_t max_read = sfs_origin_max_read(pf->origin);
	unsigned n_parts;

	if (max_read == 0 || max_read > SFS_CHUNK_BYTES)
		max_read = SFS_CHUNK_BYTES;
	n_parts = (len + max_read - 1) / max_read;
	while (f->n_chunks >= limit)
		if (!chunk_evict_one(f, cur, demand))
			break;
	if (f->n_chunks >= limit && !demand)
		return NULL;
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
			return NULL;
		f->chunks = n;
		f->cap_chunks = cap;
	}
	void *buf = buf_get(pf, demand);
	if (!buf)
		return NULL;
	struct pf_chunk *c = calloc(1, sizeof(*c) + n_parts * sizeof(c->parts[0]));
	if (!c) {
		buf_put(pf, buf);
		return NULL;
	}
	c->file = f;
	c->index = index;
	c->state = CHUNK_FETCHING;
	c->len = c->fetch_len = len;
	c->buf = buf;
	c->readahead = !demand;
	c->n_parts = n_parts;
	c->parts_pending = n_parts;
	for (unsigned i = 0; i < n_parts; i++) {
		struct sfs_origin_req *r = &c->parts[i];
		uint32_t off = i * max_read;
		r->op = SFS_ORIGIN_READ;
		r->fh = f->fh;
		r->offset = start + off;
		r->count = len - off < max_read ? len - off : max_read;
		r->buf = buf + off;
		r->done = part_done;
		r->arg = c;
	}
	f->chunks[f->n_chunks++] = c;
	f->refs++; /* the fetch holds the file */
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
	free(f->chunks);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* Origin completion of one part: runs on an I/O thread. */
static void part_done(struct sfs_origin_req *req)
{
	struct pf_chunk *c = req->arg;
	struct sfs_pf_file *f = c->file;
	bool free_file = false;

	pthread_mutex_lock(&f->lock);
	if (req->result < 0) {
		c->err = req->result;
	} else if ((uint32_t)req->result < req->count) {
		/* The file is shorter than its attributes said: end the chunk. */
		uint32_t end = (uint32_t)(req->offset - (c->index << SFS_CHUNK_SHIFT)) + (uint32_t)req->result;
		if (end < c->len)
			c->len = end;
	}
	if (req->result > 0)
		count(&f->pf->stats.fetched_bytes, req->result);
	if (--c->parts_pending == 0) {
		count(&f->pf->stats.inflight_bytes, -(int64_t)c->fetch_len);
		c->state = c->err ? CHUNK_FAILED : CHUNK_READY;
		pthread_cond_broadcast(&f->cond);
		free_file = --f->refs == 0;
	}
	pthread_mutex_unlock(&f->lock);
	if (free_file)
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
	pf->free_bufs = calloc(pf->max_buffers, sizeof(void *));
	if (!pf->free_bufs) {
		free(pf);
		return -ENOMEM;
	}
	pthread_mutex_init(&pf->buf_lock, NULL);
	pthread_mutex_init(&pf->files_lock, NULL);
	*out = pf;
	return 0;
}

void sfs_prefetch_close(sfs_prefetch *pf)
{
	if (!pf)
		return;
	for (size_t i = 0; i < pf->n_free; i++)
		free(pf->free_bufs[i]);
	free(pf->free_bufs);
	pthread_mutex_destroy(&pf->buf_lock);
	pthread_mutex_destroy(&pf->files_lock);
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
#undef LOAD
}

int sfs_pf_file_open(sfs_prefetch *pf, const struct sfs_fh *fh, uint64_t size, sfs_pf_file **out)
{
	struct sfs_pf_file *f = calloc(1, sizeof(*f));

	if (!f)
		return -ENOMEM;
	f->pf = pf;
	f->fh = *fh;
	f->size = size;
	f->refs = 1;
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

ssize_t sfs_pf_read(sfs_pf_file *f, uint64_t off, size_t len, struct sfs_pf_view *v)
{
	struct pf_chunk *want[3], *started[SFS_PF_MAX_WINDOW + 3];
	size_t n_started = 0;
	int n_want = 0;
	ssize_t ret = 0;

	v->n_iov = 0;
	v->n_pins = 0;
	v->bytes = 0;
	if (off >= f->size || len == 0)
		return 0;
	uint64_t end = off + len < f->size ? off + len : f->size;
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;
	if (c1 - c0 >= 3)
		return -EINVAL;

	pthread_mutex_lock(&f->lock);
	/* Sequential: this read starts in the chunk the last one ended in, or
	 * the next. The first read of a file counts as sequential. */
	f->sequential = c0 == 0 || c0 + 1 == f->next_seq || c0 == f->next_seq;
	f->next_seq = c1 + 1;
	for (uint64_t ci = c0; ci <= c1; ci++) {
		struct pf_chunk *c;
		for (;;) {
			if ((c = chunk_find(f, ci)))
				break;
			if ((c = chunk_start(f, ci, c0, true))) {
				started[n_started++] = c;
				break;
			}
			/* Out of memory or room: wait for a pin or fetch to end. */
			pthread_cond_wait(&f->cond, &f->lock);
		}
		c->refs++;
		c->used = true;
		want[n_want++] = c;
	}
	if (f->sequential) {
		uint64_t last = (f->size - 1) >> SFS_CHUNK_SHIFT;
		for (uint64_t ci = c1 + 1; ci <= c1 + f->pf->conf.window_chunks && ci <= last;
		     ci++) {
			if (chunk_find(f, ci))
				continue;
			struct pf_chunk *c = chunk_start(f, ci, c0, false);
			if (!c)
				break;
			started[n_started++] = c;
		}
	}
	pthread_mutex_unlock(&f->lock);
	submit_chunks(f, started, n_started);

	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < n_want; i++)
		while (want[i]->state == CHUNK_FETCHING)
			pthread_cond_wait(&f->cond, &f->lock);
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
		if (to == cstart + c->len)
			c->consumed = true;
		v->iov[v->n_iov].iov_base = c->buf + (from - cstart);
		v->iov[v->n_iov].iov_len = (size_t)(to - from);
		v->n_iov++;
		v->bytes += (size_t)(to - from);
		if (to < cstart + SFS_CHUNK_BYTES && to < end)
			break; /* short chunk: end of file */
	}
	for (int i = 0; i < n_want; i++)
		v->pins[v->n_pins++] = want[i];
	if (ret < 0) {
		for (int i = 0; i < n_want; i++)
			want[i]->refs--;
		v->n_pins = 0;
		v->n_iov = 0;
		v->bytes = 0;
		/* Failed chunks are dropped so that the next read retries. */
		for (size_t i = 0; i < f->n_chunks;)
			if (f->chunks[i]->state == CHUNK_FAILED && f->chunks[i]->refs == 0)
				chunk_free(f, i);
			else
				i++;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	return ret < 0 ? ret : (ssize_t)v->bytes;
}

void sfs_pf_view_release(sfs_pf_file *f, struct sfs_pf_view *v)
{
	if (!v->n_pins)
		return;
	pthread_mutex_lock(&f->lock);
	for (int i = 0; i < v->n_pins; i++) {
		struct pf_chunk *c = v->pins[i];
		c->refs--;
		/* A sequential reader (and the kernel's page cache) will not ask
		 * for a chunk read to its end again: free it now, not at eviction,
		 * so finished chunks never hold the memory budget. */
		if (c->refs == 0 && c->consumed && c->state == CHUNK_READY)
			for (size_t k = 0; k < f->n_chunks; k++)
				if (f->chunks[k] == c) {
					chunk_free(f, k);
					break;
				}
	}
	v->n_pins = 0;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
}

void sfs_pf_file_drop_idle(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	for (size_t i = 0; i < f->n_chunks;)
		if (f->chunks[i]->refs == 0 && f->chunks[i]->state != CHUNK_FETCHING)
			chunk_free(f, i);
		else
			i++;
	pthread_mutex_unlock(&f->lock);
}
