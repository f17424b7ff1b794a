// SPDX-License-Identifier: Apache-2.0
/*
 * fake_origin — in-memory origin for unit tests. See fake_origin.h.
 *
 *   submit ──lock──> queue (FIFO of nodes) ──> worker threads ──> req->done()
 *                └─> held list (offset >= hold_from) ──release──> queue
 *
 * A request is "outstanding" from submit until its done() has returned, so
 * fake_origin_drain() guarantees that no completion is still running. The
 * fake never touches a request after calling its done().
 */
#include "fake_origin.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct fake_node {
	struct sfs_origin_req *req;
	pthread_t submitter;
	uint64_t seq;
	int fail_err; /* 0 or the injected -errno */
	struct fake_node *next;
};

struct sfs_origin {
	struct fake_origin_conf conf; /* set at creation */
	pthread_t *threads;	      /* set at creation */
	unsigned n_threads;

	pthread_mutex_t lock;
	pthread_cond_t work; /* queue non-empty or stop */
	pthread_cond_t idle; /* outstanding dropped to 0 */
	/* protected by lock */
	struct fake_node *head, *tail;
	struct fake_node *held_head, *held_tail;
	uint64_t hold_from;
	bool stop;
	uint64_t fail_n, fail_count;
	int fail_err;
	fake_submit_hook hook;
	void *hook_arg;
	struct fake_origin_stats st;
	uint64_t chunk_bytes[FAKE_MAX_CHUNKS];
	struct {
		uint32_t seed;
		uint64_t size;
	} sizes[16]; /* fake_origin_set_size() overrides */
	unsigned n_sizes;
};

