// SPDX-License-Identifier: Apache-2.0
/*
 * inode — open hash of inodes keyed by (fsid, fileid). See inode.h.
 */
#include "inode.h"
#include "../cache/common/iobuf.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/*
 * Inodes come from a slab of their own: SLAB_PAGE-aligned pages of
 * SLAB_SLOT-byte slots, for handles up to SLAB_FH_MAX bytes (a longer one
 * is calloc'd). The kernel's inodes churn by the hundred thousand (a walk,
 * inode_max's pruning), and from malloc they lay among the daemon's
 * short-lived buffers and listings, so what FORGETs freed stayed in pages
 * that other live chunks pinned. A page left empty is unmapped, one spare
 * kept. Its own lock (a leaf): inodes are freed outside the table lock.
 */
/* Under AddressSanitizer a slot is poisoned while free, so that a use of a
 * forgotten inode is caught as it would be with malloc. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SFS_INODE_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SFS_INODE_ASAN 1
#endif
#ifdef SFS_INODE_ASAN
#include <sanitizer/asan_interface.h>
#define SLOT_POISON(p, n)   ASAN_POISON_MEMORY_REGION((p), (n))
#define SLOT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define SLOT_POISON(p, n)   ((void)(p), (void)(n))
#define SLOT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define SLAB_PAGE   (64u << 10)
#define SLAB_FH_MAX 36u
#define SLAB_HEAD   64u

struct slab_page {
	struct slab_page *prev, *next; /* in the partial list while it has free slots */
	void *free;		       /* free slots, linked through their first word */
	uint32_t used;		       /* slots handed out */
};
_Static_assert(sizeof(struct slab_page) <= SLAB_HEAD, "the page header fits before the slots");

struct inode_slab {
	pthread_mutex_t lock;
	struct slab_page *partial; /* protected by lock: pages with a free slot */
	struct slab_page *spare;   /* protected by lock: an empty page kept */
};

struct sfs_inode_table {
	struct inode_slab slab;
	pthread_mutex_t lock;
	struct sfs_inode **buckets; /* protected by lock */
	size_t n_buckets, n_inodes; /* protected by lock */
	uint64_t bytes;		    /* protected by lock: of the inodes in buckets and orphans */
	struct sfs_inode *orphans;  /* protected by lock: replaced inodes the kernel
				       still holds (fileid reused), via hash_next */
	struct sfs_inode *root;	    /* freed at close; nlookup is not counted */
	size_t hand;		    /* protected by lock: the prune scan's next bucket */
	/* Files whose last open closed, oldest first (sfs_inode_closed): a
	 * ring of closed_cap keys, closed_n of them from closed_head. */
	pthread_mutex_t closed_lock; /* leaf: taken alone or under lock */
	struct inode_key {
		uint64_t fsid, fileid;
	} * closed;		      /* set before the FUSE loop, then read-only */
	size_t closed_cap;	      /* set before the FUSE loop, then read-only */
	size_t closed_head, closed_n; /* protected by closed_lock */
	/* Closes are queued only while the table holds closed_from inodes or
	 * more (closing_queued: atomic, written under lock), so that a mount
	 * far below its limit pays one load per close, not a lock. */
	uint64_t closed_from; /* set before the FUSE loop, then read-only */
	bool closing_queued;
	uint64_t kick_at;   /* set before the FUSE loop, then read-only */
	void (*kick)(void); /* set before the FUSE loop, then read-only */
	bool kicked;	    /* protected by lock: kick called, not below kick_at since */
};

_Static_assert(sizeof(void *) != 8 || offsetof(struct sfs_inode, fh) <= 172,
	       "an inode is paid for every file the kernel holds: keep it small");
_Static_assert(SFS_FH_MAX <= UINT8_MAX, "fh_len holds a handle's length");

/* The bytes an inode with a handle of fh_len takes (never less than the
 * struct with its tail padding). */
static size_t inode_size(uint32_t fh_len)
{
	size_t n = offsetof(struct sfs_inode, fh) + fh_len;
	return n > sizeof(struct sfs_inode) ? n : sizeof(struct sfs_inode);
}

#define SLAB_SLOT  ((offsetof(struct sfs_inode, fh) + SLAB_FH_MAX + 7) & ~(size_t)7)
#define SLAB_SLOTS ((SLAB_PAGE - SLAB_HEAD) / SLAB_SLOT)

static struct slab_page *slab_page_of(const void *slot)
{
	return (struct slab_page *)((uintptr_t)slot & ~(uintptr_t)(SLAB_PAGE - 1));
}

static void slab_unlink(struct inode_slab *sl, struct slab_page *p)
{
	if (p->prev)
		p->prev->next = p->next;
	else
		sl->partial = p->next;
	if (p->next)
		p->next->prev = p->prev;
	p->prev = p->next = NULL;
}

static void slab_push(struct inode_slab *sl, struct slab_page *p)
{
	p->prev = NULL;
	p->next = sl->partial;
	if (p->next)
		p->next->prev = p;
	sl->partial = p;
}

/* A SLAB_PAGE-aligned page from mmap with every slot on its free list, or
 * NULL. */
static struct slab_page *slab_page_map(void)
{
	uint8_t *a = sfs_map_aligned(SLAB_PAGE, SLAB_PAGE, 0);
	if (a == MAP_FAILED)
		return NULL;
	struct slab_page *p = (struct slab_page *)a; /* zero-filled */
	for (size_t i = SLAB_SLOTS; i-- > 0;) {
		void *slot = a + SLAB_HEAD + i * SLAB_SLOT;
		memcpy(slot, &p->free, sizeof(void *));
		p->free = slot;
	}
	SLOT_POISON(a + SLAB_HEAD, SLAB_PAGE - SLAB_HEAD);
	return p;
}

static void slab_page_unmap(struct slab_page *p)
{
	SLOT_UNPOISON((uint8_t *)p + SLAB_HEAD, SLAB_PAGE - SLAB_HEAD);
	munmap(p, SLAB_PAGE);
}

/* A zeroed slot, or NULL on ENOMEM. */
static void *slab_alloc(struct inode_slab *sl)
{
	void *slot = NULL;

	pthread_mutex_lock(&sl->lock);
	struct slab_page *p = sl->partial;
	if (!p) {
		p = sl->spare ? sl->spare : slab_page_map();
		sl->spare = NULL;
		if (p)
			slab_push(sl, p);
	}
	if (p) {
		slot = p->free;
		SLOT_UNPOISON(slot, SLAB_SLOT);
		memcpy(&p->free, slot, sizeof(void *));
		if (++p->used == SLAB_SLOTS)
			slab_unlink(sl, p);
	}
	pthread_mutex_unlock(&sl->lock);
	if (slot)
		memset(slot, 0, SLAB_SLOT);
	return slot;
}

static void slab_free(struct inode_slab *sl, void *slot)
{
	struct slab_page *p = slab_page_of(slot), *unmap = NULL;

	pthread_mutex_lock(&sl->lock);
	memcpy(slot, &p->free, sizeof(void *));
	SLOT_POISON(slot, SLAB_SLOT);
	p->free = slot;
	if (p->used-- == SLAB_SLOTS)
		slab_push(sl, p);
	if (!p->used) {
		slab_unlink(sl, p);
		if (sl->spare)
			unmap = p;
		else
			sl->spare = p; /* every slot back on its free list */
	}
	pthread_mutex_unlock(&sl->lock);
	if (unmap)
		slab_page_unmap(unmap);
}

static bool from_slab(uint32_t fh_len) { return fh_len && fh_len <= SLAB_FH_MAX; }

static struct sfs_inode *inode_new(struct inode_slab *sl, const struct sfs_fh *fh)
{
	struct sfs_inode *ino =
	    from_slab(fh->len) ? slab_alloc(sl) : calloc(1, inode_size(fh->len));

	if (ino) {
		ino->fh_len = (uint8_t)fh->len;
		memcpy(ino->fh, fh->data, fh->len);
	}
	return ino;
}

static bool fh_is(const struct sfs_inode *ino, const struct sfs_fh *fh)
{
	return ino->fh_len == fh->len && !memcmp(ino->fh, fh->data, fh->len);
}

struct sfs_fh sfs_inode_fh(const struct sfs_inode *ino)
{
	struct sfs_fh fh = {.len = ino->fh_len};

	memcpy(fh.data, ino->fh, ino->fh_len);
	return fh;
}

struct sfs_inode *sfs_inode_virtual(enum sfs_inode_kind kind)
{
	struct sfs_inode *ino = calloc(1, inode_size(0));

	if (ino)
		ino->fileid =
		    kind == SFS_INODE_STATS ? SFS_INODE_STATS_FILEID : SFS_INODE_CTL_DIR_FILEID;
	return ino;
}

static struct timespec ts(int64_t s, uint32_t ns)
{
	return (struct timespec){.tv_sec = (time_t)s, .tv_nsec = (long)ns};
}

void sfs_inode_attr_get(const struct sfs_inode *ino, struct sfs_attr *out)
{
	const struct sfs_inode_attr *a = &ino->attr;

	*out = (struct sfs_attr){.type = a->type,
				 .mode = a->mode,
				 .nlink = a->nlink,
				 .uid = a->uid,
				 .gid = a->gid,
				 .size = a->size,
				 .used = a->used,
				 .fsid = ino->fsid,
				 .fileid = ino->fileid,
				 .rdev_major = a->rdev_major,
				 .rdev_minor = a->rdev_minor,
				 .atime = ts(a->atime_s, a->atime_ns),
				 .mtime = ts(a->mtime_s, a->mtime_ns),
				 .ctime = ts(a->ctime_s, a->ctime_ns)};
}

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
	pthread_mutex_init(&t->slab.lock, NULL);
	t->root = inode_new(&t->slab, root_fh);
	if (!t->root) {
		pthread_mutex_destroy(&t->slab.lock);
		free(t->buckets);
		free(t);
		return -ENOMEM;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->closed_lock, NULL);
	*out = t;
	return 0;
}

