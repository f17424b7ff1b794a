// SPDX-License-Identifier: Apache-2.0
/* passthrough — see passthrough.h. */
#include "passthrough.h"
#include "../../cache/common/htab.h"
#include "../../cache/common/log.h"
#include "../../cache/prefetch/prefetch.h"
#include "../../cache/store/store.h"
#include "fusedev.h"
#include "../inode/inode.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One inode's hold (sfs_pt_start): the store object of the version its
 * passthrough opens read, or, adopted with that version evicted by the dead
 * server, the bytes counted as held in its place. */
struct pt_hold {
	const struct sfs_inode *ino;
	sfs_store_obj *obj;    /* referenced; NULL: orphan_bytes instead */
	uint64_t orphan_bytes; /* counted by sfs_store_held_add */
	struct pt_hold *next;  /* the table's chain */
};

static uint64_t ino_hash(const struct sfs_inode *i)
{
	uint64_t x = (uint64_t)(uintptr_t)i;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	return x ^ (x >> 33);
}
static uint64_t hold_hash(const struct pt_hold *h) { return ino_hash(h->ino); }

/* The holds by inode: one node per inode with passthrough opens. */
SFS_HTAB_DEFINE(pt_hold_table, struct pt_hold, next, hold_hash, 2);
#define PT_HOLD_BUCKETS0 64 /* the table doubles as inodes are held */

static void add(uint64_t *c, int64_t n) { __atomic_fetch_add(c, (uint64_t)n, __ATOMIC_RELAXED); }

void sfs_pt_start(struct sfs_pt *pt, sfs_store *store)
{
	pt->store = store;
	pthread_mutex_init(&pt->hold_lock, NULL);
	pt->holds = malloc(sizeof(*pt->holds));
	if (pt->holds && pt_hold_table_init(pt->holds, PT_HOLD_BUCKETS0) < 0) {
		free(pt->holds);
		pt->holds = NULL;
	}
	if (!pt->holds)
		sfs_log(SFS_LOG_WARN, "fuse",
			"passthrough: no memory for the table of held versions: versions "
			"evicted under passthrough readers are not counted as held");
}

/* Where i's hold is, or would be linked, on its chain. Caller holds
 * hold_lock; pt->holds is set. */
static struct pt_hold **hold_slot(struct sfs_pt *pt, const struct sfs_inode *i)
{
	struct pt_hold **p = pt_hold_table_head(pt->holds, ino_hash(i));

	while (*p && (*p)->ino != i)
		p = &(*p)->next;
	return p;
}

/* Hold obj (referenced by the caller, handed over) or orphan bytes for i.
 * An inode has one hold: a second one is dropped. */
static void hold_add(struct sfs_pt *pt, const struct sfs_inode *i, sfs_store_obj *obj,
		     uint64_t orphan_bytes)
{
	struct pt_hold *h = pt->holds ? malloc(sizeof(*h)) : NULL;

	if (h) {
		*h = (struct pt_hold){.ino = i, .obj = obj, .orphan_bytes = orphan_bytes};
		pthread_mutex_lock(&pt->hold_lock);
		struct pt_hold **p = hold_slot(pt, i);
		if (!*p) {
			pt_hold_table_insert_at(pt->holds, p, h);
			h = NULL;
		}
		pthread_mutex_unlock(&pt->hold_lock);
		if (!h)
			return;
	}
	if (obj) /* ENOMEM, or held already: unheld is only unaccounted */
		sfs_store_obj_put(obj);
	else
		sfs_store_held_add(pt->store, -(int64_t)orphan_bytes);
	free(h);
}

/* i's last passthrough open was released: its hold, out of the table (NULL:
 * none). Caller holds i's lock, so that no new first open of i adds its own
 * before this one is out. */
static struct pt_hold *hold_take(struct sfs_pt *pt, const struct sfs_inode *i)
{
	if (!pt->holds)
		return NULL;
	pthread_mutex_lock(&pt->hold_lock);
	struct pt_hold **p = hold_slot(pt, i), *h = *p;
	if (h)
		pt_hold_table_unlink(pt->holds, p);
	pthread_mutex_unlock(&pt->hold_lock);
	return h;
}

/* Let a taken hold go: the store may free its version now. No lock held. */
static void hold_free(struct sfs_pt *pt, struct pt_hold *h)
{
	if (!h)
		return;
	if (h->obj)
		sfs_store_obj_put(h->obj);
	else if (h->orphan_bytes)
		sfs_store_held_add(pt->store, -(int64_t)h->orphan_bytes);
	free(h);
}

