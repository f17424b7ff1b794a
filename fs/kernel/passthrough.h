/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passthrough — opens the kernel reads by itself (FUSE passthrough, Linux
 * 6.9+): an open of a file whose version is wholly in the cache and
 * verified is answered with FOPEN_PASSTHROUGH and a backing file, the
 * version's data file in cache_dir (byte x at x; cache/store/store.h,
 * sfs_store_obj_backing_fd). Its reads and mmaps go from the kernel to that
 * file without a FUSE request: no daemon CPU, no per-read checksum (the
 * scrubber re-reads the cache, cache/store/scrub.c).
 *
 * The kernel's rules (fs/fuse/iomode.c, Linux 6.18) and how this module
 * keeps them:
 * - While an inode has passthrough opens, every open of it must be a
 *   passthrough open of the same backing file (any other, direct_io
 *   included, fails with EIO); and a passthrough open fails while the inode
 *   has page-cache opens. An open is the first passthrough one only when it
 *   is the inode's only open (i->n_open == 1 under the inode lock, where
 *   every open is counted before any decision); later opens join it.
 * - One backing file per inode at a time: the first passthrough open
 *   registers one (FUSE_DEV_IOC_BACKING_OPEN) and keeps its id in the
 *   inode; later ones join it; the last release drops it.
 * - An open that may not join (the file changed on the cluster, or its
 *   cached version was evicted, e.g. by the scrubber) gets ESTALE and the
 *   inode is marked pt_stale: the kernel retries the open once after a
 *   forced lookup, which gives the name a new inode (inode.c, pt_replaced)
 *   served as any other; the readers of the old one read on.
 * - The id and the count live in the inode's shared slot (inode.h): a
 *   resumed server (keeper.h) sees them, and the fh's
 *   SFS_HANDLE_PASSTHROUGH bit tells which of a dead server's releases were
 *   passthrough opens; an inode adopted from a dead server with no
 *   passthrough open never becomes one (pt_blocked: its page-cache opens
 *   are not known here).
 * Packed small files (one chunk or less, in segments) are never
 * passthrough; nor are tool opens (O_NONBLOCK, shardfs-warm).
 *
 * Accounting: a passthrough open counts the version's size as bytes served
 * from the cache at open (the dataset's read counters and recency, which
 * cache_policy=auto uses), and as opens and bytes of their own series;
 * the daemon never sees the reads, so per-read counters (FUSE reads, job
 * bytes) do not include them.
 *
 * Owns: the decision at open, each inode's backing id from its first
 * passthrough open to its last release, and the counters. Does not own the
 * backing files or their checks (cache/store, its scrubber).
 * Threading: any thread; the counters are atomics, the inode fields are
 * under the inode lock.
 */
#ifndef SFS_PASSTHROUGH_H
#define SFS_PASSTHROUGH_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct sfs_inode;
struct sfs_file_version;
typedef struct sfs_pf_file sfs_pf_file;
typedef struct sfs_store sfs_store;
typedef struct sfs_store_obj sfs_store_obj;

struct sfs_pt_stats {
	uint64_t opens;		 /* answered with passthrough */
	uint64_t open_bytes;	 /* the sizes of the versions they opened */
	uint64_t stale_opens;	 /* refused with ESTALE (retried by the kernel on a new inode) */
	uint64_t unverified;	 /* wholly cached, not yet verified: served by the daemon */
	uint64_t backing_errors; /* backing file not registered (EPERM, ELOOP, ...) */
	uint64_t backing_files;	 /* backing files registered (one per inode and version) */
};

