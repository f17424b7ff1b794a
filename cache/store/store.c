// SPDX-License-Identifier: Apache-2.0
/*
 * store/store — the store's public API (store.h): open, start, close, stats,
 * object references and chunk states. Not here: reads (read.c), writes
 * (writer.c), the index (index.c), datasets (by_dataset.c, policy.c). The
 * layout, the structures and the lock order are described in store_int.h.
 *
 * Threading: as store.h, any thread; open, start and close once each, by
 * the store's owner.
 */
#include "store_int.h"

/* --- public API ----------------------------------------------------------- */

int sfs_store_open(const struct sfs_store_conf *conf, sfs_store **out, char *err, size_t err_len)
{
	sfs_store *s;
	int rc;

	if (!conf->dir || conf->dir[0] != '/') {
		snprintf(err, err_len, "cache_dir must be an absolute path");
		return -EINVAL;
	}
	if (conf->chunk_bytes < SUB_BYTES || conf->chunk_bytes > (1ull << MAX_CHUNK_SHIFT) ||
	    (conf->chunk_bytes & (conf->chunk_bytes - 1))) {
		snprintf(err, err_len, "chunk size must be a power of two, 64 KiB to 1 MiB");
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->conf = *conf;
	s->conf.dir = strdup(conf->dir);
	s->chunk_shift = (unsigned)__builtin_ctzll(conf->chunk_bytes);
	s->capacity_bytes = conf->capacity_bytes;
	s->lock_fd = -1;
	int index_rc = store_index_init(&s->index, 1024);
	pthread_mutex_init(&s->lock, NULL);
	pthread_cond_init(&s->work, NULL);
	pthread_cond_init(&s->ctl_done, NULL);
	if (!s->conf.dir || index_rc < 0 || policy_open(s) < 0) {
		rc = -ENOMEM;
		goto err_free;
	}
	char dpath[4200];
	snprintf(dpath, sizeof(dpath), "%s/datasets", s->conf.dir);
	if ((rc = sfs_dsets_open(dpath, &s->dsets)) < 0)
		goto err_free;
	rc = store_attach(s, err, err_len);
	if (rc == -EBUSY)
		goto err_free;
	s->online = rc == 0;
	if (rc < 0) {
		sfs_log(SFS_LOG_WARN, "store", "cache %s unusable (%s): reading from NFS, retrying",
			s->conf.dir, strerror(-rc));
		count(&s->stats.errors, 1);
		s->retry_at_ms = sfs_now_ms() + RETRY_OFFLINE_MS;
	}
	if ((rc = sfs_uring_open(WRITE_BATCH * 4, &s->ring)) < 0)
		goto err_free;
	*out = s;
	return 0;

err_free:
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	for (size_t b = 0; b < s->index.n_buckets; b++)
		for (sfs_store_obj *o = s->index.buckets[b], *next; o; o = next) {
			next = o->hnext;
			obj_free(o);
		}
	sfs_seg_close(s->seg);
	sfs_dsets_close(s->dsets);
	policy_close(s);
	store_index_fini(&s->index);
	free((char *)s->conf.dir);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->ctl_done);
	free(s);
	return rc;
}

int sfs_store_start(sfs_store *s)
{
	int rc = -pthread_create(&s->writer, NULL, writer_main, s);

	if (rc == 0)
		s->writer_started = true;
	return rc;
}

void sfs_store_close(sfs_store *s)
{
	if (!s)
		return;
	scrub_stop(s);
	pthread_mutex_lock(&s->lock);
	s->stopping = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->lock);
	if (s->writer_started)
		pthread_join(s->writer, NULL);
	if (s->online)
		sfs_dsets_save(s->dsets, false);
	sfs_uring_close(s->ring);
	for (size_t b = 0; b < s->index.n_buckets; b++)
		for (sfs_store_obj *o = s->index.buckets[b], *next; o; o = next) {
			next = o->hnext;
			obj_free(o); /* objects still referenced leak their holders' view */
		}
	policy_close(s);
	store_index_fini(&s->index);
	sfs_seg_close(s->seg);
	sfs_dsets_close(s->dsets);
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	free((char *)s->conf.dir);
	pthread_mutex_destroy(&s->lock);
	pthread_cond_destroy(&s->work);
	pthread_cond_destroy(&s->ctl_done);
	free(s);
}

void sfs_store_get_stats(sfs_store *s, struct sfs_store_stats *out)
{
	struct sfs_seg_stats gs = {0};
	sfs_seg *sg = seg_of(s);

	if (sg)
		sfs_seg_get_stats(sg, &gs);
#define LOAD(x) out->x = __atomic_load_n(&s->stats.x, __ATOMIC_RELAXED)
	LOAD(write_bytes);
	LOAD(evicted_bytes);
	LOAD(read_bytes);
	LOAD(checksum_failures);
	LOAD(errors);
	LOAD(not_admitted_bytes);
#undef LOAD
	pthread_mutex_lock(&s->lock);
	out->used_bytes = used_total(s); /* what admission sees */
	out->capacity_bytes = s->capacity_bytes;
	out->held_bytes = s->held_bytes;
	out->objects = s->n_objects + gs.objects;
	out->small_objects = gs.objects;
	out->segments = gs.segments;
	out->index_bytes =
	    s->mem_bytes + s->index.n_buckets * sizeof(*s->index.buckets) + gs.index_bytes;
	out->queued_bytes = s->queued_bytes;
	out->online = s->online;
	pthread_mutex_unlock(&s->lock);
}

