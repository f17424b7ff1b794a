/* SPDX-License-Identifier: Apache-2.0 */
/*
 * jobs — per-job read accounting: which Slurm job, Kubernetes pod or user
 * each read() and STAGE call works for, and how long it waited for data.
 *
 * Owns: parsing /proc/PID/cgroup (cgroup v1 and v2) into a job label, a
 * bounded pid -> job cache (so the read path reads /proc only on a miss),
 * a bounded job table with per-job counters and a wait histogram, and the
 * snapshot the stats renderer prints. Does not include libfuse: fs/ops (fs.h)
 * passes the caller's pid and uid from fuse_req_ctx().
 *
 * Labels: a path component "job_<N>" -> "slurm/<N>"; "pod<uid>" or
 * "pod_<uid>" (cgroupfs) or "...-pod<uid_with_underscores>.slice" (systemd
 * driver) -> "k8s/<uid>" (dashes); anything else, an unreadable cgroup file
 * or pid 0 (a caller in another pid namespace) -> "uid/<uid>"; when the job
 * table is full of active jobs -> "other".
 *
 * Bounds: SFS_JOBS_PID_ENTRIES pid entries (4-way set-associative, the least
 * recently used way of a set is replaced; entries expire after pid_ttl_ms so
 * a reused pid resolves again) and SFS_JOBS_MAX jobs (a job with no read for
 * idle_ms is removed when a new job needs its slot or when stats are taken).
 *
 * Threading: every function is thread-safe. The read path takes one of 64
 * striped pid-set locks for a few instructions and otherwise uses atomics;
 * the job table's lock is taken only on a pid-cache miss and by snapshots.
 * Lock order: a pid-set lock is never held while taking the job lock.
 */
#ifndef SFS_JOBS_H
#define SFS_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SFS_JOBS_PID_ENTRIES	 4096 /* pid -> job cache entries */
#define SFS_JOBS_MAX		 256  /* jobs tracked at once, "other" included */
#define SFS_JOBS_LABEL_MAX	 64   /* bytes of a label, NUL included */
#define SFS_JOBS_WAIT_BUCKETS	 16
#define SFS_JOBS_DEFAULT_TTL_MS	 10000	/* pid entry lifetime */
#define SFS_JOBS_DEFAULT_IDLE_MS 600000 /* a job with no read for this long ages out */

/* Upper bounds (seconds) of the wait histogram's buckets; +Inf is implied. */
extern const double sfs_jobs_wait_bounds_s[SFS_JOBS_WAIT_BUCKETS];

typedef struct sfs_jobs sfs_jobs;

struct sfs_jobs_conf {
	const char *proc_root;	  /* NULL: "/proc"; tests point it at a fake tree */
	uint64_t pid_ttl_ms;	  /* 0: SFS_JOBS_DEFAULT_TTL_MS */
	uint64_t idle_ms;	  /* 0: SFS_JOBS_DEFAULT_IDLE_MS */
	uint64_t (*now_ns)(void); /* NULL: CLOCK_MONOTONIC; tests pass a fake clock */
};

/* Returns 0 and sets *out, or -ENOMEM. */
int sfs_jobs_open(const struct sfs_jobs_conf *conf, sfs_jobs **out);
void sfs_jobs_close(sfs_jobs *j); /* NULL is fine */

/*
 * The job label of one /proc/PID/cgroup text (NUL-terminated; v1 lines
 * "ID:controllers:/path", v2 line "0::/path"). The v2 line is looked at
 * first, then the v1 lines in order. Returns true and writes the label
 * ("slurm/N" or "k8s/UID") into label[SFS_JOBS_LABEL_MAX], or false when no
 * line names a job. Pure: no state, no I/O.
 */
bool sfs_jobs_parse_cgroup(const char *text, char *label);

/* The job label of a caller, as sfs_jobs_read_begin would count it (reads
 * /proc/PID/cgroup; not cached). j may be NULL: "uid/<uid>". */
void sfs_jobs_label(sfs_jobs *j, pid_t pid, uid_t uid, char *label);

/* One read in progress: from sfs_jobs_read_begin to sfs_jobs_read_end. */
struct sfs_job_read {
	uint32_t slot, gen; /* the job: its table slot and the slot's generation */
	uint64_t start_ns;
};

/*
 * Start timing a read for the caller (pid from fuse_req_ctx: a thread id,
 * 0 across pid namespaces). Finds its job in the pid cache, or on a miss
 * reads PROC/pid/cgroup once. Never fails: an unknown job is counted under
 * "uid/<uid>" or "other". j may be NULL (accounting off): then a no-op.
 */
struct sfs_job_read sfs_jobs_read_begin(sfs_jobs *j, pid_t pid, uid_t uid);

/* The read ended: bytes returned (< 0: an error, counted as a request of 0
 * bytes), of which cache_bytes came from the local cache. */
void sfs_jobs_read_end(sfs_jobs *j, const struct sfs_job_read *r, ssize_t bytes,
		       uint64_t cache_bytes);

/* One job's counters, as a snapshot. */
struct sfs_job_stats {
	char label[SFS_JOBS_LABEL_MAX];
	uint64_t read_bytes, read_requests, cache_bytes;
	uint64_t wait_ns;			      /* sum of per-read waits */
	uint64_t busy_ns;			      /* time with >= 1 read of the job waiting */
	uint64_t wait_buckets[SFS_JOBS_WAIT_BUCKETS]; /* per bucket, not cumulative */
	uint64_t wait_count;
};

/* Table-wide counters. */
struct sfs_jobs_totals {
	uint64_t pid_entries;  /* pid cache entries in use (<= SFS_JOBS_PID_ENTRIES) */
	uint64_t cgroup_reads; /* /proc/PID/cgroup files read (pid cache misses) */
	uint64_t jobs;	       /* jobs in the table */
	uint64_t evicted_jobs; /* jobs aged out */
};

/*
 * Copy up to max jobs' counters into out (malloc'd by the caller), first
 * removing jobs idle for longer than idle_ms. Returns the number copied.
 */
size_t sfs_jobs_snapshot(sfs_jobs *j, struct sfs_job_stats *out, size_t max,
			 struct sfs_jobs_totals *totals);

#endif
