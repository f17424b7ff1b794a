// SPDX-License-Identifier: Apache-2.0
/*
 * inode — open hash of inodes keyed by (fsid, fileid). See inode.h.
 */
#include "inode.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct sfs_inode_table {
	pthread_mutex_t lock;
	struct sfs_inode **buckets; /* protected by lock */
	size_t n_buckets, n_inodes; /* protected by lock */
	struct sfs_inode *orphans;  /* protected by lock: replaced inodes the kernel
				       still holds (fileid reused), via hash_next */
	struct sfs_inode root;	    /* never freed; nlookup is not counted */
};

_Static_assert(sizeof(void *) != 8 || sizeof(struct sfs_inode) <= 272,
	       "an inode is paid for every file the kernel holds: keep it small");

/* The inode locks (inode.h: sfs_inode_lock): enough that FUSE workers on
 * different files rarely meet, 16 KiB in all. */
#define INODE_LOCKS 256 /* a power of two */
static pthread_mutex_t inode_locks[INODE_LOCKS] = {[0 ... INODE_LOCKS - 1] =
						       PTHREAD_MUTEX_INITIALIZER};

static pthread_mutex_t *lock_of(const struct sfs_inode *ino)
{
	uint64_t h = (uint64_t)(uintptr_t)ino * 0x9e3779b97f4a7c15ull;
	return &inode_locks[(h >> 32) & (INODE_LOCKS - 1)];
}

void sfs_inode_lock(const struct sfs_inode *ino) { pthread_mutex_lock(lock_of(ino)); }
void sfs_inode_unlock(const struct sfs_inode *ino) { pthread_mutex_unlock(lock_of(ino)); }

static size_t bucket_of(const sfs_inode_table *t, uint64_t fsid, uint64_t fileid)
{
	uint64_t h = (fileid ^ (fsid * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
	return (size_t)(h >> 17) & (t->n_buckets - 1);
}

int sfs_inode_table_open(const struct sfs_fh *root_fh, sfs_inode_table **out)
{
	sfs_inode_table *t = calloc(1, sizeof(*t));

	if (!t)
		return -ENOMEM;
	t->n_buckets = 1024;
	t->buckets = calloc(t->n_buckets, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->root.kind = SFS_INODE_NFS;
	t->root.fh = *root_fh;
	*out = t;
	return 0;
}

static void inode_free(struct sfs_inode *ino)
{
	if (ino->pf)
		sfs_pf_file_unref(ino->pf);
	free(ino);
}

void sfs_inode_table_close(sfs_inode_table *t)
{
	if (!t)
		return;
	for (size_t b = 0; b < t->n_buckets; b++)
		for (struct sfs_inode *i = t->buckets[b], *next; i; i = next) {
			next = i->hash_next;
			inode_free(i);
		}
	for (struct sfs_inode *i = t->orphans, *next; i; i = next) {
		next = i->hash_next;
		inode_free(i);
	}
	if (t->root.pf)
		sfs_pf_file_unref(t->root.pf);
	free(t->buckets);
	pthread_mutex_destroy(&t->lock);
	free(t);
}

struct sfs_inode *sfs_inode_root(sfs_inode_table *t) { return &t->root; }

/* Double the bucket array once the table is twice as full. Caller holds lock. */
static void maybe_grow(sfs_inode_table *t)
{
	if (t->n_inodes < t->n_buckets * 2)
		return;
	size_t n = t->n_buckets * 2;
	struct sfs_inode **nb = calloc(n, sizeof(*nb));
	if (!nb)
		return; /* keep the longer chains */
	struct sfs_inode **old = t->buckets;
	size_t old_n = t->n_buckets;
	t->buckets = nb;
	t->n_buckets = n;
	for (size_t b = 0; b < old_n; b++)
		for (struct sfs_inode *i = old[b], *next; i; i = next) {
			next = i->hash_next;
			size_t k = bucket_of(t, i->fsid, i->fileid);
			i->hash_next = nb[k];
			nb[k] = i;
		}
	free(old);
}

struct sfs_inode *sfs_inode_get(sfs_inode_table *t, const struct sfs_fh *fh,
				const struct sfs_attr *attr, uint64_t now_ms)
{
	struct sfs_inode *ino;

	/* The export root can be reached by name too (".." of a top dir). */
	if (fh->len == t->root.fh.len && !memcmp(fh->data, t->root.fh.data, fh->len)) {
		sfs_inode_set_attr(&t->root, attr, now_ms);
		return &t->root;
	}
	pthread_mutex_lock(&t->lock);
	size_t b = bucket_of(t, attr->fsid, attr->fileid);
	for (ino = t->buckets[b]; ino; ino = ino->hash_next)
		if (ino->fileid == attr->fileid && ino->fsid == attr->fsid)
			break;
	if (ino && (ino->fh.len != fh->len || memcmp(ino->fh.data, fh->data, fh->len))) {
		/* Same fileid, new handle: the server reused the inode number for
		 * a new file. Unhook the old one; the kernel's references to it
		 * stay valid until forgotten, and it is freed then. */
		struct sfs_inode **p = &t->buckets[b];
		while (*p != ino)
			p = &(*p)->hash_next;
		*p = ino->hash_next;
		ino->orphaned = true; /* never matches again; freed on forget */
		ino->hash_next = t->orphans;
		t->orphans = ino;
		ino = NULL;
	}
	if (!ino) {
		ino = calloc(1, sizeof(*ino));
		if (!ino) {
			pthread_mutex_unlock(&t->lock);
			return NULL;
		}
		ino->kind = SFS_INODE_NFS;
		ino->fsid = attr->fsid;
		ino->fileid = attr->fileid;
		ino->fh = *fh;
		ino->hash_next = t->buckets[b];
		t->buckets[b] = ino;
		t->n_inodes++;
		maybe_grow(t);
	}
	ino->nlookup++;
	pthread_mutex_unlock(&t->lock);
	sfs_inode_set_attr(ino, attr, now_ms);
	return ino;
}

void sfs_inode_forget(sfs_inode_table *t, struct sfs_inode *ino, uint64_t n)
{
	if (ino == &t->root || ino->kind != SFS_INODE_NFS)
		return;
	pthread_mutex_lock(&t->lock);
	ino->nlookup = ino->nlookup > n ? ino->nlookup - n : 0;
	if (ino->nlookup) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	struct sfs_inode **p =
	    ino->orphaned ? &t->orphans : &t->buckets[bucket_of(t, ino->fsid, ino->fileid)];
	while (*p && *p != ino)
		p = &(*p)->hash_next;
	if (*p) {
		*p = ino->hash_next;
		t->n_inodes--;
	}
	pthread_mutex_unlock(&t->lock);
	inode_free(ino);
}

void sfs_inode_set_attr(struct sfs_inode *ino, const struct sfs_attr *attr, uint64_t now_ms)
{
	sfs_inode_lock(ino);
	ino->attr = *attr;
	ino->attr_time_ms = now_ms;
	sfs_inode_unlock(ino);
}

uint64_t sfs_inode_count(sfs_inode_table *t)
{
	pthread_mutex_lock(&t->lock);
	uint64_t n = t->n_inodes;
	pthread_mutex_unlock(&t->lock);
	return n;
}