static void inode_free(struct inode_slab *sl, struct sfs_inode *ino)
{
	if (ino->pf)
		sfs_pf_file_unref(ino->pf);
	if (from_slab(ino->fh_len))
		slab_free(sl, ino);
	else
		free(ino);
}

void sfs_inode_table_close(sfs_inode_table *t)
{
	if (!t)
		return;
	for (size_t b = 0; b < t->n_buckets; b++)
		for (struct sfs_inode *i = t->buckets[b], *next; i; i = next) {
			next = i->hash_next;
			inode_free(&t->slab, i);
		}
	for (struct sfs_inode *i = t->orphans, *next; i; i = next) {
		next = i->hash_next;
		inode_free(&t->slab, i);
	}
	inode_free(&t->slab, t->root);
	if (t->slab.spare)
		slab_page_unmap(t->slab.spare);
	pthread_mutex_destroy(&t->slab.lock);
	free(t->buckets);
	free(t->closed);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->closed_lock);
	free(t);
}

struct sfs_inode *sfs_inode_root(sfs_inode_table *t) { return t->root; }

/* After n_inodes changed: whether closes are queued now. Caller holds lock
 * (or the FUSE loop has not started). */
static void count_changed(sfs_inode_table *t)
{
	bool queued = t->closed_cap && t->n_inodes >= t->closed_from;

	if (queued != __atomic_load_n(&t->closing_queued, __ATOMIC_RELAXED))
		__atomic_store_n(&t->closing_queued, queued, __ATOMIC_RELAXED);
	if (t->n_inodes < t->kick_at)
		t->kicked = false;
}