struct sfs_pt {
	bool wanted; /* set at start: passthrough=auto and a cache_dir */
	/* Set at start: a regular file on cache_dir's filesystem (an unnamed
	 * one), registered once as a backing file after INIT to learn whether
	 * this daemon may (sfs_pt_probe); -1: none. The probe closes it. */
	int probe_fd;
	/* Set at start: a file up to this size has its whole backing file read
	 * ahead into the page cache at its first passthrough open (prefetch=
	 * shard's prefetch_max; 0: none). */
	uint64_t willneed_max;
	bool available;		/* atomic: wanted, offered at INIT, and the probe passed */
	bool logged_error;	/* atomic: a backing error was logged */
	struct sfs_pt_stats st; /* atomic counters */
	/* The version each inode's passthrough opens read, held in the store
	 * from the first of them to the last release (sfs_pt_start). */
	sfs_store *store;
	pthread_mutex_t hold_lock; /* a leaf */
	/* Protected by hold_lock: the holds by inode, a table that doubles as
	 * more inodes are held (NULL: no memory at start; holds are dropped,
	 * uncounted). */
	struct pt_hold_table *holds;
};

/* Before any open: the store whose versions passthrough opens read (NULL:
 * none). Holding: while an inode has passthrough opens, the version they
 * read keeps a store reference, so the policy never evicts it, and an
 * explicit eviction (shardfs-cache evict, a failed scrub) counts its bytes
 * as held (cache/store/store.h, held_bytes) until the last release, when
 * the kernel lets go of the file. */
void sfs_pt_start(struct sfs_pt *pt, sfs_store *store);

/* After the FUSE loop, before the store closes: let every hold still in the
 * table go (files the kernel still had open when the loop ended) and free
 * the table. pt may never have been started. */
void sfs_pt_close(struct sfs_pt *pt);

/* Resumed (fs/restart/keeper.h): an inode a dead server left with
 * passthrough opens: its last opened version is held again as though its
 * opens were this server's (or, evicted by the dead server, its size is
 * counted as held) until their last release. Before the FUSE loop. */
void sfs_pt_adopted(struct sfs_pt *pt, struct sfs_inode *i);

/* Once the kernel took the INIT reply (fusedev's after-init hook): whether
 * passthrough is on for this mount. It is when it was wanted, the kernel
 * offered it, and one backing file (probe_fd) registers; otherwise it is
 * off for the mount, said in one log line naming the reason (no FUSE
 * passthrough in this kernel; EPERM: no CAP_SYS_ADMIN, as for a daemon that
 * is not root or runs in a user namespace; ELOOP: cache_dir on a stacked
 * filesystem), and no open tries. Before it runs every open is served by
 * the daemon. */
void sfs_pt_probe(struct sfs_pt *pt);

/* How an open of i goes, decided with i's other opens (see above). */
enum sfs_pt_mode {
	SFS_PT_NO,    /* as without passthrough (the page-cache policy decides) */
	SFS_PT_STALE, /* refuse with ESTALE: passthrough opens of i read a stale backing */
	SFS_PT_OPEN,  /* passthrough with *backing_id */
};

/*
 * Decide an open of i (already counted in i->n_open, with pt_stale set
 * when its version is not the one i's passthrough opens read: see
 * sfs_pt_opened_version) of version v, which pf holds. eligible: the caller's
 * wish for a first passthrough open (a reader's open; joining is not a
 * wish: it is the only open the kernel allows beside passthrough ones).
 * SFS_PT_OPEN sets *backing_id and counts the open in i->pt_opens (the
 * caller answers with it, and calls sfs_pt_release at its release, or
 * now when the reply failed). Takes the inode lock; may open and register
 * a backing file without it.
 */
enum sfs_pt_mode sfs_pt_open(struct sfs_pt *pt, struct sfs_inode *i, sfs_pf_file *pf,
			     const struct sfs_file_version *v, bool eligible, int *backing_id);

/* An open of i found a version other than the one last opened: caller
 * holds the inode lock (the same section that records the new version, so
 * that no later open of it joins the old backing file). */
static inline void sfs_pt_opened_version(struct sfs_inode *i, bool unchanged);

/* A passthrough open of i released (by this server or a dead one). */
void sfs_pt_release(struct sfs_pt *pt, struct sfs_inode *i);

void sfs_pt_get_stats(struct sfs_pt *pt, struct sfs_pt_stats *out);

#include "../inode/inode.h"
static inline void sfs_pt_opened_version(struct sfs_inode *i, bool unchanged)
{
	if (!unchanged && i->pt_opens)
		i->pt_stale = 1;
}

#endif
