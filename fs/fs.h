/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fs.h — private to fs/: the daemon's state shared by the FUSE operations
 * and main. Other folders never include it, nor do the wings main hands
 * their handles to (restart/, hints/, observe/).
 *
 * Owns: struct sfs_fs (filled by main before the session starts) and the
 * node ids of the virtual .shardfs/ tree (an open file's state is
 * fs/ops/open_file.h). Does not own the modules it points to: each keeps its
 * own state and locks.
 * Threading: every field says what protects it; those set at start are
 * read-only once the FUSE workers run.
 */
#ifndef SFS_FS_H
#define SFS_FS_H

/* The libfuse 3.12 API (libfuse 3.14 on Debian 12). The workers are our
 * own pool (workers.h), or with active_threads=0 libfuse's loop. */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>

#include "../cache/namespace/namespace.h"
#include "../cache/nfs/origin.h"
#include "../cache/prefetch/prefetch.h"
#include "../cache/staging/staging.h"
#include "inode/inode.h"
#include "observe/jobs.h"
#include "restart/keeper.h"
#include "options.h"
#include "counters.h"

struct sfs_pt;
typedef struct sfs_stats sfs_stats;

struct sfs_fs {
	struct sfs_options *opts; /* set at start, then read-only */
	sfs_origin *origin;	  /* set at start, then read-only */
	sfs_prefetch *prefetch;	  /* set at start, then read-only */
	sfs_store *store;	  /* set at start, then read-only; NULL: no cache */
	uint32_t root_dataset;	  /* set at start: the export's own dataset */
	sfs_staging *staging;	  /* set at start, then read-only */
	struct fuse_session *se;  /* set at start: for kernel cache invalidation */
	sfs_inode_table *inodes;  /* set at start, then read-only */
	sfs_jobs *jobs;		  /* set at start, then read-only: per-job reads */
	sfs_ns *ns;		  /* set at start; non-NULL iff immutable */
	sfs_ns *listings;	  /* set at start: not immutable, directory listings (NULL: none) */
	struct sfs_hints *hints;  /* set at start: epoch hints (hints.h) */
	sfs_stats *stats;	  /* set at start: the stats file (observe/stats.h) */
	pthread_mutex_t statfs_lock;		/* immutable: guards the two below */
	bool have_fsstat;			/* protected by statfs_lock */
	struct sfs_fsstat fsstat;		/* protected by statfs_lock: first answer */
	double attr_timeout_s;			/* set at start, then read-only */
	uint64_t start_ns;			/* set at start, then read-only */
	struct sfs_inode *ctl_dir, *stats_file; /* set at start: the virtual .shardfs/ tree */
	/* set at start: the stats file's text (main.c, render_stats), so that the
	 * .shardfs/ tree (fs/ops/ctl.c) serves it without depending on
	 * fs/observe */
	ssize_t (*stats_render)(struct sfs_fs *fs, char **out);
	/* set at start: the keeper's state page (keeper.h), NULL without one */
	struct sfs_keeper_state *keeper;
	/* set at start: counters carried from the process that handed over
	 * (carry.h), NULL if none */
	struct sfs_carry *carry;
	uint64_t op_count[SFS_OP_COUNT]; /* atomic */
	uint64_t read_bytes;		 /* atomic: bytes replied to read() */
	uint64_t read_errors;		 /* atomic */
	uint64_t invalidations;		 /* atomic: kernel caches dropped for changed files */
	uint64_t direct_opens;		 /* atomic: opens answered FOPEN_DIRECT_IO */
	uint64_t inodes_pruned;		 /* atomic: inodes handed back past inode_max */
	struct sfs_pc_policy page_cache; /* which opens are direct_io */
	struct sfs_pt *pt;		 /* set at start: passthrough opens (passthrough.h) */
	uint64_t stage_bytes[SFS_STAGE_KIND_COUNT];    /* atomic */
	uint64_t stage_requests[SFS_STAGE_KIND_COUNT]; /* atomic */
	uint64_t stage_errors[SFS_STAGE_E_COUNT];      /* atomic */
};

/*
 * Node ids: FUSE_ROOT_ID for the export root, two fixed ids for the virtual
 * .shardfs/ tree, and the inode table's ids (inode.h: slot offsets, never
 * below 64 KiB) for the rest, so that every id means the same to a process
 * that adopts the table. sfs_fs_inode returns NULL for an id it never gave.
 */
#define SFS_CTL_DIR_ID 2
#define SFS_STATS_ID   3

static inline struct sfs_inode *sfs_fs_inode(struct sfs_fs *fs, uint64_t ino)
{
	return ino == FUSE_ROOT_ID     ? sfs_inode_root(fs->inodes)
	       : ino == SFS_CTL_DIR_ID ? fs->ctl_dir
	       : ino == SFS_STATS_ID   ? fs->stats_file
				       : sfs_inode_by_id(fs->inodes, ino);
}

static inline uint64_t sfs_fs_ino(struct sfs_fs *fs, const struct sfs_inode *i)
{
	return i == sfs_inode_root(fs->inodes) ? FUSE_ROOT_ID
	       : i == fs->ctl_dir	       ? SFS_CTL_DIR_ID
	       : i == fs->stats_file	       ? SFS_STATS_ID
					       : sfs_inode_id(fs->inodes, i);
}

/* The first staging region id of an open file: the serving process's epoch
 * (keeper.h; 0 without a keeper) in the top 32 bits, so that an id a dead
 * process gave is told from this one's (ioctl.c, -EOWNERDEAD). */
static inline uint64_t sfs_fs_first_region_id(const struct sfs_fs *fs)
{
	return ((uint64_t)(fs->keeper ? fs->keeper->epoch : 0) << 32) | 1;
}

/* The kernel's readahead for buffered FUSE reads (op_init), 1 MiB requests. */
#define SFS_FUSE_MAX_READAHEAD (8u << 20)

/* Start per-job accounting (fs/observe/jobs.h) of a read or STAGE for req's caller;
 * end it with sfs_jobs_read_end(fs->jobs, ...). Any FUSE worker. */
static inline struct sfs_job_read sfs_fs_job_begin(struct sfs_fs *fs, fuse_req_t req)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);
	return sfs_jobs_read_begin(fs->jobs, c->pid, c->uid);
}

extern const struct fuse_lowlevel_ops sfs_fuse_ops;

#endif
