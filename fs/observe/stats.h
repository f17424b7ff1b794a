/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stats — MOUNTPOINT/.shardfs/stats: every module's counters in the
 * Prometheus text exposition format (version 0.0.4), described once in
 * shardfs-stats(7).
 *
 * Two steps: a snapshot of the counters (stats_snap.c: each module's
 * get_stats call, through the handles main gives at open), then its text
 * (stats.c: reads the snapshot and nothing else, so that a test renders
 * known counters). sfs_stats_read does both and hands the text to the
 * sources' amend hook (main's: the counters carried from the process that
 * handed over, fs/restart/carry.h).
 *
 * Owns: the snapshot and the text's layout (metric names, help, labels).
 * Does not own a counter: each module keeps its own; the FUSE operations'
 * live in struct sfs_fs (fs.h), handed over as pointers.
 *
 * Threading: open and close on the main thread, before the FUSE loop and
 * after it; sfs_stats_read on any thread (a FUSE worker at an open or
 * getattr of the stats file, main at a takeover). The get_stats calls take
 * their modules' locks briefly, no I/O under them; /proc/self/statm is
 * read for the RSS.
 */
#ifndef SFS_STATS_H
#define SFS_STATS_H

#include "../../cache/common/iobuf.h"
#include "../../cache/namespace/namespace.h"
#include "../../cache/prefetch/prefetch.h"
#include "../../cache/staging/staging.h"
#include "../hints/hints.h"
#include "../inode/inode.h"
#include "../kernel/pagecache.h"
#include "../kernel/passthrough.h"
#include "../kernel/workers.h"
#include "../restart/keeper.h"
#include "jobs.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct sfs_stats sfs_stats;

/* The FUSE side's counters, which fs/ops keeps (struct sfs_fs, fs.h):
 * where they are (each an atomic uint64_t, read at every rendering) and
 * their label values. */
struct sfs_stats_fuse {
	const uint64_t *ops;	     /* [n_ops]: requests by operation */
	const char *const *op_names; /* [n_ops] */
	unsigned n_ops;
	const uint64_t *read_bytes, *read_errors, *invalidations, *direct_opens, *inodes_pruned;
	const uint64_t *stage_bytes, *stage_requests; /* [n_stage_targets] */
	const char *const *stage_targets;	      /* [n_stage_targets] */
	unsigned n_stage_targets;
	const uint64_t *stage_errors;	  /* [n_stage_reasons] */
	const char *const *stage_reasons; /* [n_stage_reasons] */
	unsigned n_stage_reasons;
};

/* What the stats read, handed over by main at open (copied): each set at
 * start, then read-only; every one outlives the stats. */
struct sfs_stats_sources {
	sfs_origin *origin;
	sfs_prefetch *prefetch;
	sfs_store *store;			/* NULL: no cache */
	sfs_ns *ns;				/* NULL: not immutable */
	sfs_ns *listings;			/* NULL: no directory listings */
	sfs_staging *staging;			/* NULL: none */
	sfs_inode_table *inodes;		/* the inodes the kernel holds */
	sfs_jobs *jobs;				/* NULL: no per-job accounting */
	sfs_hints *hints;			/* NULL: no hints */
	const struct sfs_keeper_state *keeper;	/* NULL: no keeper */
	struct sfs_pt *pt;			/* passthrough opens */
	const struct sfs_pc_policy *page_cache; /* the page_cache= policy */
	uint64_t start_ns;			/* when the daemon mounted (sfs_now_ns) */
	uint64_t mem_max;			/* mem_max in effect */
	struct sfs_stats_fuse fuse;
	/* Called on every text before it is handed out; returns 0 or -ENOMEM
	 * (*text, malloc'd, of *len bytes, may be replaced). NULL: none. */
	int (*amend)(void *arg, char **text, size_t *len);
	void *amend_arg;
};

/* Every counter of one rendering. Arrays are malloc'd by
 * sfs_stats_snapshot_take (free with sfs_stats_snapshot_free); a test may
 * fill one by hand. */
struct sfs_stats_snapshot {
	uint64_t uptime_ns;
	uint64_t serving_pid;
	bool crash_recovery;		     /* a keeper, and the kernel resends */
	uint64_t restarts[SFS_RESTART_N];    /* 0 without a keeper */
	const char *const *restart_names;    /* [SFS_RESTART_N] */
	size_t n_nodes;			     /* the origin's */
	struct sfs_origin_node_stats *nodes; /* [n_nodes] */
	const char *const *origin_op_names;  /* [SFS_ORIGIN_N_OPS] */
	const double *lat_bounds_s;	     /* [SFS_ORIGIN_LAT_BUCKETS] */
	uint64_t queue_depth;		     /* requests waiting for a slot */
	struct sfs_origin_background_stats background;
	struct sfs_stats_fuse fuse;   /* read as it is rendered */
	uint64_t inodes, inode_bytes; /* the inode table */
	uint32_t small_read_share;    /* page_cache=auto, in 256ths */
	bool direct_io_mmap;	      /* fusedev */
	uint32_t kernel_minor;	      /* fusedev */
	struct sfs_workers_stats workers;
	struct sfs_prefetch_stats prefetch;
	bool have_store;
	struct sfs_store_stats store;	    /* zero without a store */
	struct sfs_store_scrub_stats scrub; /* zero without a store */
	struct sfs_pt_stats pt;
	bool pt_available;
	bool have_datasets;		    /* a store, and its table was read */
	struct sfs_store_dataset *datasets; /* [n_datasets] */
	size_t n_datasets;
	enum sfs_store_policy policy;
	uint64_t policy_idle_ms;
	uint64_t dataset_overflows;
	bool immutable;
	struct sfs_ns_stats ns, listings; /* zero where there is none */
	unsigned gpus;
	uint64_t staging_pinned_bytes;
	uint64_t rss_bytes; /* 0 when /proc/self/statm cannot be read */
	uint64_t mem_max;
	struct sfs_iobuf_stats iobuf;
	uint64_t memtrims;
	bool have_jobs;
	struct sfs_job_stats *jobs; /* [n_jobs] */
	size_t n_jobs;
	struct sfs_jobs_totals job_totals;
	struct sfs_hints_stats hints;
	struct sfs_hint_job_counts *hint_jobs; /* [n_hint_jobs] */
	size_t n_hint_jobs;
};

/* Stats over src (copied). Returns 0 and *out, or -ENOMEM. */
int sfs_stats_open(const struct sfs_stats_sources *src, sfs_stats **out);
/* NULL is fine. After the last read. */
void sfs_stats_close(sfs_stats *st);

/* The stats file's text, malloc'd into *out (amended). Returns its length,
 * or -ENOMEM. */
ssize_t sfs_stats_read(sfs_stats *st, char **out);

/* Every counter of the sources now into *out. Returns 0 or -ENOMEM
 * (nothing to free then). */
int sfs_stats_snapshot_take(sfs_stats *st, struct sfs_stats_snapshot *out);
void sfs_stats_snapshot_free(struct sfs_stats_snapshot *s);

/* The text of s, malloc'd into *text of *len bytes (not amended). Returns 0
 * or -ENOMEM. */
int sfs_stats_format(const struct sfs_stats_snapshot *s, char **text, size_t *len);

#endif
