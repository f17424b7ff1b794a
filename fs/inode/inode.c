// SPDX-License-Identifier: Apache-2.0
/*
 * inode — open hash of inodes keyed by (fsid, fileid). See inode.h.
 */
#include "inode.h"
#include "../../cache/common/htab.h"
#include "inode_slab.h"

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

/*
 * Inodes live in slots of a slab of their own (inode_slab.h): pages of
 * fixed-size slots inside one shared-memory region, a size class for
 * handles up to SLAB_FH_SMALL bytes and one for the rest (up to
 * SFS_FH_MAX). The kernel's inodes churn by the hundred thousand (a walk,
 * inode_max's pruning), and from malloc they lay among the daemon's
 * short-lived buffers and listings, so what FORGETs freed stayed in pages
 * that other live chunks pinned. A node id is the slot's offset in the
 * region, so that a process that adopts the region answers for the ids the
 * kernel holds (sfs_inode_table_adopt).
 */
#define SLAB_FH_SMALL 36u

/* The bucket of an inode keyed (fsid, fileid): the low bits of this. */
static uint64_t key_hash(uint64_t fsid, uint64_t fileid)
{
	return ((fileid ^ (fsid * 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull) >> 17;
}

static uint64_t inode_hash(const struct sfs_inode *ino) { return key_hash(ino->fsid, ino->fileid); }

SFS_HTAB_DEFINE(inode_by_key, struct sfs_inode, hash_next, inode_hash, 2);

struct sfs_inode_table {
	struct sfs_inode_slab slab;
	pthread_mutex_t lock;
	struct inode_by_key by_key; /* protected by lock: every inode but root and orphans */
	size_t n_inodes;	    /* protected by lock: in by_key and orphans */
	uint64_t bytes;		    /* protected by lock: of the inodes in by_key and orphans */
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
	/* Adopted inodes with passthrough opens (slab ids), from adopt until
	 * sfs_inode_each_adopted_passthrough hands them out once. */
	uint64_t *adopted_pt;
	size_t n_adopted_pt, cap_adopted_pt;
	uint64_t kick_at;   /* set before the FUSE loop, then read-only */
	void (*kick)(void); /* set before the FUSE loop, then read-only */
	bool kicked;	    /* protected by lock: kick called, not below kick_at since */
};

/* 171 before passthrough's backing id and open count (6 bytes: they must
 * live where a resumed server finds them). */
_Static_assert(sizeof(void *) != 8 || offsetof(struct sfs_inode, fh) <= 177,
	       "an inode is paid for every file the kernel holds: keep it small");
_Static_assert(SFS_FH_MAX <= UINT8_MAX, "fh_len holds a handle's length");

/* The bytes an inode with a handle of fh_len takes (never less than the
 * struct with its tail padding). */
static size_t inode_size(uint32_t fh_len)
{
	size_t n = offsetof(struct sfs_inode, fh) + fh_len;
	return n > sizeof(struct sfs_inode) ? n : sizeof(struct sfs_inode);
}

/* Slot sizes of the two classes, and the fingerprint of what a slot holds
 * that an adopted region must match (another build may order the fields
 * otherwise). */
static const struct sfs_inode_slab_conf slab_conf = {
    .slot_bytes = {(offsetof(struct sfs_inode, fh) + SLAB_FH_SMALL + 7) & ~(size_t)7,
		   (offsetof(struct sfs_inode, fh) + SFS_FH_MAX + 7) & ~(size_t)7},
    .layout = ((uint64_t)sizeof(struct sfs_inode) << 48) |
	      ((uint64_t)offsetof(struct sfs_inode, fh) << 32) |
	      ((uint64_t)offsetof(struct sfs_inode, nlookup) << 24) |
	      ((uint64_t)offsetof(struct sfs_inode, attr) << 16) |
	      ((uint64_t)offsetof(struct sfs_inode, dataset) << 8) | 1u,
};

/* A new inode for handle fh (not empty: virtual inodes are not in the
 * slab), live once fh_len is set. NULL on ENOMEM. */
static struct sfs_inode *inode_new(struct sfs_inode_slab *sl, const struct sfs_fh *fh)
{
	struct sfs_inode *ino = sfs_inode_slab_alloc(sl, inode_size(fh->len));

	if (ino) {
		memcpy(ino->fh, fh->data, fh->len);
		__atomic_store_n(&ino->fh_len, (uint8_t)fh->len, __ATOMIC_RELEASE);
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

/* A table around an opened or adopted slab: buckets and locks. Returns
 * NULL on ENOMEM. */
static sfs_inode_table *table_new(void)
{
	sfs_inode_table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	if (inode_by_key_init(&t->by_key, 1024) < 0) {
		free(t);
		return NULL;
	}
	pthread_mutex_init(&t->lock, NULL);
	pthread_mutex_init(&t->closed_lock, NULL);
	return t;
}

static void table_free(sfs_inode_table *t)
{
	inode_by_key_fini(&t->by_key);
	free(t->closed);
	free(t->adopted_pt);
	pthread_mutex_destroy(&t->lock);
	pthread_mutex_destroy(&t->closed_lock);
	free(t);
}

int sfs_inode_table_open(const struct sfs_fh *root_fh, sfs_inode_table **out)
{
	sfs_inode_table *t = table_new();
	int err;

	if (!t)
		return -ENOMEM;
	if ((err = sfs_inode_slab_open(&t->slab, &slab_conf)) < 0)
		goto err_table;
	t->root = inode_new(&t->slab, root_fh);
	if (!t->root) {
		err = -ENOMEM;
		goto err_slab;
	}
	sfs_inode_slab_set_root_id(&t->slab, sfs_inode_slab_id(&t->slab, t->root));
	*out = t;
	return 0;
err_slab:
	sfs_inode_slab_close(&t->slab);
err_table:
	table_free(t);
	return err;
}

static struct sfs_inode *find_locked(sfs_inode_table *t, const struct inode_key *k);

/* Note an adopted inode with passthrough opens for
 * sfs_inode_each_adopted_passthrough. False on ENOMEM. */
static bool remember_passthrough(sfs_inode_table *t, const struct sfs_inode *ino)
{
	if (t->n_adopted_pt == t->cap_adopted_pt) {
		size_t cap = t->cap_adopted_pt ? 2 * t->cap_adopted_pt : 64;
		uint64_t *a = realloc(t->adopted_pt, cap * sizeof(*a));
		if (!a)
			return false;
		t->adopted_pt = a;
		t->cap_adopted_pt = cap;
	}
	t->adopted_pt[t->n_adopted_pt++] = sfs_inode_slab_id(&t->slab, ino);
	return true;
}

/* sfs_inode_slab_adopt's keep(): whether a slot of the adopted region holds
 * an inode the kernel may still refer to (a handle, and lookups, or the
 * root), which then goes into the table; what meant something only to the
 * other process (its pointers, its opens) is reset. A slot the other
 * process was filling or freeing when it stopped has fh_len 0 or nlookup 0
 * and is freed. */
static bool adopt_slot(void *slot, void *arg)
{
	sfs_inode_table *t = arg;
	struct sfs_inode *ino = slot;
	bool root = sfs_inode_slab_id(&t->slab, slot) == sfs_inode_slab_root_id(&t->slab);

	if (ino->fh_len == 0 || ino->fh_len > SFS_FH_MAX || (!root && ino->nlookup == 0))
		return false;
	ino->pf = NULL;
	ino->n_open = 0;
	ino->pt_blocked = ino->pt_opens > 0 || ino->have_opened; /* opens unknown */
	if (ino->pt_opens)
		(void)remember_passthrough(t, ino); /* ENOMEM: its version goes unheld */
	ino->hash_next = NULL;
	if (root) {
		t->root = ino;
		return true;
	}
	struct inode_key k = {ino->fsid, ino->fileid};
	if (!ino->orphaned && find_locked(t, &k))
		ino->orphaned = true; /* two for one key: a reuse cut short */
	if (ino->orphaned) {
		ino->hash_next = t->orphans;
		t->orphans = ino;
	} else {
		inode_by_key_insert(&t->by_key, ino);
	}
	t->n_inodes++;
	t->bytes += inode_size(ino->fh_len);
	return true;
}

int sfs_inode_table_adopt(int region_fd, const struct sfs_fh *root_fh, sfs_inode_table **out)
{
	sfs_inode_table *t = table_new();
	int err;

	if (!t)
		return -ENOMEM;
	if ((err = sfs_inode_slab_adopt(&t->slab, &slab_conf, region_fd)) < 0)
		goto err_table;
	struct sfs_inode *root = sfs_inode_slab_at(&t->slab, sfs_inode_slab_root_id(&t->slab));
	if (!root || !root->fh_len || !fh_is(root, root_fh)) {
		err = -ESTALE; /* another export's inodes: leave them as they are */
		goto err_slab;
	}
	/* Single-threaded until returned: find_locked and the inserts need no lock. */
	sfs_inode_slab_rebuild(&t->slab, adopt_slot, t);
	*out = t;
	return 0;
err_slab:
	sfs_inode_slab_close(&t->slab);
err_table:
	table_free(t);
	return err;
}

void sfs_inode_each_adopted_passthrough(sfs_inode_table *t,
					void (*fn)(struct sfs_inode *ino, void *arg), void *arg)
{
	for (size_t k = 0; k < t->n_adopted_pt; k++) {
		struct sfs_inode *ino = sfs_inode_slab_at(&t->slab, t->adopted_pt[k]);
		if (ino)
			fn(ino, arg);
	}
	free(t->adopted_pt);
	t->adopted_pt = NULL;
	t->n_adopted_pt = t->cap_adopted_pt = 0;
}

int sfs_inode_table_region_fd(const sfs_inode_table *t) { return t->slab.fd; }

int sfs_inode_table_check_region(int region_fd)
{
	struct sfs_inode_slab sl;
	int rc = sfs_inode_slab_adopt(&sl, &slab_conf, region_fd);

	if (rc == 0)
		sfs_inode_slab_close(&sl);
	return rc;
}

uint64_t sfs_inode_id(const sfs_inode_table *t, const struct sfs_inode *ino)
{
	return sfs_inode_slab_id(&t->slab, ino);
}

struct sfs_inode *sfs_inode_by_id(const sfs_inode_table *t, uint64_t id)
{
	struct sfs_inode *ino = sfs_inode_slab_at(&t->slab, id);

	return ino && __atomic_load_n(&ino->fh_len, __ATOMIC_ACQUIRE) ? ino : NULL;
}

/* Free an inode: its fetch state, then its slot, made not live first. */
static void inode_free(struct sfs_inode_slab *sl, struct sfs_inode *ino)
{
	if (ino->pf)
		sfs_pf_file_unref(ino->pf);
	__atomic_store_n(&ino->fh_len, 0, __ATOMIC_RELEASE);
	sfs_inode_slab_free(sl, ino);
}

void sfs_inode_table_close(sfs_inode_table *t)
{
	if (!t)
		return;
	for (size_t b = 0; b < t->by_key.n_buckets; b++)
		for (struct sfs_inode *i = t->by_key.buckets[b]; i; i = i->hash_next)
			if (i->pf)
				sfs_pf_file_unref(i->pf);
	for (struct sfs_inode *i = t->orphans; i; i = i->hash_next)
		if (i->pf)
			sfs_pf_file_unref(i->pf);
	if (t->root->pf)
		sfs_pf_file_unref(t->root->pf);
	sfs_inode_slab_close(&t->slab); /* every slot */
	table_free(t);
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
	struct sfs_inode *ino = *inode_by_key_head(&t->by_key, key_hash(k->fsid, k->fileid));

	while (ino && (ino->fileid != k->fileid || ino->fsid != k->fsid))
		ino = ino->hash_next;
	return ino;
}

/* Whether ino must give way to a new inode for the same file: its
 * passthrough opens read a backing file no new open may join (another
 * version, or one evicted since: passthrough.h), and the kernel allows no
 * other open beside them. A new node id makes the kernel take a new inode
 * for the name. Caller holds the table lock (the inode lock nests in it). */
static bool pt_replaced(const struct sfs_inode *ino, const struct sfs_attr *a)
{
	sfs_inode_lock(ino);
	const struct sfs_inode_version *o = &ino->opened;
	bool same = o->size == a->size && o->mtime_s == a->mtime.tv_sec &&
		    o->mtime_ns == (uint32_t)a->mtime.tv_nsec && o->ctime_s == a->ctime.tv_sec &&
		    o->ctime_ns == (uint32_t)a->ctime.tv_nsec;
	bool replaced = ino->pt_opens && (ino->pt_stale || !same);
	sfs_inode_unlock(ino);
	return replaced;
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
	if (ino && (!fh_is(ino, fh) || pt_replaced(ino, attr))) {
		/* Same fileid, new handle: the server reused the inode number for
		 * a new file (or passthrough readers hold an older version of
		 * it). Unhook the old one; the kernel's references to it stay
		 * valid until forgotten, and it is freed then. */
		inode_by_key_remove(&t->by_key, ino);
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
		inode_by_key_insert(&t->by_key, ino);
		t->n_inodes++;
		t->bytes += inode_size(ino->fh_len);
		count_changed(t);
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
				ids[(*n)++] = sfs_inode_id(t, ino);
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
	size_t left = t->by_key.n_buckets * 2;
	while (n < max && left) {
		for (size_t k = 0; k < PRUNE_SCAN_BUCKETS && n < max && left; k++, left--) {
			size_t b = t->hand++ & (t->by_key.n_buckets - 1);
			for (struct sfs_inode *i = t->by_key.buckets[b]; i && n < max;
			     i = i->hash_next)
				if (prune_candidate(i, true))
					ids[n++] = sfs_inode_id(t, i);
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
	bool found;
	if (ino->orphaned) {
		struct sfs_inode **p = &t->orphans;
		while (*p && *p != ino)
			p = &(*p)->hash_next;
		found = *p != NULL;
		if (found)
			*p = ino->hash_next;
	} else {
		found = inode_by_key_remove(&t->by_key, ino);
	}
	if (found) {
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
