// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/hinted — one fetch state per file version, and fetching ahead
 * for hint lists (prefetch.h, "Hints"): the version table that lets a hint
 * list's open and the reader's open of a version share its chunks, holds
 * that keep a hinted file's chunks for its reader, the fetch of an item's
 * range, and the observers the hint lists set (called by the reads and
 * the fetch completions). Not here: what a hint list holds and when it lets
 * go (fs/hints/hints.c).
 *
 * Threading: any thread; the version table is under files_lock, a file's
 * holds under its lock. prefetch_int.h has the structures and the lock
 * order.
 */
#include "prefetch_int.h"

#include <time.h>

/* --- the version table (caller holds files_lock) ---------------------------- */

void vtable_insert(sfs_prefetch *pf, struct sfs_pf_file *f)
{
	if (!pf->vtable.n_buckets && pf_vtable_init(&pf->vtable, 256) < 0)
		return; /* no table (ENOMEM): this file is not shared */
	pf_vtable_insert(&pf->vtable, f);
}

void vtable_remove(sfs_prefetch *pf, struct sfs_pf_file *f)
{
	if (pf->vtable.n_buckets)
		pf_vtable_remove(&pf->vtable, f);
}

static bool same_file_version(const struct sfs_pf_file *f, const struct sfs_fh *fh,
			      const struct sfs_file_version *v)
{
	const struct sfs_file_version *w = &f->version;
	return w->fsid == v->fsid && w->fileid == v->fileid && w->size == v->size &&
	       w->mtime_s == v->mtime_s && w->mtime_ns == v->mtime_ns && w->ctime_s == v->ctime_s &&
	       w->ctime_ns == v->ctime_ns && f->fh.len == fh->len &&
	       !memcmp(f->fh.data, fh->data, fh->len);
}

struct sfs_pf_file *vtable_find(sfs_prefetch *pf, const struct sfs_fh *fh,
				const struct sfs_file_version *v)
{
	struct sfs_pf_file *f = NULL;

	pthread_mutex_lock(&pf->files_lock);
	if (pf->vtable.n_buckets)
		f = *pf_vtable_head(&pf->vtable, vtable_hash(v->fsid, v->fileid));
	for (; f; f = f->vnext)
		if (same_file_version(f, fh, v))
			break;
	/* The lock order puts f->lock before files_lock: pin f (file_free
	 * waits for pins to go) and take its lock without files_lock. */
	if (f)
		__atomic_fetch_add(&f->vpins, 1, __ATOMIC_ACQUIRE);
	pthread_mutex_unlock(&pf->files_lock);
	if (!f)
		return NULL;
	pthread_mutex_lock(&f->lock);
	bool alive = f->refs > 0; /* else it is being freed: not shared */
	if (alive)
		f->refs++;
	pthread_mutex_unlock(&f->lock);
	__atomic_fetch_sub(&f->vpins, 1, __ATOMIC_RELEASE);
	return alive ? f : NULL;
}

/* --- holds and fetching ahead ----------------------------------------------- */

void sfs_prefetch_set_observers(sfs_prefetch *pf, sfs_pf_read_observer read,
				sfs_pf_fetch_observer fetched, void *arg)
{
	pf->observer = read;
	pf->fetch_observer = fetched;
	pf->observer_arg = arg;
}

void sfs_pf_file_hint_hold(sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

	pthread_mutex_lock(&f->lock);
	f->refs++;
	if (f->openers++ == 0 && pf->conf.store && !f->obj)
		f->obj = sfs_store_obj_get(pf->conf.store, &f->version); /* NULL: uncached */
	__atomic_store_n(&f->hint_holds, f->hint_holds + 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&f->lock);
}

void sfs_pf_file_hint_release(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	__atomic_store_n(&f->hint_holds, f->hint_holds - 1, __ATOMIC_RELAXED);
	bool last_open = f->openers == 1;
	pthread_mutex_unlock(&f->lock);
	if (last_open) {
		sfs_pf_file_drop_idle(f); /* what nobody read goes, as at a last close */
	} else {
		pthread_mutex_lock(&f->lock);
		f->openers--;
		pthread_mutex_unlock(&f->lock);
	}
	sfs_pf_file_unref(f);
}

/* Whether a chunk of [c0, c1] is still on its way (fetching or loading).
 * Caller holds f->lock. */
static bool range_busy(struct sfs_pf_file *f, uint64_t c0, uint64_t c1)
{
	for (size_t i = 0; i < f->n_chunks; i++) {
		const struct pf_chunk *c = f->chunks[i];
		if (c->index >= c0 && c->index <= c1 &&
		    (c->state == CHUNK_FETCHING || c->state == CHUNK_LOADING))
			return true;
	}
	return false;
}

void sfs_pf_file_id(const sfs_pf_file *f, uint64_t *fsid, uint64_t *fileid)
{
	*fsid = f->version.fsid; /* set at open, never changed */
	*fileid = f->version.fileid;
}

bool sfs_pf_file_range_busy(sfs_pf_file *f, uint64_t off, uint64_t end)
{
	end = end < f->size ? end : f->size;
	if (off >= end)
		return false;
	pthread_mutex_lock(&f->lock);
	bool busy = range_busy(f, off >> SFS_CHUNK_SHIFT, (end - 1) >> SFS_CHUNK_SHIFT);
	pthread_mutex_unlock(&f->lock);
	return busy;
}

/* Wait on f->cond until [c0, c1] is not busy or wait_ms passed. Caller
 * holds f->lock. Returns whether it is still busy. */
static bool wait_range(struct sfs_pf_file *f, uint64_t c0, uint64_t c1, unsigned wait_ms)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += wait_ms / 1000;
	until.tv_nsec += (long)(wait_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	bool busy;
	while ((busy = range_busy(f, c0, c1)) &&
	       pthread_cond_timedwait(&f->cond, &f->lock, &until) == 0) {
	}
	return busy && range_busy(f, c0, c1);
}

int sfs_pf_file_fetch_ahead(sfs_pf_file *f, uint64_t off, uint64_t end, unsigned wait_ms,
			    struct sfs_pf_ahead *out)
{
	struct pf_chunk *started[SFS_PF_MAX_WINDOW];
	size_t n = 0;

	*out = (struct sfs_pf_ahead){.cached = true};
	end = end < f->size ? end : f->size;
	if (off >= end)
		return -EINVAL;
	uint64_t c0 = off >> SFS_CHUNK_SHIFT, c1 = (end - 1) >> SFS_CHUNK_SHIFT;
	for (uint64_t ci = c0; ci <= c1;) {
		pthread_mutex_lock(&f->lock);
		for (; ci <= c1 && n < SFS_PF_MAX_WINDOW; ci++) {
			if (store_state(f, ci) != SFS_CHUNK_ABSENT)
				continue;
			out->cached = false;
			if (chunk_find(f, ci))
				continue; /* in memory, or on its way */
			struct pf_chunk *c =
			    chunk_start(f, ci, f->next_seq, false, false, off, end);
			if (!c) {
				out->pending = (unsigned)(c1 - ci + 1);
				ci = c1 + 1;
				break;
			}
			out->started_bytes += c->fetch_len;
			started[n++] = c;
		}
		pthread_mutex_unlock(&f->lock);
		submit_chunks(f, started, n);
		n = 0;
	}
	pthread_mutex_lock(&f->lock);
	if (wait_ms) {
		sfs_blocking_begin();
		out->busy = wait_range(f, c0, c1, wait_ms);
		sfs_blocking_end();
	} else {
		out->busy = range_busy(f, c0, c1);
	}
	pthread_mutex_unlock(&f->lock);
	return 0;
}