static uint64_t mix(uint32_t seed, uint64_t x)
{
	uint64_t z = x ^ ((uint64_t)(seed + 1) * 0x9e3779b97f4a7c15ull);

	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void fake_fill(uint32_t seed, uint64_t off, void *buf, size_t n)
{
	uint8_t *p = buf;
	uint64_t w = mix(seed, off >> 3);

	for (size_t k = 0; k < n; k++) {
		uint64_t i = off + k;
		if ((i & 7) == 0)
			w = mix(seed, i >> 3);
		p[k] = (uint8_t)(w >> ((i & 7) * 8));
	}
}

void fake_fh(struct sfs_fh *fh, uint32_t seed, uint64_t server_size)
{
	memset(fh, 0, sizeof(*fh));
	fh->len = 16;
	memcpy(fh->data, &seed, 4);
	memcpy(fh->data + 4, &server_size, 8);
	memcpy(fh->data + 12, "fake", 4);
}

static void push(struct fake_node **head, struct fake_node **tail, struct fake_node *n)
{
	n->next = NULL;
	if (*tail)
		(*tail)->next = n;
	else
		*head = n;
	*tail = n;
}

/* Runs one request and calls its done(); the caller holds no lock. */
static void complete(sfs_origin *o, struct fake_node *n)
{
	struct sfs_origin_req *req = n->req;
	uint32_t seed;
	uint64_t size, served = 0;
	char *lent = NULL;

	if (o->conf.delay_us)
		usleep(o->conf.delay_us);
	memcpy(&seed, req->fh.data, 4);
	memcpy(&size, req->fh.data + 4, 8);
	pthread_mutex_lock(&o->lock);
	for (unsigned i = 0; i < o->n_sizes; i++)
		if (o->sizes[i].seed == seed)
			size = o->sizes[i].size;
	pthread_mutex_unlock(&o->lock);
	if (n->fail_err) {
		memset(req->buf, 0xee, req->count); /* must never be served */
		req->result = n->fail_err;
		req->eof = false;
		req->have_attr = false;
	} else {
		served = req->offset >= size		   ? 0
			 : size - req->offset < req->count ? size - req->offset
							   : req->count;
		/* A READ that allows it is lent its bytes, as the real origin
		 * lends a whole reply: they are poisoned once done() returns. */
		lent = req->lend ? malloc(req->count) : NULL;
		req->data = lent ? lent : req->buf;
		/* A request with its own placing gets the bytes through it, as
		 * from the real origin's receive buffer. */
		char *landed = !lent && req->place && served ? malloc(served) : NULL;
		fake_fill(seed, req->offset, landed ? landed : (char *)req->data, served);
		if (landed)
			req->place(req, req->buf, landed, (uint32_t)served);
		free(landed);
		memset((char *)req->data + served, 0xee, req->count - served);
		req->result = (int)served;
		req->eof = req->offset + served >= size;
		req->have_attr = true;
		memset(&req->attr, 0, sizeof(req->attr));
		req->attr.type = 0100000; /* S_IFREG */
		req->attr.size = size;
	}
	bool wrong = pthread_equal(pthread_self(), n->submitter);
	int err = n->fail_err;
	uint32_t lent_len = lent ? req->count : 0;
	free(n);
	req->done(req); /* req belongs to the caller from here on */
	if (lent) {
		memset(lent, 0xee, lent_len); /* a view kept past done() reads this */
		free(lent);
	}

	pthread_mutex_lock(&o->lock);
	o->st.bytes_served += served;
	o->st.failed += err != 0;
	o->st.wrong_thread += wrong;
	o->st.lent += lent_len != 0;
	if (--o->st.outstanding == 0)
		pthread_cond_broadcast(&o->idle);
	pthread_mutex_unlock(&o->lock);
}

static void *worker(void *arg)
{
	sfs_origin *o = arg;

	pthread_mutex_lock(&o->lock);
	for (;;) {
		while (!o->head && !o->stop)
			pthread_cond_wait(&o->work, &o->lock);
		if (!o->head)
			break;
		struct fake_node *n = o->head;
		o->head = n->next;
		if (!o->head)
			o->tail = NULL;
		pthread_mutex_unlock(&o->lock);
		complete(o, n);
		pthread_mutex_lock(&o->lock);
	}
	pthread_mutex_unlock(&o->lock);
	return NULL;
}

sfs_origin *fake_origin_new(const struct fake_origin_conf *conf)
{
	sfs_origin *o = calloc(1, sizeof(*o));

	if (!o)
		abort();
	o->conf = *conf;
	o->n_threads = conf->n_threads ? conf->n_threads : 2;
	o->hold_from = UINT64_MAX;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->work, NULL);
	pthread_cond_init(&o->idle, NULL);
	o->threads = calloc(o->n_threads, sizeof(*o->threads));
	if (!o->threads)
		abort();
	for (unsigned i = 0; i < o->n_threads; i++)
		if (pthread_create(&o->threads[i], NULL, worker, o))
			abort();
	return o;
}

void fake_origin_free(sfs_origin *o)
{
	fake_origin_release(o);
	fake_origin_drain(o);
	pthread_mutex_lock(&o->lock);
	o->stop = true;
	pthread_cond_broadcast(&o->work);
	pthread_mutex_unlock(&o->lock);
	for (unsigned i = 0; i < o->n_threads; i++)
		pthread_join(o->threads[i], NULL);
	free(o->threads);
	pthread_cond_destroy(&o->idle);
	pthread_cond_destroy(&o->work);
	pthread_mutex_destroy(&o->lock);
	free(o);
}