/* Whether the caller, after dropping lock, must call t->kick (once per
 * crossing of kick_at). Caller holds lock. */
static bool kick_due(sfs_inode_table *t)
{
	if (!t->kick || t->kicked || t->n_inodes < t->kick_at)
		return false;
	t->kicked = true;
	return true;
}

/* The inode of a key, if the table still has it. Caller holds lock. */
static struct sfs_inode *find_locked(sfs_inode_table *t, const struct inode_key *k)
{
	struct sfs_inode *ino = t->buckets[bucket_of(t, k->fsid, k->fileid)];

	while (ino && (ino->fileid != k->fileid || ino->fsid != k->fsid))
		ino = ino->hash_next;
	return ino;
}

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
	if (fh_is(t->root, fh)) {
		sfs_inode_set_attr(t->root, attr, now_ms);
		return t->root;
	}
	pthread_mutex_lock(&t->lock);
	ino = find_locked(t, &(struct inode_key){attr->fsid, attr->fileid});
	if (ino && !fh_is(ino, fh)) {
		/* Same fileid, new handle: the server reused the inode number for
		 * a new file. Unhook the old one; the kernel's references to it
		 * stay valid until forgotten, and it is freed then. */
		struct sfs_inode **p = &t->buckets[bucket_of(t, attr->fsid, attr->fileid)];
		while (*p != ino)
			p = &(*p)->hash_next;
		*p = ino->hash_next;
		ino->orphaned = true; /* never matches again; freed on forget */
		ino->hash_next = t->orphans;
		t->orphans = ino;
		ino = NULL;
	}
	if (!ino) {
		ino = inode_new(&t->slab, fh);
		if (!ino) {
			pthread_mutex_unlock(&t->lock);
			return NULL;
		}
		ino->fsid = attr->fsid;
		ino->fileid = attr->fileid;
		size_t b = bucket_of(t, attr->fsid, attr->fileid);
		ino->hash_next = t->buckets[b];
		t->buckets[b] = ino;
		t->n_inodes++;
		t->bytes += inode_size(ino->fh_len);
		count_changed(t);
		maybe_grow(t);
	}
	ino->nlookup++;
	bool kick = kick_due(t);
	pthread_mutex_unlock(&t->lock);
	sfs_inode_set_attr(ino, attr, now_ms);
	if (kick)
		t->kick();
	return ino;
}

