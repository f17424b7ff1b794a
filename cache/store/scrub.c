// SPDX-License-Identifier: Apache-2.0
/*
 * store/scrub — the scrubber (store.h, sfs_store_scrub_start): one thread
 * that re-reads the per-file versions' chunks with their checksums, at a
 * bounded rate, and evicts a version that fails. Passthrough opens
 * (fs/kernel/passthrough.h) are read by the kernel without the daemon's checks;
 * this is what finds a flipped byte under them.
 *
 * Its reads go through read_chunk_scrub (O_DIRECT where the filesystem has
 * it, so the page cache keeps the readers' pages; no recency). A pass works
 * on a snapshot of the keys of the per-file objects holding bytes, taken
 * under s->lock (16 bytes per object, freed at the pass's end); an object
 * evicted meanwhile is skipped. Between two versions of a pass the thread
 * serves the verify queue: versions a passthrough open found wholly cached
 * but not verified since the load (sfs_store_obj_backing_fd), verified
 * ahead of the pass. The rate applies to both.
 *
 * Owns: the thread, its pace and its queue. Does not own: the checks
 * (read.c), the eviction of a version that fails (sfs_store_evict_keys, on
 * the writer thread), the passthrough opens it protects (fs/kernel).
 * Lock order: sc->lock is a leaf, taken under s->lock by scrub_queue; the
 * thread never holds it across I/O or while taking s->lock.
 */
#include "store_int.h"

#include <time.h>

#define SCRUB_QUEUE 256 /* versions waiting for verification; more are dropped */

struct scrub {
	struct sfs_store_scrub_conf conf; /* set at start */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;		/* queued, or stopping */
	bool stopping;			/* protected by lock */
	uint8_t queue[SCRUB_QUEUE][16]; /* protected by lock: a ring of keys */
	unsigned q_head, q_len;		/* protected by lock */
	void *buf;			/* the thread's: one chunk, 4096-aligned */
	/* The rate: bytes read since paced_from_ms (thread only). */
	uint64_t paced_bytes, paced_from_ms;
	struct sfs_store_scrub_stats st; /* atomic counters; the conf copied in */
};

void scrub_queue(sfs_store *s, const uint8_t key[16])
{
	struct scrub *sc = __atomic_load_n(&s->scrub, __ATOMIC_RELAXED);

	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	bool there = false;
	for (unsigned k = 0; k < sc->q_len && !there; k++)
		there = !memcmp(sc->queue[(sc->q_head + k) % SCRUB_QUEUE], key, 16);
	if (!there && sc->q_len < SCRUB_QUEUE) {
		memcpy(sc->queue[(sc->q_head + sc->q_len) % SCRUB_QUEUE], key, 16);
		sc->q_len++;
		pthread_cond_signal(&sc->wake);
	}
	pthread_mutex_unlock(&sc->lock);
}

/* Wait until deadline_ms (CLOCK_MONOTONIC), a queued version (if
 * for_queue) or stopping. Returns false when stopping. */
static bool scrub_wait(struct scrub *sc, uint64_t deadline_ms, bool for_queue)
{
	pthread_mutex_lock(&sc->lock);
	while (!sc->stopping && !(for_queue && sc->q_len) && sfs_now_ms() < deadline_ms) {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		uint64_t left = deadline_ms - sfs_now_ms();
		if (left > 1000)
			left = 1000;
		ts.tv_sec += (time_t)(left / 1000);
		ts.tv_nsec += (long)(left % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&sc->wake, &sc->lock, &ts);
	}
	bool go = !sc->stopping;
	pthread_mutex_unlock(&sc->lock);
	return go;
}

/* After reading n bytes: sleep so that the reads stay under the rate.
 * Returns false when stopping. */
static bool scrub_pace(struct scrub *sc, uint64_t n)
{
	uint64_t now = sfs_now_ms();

	if (now - sc->paced_from_ms > 10000) { /* idle a while: no credit, no debt */
		sc->paced_from_ms = now;
		sc->paced_bytes = 0;
	}
	sc->paced_bytes += n;
	if (!sc->conf.rate_bytes)
		return true;
	uint64_t due = sc->paced_from_ms + sc->paced_bytes * 1000 / sc->conf.rate_bytes;
	return due <= now || scrub_wait(sc, due, false);
}

/* Check every cached chunk of the version with this key; evict it if one
 * fails. Returns false when stopping. */
static bool scrub_version(sfs_store *s, struct scrub *sc, const uint8_t key[16])
{
	pthread_mutex_lock(&s->lock);
	sfs_store_obj *o = index_find(s, key);
	if (!o || o->packed || o->evicted || !o->on_disk) {
		pthread_mutex_unlock(&s->lock);
		return true;
	}
	o->refs++;
	pthread_mutex_unlock(&s->lock);
	bool bad = false, go = true;
	for (uint32_t i = 0; i < o->n_chunks && !bad && go; i++) {
		if (sfs_store_chunk_state(o, i) < SFS_CHUNK_PRESENT)
			continue;
		ssize_t n = read_chunk_scrub(o, i, sc->buf);
		if (n == -EBADMSG)
			bad = true;
		else if (n < 0 && n != -ENOENT)
			break; /* an I/O error: counted by the read; try again next pass */
		if (n > 0) {
			count(&sc->st.bytes, (uint64_t)n);
			go = scrub_pace(sc, (uint64_t)n);
		}
	}
	sfs_store_obj_put(o);
	count(&sc->st.versions, 1);
	if (bad) {
		char name[33];
		struct sfs_store_evicted ev;
		count(&sc->st.failures, 1);
		key_hex(key, name);
		sfs_log(SFS_LOG_WARN, "store",
			"scrub: cached version %s failed its checksums: evicted, fetched again "
			"by its next open",
			name);
		sfs_store_evict_keys(s, (const uint8_t(*)[16])key, 1, &ev);
	}
	return go;
}