void sfs_store_held_add(sfs_store *s, int64_t n)
{
	pthread_mutex_lock(&s->lock);
	s->held_bytes += (uint64_t)n;
	pthread_mutex_unlock(&s->lock);
}

sfs_store_obj *sfs_store_obj_get(sfs_store *s, const struct sfs_file_version *v)
{
	uint8_t key[16];

	key_for(v, key);
	pthread_mutex_lock(&s->lock);
	sfs_store_obj *o = index_find(s, key);
	if (!o) {
		o = obj_new(s, key, v->size);
		if (!o) {
			pthread_mutex_unlock(&s->lock);
			return NULL;
		}
		o->dataset = v->dataset;
		/* Indexed at once, so that every holder of this version shares
		 * one object; a per-file one gets a file with its first chunk,
		 * and leaves the index again if its last holder goes before
		 * that; a packed one always leaves with its last holder. */
		index_add(s, o);
	} else {
		lru_touch(s, o);
	}
	o->refs++;
	pthread_mutex_unlock(&s->lock);
	return o;
}

void sfs_store_obj_ref(sfs_store_obj *o)
{
	pthread_mutex_lock(&o->store->lock);
	o->refs++;
	pthread_mutex_unlock(&o->store->lock);
}

void sfs_store_obj_put(sfs_store_obj *o)
{
	sfs_store *s = o->store;
	struct chunk_rec *recs = NULL;
	int fd = -1, dfd = -1, rfd = -1;
	bool gone = false;

	pthread_mutex_lock(&s->lock);
	if (--o->refs == 0) {
		if (!o->on_disk) { /* packed, never written, or evicted */
			if (o->in_index)
				index_remove(s, o);
			if (o->recs)
				s->mem_bytes -= (uint64_t)o->n_chunks * sizeof(*o->recs);
			s->held_bytes -= o->held_bytes; /* its unlinked file goes now */
			gone = true;
		} else {
			/* Bound open files and records in memory by the objects
			 * in use, not by the cache size. */
			fd = o->fd;
			dfd = o->dfd;
			rfd = o->rfd;
			recs = o->recs;
			if (recs)
				s->mem_bytes -= (uint64_t)o->n_chunks * sizeof(*recs);
			o->fd = o->dfd = o->rfd = -1;
			o->recs = NULL;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (gone)
		obj_free(o);
	if (fd >= 0)
		close(fd);
	if (dfd >= 0)
		close(dfd);
	if (rfd >= 0)
		close(rfd);
	free(recs);
}

bool chunk_cached(const sfs_store_obj *o, uint32_t index)
{
	return o->state[index] == SFS_CHUNK_PRESENT || o->state[index] == SFS_CHUNK_VERIFIED;
}

enum sfs_chunk_state sfs_store_chunk_state(sfs_store_obj *o, uint32_t index)
{
	pthread_mutex_lock(&o->store->lock);
	enum sfs_chunk_state st =
	    index < o->n_chunks ? (enum sfs_chunk_state)o->state[index] : SFS_CHUNK_ABSENT;
	pthread_mutex_unlock(&o->store->lock);
	if (o->packed && index == 0 && st == SFS_CHUNK_ABSENT && packed_present(o->store, o))
		st = SFS_CHUNK_PRESENT;
	return st;
}

uint64_t sfs_store_obj_cached_bytes(sfs_store_obj *o)
{
	sfs_store *s = o->store;
	uint64_t n = 0;

	if (o->packed)
		return packed_present(s, o) ? o->size : 0;
	pthread_mutex_lock(&s->lock);
	for (uint32_t i = 0; i < o->n_chunks; i++)
		if (chunk_cached(o, i))
			n += chunk_len(o, i, s->chunk_shift);
	pthread_mutex_unlock(&s->lock);
	return n;
}

uint64_t sfs_store_cached_bytes(sfs_store *s, const struct sfs_file_version *v)
{
	uint8_t key[16];
	sfs_seg *sg = seg_of(s);
	uint32_t len = 0;

	key_for(v, key);
	if (size_packed(s, v->size))
		return sg && sfs_seg_lookup(sg, key, &len) && len == v->size ? v->size : 0;
	pthread_mutex_lock(&s->lock);
	sfs_store_obj *o = index_find(s, key);
	if (o)
		o->refs++;
	pthread_mutex_unlock(&s->lock);
	if (!o)
		return 0;
	uint64_t n = sfs_store_obj_cached_bytes(o);
	sfs_store_obj_put(o);
	return n;
}