/* Whether the kernel may be asked to let ino go now: a file or symlink with
 * no open handle here (a directory's dentry stays while it has children,
 * and an open file's is in use: the kernel would keep both anyway) and
 * referenced clear. A picked inode gets referenced set, so that one call
 * never picks it twice. clock: the CLOCK step, where a set referenced is
 * cleared instead (its second chance). */
static bool prune_candidate(struct sfs_inode *ino, bool clock)
{
	bool pick = false;

	sfs_inode_lock(ino);
	if (ino->n_open == 0 && ino->attr.type != S_IFDIR) {
		if (!ino->referenced) {
			pick = true;
			ino->referenced = 1; /* not picked again in this call */
		} else if (clock) {
			ino->referenced = 0; /* its second chance */
		}
	}
	sfs_inode_unlock(ino);
	return pick;
}

int sfs_inode_prune_enable(sfs_inode_table *t, const struct sfs_inode_prune_conf *conf)
{
	if (conf->ring) {
		t->closed = calloc(conf->ring, sizeof(*t->closed));
		if (!t->closed)
			return -ENOMEM;
		t->closed_cap = conf->ring;
	}
	t->closed_from = conf->from;
	t->kick_at = conf->kick_at;
	t->kick = conf->kick;
	count_changed(t);
	return 0;
}

void sfs_inode_closed(sfs_inode_table *t, const struct sfs_inode *ino)
{
	if (!__atomic_load_n(&t->closing_queued, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&t->closed_lock);
	size_t at = (t->closed_head + t->closed_n) % t->closed_cap;
	t->closed[at] = (struct inode_key){ino->fsid, ino->fileid};
	if (t->closed_n < t->closed_cap)
		t->closed_n++;
	else
		t->closed_head = (t->closed_head + 1) % t->closed_cap; /* dropped the oldest */
	pthread_mutex_unlock(&t->closed_lock);
}

/* Up to max keys off the front of the closed queue, into keys. */
static size_t closed_take(sfs_inode_table *t, struct inode_key *keys, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&t->closed_lock);
	for (; n < max && t->closed_n; n++, t->closed_n--) {
		keys[n] = t->closed[t->closed_head];
		t->closed_head = (t->closed_head + 1) % t->closed_cap;
	}
	pthread_mutex_unlock(&t->closed_lock);
	return n;
}