void sfs_pt_close(struct sfs_pt *pt)
{
	if (!pt->holds)
		return;
	for (size_t b = 0; b < pt->holds->n_buckets; b++)
		while (pt->holds->buckets[b]) {
			struct pt_hold *h = pt->holds->buckets[b];
			pt_hold_table_unlink(pt->holds, &pt->holds->buckets[b]);
			hold_free(pt, h);
		}
	pt_hold_table_fini(pt->holds);
	free(pt->holds);
	pt->holds = NULL;
	pthread_mutex_destroy(&pt->hold_lock);
}

void sfs_pt_adopted(struct sfs_pt *pt, struct sfs_inode *i)
{
	sfs_inode_lock(i);
	bool known = i->pt_opens && i->have_opened;
	struct sfs_file_version v = {.fsid = i->fsid,
				     .fileid = i->fileid,
				     .size = i->opened.size,
				     .mtime_s = i->opened.mtime_s,
				     .mtime_ns = i->opened.mtime_ns,
				     .ctime_s = i->opened.ctime_s,
				     .ctime_ns = i->opened.ctime_ns,
				     .dataset = __atomic_load_n(&i->dataset, __ATOMIC_RELAXED)};
	sfs_inode_unlock(i);
	if (!pt->store || !known)
		return;
	if (sfs_store_cached_bytes(pt->store, &v) == v.size) {
		sfs_store_obj *obj = sfs_store_obj_get(pt->store, &v);
		if (obj)
			hold_add(pt, i, obj, 0);
	} else { /* evicted by the dead server: its file lives on in the kernel */
		sfs_store_held_add(pt->store, (int64_t)v.size);
		hold_add(pt, i, NULL, v.size);
	}
}

/* Why the kernel refuses backing files, for the log. */
static const char *backing_refusal(int err)
{
	return err == -EPERM   ? "the daemon lacks CAP_SYS_ADMIN (not root, or in a user namespace)"
	       : err == -ELOOP ? "cache_dir is on a stacked filesystem"
			       : "see dmesg";
}

void sfs_pt_probe(struct sfs_pt *pt)
{
	bool on = pt->wanted && sfs_fusedev_passthrough();
	int id = -ENOENT;

	if (on && pt->probe_fd >= 0) {
		id = sfs_fusedev_backing_open(pt->probe_fd);
		if (id > 0)
			sfs_fusedev_backing_close(id);
		on = id > 0;
	}
	if (pt->probe_fd >= 0)
		close(pt->probe_fd);
	pt->probe_fd = -1;
	__atomic_store_n(&pt->available, on, __ATOMIC_RELAXED);
	if (on)
		sfs_log(SFS_LOG_INFO, "fuse", "passthrough: cached files are read by the kernel");
	else if (pt->wanted && !sfs_fusedev_passthrough())
		sfs_log(SFS_LOG_WARN, "fuse",
			"passthrough off: this kernel does not offer FUSE passthrough (Linux 6.9+ "
			"with CONFIG_FUSE_PASSTHROUGH): cached files are read through the daemon");
	else if (pt->wanted)
		sfs_log(SFS_LOG_WARN, "fuse",
			"passthrough off: the kernel refused a backing file: %s (%s): cached "
			"files are read through the daemon",
			strerror(-id), backing_refusal(id));
}

/* The choice under the inode lock; *join: the existing backing id (0 with
 * SFS_PT_OPEN: register one). ready: pf's version is whole and verified in
 * the cache. */
static enum sfs_pt_mode pt_choose(struct sfs_inode *i, bool eligible, bool ready, int *join)
{
	*join = 0;
	if (i->pt_opens) {
		if (!ready)
			i->pt_stale = 1; /* evicted (or the cache went away) since */
		if (i->pt_stale || i->pt_opens == UINT16_MAX)
			return SFS_PT_STALE;
		if (!i->backing_id)
			return SFS_PT_NO; /* being registered: the caller waits */
		i->pt_opens++;
		*join = (int)i->backing_id;
		return SFS_PT_OPEN;
	}
	if (eligible && ready && !i->pt_blocked && i->n_open == 1) {
		i->pt_opens = 1; /* reserved: others wait for the id */
		i->backing_id = 0;
		return SFS_PT_OPEN;
	}
	return SFS_PT_NO;
}

/* pt_choose, waiting out another open's registration (microseconds: an
 * open() and an ioctl; bounded at 2 s, then ESTALE). */