/* Verify what the queue holds. Returns false when stopping. */
static bool scrub_queued(sfs_store *s, struct scrub *sc)
{
	for (;;) {
		uint8_t key[16];
		pthread_mutex_lock(&sc->lock);
		bool have = sc->q_len > 0 && !sc->stopping;
		if (have) {
			memcpy(key, sc->queue[sc->q_head], 16);
			sc->q_head = (sc->q_head + 1) % SCRUB_QUEUE;
			sc->q_len--;
		}
		bool stop = sc->stopping;
		pthread_mutex_unlock(&sc->lock);
		if (!have)
			return !stop;
		if (!scrub_version(s, sc, key))
			return false;
		count(&sc->st.queued_verified, 1);
	}
}

/* The keys of the per-file objects holding bytes, malloc'd. */
static uint8_t (*scrub_snapshot(sfs_store *s, size_t *n))[16]
{
	uint8_t(*keys)[16] = NULL;

	*n = 0;
	pthread_mutex_lock(&s->lock);
	if (s->index.n)
		keys = malloc(s->index.n * sizeof(*keys));
	for (size_t b = 0; keys && b < s->index.n_buckets; b++)
		for (sfs_store_obj *o = s->index.buckets[b]; o; o = o->hnext)
			if (!o->packed && o->used_bytes)
				memcpy(keys[(*n)++], o->key, 16);
	pthread_mutex_unlock(&s->lock);
	return keys;
}

/* One pass over every per-file version. Returns false when stopping. */
static bool scrub_pass(sfs_store *s, struct scrub *sc)
{
	size_t n;
	uint64_t t0 = sfs_now_ms();
	uint8_t(*keys)[16] = scrub_snapshot(s, &n);
	bool go = true;

	__atomic_store_n(&sc->st.pass_started_s, (uint64_t)time(NULL), __ATOMIC_RELAXED);
	for (size_t i = 0; i < n && go; i++)
		go = scrub_queued(s, sc) && scrub_version(s, sc, keys[i]);
	free(keys);
	if (go) {
		count(&sc->st.passes, 1);
		__atomic_store_n(&sc->st.last_pass_ms, sfs_now_ms() - t0, __ATOMIC_RELAXED);
	}
	return go;
}

static void *scrub_main(void *arg)
{
	sfs_store *s = arg;
	struct scrub *sc = __atomic_load_n(&s->scrub, __ATOMIC_ACQUIRE);
	uint64_t next_pass = sc->conf.interval_ms ? sfs_now_ms() : UINT64_MAX;

	pthread_setname_np(pthread_self(), "sfs-scrub");
	for (;;) {
		if (!scrub_queued(s, sc))
			break;
		if (sfs_now_ms() >= next_pass) {
			uint64_t started = sfs_now_ms();
			if (!scrub_pass(s, sc))
				break;
			next_pass = started + sc->conf.interval_ms;
			continue;
		}
		if (!scrub_wait(sc, next_pass, true))
			break;
	}
	return NULL;
}

/* Unhook the scrubber from s and free it (its thread gone or never
 * started). */
static void scrub_free(sfs_store *s, struct scrub *sc)
{
	pthread_mutex_lock(&s->lock);
	__atomic_store_n(&s->scrub, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->lock);
	pthread_cond_destroy(&sc->wake);
	pthread_mutex_destroy(&sc->lock);
	free(sc->buf);
	free(sc);
}

int sfs_store_scrub_start(sfs_store *s, const struct sfs_store_scrub_conf *conf)
{
	struct scrub *sc = calloc(1, sizeof(*sc));

	if (!sc || !(sc->buf = aligned_alloc(4096, (size_t)1 << s->chunk_shift))) {
		free(sc);
		return -ENOMEM;
	}
	sc->conf = *conf;
	sc->st.interval_ms = conf->interval_ms;
	sc->st.rate_bytes = conf->rate_bytes;
	sc->paced_from_ms = sfs_now_ms();
	pthread_mutex_init(&sc->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&sc->wake, &ca);
	pthread_condattr_destroy(&ca);
	pthread_mutex_lock(&s->lock); /* scrub_queue reads s->scrub under it */
	__atomic_store_n(&s->scrub, sc, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->lock);
	int rc = -pthread_create(&sc->thread, NULL, scrub_main, s);
	if (rc < 0)
		scrub_free(s, sc);
	return rc;
}

void scrub_stop(sfs_store *s)
{
	struct scrub *sc = __atomic_load_n(&s->scrub, __ATOMIC_ACQUIRE);

	if (!sc)
		return;
	pthread_mutex_lock(&sc->lock);
	sc->stopping = true;
	pthread_cond_signal(&sc->wake);
	pthread_mutex_unlock(&sc->lock);
	pthread_join(sc->thread, NULL);
	scrub_free(s, sc);
}

void sfs_store_scrub_get_stats(sfs_store *s, struct sfs_store_scrub_stats *out)
{
	struct scrub *sc = __atomic_load_n(&s->scrub, __ATOMIC_ACQUIRE);

	memset(out, 0, sizeof(*out));
	if (!sc)
		return;
	out->running = true;
	out->interval_ms = sc->conf.interval_ms;
	out->rate_bytes = sc->conf.rate_bytes;
#define LOAD(x) out->x = __atomic_load_n(&sc->st.x, __ATOMIC_RELAXED)
	LOAD(passes);
	LOAD(bytes);
	LOAD(versions);
	LOAD(failures);
	LOAD(queued_verified);
	LOAD(last_pass_ms);
	LOAD(pass_started_s);
#undef LOAD
}
