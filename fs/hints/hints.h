/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hints — epoch hints: the ordered lists of files and ranges trainers send
 * (SHARDFS_IOC_HINT_*, shardfs_ioctl.h), fetched ahead of their reads.
 *
 * Owns: the lists of the mount, each tied to the open file it was sent on
 * (its fh) and dropped at that open's release; the fetcher threads (up to
 * 4, started at the first list), which resolve items ahead (fs/hints/hint_resolve.h,
 * as their sender) and start the fetches of every list's items in order:
 * hint_fetchers items in flight at most (their ends seen through prefetch's
 * fetch observer), a window at most ahead of the reader (twice its spread,
 * at most hint_window items; all lists together hold at most mem_bytes
 * unread); what the cache holds is skipped, what was fetched is held for
 * the reader (prefetch.h, "Hints"). Following the reads: a read of a held
 * file, or an open of an item resolved ahead (sfs_hints_opened), marks its
 * item read; an item a window behind the reader is dropped (its bytes are
 * waste); a reader past the fetch makes it skip there. The counters, per
 * job and in all.
 * Does not own: fetching and caching bytes (cache/prefetch, cache/store),
 * the ioctl structs' plumbing (fs/ops/ioctl.c), the handles it is given
 * (struct sfs_hints_handles: main's, set at open).
 *
 * Threading: any thread. One mutex protects every list and counter; it is
 * taken before a prefetch file's lock (holds are released under it) and
 * never while a prefetch lock is held (the read observer is called with
 * none). Fetchers resolve and fetch without it.
 */
#ifndef SFS_HINTS_H
#define SFS_HINTS_H

#include "hint_handles.h"
#include <shardfs/shardfs_ioctl.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct sfs_hints sfs_hints;

struct sfs_hints_conf {
	unsigned window;       /* items of one list fetched ahead at most */
	unsigned fetchers;     /* items being fetched at once (threads: at most 4) */
	uint64_t mem_bytes;    /* bytes fetched ahead and not yet read, all lists */
	uint64_t list_mem_max; /* memory of all lists' items and paths (ENOMEM past it) */
	bool check_perms;      /* default_permissions: a hint reads only what its sender may */
};

/* Returns 0 and *out, or -ENOMEM. Threads start with the first list. */
int sfs_hints_open(const struct sfs_hints_handles *hh, const struct sfs_hints_conf *conf,
		   sfs_hints **out);
/* Stop the fetchers (each finishes its item) and drop every list. Before
 * the prefetch pool and the origin close. NULL is fine. */
void sfs_hints_close(sfs_hints *h);

/* The calls of one open file (owner: its fi->fh). Return 0 or -errno, as
 * shardfs_ioctl.h lists them. */
int sfs_hints_begin(sfs_hints *h, uint64_t owner, const struct sfs_hint_sender *s);
int sfs_hints_append(sfs_hints *h, uint64_t owner, const struct shardfs_hint_append *a);
int sfs_hints_commit(sfs_hints *h, uint64_t owner, uint64_t *n_items);
int sfs_hints_cancel(sfs_hints *h, uint64_t owner);
void sfs_hints_status(sfs_hints *h, uint64_t owner, struct shardfs_hint_status *out);
/* A reader opened file (fsid, fileid): where a list names it among the
 * items resolved ahead, the list's reader is there (the fetch skips to it
 * if it was behind). Cheap when there is no list. Any thread. */
void sfs_hints_opened(sfs_hints *h, uint64_t fsid, uint64_t fileid);
/* The open file `owner` was released: its lists go. Cheap when it has none. */
void sfs_hints_release(sfs_hints *h, uint64_t owner);

/* Counters of one job's lists (alive or gone), or of all. */
struct sfs_hint_counts {
	uint64_t lists;		/* committed */
	uint64_t items;		/* in committed lists */
	uint64_t item_bytes;	/* of the items resolved */
	uint64_t fetched_items; /* fetched ahead (not in the cache when taken) */
	uint64_t fetched_bytes; /* their bytes */
	uint64_t read_items;	/* of those, read by a reader */
	uint64_t read_bytes;
	uint64_t wasted_bytes; /* fetched ahead, dropped unread */
	uint64_t cached_items; /* skipped: in the cache */
	uint64_t unknown_items;
	uint64_t denied_items;
	uint64_t passed_items; /* skipped: the reader got there before the fetch */
};

struct sfs_hint_job_counts {
	char job[64];
	struct sfs_hint_counts c;
};

struct sfs_hints_stats {
	uint64_t active_lists;	   /* lists with items left */
	uint64_t held_bytes;	   /* fetched ahead, not yet read or dropped */
	uint64_t list_mem_bytes;   /* memory of the lists' items and paths, being built too */
	uint64_t refused_invalid;  /* batches or commits refused: EINVAL */
	uint64_t refused_too_long; /* lists refused: E2BIG */
	uint64_t refused_memory;   /* lists refused: ENOMEM (list_mem_max) */
	struct sfs_hint_counts all;
};

#define SFS_HINT_JOBS_MAX 64 /* jobs counted apart; more go under "other" */

/* Totals into *out; up to max jobs' counters into jobs. Returns the number
 * of jobs copied. h may be NULL (all zero). */
size_t sfs_hints_stats(sfs_hints *h, struct sfs_hints_stats *out, struct sfs_hint_job_counts *jobs,
		       size_t max);

#endif
