/* SPDX-License-Identifier: Apache-2.0 */
/*
 * inode — the FUSE inode table: FUSE node id <-> NFS file handle, with the
 * attributes last seen and the lookup count the kernel holds.
 *
 * Owns: inode lifetime (created by lookup/readdirplus, freed when the
 * kernel's lookup count drops to zero via FORGET), the (fsid, fileid) index
 * that gives one file one node id, cached attributes and their expiry.
 * The FUSE node id of an inode is its slot's offset in the table's
 * shared-memory region (inode_slab.h), which outlives the process: a
 * process that adopts the region (sfs_inode_table_adopt: a daemon started
 * again on the same connection) finds each inode the kernel holds under the
 * id the kernel knows. The root answers to FUSE_ROOT_ID too (fs/fs.h).
 * Memory is per inode the kernel remembers (struct sfs_inode and its
 * handle in a 216-byte slab slot, 248 for a handle over 36 bytes, ~2 bucket
 * pointers), never per byte; a slab page all of whose inodes were forgotten
 * goes back to the system.
 * Does not own: the NFS calls that fill the attributes (fs/ops), the slab
 * memory (inode_slab.h), an inode's prefetch state (cache/prefetch: the
 * inode only holds a reference).
 *
 * Threading: the table lock protects the index and every nlookup; each
 * inode's lock (sfs_inode_lock) protects its attr fields and open state.
 * Order: table lock, then inode lock (never the reverse).
 */
#ifndef SFS_INODE_H
#define SFS_INODE_H

#include "../../cache/nfs/origin.h"
#include "../../cache/prefetch/prefetch.h"

#include <pthread.h>
#include <stdint.h>

enum sfs_inode_kind {
	SFS_INODE_NFS,
	SFS_INODE_CTL_DIR, /* MOUNTPOINT/.shardfs */
	SFS_INODE_STATS,   /* MOUNTPOINT/.shardfs/stats */
};
#define SFS_INODE_CTL_DIR_FILEID (UINT64_MAX - 1) /* the virtual inodes' st_ino */
#define SFS_INODE_STATS_FILEID	 (UINT64_MAX - 2)

/* What tells two versions of one file apart besides its fsid and fileid
 * (the inode's own): the rest of its sfs_file_version identity. */
struct sfs_inode_version {
	uint64_t size;
	int64_t mtime_s, ctime_s;
	uint32_t mtime_ns, ctime_ns;
};

/* The attributes an inode keeps: an sfs_attr without the (fsid, fileid)
 * that key the inode, its timestamps as seconds and nanoseconds. 80 bytes
 * (an sfs_attr is 112). */
struct sfs_inode_attr {
	uint64_t size, used;
	int64_t atime_s, mtime_s, ctime_s;
	uint32_t atime_ns, mtime_ns, ctime_ns;
	uint32_t type, mode, nlink, uid, gid, rdev_major, rdev_minor;
};

/* 177 bytes and the file handle at its own length (fh_len, e.g. 28 for
 * nfs-ganesha's): one 216-byte slab slot for handles up to 36 bytes (inode.c;
 * a longer one is malloc'd at its length).
 * The kernel may hold millions of these, so fields are ordered to leave no
 * padding, the lock is not in the struct, and the handle is not kept at
 * NFSv3's 64-byte maximum. Allocated by the table only (the handle follows
 * the struct). */
struct sfs_inode {
	uint64_t fsid, fileid;	     /* set at creation: the index key */
	struct sfs_inode *hash_next; /* protected by the table lock */
	uint64_t nlookup;	     /* protected by the table lock */

