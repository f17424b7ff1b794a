// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/readahead — fetching ahead of readers: the readahead window of a
 * sequential reader (start_readahead: chunks the store lacks fetched,
 * cached ones queued for the loader threads); the whole-file fetch of a
 * shard (SHARD mode at open, or a warm-up: sfs_pf_file_warm) and its pump
 * (shard_pump: every chunk the store lacks, in order, as the budget
 * allows, moved on by each completion); and the pump thread, which
 * restarts pumps stalled on the budget with nothing in flight.
 * Not here: the sequential detector (read.c, plan_read); making and loading
 * chunks (chunks.c); a hint list's fetch of an item's range (hinted.c).
 *
 * Threading: start_readahead and shard_pump run with file->lock held and
 * append the chunks they start, which the caller submits after unlocking;
 * the pump thread takes files_lock, then only try-locks files.
 * prefetch_int.h has the lock order.
 */
#include "prefetch_int.h"

/* --- readahead --------------------------------------------------------------- */

/*
 * The readahead window after c1 for a sequential reader (step 2 of a
 * chunk-path read, read.c): chunks the store lacks are fetched (started[]),
 * cached ones loaded by the loader threads (ahead_loads[]). Caller holds
 * f->lock.
 */
void start_readahead(struct sfs_pf_file *f, uint64_t c0, uint64_t c1, struct pf_chunk **started,
		     size_t *n_started, struct pf_chunk **ahead_loads, size_t *n_ahead_loads)
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

/* --- the shard pump and warm-ups --------------------------------------------- */

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

void sfs_pf_file_prefetch_whole(sfs_pf_file *f)
{
	sfs_prefetch *pf = f->pf;

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
	if (first)
		sfs_store_obj_wanted(f->obj); /* a warm-up is no first pass (auto) */
	/* Chunks fetched before the warm-up and not cached (write_admitted)
	 * go to the store now, and the pump goes over the file again for
	 * those that left memory. */
	for (size_t i = 0; first && i < f->n_chunks; i++) {
		struct pf_chunk *c = f->chunks[i];
		if (c->state == CHUNK_READY && chunk_storable(f, c) && chunk_offer(f, c))
			file_get_locked(f); /* the write's */
		/* What the open's prefetch queued for a reader that has not read
		 * is the warm-up's (the warm tool's own open started it). */
		if (!f->read_seen && !c->used)
			chunk_demote(c);
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
				file_get_locked(f); /* keep it across the unlocks below */
				shard_pump(f, started, &n, SFS_PF_MAX_WINDOW);
			} else {
				pthread_mutex_unlock(&f->lock);
				continue;
			}
			pthread_mutex_unlock(&f->lock);
			pthread_mutex_unlock(&pf->files_lock);
			submit_chunks(f, started, n);
			pthread_mutex_lock(&f->lock);
			bool last = file_put_locked(f);
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
