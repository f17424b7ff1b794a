// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/prefetch — the pool and the life of a file version's fetch
 * state: the pool opened (with its pump and loader threads), stopped,
 * closed, and its stats; a version's fetch state made (or found in the
 * version table), referenced, and freed with its last reference
 * (file_free); its opens and their end (sfs_pf_file_opened,
 * sfs_pf_file_drop_idle) with the store object it holds while open; the
 * passthrough backing fd and the bytes cached.
 * Not here: reads and views (read.c); chunks, their loading and waiters
 * (chunks.c); readahead, the shard pump and warm-ups (readahead.c); the
 * offer to the store (offer.c); buffers and scratch (buffers.c); the
 * version table (vtable.c); hints (hinted.c).
 *
 * Threading: any thread; each function takes the locks it needs, in the
 * order of prefetch_int.h (which has the data structures). file_free runs
 * on the thread that dropped the last reference, with no lock held.
 */
#include "prefetch_int.h"

#include <sched.h>

/* --- the pool ---------------------------------------------------------------- */

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
	/* What is kept beyond the budget is a share of it (mem_max, small
	 * budgets): an eighth, for buffers past it and the direct path's
	 * scratch pages. */
	pf->over_max = pf->max_buffers / 8;
	pf->over_max = pf->over_max < 2			 ? 2
		       : pf->over_max > SFS_PF_OVER_BUFS ? SFS_PF_OVER_BUFS
							 : pf->over_max;
	uint64_t keep = conf->mem_bytes / 8 / SCRATCH_BYTES;
	__atomic_store_n(&scratch_keep,
			 keep < 2	       ? 2u
			 : keep > SCRATCH_KEEP ? (unsigned)SCRATCH_KEEP
					       : (unsigned)keep,
			 __ATOMIC_RELAXED);
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
	pf_vtable_fini(&pf->vtable);
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
	LOAD(preloads);
	LOAD(preload_misses);
	LOAD(preload_unread);
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

/* --- a version's fetch state ------------------------------------------------- */

int sfs_pf_file_open_version(sfs_prefetch *pf, const struct sfs_fh *fh,
			     const struct sfs_file_version *v, sfs_pf_file **out)
{
	struct sfs_pf_file *f = vtable_find(pf, fh, v); /* one fetch state per version */
	if (f) {
		*out = f;
		return 0;
	}
	if (!(f = calloc(1, sizeof(*f))))
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
	vtable_insert(pf, f);
	pthread_mutex_unlock(&pf->files_lock);
	count(&pf->stats.files_opened, 1);
	*out = f;
	return 0;
}

void sfs_pf_file_ref(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	file_get_locked(f);
	pthread_mutex_unlock(&f->lock);
}

void sfs_pf_file_unref(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock);
	bool last = file_put_locked(f);
	pthread_mutex_unlock(&f->lock);
	if (last)
		file_free(f);
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
	/* Nothing holds f any more: no open, hold, view, waiter, chunk in
	 * flight or write (each holds a reference), so every chunk is idle. */
	assert(f->refs == 0 && !f->waiters && !f->pre_busy);
	assert(__atomic_load_n(&f->hint_holds, __ATOMIC_RELAXED) == 0);
	while (f->n_chunks)
		chunk_free(f, f->n_chunks - 1);
	if (f->obj)
		sfs_store_obj_put(f->obj);
	free(f->chunks);
	pthread_cond_destroy(&f->cond);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

/* --- opens ------------------------------------------------------------------- */

void sfs_pf_file_opened_no_prefetch(sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

	pthread_mutex_lock(&f->lock);
	if (f->openers++ == 0 && pf->conf.store && !f->obj)
		f->obj = sfs_store_obj_get(pf->conf.store, &f->version); /* NULL: uncached */
	pthread_mutex_unlock(&f->lock);
}

void sfs_pf_file_opened(sfs_pf_file *f)
{
	sfs_pf_file_opened_no_prefetch(f);
	sfs_pf_file_prefetch_whole(f);
}

void sfs_pf_file_drop_idle(sfs_pf_file *f)
{
	struct sfs_seg_aio *pre = NULL;
	void *pre_buf = NULL;

	pthread_mutex_lock(&f->lock);
	if (f->openers)
		f->openers--;
	sfs_store_obj *put = NULL;
	if (f->openers == 0) {
		pre = f->pre_aio; /* opened and never read: wait for it, drop it */
		pre_buf = f->pre_buf;
		f->pre_aio = NULL;
		f->pre_buf = NULL;
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
	if (pre) {
		const char *data;
		sfs_store_read_finish(put, pre, 0, 0, &data);
		scratch_give(pre_buf);
		count(&f->pf->stats.preload_unread, 1);
	}
	if (put)
		sfs_store_obj_put(put);
}

/* sfs_pf_file_backing_fd (want_fd) or _check. */
static int backing(sfs_pf_file *f, bool want_fd)
{
	pthread_mutex_lock(&f->lock);
	sfs_store_obj *o = f->obj;
	if (o)
		sfs_store_obj_ref(o);
	pthread_mutex_unlock(&f->lock);
	if (!o)
		return -ENOENT;
	int rc = want_fd ? sfs_store_obj_backing_fd(o) : sfs_store_obj_backing_check(o);
	sfs_store_obj_put(o);
	return rc;
}

int sfs_pf_file_backing_fd(sfs_pf_file *f) { return backing(f, true); }

int sfs_pf_file_backing_check(sfs_pf_file *f) { return backing(f, false); }

uint64_t sfs_pf_file_cached_bytes(sfs_pf_file *f)
{
	pthread_mutex_lock(&f->lock); /* then the store's lock: the lock order */
	uint64_t n = f->obj ? sfs_store_obj_cached_bytes(f->obj) : 0;
	pthread_mutex_unlock(&f->lock);
	return n;
}