	/* The rest is protected by sfs_inode_lock(), but for what is set at
	 * creation and dataset. */
	/* Fetch state exists only while the file is open (n_open > 0): a file
	 * the kernel remembers but nobody has open costs this struct alone. */
	sfs_pf_file *pf;	    /* fetch state for current opens */
	uint64_t attr_time_ms;	    /* when attr was fetched */
	struct sfs_inode_attr attr; /* the last seen */
	/* The version the kernel's page cache holds (the last one opened),
	 * kept across closes to decide keep_cache. */
	struct sfs_inode_version opened;
	uint32_t dataset; /* atomic: set once, at the first lookup (cache/store/store.h) */
	unsigned n_open;  /* open file handles on pf */
	/* Passthrough (fs/kernel/passthrough.h). Kept across a restart, unlike
	 * n_open: the kernel's passthrough opens outlive a dead server, and a
	 * resumed one must not give the inode a second backing file or a
	 * page-cache open while they live. */
	uint32_t backing_id;	 /* the kernel's id of pt_opens' backing file; 0: none yet */
	uint16_t pt_opens;	 /* opens answered with passthrough, not yet released */
	bool orphaned;		 /* protected by the table lock: fileid reused */
	uint8_t have_opened : 1; /* opened is set */
	/* The opens of opened's version so far overlap its first one (its
	 * first read since the kernel took the inode in); 0 once they all
	 * closed. page_cache=auto reads a big file's first epoch direct_io. */
	uint8_t first_epoch : 1;
	/* Looked up or its attributes fetched since the prune hand last
	 * passed (sfs_inode_prune_pick), and not closed since: the last close
	 * takes its second chance away, since a file read and closed is done
	 * with for now (an epoch reads each file once). */
	uint8_t referenced : 1;
	/* pt_opens' backing file may not be joined (an older version than
	 * the file's now, or evicted since): opens of this inode are refused
	 * with ESTALE and the next lookup gives the name a new inode
	 * (passthrough.h); cleared with the last of them. */
	uint8_t pt_stale : 1;
	/* Adopted from a dead server, whose opens are not known here: never
	 * passthrough (a page-cache open of it may be live in the kernel). */
	uint8_t pt_blocked : 1;
	uint8_t fh_len; /* set at creation: the NFS file handle's length */
	uint8_t fh[];	/* set at creation: its bytes (fh_len) */
};

/* What an inode is: an NFS file or directory (it has a handle; no file has
 * an empty one, origin_nfs3.c refuses them), else one of the two virtual
 * inodes, told apart by their fileid. */
static inline enum sfs_inode_kind sfs_inode_kind(const struct sfs_inode *ino)
{
	return ino->fh_len			       ? SFS_INODE_NFS
	       : ino->fileid == SFS_INODE_STATS_FILEID ? SFS_INODE_STATS
						       : SFS_INODE_CTL_DIR;
}

/* The inode's NFS file handle. */
struct sfs_fh sfs_inode_fh(const struct sfs_inode *ino);

/* The inode's attributes as an sfs_attr. Caller holds sfs_inode_lock(). */
void sfs_inode_attr_get(const struct sfs_inode *ino, struct sfs_attr *out);

/* A virtual inode (the .shardfs tree, kind SFS_INODE_CTL_DIR or
 * SFS_INODE_STATS): no handle, no attributes, never in a table; free() it.
 * Returns NULL on ENOMEM. */
struct sfs_inode *sfs_inode_virtual(enum sfs_inode_kind kind);

/*
 * The lock of an inode's attr and open state: one of a fixed set of mutexes
 * shared by all inodes (a mutex of its own would add 40 bytes to every inode
 * the kernel holds). Two inodes may share one, so it is a leaf among inode
 * locks: never take a second inode's lock while holding one. Short critical
 * sections only; the table lock may be held when it is taken, never taken
 * under it.
 */
void sfs_inode_lock(const struct sfs_inode *ino);
void sfs_inode_unlock(const struct sfs_inode *ino);

typedef struct sfs_inode_table sfs_inode_table;

int sfs_inode_table_open(const struct sfs_fh *root_fh, sfs_inode_table **out);
void sfs_inode_table_close(sfs_inode_table *t);

/*
 * A table over the region of memfd region_fd (sfs_inode_table_region_fd of
 * a table another process or an earlier table wrote; the caller keeps its
 * fd): every inode the kernel may hold keeps its id, lookup count, handle
 * and attributes; nothing is open (opens and fetch state were the other
 * process's). The process that wrote the region must be gone, or have
 * stopped using it for good (a handover): adopting rewrites its lists.
 * Call before any other thread uses the table. Returns 0;
 * -EINVAL when the region was written by a build with another inode
 * layout; -ESTALE when its root is not root_fh (another export); -errno.
 */
int sfs_inode_table_adopt(int region_fd, const struct sfs_fh *root_fh, sfs_inode_table **out);

