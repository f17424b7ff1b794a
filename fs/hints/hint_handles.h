/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hint_handles — the types the hints wing shares between its parts
 * (hints.c, hint_resolve.c) and main: what the hints use of the daemon
 * (struct sfs_hints_handles) and who sent a list (struct sfs_hint_sender).
 * Types only, so that hint_resolve.h need not include hints.h.
 * Owns nothing; each struct says who fills it. Threading: none (types).
 */
#ifndef SFS_HINT_HANDLES_H
#define SFS_HINT_HANDLES_H

#include "../../cache/namespace/namespace.h"
#include "../../cache/prefetch/prefetch.h"

#include <stdint.h>
#include <sys/types.h>

typedef struct sfs_inode_table sfs_inode_table; /* fs/inode/inode.h */
struct sfs_options;				/* fs/options.h */

/* What the hints use of the daemon, handed over by main at open (copied):
 * each set at start, then read-only; every one outlives the hints. */
struct sfs_hints_handles {
	sfs_prefetch *prefetch;		/* fetches ahead; its observers report reads, fetches */
	sfs_origin *origin;		/* lookups the namespace or a listing do not answer */
	sfs_ns *ns;			/* immutable: the namespace (NULL: not immutable) */
	sfs_ns *listings;		/* not immutable: directory listings (NULL: none) */
	sfs_inode_table *inodes;	/* the root directory's handle and attributes */
	double attr_timeout_s;		/* how long a directory resolved stands */
	sfs_store *store;		/* datasets (NULL: no cache, every dataset 0) */
	uint32_t root_dataset;		/* the export's own dataset */
	const struct sfs_options *opts; /* the export path, for datasets' names */
};

/* Who sent a list: from the ioctl's request. */
#define SFS_HINT_GROUPS_MAX 64
struct sfs_hint_sender {
	uid_t uid;
	gid_t gid;
	int n_groups; /* supplementary groups known (at most SFS_HINT_GROUPS_MAX) */
	gid_t groups[SFS_HINT_GROUPS_MAX];
	char job[64]; /* the job label (fs/observe/jobs.h) */
};

#endif