void fake_origin_drain(sfs_origin *o)
{
	pthread_mutex_lock(&o->lock);
	while (o->st.outstanding)
		pthread_cond_wait(&o->idle, &o->lock);
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_fail(sfs_origin *o, uint64_t n, uint64_t count, int err)
{
	pthread_mutex_lock(&o->lock);
	o->fail_n = n;
	o->fail_count = count;
	o->fail_err = err;
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_hold_from(sfs_origin *o, uint64_t off)
{
	pthread_mutex_lock(&o->lock);
	o->hold_from = off;
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_release(sfs_origin *o)
{
	pthread_mutex_lock(&o->lock);
	o->hold_from = UINT64_MAX;
	while (o->held_head) {
		struct fake_node *n = o->held_head;
		o->held_head = n->next;
		push(&o->head, &o->tail, n);
	}
	o->held_tail = NULL;
	o->st.held = 0;
	pthread_cond_broadcast(&o->work);
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_set_size(sfs_origin *o, uint32_t seed, uint64_t size)
{
	unsigned i;

	pthread_mutex_lock(&o->lock);
	for (i = 0; i < o->n_sizes && o->sizes[i].seed != seed; i++)
		;
	if (i == sizeof(o->sizes) / sizeof(o->sizes[0]))
		abort();
	o->sizes[i].seed = seed;
	o->sizes[i].size = size;
	if (i == o->n_sizes)
		o->n_sizes++;
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_set_hook(sfs_origin *o, fake_submit_hook hook, void *arg)
{
	pthread_mutex_lock(&o->lock);
	o->hook = hook;
	o->hook_arg = arg;
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_stats(sfs_origin *o, struct fake_origin_stats *out)
{
	pthread_mutex_lock(&o->lock);
	*out = o->st;
	pthread_mutex_unlock(&o->lock);
}

void fake_origin_reset_stats(sfs_origin *o)
{
	pthread_mutex_lock(&o->lock);
	o->st.max_outstanding = o->st.outstanding;
	o->st.max_end = 0;
	memset(o->chunk_bytes, 0, sizeof(o->chunk_bytes));
	pthread_mutex_unlock(&o->lock);
}

uint64_t fake_origin_chunk_bytes(sfs_origin *o, uint64_t index)
{
	uint64_t v;

	if (index >= FAKE_MAX_CHUNKS)
		return 0;
	pthread_mutex_lock(&o->lock);
	v = o->chunk_bytes[index];
	pthread_mutex_unlock(&o->lock);
	return v;
}

/* --- the origin.h functions cache/prefetch uses ---------------------------- */

uint32_t sfs_origin_max_read(const sfs_origin *pool) { return pool->conf.max_read; }

void sfs_origin_submit(sfs_origin *o, struct sfs_origin_req *req)
{
	struct fake_node *n = calloc(1, sizeof(*n));
	uint64_t off = req->offset;
	uint32_t count = req->count;

	if (!n)
		abort();
	n->req = req;
	n->submitter = pthread_self();

	pthread_mutex_lock(&o->lock);
	n->seq = ++o->st.requests;
	if (o->fail_n && n->seq >= o->fail_n && n->seq - o->fail_n < o->fail_count)
		n->fail_err = o->fail_err;
	o->st.bytes_requested += count;
	o->st.background += req->background;
	if (++o->st.outstanding > o->st.max_outstanding)
		o->st.max_outstanding = o->st.outstanding;
	if (off + count > o->st.max_end)
		o->st.max_end = off + count;
	for (uint64_t p = off; p < off + count;) {
		uint64_t idx = p >> 20, next = (idx + 1) << 20;
		uint64_t piece = (next < off + count ? next : off + count) - p;
		if (idx < FAKE_MAX_CHUNKS)
			o->chunk_bytes[idx] += piece;
		p += piece;
	}
	if (off >= o->hold_from) {
		push(&o->held_head, &o->held_tail, n);
		o->st.held++;
	} else {
		push(&o->head, &o->tail, n);
		pthread_cond_signal(&o->work);
	}
	fake_submit_hook hook = o->hook;
	void *hook_arg = o->hook_arg;
	uint64_t seq = n->seq;
	pthread_mutex_unlock(&o->lock);
	if (hook)
		hook(off, count, seq, hook_arg);
}

/* The fake serves in submission order: promotion only clears the flag. */
void sfs_origin_promote(sfs_origin *o, struct sfs_origin_req *req)
{
	pthread_mutex_lock(&o->lock);
	if (req->background) {
		req->background = false;
		o->st.promoted++;
	}
	pthread_mutex_unlock(&o->lock);
}

void sfs_origin_demote(sfs_origin *o, struct sfs_origin_req *req)
{
	pthread_mutex_lock(&o->lock);
	if (!req->background) {
		req->background = true;
		o->st.demoted++;
	}
	pthread_mutex_unlock(&o->lock);
}

/* Batch submit of the real origin: the same, one at a time. */
void sfs_origin_submit_batch(sfs_origin *pool, struct sfs_origin_req **reqs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sfs_origin_submit(pool, reqs[i]);
}