/* Whether the region of memfd region_fd could be adopted by this build
 * (its layout fingerprint), without changing it. Returns 0 or -EINVAL. */
int sfs_inode_table_check_region(int region_fd);

/* The memfd that holds the table's inodes (owned by the table). */
int sfs_inode_table_region_fd(const sfs_inode_table *t);

/* Once, after sfs_inode_table_adopt and before the FUSE loop: fn for every
 * adopted inode that had passthrough opens (pt_opens > 0) when the other
 * process stopped, so that the versions the kernel still reads are held
 * again (passthrough.h). Then forgets them. */
void sfs_inode_each_adopted_passthrough(sfs_inode_table *t,
					void (*fn)(struct sfs_inode *ino, void *arg), void *arg);

/* An inode's node id (not the root's FUSE_ROOT_ID: fs/fs.h maps that),
 * and the inode of a node id this table gave, or NULL for any other
 * number (never one the kernel holds). Any thread, no lock. */
uint64_t sfs_inode_id(const sfs_inode_table *t, const struct sfs_inode *ino);
struct sfs_inode *sfs_inode_by_id(const sfs_inode_table *t, uint64_t id);

struct sfs_inode *sfs_inode_root(sfs_inode_table *t);

/*
 * Find or create the inode for (attr->fsid, attr->fileid) and add one
 * lookup reference. Refreshes its attributes. Returns NULL on ENOMEM.
 */
struct sfs_inode *sfs_inode_get(sfs_inode_table *t, const struct sfs_fh *fh,
				const struct sfs_attr *attr, uint64_t now_ms);

/* Drop n lookup references (FUSE forget); frees the inode at zero. */
void sfs_inode_forget(sfs_inode_table *t, struct sfs_inode *ino, uint64_t n);

/* Store attributes NFS gave at now_ms (a GETATTR's, or a listing's from
 * earlier); older than those held, they are ignored (but the inode is
 * still marked referenced). */
void sfs_inode_set_attr(struct sfs_inode *ino, const struct sfs_attr *attr, uint64_t now_ms);

/* How the table helps its pruner (sfs_inode_prune_enable). */
struct sfs_inode_prune_conf {
	/* Keep a queue of the files whose last open closed (at most ring of
	 * them; the oldest is dropped past it) while the table holds from
	 * inodes or more: sfs_inode_prune_pick takes victims from it first. */
	size_t ring;
	uint64_t from;
	/* When a lookup brings the table to kick_at inodes, call kick() (after
	 * dropping the table lock), once until the table is below kick_at
	 * again: a burst of lookups (a listing) gets a pass at once instead
	 * of at the next tick. NULL: none. */
	uint64_t kick_at;
	void (*kick)(void);
};

/* Call once, before the FUSE loop; without it the picker uses its CLOCK
 * hand alone. Returns 0 or -ENOMEM. */
int sfs_inode_prune_enable(sfs_inode_table *t, const struct sfs_inode_prune_conf *conf);

/* The last open of ino closed (its referenced bit was cleared under its
 * lock): queue it for pruning. Any thread; ino must be alive (RELEASE: the
 * kernel holds the inode until it is answered). */
void sfs_inode_closed(sfs_inode_table *t, const struct sfs_inode *ino);

/*
 * Up to max node ids of inodes to hand back to the kernel so that the table
 * shrinks to target: regular files and symlinks nobody has open. First the
 * files closed longest ago and not looked up since (the queue of
 * sfs_inode_closed, oldest first), then the rest looked up least recently
 * (CLOCK: an inode with referenced set gets a second chance). Returns how many were written to ids
 * (0 when the table holds target or fewer). The ids are numbers only: an inode may be forgotten and
 * freed by the time the kernel reads them, which the kernel tolerates (an unknown node id is
 * skipped), and nothing here dereferences them. The caller sends them (FUSE_NOTIFY_PRUNE); the
 * kernel's FORGETs then free what it let go.
 */
size_t sfs_inode_prune_pick(sfs_inode_table *t, uint64_t target, uint64_t *ids, size_t max);

/* Inodes the kernel currently knows (for stats). */
uint64_t sfs_inode_count(sfs_inode_table *t);

/* Bytes those inodes take: structs and handles, without malloc headers. */
uint64_t sfs_inode_bytes(sfs_inode_table *t);

#endif
