// SPDX-License-Identifier: Apache-2.0
/*
 * prefetch/vtable — the version table: every live fetch state by (fsid,
 * fileid), chained on vnext, so that every open of one version (a reader's,
 * a hint list's) shares one fetch state and its chunks. Grown by doubling;
 * without memory to grow, chains get longer and lookups stay correct.
 * Not here: making and freeing a fetch state (prefetch.c), which insert
 * into and remove from the table.
 *
 * Threading: vtable_insert and vtable_remove: caller holds files_lock.
 * vtable_find takes files_lock, then, not under it, the file's lock, the
 * file pinned (vpins) in between; file_free waits for pins to go.
 */
#include "prefetch_int.h"

static size_t vslot(const sfs_prefetch *pf, uint64_t fsid, uint64_t fileid)
{
	uint64_t h = (fileid ^ (fsid * 0x9E3779B97F4A7C15ull)) * 0xC2B2AE3D27D4EB4Full;
	return (size_t)(h >> 32) & (pf->vcap - 1);
}

static void vtable_grow(sfs_prefetch *pf)
{
	size_t cap = pf->vcap ? pf->vcap * 2 : 256;
	struct sfs_pf_file **t = calloc(cap, sizeof(*t));

	if (!t)
		return; /* chains grow longer; lookups stay correct */
	struct sfs_pf_file **old = pf->vtable;
	size_t old_cap = pf->vcap;
	pf->vtable = t;
	pf->vcap = cap;
	for (size_t i = 0; i < old_cap; i++)
		for (struct sfs_pf_file *f = old[i], *next; f; f = next) {
			next = f->vnext;
			size_t s = vslot(pf, f->version.fsid, f->version.fileid);
			f->vnext = t[s];
			t[s] = f;
		}
	free(old);
}

void vtable_insert(sfs_prefetch *pf, struct sfs_pf_file *f)
{
	if (pf->vcount >= pf->vcap)
		vtable_grow(pf);
	if (!pf->vcap)
		return; /* no table (ENOMEM): this file is not shared */
	size_t s = vslot(pf, f->version.fsid, f->version.fileid);
	f->vnext = pf->vtable[s];
	pf->vtable[s] = f;
	pf->vcount++;
}

void vtable_remove(sfs_prefetch *pf, struct sfs_pf_file *f)
{
	if (!pf->vcap)
		return;
	for (struct sfs_pf_file **p = &pf->vtable[vslot(pf, f->version.fsid, f->version.fileid)];
	     *p; p = &(*p)->vnext)
		if (*p == f) {
			*p = f->vnext;
			pf->vcount--;
			return;
		}
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
	for (f = pf->vcap ? pf->vtable[vslot(pf, v->fsid, v->fileid)] : NULL; f; f = f->vnext)
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