/* Victims from the closed queue, added to ids from *n up to max: each one
 * still in the table, still closed and not looked up since (referenced
 * clear). Caller holds lock. */
static void pick_closed(sfs_inode_table *t, uint64_t *ids, size_t *n, size_t max)
{
	struct inode_key keys[256];

	while (*n < max) {
		size_t want = max - *n < 256 ? max - *n : 256;
		size_t got = closed_take(t, keys, want);
		for (size_t k = 0; k < got; k++) {
			struct sfs_inode *ino = find_locked(t, &keys[k]);
			if (ino && prune_candidate(ino, false))
				ids[(*n)++] = (uint64_t)(uintptr_t)ino;
		}
		if (got < want)
			break; /* the queue is empty */
	}
}

/* Buckets scanned per hold of the table lock: lookups wait at most this. */
#define PRUNE_SCAN_BUCKETS 1024

size_t sfs_inode_prune_pick(sfs_inode_table *t, uint64_t target, uint64_t *ids, size_t max)
{
	size_t n = 0;

	pthread_mutex_lock(&t->lock);
	uint64_t excess = t->n_inodes > target ? t->n_inodes - target : 0;
	if (excess < max)
		max = (size_t)excess;
	pick_closed(t, ids, &n, max);
	/* Two turns of the hand at most: the first clears what was looked up
	 * since the last pass, the second takes it if it was not again. */
	size_t left = t->n_buckets * 2;
	while (n < max && left) {
		for (size_t k = 0; k < PRUNE_SCAN_BUCKETS && n < max && left; k++, left--) {
			size_t b = t->hand++ & (t->n_buckets - 1);
			for (struct sfs_inode *i = t->buckets[b]; i && n < max; i = i->hash_next)
				if (prune_candidate(i, true))
					ids[n++] = (uint64_t)(uintptr_t)i;
		}
		pthread_mutex_unlock(&t->lock); /* let lookups in between */
		pthread_mutex_lock(&t->lock);
	}
	pthread_mutex_unlock(&t->lock);
	return n;
}

void sfs_inode_forget(sfs_inode_table *t, struct sfs_inode *ino, uint64_t n)
{
	if (ino == t->root || sfs_inode_kind(ino) != SFS_INODE_NFS)
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
		t->bytes -= inode_size(ino->fh_len);
		count_changed(t);
	}
	pthread_mutex_unlock(&t->lock);
	inode_free(&t->slab, ino);
}

void sfs_inode_set_attr(struct sfs_inode *ino, const struct sfs_attr *attr, uint64_t now_ms)
{
	struct sfs_inode_attr a = {.size = attr->size,
				   .used = attr->used,
				   .atime_s = attr->atime.tv_sec,
				   .mtime_s = attr->mtime.tv_sec,
				   .ctime_s = attr->ctime.tv_sec,
				   .atime_ns = (uint32_t)attr->atime.tv_nsec,
				   .mtime_ns = (uint32_t)attr->mtime.tv_nsec,
				   .ctime_ns = (uint32_t)attr->ctime.tv_nsec,
				   .type = attr->type,
				   .mode = attr->mode,
				   .nlink = attr->nlink,
				   .uid = attr->uid,
				   .gid = attr->gid,
				   .rdev_major = attr->rdev_major,
				   .rdev_minor = attr->rdev_minor};

	sfs_inode_lock(ino);
	if (now_ms >= ino->attr_time_ms) { /* never back to older news (a listing's) */
		ino->attr = a;
		ino->attr_time_ms = now_ms;
	}
	ino->referenced = 1;
	sfs_inode_unlock(ino);
}

uint64_t sfs_inode_bytes(sfs_inode_table *t)
{
	pthread_mutex_lock(&t->lock);
	uint64_t n = t->bytes;
	pthread_mutex_unlock(&t->lock);
	return n;
}

uint64_t sfs_inode_count(sfs_inode_table *t)
{
	pthread_mutex_lock(&t->lock);
	uint64_t n = t->n_inodes;
	pthread_mutex_unlock(&t->lock);
	return n;
}
