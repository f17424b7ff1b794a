// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/vtable — the version table: every live fetch state by (fsid,
 * fileid), chained on vnext, so that every open of one version (a reader's,
 * a hint list's) shares one fetch state and its chunks: a table of
 * cache/common/htab.h (grown by doubling; without memory to grow, chains
 * get longer and lookups stay correct).
 * Not here: making and freeing a fetch state (prefetch.c), which insert
 * into and remove from the table.
 *
 * Threading: vtable_insert and vtable_remove: caller holds files_lock.
 * vtable_find takes files_lock, then, not under it, the file's lock, the
 * file pinned (vpins) in between; file_free waits for pins to go.
 */
#include "prefetch_int.h"

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
