// SPDX-License-Identifier: Apache-2.0
/*
 * open_file — one open NFS file and the inode's open state (open_file.h).
 */
#include "open_file.h"
#include "../kernel/handles.h"

#include <errno.h>
#include <stdlib.h>

struct sfs_file_version sfs_open_file_version(const struct sfs_attr *a, const struct sfs_inode *i)
{
	return (struct sfs_file_version){.dataset = __atomic_load_n(&i->dataset, __ATOMIC_RELAXED),
					 .fsid = a->fsid,
					 .fileid = a->fileid,
					 .size = a->size,
					 .mtime_s = a->mtime.tv_sec,
					 .mtime_ns = (uint32_t)a->mtime.tv_nsec,
					 .ctime_s = a->ctime.tv_sec,
					 .ctime_ns = (uint32_t)a->ctime.tv_nsec};
}

/* Whether the kernel's pages of i (the version last opened) are of v.
 * Caller holds the inode lock. */
static bool opened_is(const struct sfs_inode *i, const struct sfs_file_version *v)
{
	const struct sfs_inode_version *o = &i->opened;
	return i->have_opened && o->size == v->size && o->mtime_s == v->mtime_s &&
	       o->mtime_ns == v->mtime_ns && o->ctime_s == v->ctime_s && o->ctime_ns == v->ctime_ns;
}

/* Caller holds the inode lock. */
static void opened_set(struct sfs_inode *i, const struct sfs_file_version *v)
{
	i->opened = (struct sfs_inode_version){.size = v->size,
					       .mtime_s = v->mtime_s,
					       .ctime_s = v->ctime_s,
					       .mtime_ns = v->mtime_ns,
					       .ctime_ns = v->ctime_ns};
	i->have_opened = 1;
}

bool sfs_open_file_end(struct sfs_inode *i, sfs_pf_file *pf)
{
	sfs_pf_file *last = NULL;
	bool was_last;

	sfs_inode_lock(i);
	was_last = --i->n_open == 0;
	if (was_last) {
		last = i->pf;
		i->pf = NULL;
		i->first_epoch = 0;
		i->referenced = 0; /* read and done with: the first to prune */
	}
	sfs_inode_unlock(i);
	sfs_pf_file_drop_idle(pf); /* pairs with sfs_pf_file_opened() */
	sfs_pf_file_unref(pf);
	if (last)
		sfs_pf_file_unref(last); /* the inode's reference */
	return was_last;
}

int sfs_open_file_begin(sfs_prefetch *p, struct sfs_inode *i, const struct sfs_file_version *v,
			sfs_open_file_seen_fn seen, sfs_pf_file **out, struct sfs_open_state *st)
{
	sfs_inode_lock(i);
	st->unchanged = opened_is(i, v);
	st->changed = i->have_opened && !st->unchanged;
	if (seen)
		seen(i, st->unchanged);
	if (!st->unchanged)
		i->first_epoch = 1; /* ends when every open of it closed */
	st->first_epoch = i->first_epoch;
	sfs_pf_file *pf = i->pf;
	if (pf && !st->unchanged) {
		sfs_pf_file_unref(pf); /* open handles of the old version keep theirs */
		pf = i->pf = NULL;
	}
	if (!pf) {
		struct sfs_fh fh = sfs_inode_fh(i);
		int rc = sfs_pf_file_open_version(p, &fh, v, &pf);
		if (rc < 0) {
			sfs_inode_unlock(i);
			return rc;
		}
		i->pf = pf;
	}
	opened_set(i, v);
	sfs_pf_file_ref(pf);
	i->n_open++;
	sfs_inode_unlock(i);
	*out = pf;
	return 0;
}

struct sfs_open_file *sfs_open_file_new(sfs_pf_file *pf, uid_t uid, uint64_t first_region_id)
{
	struct sfs_open_file *of = calloc(1, sizeof(*of));

	if (!of)
		return NULL;
	of->pf = pf;
	of->uid = uid;
	of->next_region_id = first_region_id;
	pthread_mutex_init(&of->lock, NULL);
	return of;
}

sfs_pf_file *sfs_open_file_free(struct sfs_open_file *of)
{
	sfs_pf_file *pf = of->pf;

	sfs_open_file_drop_regions(of);
	pthread_mutex_destroy(&of->lock);
	free(of);
	return pf;
}

struct sfs_open_file *sfs_open_file_of(sfs_prefetch *p, struct sfs_inode *i, uint64_t fh,
				       uint64_t first_region_id)
{
	struct sfs_open_file *of = sfs_handle_get(fh);

	if (of || sfs_inode_kind(i) != SFS_INODE_NFS || (of = sfs_handle_adopted(fh)))
		return of;
	/* A dead server's open: the version it read is the inode's last opened
	 * one (the region kept it); never a newer one, so a reader gets no mix. */
	struct sfs_attr a;
	sfs_inode_lock(i);
	sfs_inode_attr_get(i, &a);
	if (i->have_opened) {
		a.size = i->opened.size;
		a.mtime =
		    (struct timespec){.tv_sec = i->opened.mtime_s, .tv_nsec = i->opened.mtime_ns};
		a.ctime =
		    (struct timespec){.tv_sec = i->opened.ctime_s, .tv_nsec = i->opened.ctime_ns};
	}
	sfs_inode_unlock(i);
	struct sfs_file_version v = sfs_open_file_version(&a, i);
	struct sfs_open_state st;
	sfs_pf_file *pf;
	/* No one to tell: v is the version last opened, or (none opened) the
	 * inode has no passthrough open that a new version would make stale. */
	if (sfs_open_file_begin(p, i, &v, NULL, &pf, &st) < 0)
		return NULL;
	sfs_pf_file_opened(pf);
	struct sfs_open_file *mine = sfs_open_file_new(pf, 0, first_region_id);
	if (!mine) {
		sfs_open_file_end(i, pf);
		return NULL;
	}
	of = sfs_handle_adopt(fh, mine);
	if (of != mine) /* another thread was first, or ENOMEM */
		sfs_open_file_end(i, sfs_open_file_free(mine));
	return of;
}

void sfs_open_file_drop_regions(struct sfs_open_file *of)
{
	pthread_mutex_lock(&of->lock);
	for (int i = 0; i < SFS_MAX_REGIONS; i++)
		if (of->regions[i].id) {
			sfs_stage_region_free(of->regions[i].region);
			of->regions[i].id = 0;
			of->regions[i].region = NULL;
		}
	pthread_mutex_unlock(&of->lock);
}