static enum sfs_pt_mode pt_choose_wait(struct sfs_inode *i, bool eligible, bool ready, int *join)
{
	for (int tries = 0;; tries++) {
		sfs_inode_lock(i);
		enum sfs_pt_mode m = pt_choose(i, eligible, ready, join);
		bool pending = m == SFS_PT_NO && i->pt_opens;
		sfs_inode_unlock(i);
		if (!pending)
			return m;
		if (tries == 2000)
			return SFS_PT_STALE;
		usleep(1000);
	}
}

/* Register the backing file of pf's version (size bytes); 0 or -errno. */
static int pt_register(struct sfs_pt *pt, sfs_pf_file *pf, uint64_t size, int *backing_id)
{
	int fd = sfs_pf_file_backing_fd(pf);

	if (fd < 0)
		return fd;
	/* A shard read whole: its pages are asked for now, all at once, as the
	 * daemon's own prefetch would fetch it (the kernel's readahead alone
	 * keeps one window in flight). */
	if (size <= pt->willneed_max)
		posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
	int id = sfs_fusedev_backing_open(fd);
	close(fd);
	if (id < 0) {
		add(&pt->st.backing_errors, 1);
		/* Refused for good (capabilities do not come back): off, as
		 * though the probe had failed, so that no later open tries. */
		if (id == -EPERM)
			__atomic_store_n(&pt->available, false, __ATOMIC_RELAXED);
		if (!__atomic_exchange_n(&pt->logged_error, true, __ATOMIC_RELAXED))
			sfs_log(SFS_LOG_WARN, "fuse",
				"passthrough: the kernel refused a backing file: %s (%s); such "
				"files are read through the daemon",
				strerror(-id), backing_refusal(id));
		return id;
	}
	*backing_id = id;
	add(&pt->st.backing_files, 1);
	return 0;
}

enum sfs_pt_mode sfs_pt_open(struct sfs_pt *pt, struct sfs_inode *i, sfs_pf_file *pf,
			     const struct sfs_file_version *v, bool eligible, int *backing_id)
{
	int join = 0, rc = -ENOENT;
	uint64_t size = v->size;

	if (!__atomic_load_n(&pt->available, __ATOMIC_RELAXED))
		return SFS_PT_NO;
	/* Whole and verified? (no fd: most opens of a warm file join) */
	rc = sfs_pf_file_backing_check(pf);
	if (rc == -EAGAIN && eligible)
		add(&pt->st.unverified, 1);
	enum sfs_pt_mode m = pt_choose_wait(i, eligible, rc == 0, &join);
	if (m == SFS_PT_OPEN && !join) {
		rc = pt_register(pt, pf, size, &join);
		sfs_inode_lock(i);
		if (rc == 0)
			i->backing_id = (uint32_t)join;
		else
			i->pt_opens = 0; /* nobody joined a reservation without an id */
		sfs_inode_unlock(i);
		if (rc < 0)
			m = SFS_PT_NO;
		sfs_store_obj *obj = rc == 0 && pt->store ? sfs_store_obj_get(pt->store, v) : NULL;
		if (obj) /* the first open: the version is held until the last release */
			hold_add(pt, i, obj, 0);
	}
	if (m == SFS_PT_OPEN) {
		*backing_id = join;
		add(&pt->st.opens, 1);
		add(&pt->st.open_bytes, (int64_t)size);
	} else if (m == SFS_PT_STALE) {
		add(&pt->st.stale_opens, 1);
	}
	return m;
}

void sfs_pt_release(struct sfs_pt *pt, struct sfs_inode *i)
{
	int drop = 0;
	struct pt_hold *h = NULL;

	sfs_inode_lock(i);
	if (i->pt_opens && --i->pt_opens == 0) {
		drop = (int)i->backing_id;
		i->backing_id = 0;
		i->pt_stale = 0;
		h = hold_take(pt, i);
	}
	sfs_inode_unlock(i);
	if (drop)
		sfs_fusedev_backing_close(drop);
	hold_free(pt, h);
}

void sfs_pt_get_stats(struct sfs_pt *pt, struct sfs_pt_stats *out)
{
#define LOAD(x) out->x = __atomic_load_n(&pt->st.x, __ATOMIC_RELAXED)
	LOAD(opens);
	LOAD(open_bytes);
	LOAD(stale_opens);
	LOAD(unverified);
	LOAD(backing_errors);
	LOAD(backing_files);
#undef LOAD
}
