/* SPDX-License-Identifier: Apache-2.0 */
/*
 * open_file — the state of one open NFS file, below the FUSE operations
 * (file.c opens, reads and releases it) and the ioctls (ioctl.c registers
 * staging regions in it and stages from it), which both call here and
 * never each other.
 *
 * Owns: struct sfs_open_file (what fi->fh points to for an open NFS file:
 * the file version it reads and its staging region table); the inode's
 * open state (the version last opened, the open count, the fetch state
 * shared by the opens of that version, i->pf) as opens come and go; a
 * dead server's open made again under its old fh (keeper.h). Does not own:
 * the fetch state's life (cache/prefetch, reference counted), the handle
 * table (fs/kernel/handles.h), the staging regions' bytes (cache/staging),
 * the replies (the caller replies).
 * Threading: any FUSE worker. The inode's open state is under the inode
 * lock (taken here); an open file's region table under its own lock, which
 * ioctl.c takes around each ioctl and sfs_open_file_drop_regions takes at
 * release.
 */
#ifndef SFS_OPEN_FILE_H
#define SFS_OPEN_FILE_H

#include "../inode/inode.h"
#include "../../cache/prefetch/prefetch.h"
#include "../../cache/staging/staging.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SFS_MAX_REGIONS 16 /* per open file */

/* What fi->fh points to for an open NFS file. */
struct sfs_open_file {
	sfs_pf_file *pf;	    /* set at open: the file version this open reads */
	uid_t uid;		    /* set at open: the opener */
	bool direct;		    /* set at open: FOPEN_DIRECT_IO (pagecache.h) */
	uint64_t direct_reads;	    /* atomic: direct: read requests */
	uint64_t direct_read_bytes; /* atomic: direct: bytes they asked for */
	pthread_mutex_t lock;	    /* serialises ioctls on this open file */
	struct {
		uint64_t id; /* 0: free slot */
		uid_t uid;
		sfs_stage_region *region;
	} regions[SFS_MAX_REGIONS]; /* protected by lock */
	uint64_t next_region_id;    /* protected by lock */
};

/* The identity of version a of inode i: what names it in the cache. */
struct sfs_file_version sfs_open_file_version(const struct sfs_attr *a, const struct sfs_inode *i);

/* How one more open of a version found the inode (sfs_open_file_begin). */
struct sfs_open_state {
	bool unchanged;	  /* the kernel's pages of i, if any, are of this version */
	bool changed;	  /* they are of another version: they must be dropped */
	bool first_epoch; /* overlaps the first open of this version since the
			     kernel took i in (its page cache cannot hold it yet) */
};

/* Told, under the inode lock, in the section that records the version an
 * open found, whether it is the one last opened (file.c passes passthrough's
 * rule, sfs_pt_opened_version: no open of a new version joins an older
 * backing file). */
typedef void (*sfs_open_file_seen_fn)(struct sfs_inode *i, bool unchanged);

/*
 * One more open of version v of i: the fetch state shared by the opens of
 * v (made through p if none is), referenced for the caller in *out and
 * counted in i's opens; end it with sfs_open_file_end. *st says how the
 * open found i; seen (NULL: none) is told too. Returns 0 or -ENOMEM (or a
 * fetch state that cannot be made). Takes the inode lock.
 */
int sfs_open_file_begin(sfs_prefetch *p, struct sfs_inode *i, const struct sfs_file_version *v,
			sfs_open_file_seen_fn seen, sfs_pf_file **out, struct sfs_open_state *st);

/* The end of one open of i (its handle held a reference on pf, which this
 * drops). When the last one closes, the inode lets go of its fetch state
 * too: chunks kept for it go back to the memory budget, and a file the
 * kernel remembers but nobody reads holds no prefetch or store state.
 * Returns whether it was the last. Takes the inode lock. */
bool sfs_open_file_end(struct sfs_inode *i, sfs_pf_file *pf);

/* A new open file reading pf (the caller's reference moves in), its region
 * ids counted from first_region_id (sfs_fs_first_region_id). NULL on
 * ENOMEM (pf is then still the caller's). */
struct sfs_open_file *sfs_open_file_new(sfs_pf_file *pf, uid_t uid, uint64_t first_region_id);

/* Free of (its regions dropped first, sfs_open_file_drop_regions) and
 * return the fetch state it read, whose reference is now the caller's
 * (for sfs_open_file_end). */
sfs_pf_file *sfs_open_file_free(struct sfs_open_file *of);

/*
 * The open file of fh on inode i: this process's, or, for a file a dead
 * server opened (keeper.h), one made again for the version that open read
 * (the inode's last opened one, never a newer one, so that a reader gets
 * no mix), adopted under the old fh until its release. NULL on ENOMEM (or
 * a fetch state that cannot be made), and for an fh of no NFS file.
 */
struct sfs_open_file *sfs_open_file_of(sfs_prefetch *p, struct sfs_inode *i, uint64_t fh,
				       uint64_t first_region_id);

/* Drop an open file's staging regions (its release). Takes of->lock. */
void sfs_open_file_drop_regions(struct sfs_open_file *of);

#endif
