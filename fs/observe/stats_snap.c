// SPDX-License-Identifier: Apache-2.0
/*
 * stats_snap — the stats object and its snapshot: every module's counters
 * read through the handles main gave at open (stats.h). Owns the
 * snapshot's arrays; not the text (stats.c, from the snapshot alone), nor
 * any counter. Any thread: each get_stats call takes its module's own
 * lock briefly; the object is read-only once open.
 */
#include "stats.h"
#include "../kernel/fusedev.h"
#include "../memtrim.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct sfs_stats {
	struct sfs_stats_sources src; /* set at open, then read-only */
};

int sfs_stats_open(const struct sfs_stats_sources *src, sfs_stats **out)
{
	sfs_stats *st = calloc(1, sizeof(*st));

	if (!st)
		return -ENOMEM;
	st->src = *src;
	*out = st;
	return 0;
}

void sfs_stats_close(sfs_stats *st) { free(st); }

/* The process's resident memory from /proc/self/statm; 0 if unreadable. */
static uint64_t rss_bytes(void)
{
	unsigned long long size_pages = 0, rss_pages = 0;
	FILE *statm = fopen("/proc/self/statm", "re");

	if (statm) {
		if (fscanf(statm, "%llu %llu", &size_pages, &rss_pages) != 2)
			rss_pages = 0;
		fclose(statm);
	}
	return rss_pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* The origin's nodes, queue and warm-ups. Returns 0 or -ENOMEM. */
static int take_origin(const struct sfs_stats_sources *src, struct sfs_stats_snapshot *s)
{
	s->n_nodes = sfs_origin_node_count(src->origin);
	s->nodes = calloc(s->n_nodes ? s->n_nodes : 1, sizeof(*s->nodes));
	if (!s->nodes)
		return -ENOMEM;
	for (size_t i = 0; i < s->n_nodes; i++)
		sfs_origin_node_stats(src->origin, i, &s->nodes[i]);
	s->origin_op_names = sfs_origin_op_names;
	s->lat_bounds_s = sfs_origin_lat_bounds_s;
	s->queue_depth = sfs_origin_queue_depth(src->origin);
	sfs_origin_background_stats(src->origin, &s->background);
	return 0;
}

/* The store, its scrubber and its datasets (nothing without a store; no
 * datasets when their table cannot be read). */
static void take_store(const struct sfs_stats_sources *src, struct sfs_stats_snapshot *s)
{
	s->have_store = src->store != NULL;
	if (!src->store)
		return;
	sfs_store_get_stats(src->store, &s->store);
	sfs_store_scrub_get_stats(src->store, &s->scrub);
	if (sfs_store_dataset_stats(src->store, &s->datasets, &s->n_datasets) < 0)
		return;
	s->have_datasets = true;
	s->policy = sfs_store_policy_of(src->store, &s->policy_idle_ms);
	s->dataset_overflows = sfs_store_dataset_overflows(src->store);
}

/* Per-job reads and hint lists. Returns 0 or -ENOMEM. */
static int take_jobs(const struct sfs_stats_sources *src, struct sfs_stats_snapshot *s)
{
	if (src->jobs) {
		if (!(s->jobs = malloc(SFS_JOBS_MAX * sizeof(*s->jobs))))
			return -ENOMEM;
		s->have_jobs = true;
		s->n_jobs = sfs_jobs_snapshot(src->jobs, s->jobs, SFS_JOBS_MAX, &s->job_totals);
	}
	if (!(s->hint_jobs = malloc(SFS_HINT_JOBS_MAX * sizeof(*s->hint_jobs))))
		return -ENOMEM;
	s->n_hint_jobs = sfs_hints_stats(src->hints, &s->hints, s->hint_jobs, SFS_HINT_JOBS_MAX);
	return 0;
}

int sfs_stats_snapshot_take(sfs_stats *st, struct sfs_stats_snapshot *out)
{
	const struct sfs_stats_sources *src = &st->src;
	struct sfs_stats_snapshot *s = out;
	const struct sfs_keeper_state *k = src->keeper;

	*s = (struct sfs_stats_snapshot){0};
	s->uptime_ns = sfs_now_ns() - src->start_ns;
	s->serving_pid = (uint64_t)getpid();
	s->crash_recovery = k && k->kernel_minor >= SFS_FUSE_RESEND_MINOR;
	for (int r = 0; r < SFS_RESTART_N; r++)
		s->restarts[r] = k ? __atomic_load_n(&k->restarts[r], __ATOMIC_RELAXED) : 0;
	s->restart_names = sfs_restart_reason_names;
	s->fuse = src->fuse;
	s->inodes = sfs_inode_count(src->inodes);
	s->inode_bytes = sfs_inode_bytes(src->inodes);
	s->small_read_share = sfs_pc_small_share(src->page_cache);
	s->direct_io_mmap = sfs_fusedev_direct_io_mmap();
	s->kernel_minor = sfs_fusedev_kernel_minor();
	sfs_workers_get_stats(&s->workers);
	sfs_prefetch_get_stats(src->prefetch, &s->prefetch);
	sfs_pt_get_stats(src->pt, &s->pt);
	s->pt_available = __atomic_load_n(&src->pt->available, __ATOMIC_RELAXED);
	take_store(src, s);
	s->immutable = src->ns != NULL;
	if (src->ns)
		sfs_ns_get_stats(src->ns, &s->ns);
	if (src->listings)
		sfs_ns_get_stats(src->listings, &s->listings);
	s->gpus = src->staging ? sfs_staging_gpu_count(src->staging) : 0;
	s->staging_pinned_bytes = src->staging ? sfs_staging_pinned_bytes(src->staging) : 0;
	s->rss_bytes = rss_bytes();
	s->mem_max = src->mem_max;
	sfs_iobuf_get_stats(&s->iobuf);
	s->memtrims = sfs_memtrim_count();
	if (take_origin(src, s) < 0 || take_jobs(src, s) < 0) {
		sfs_stats_snapshot_free(s);
		return -ENOMEM;
	}
	return 0;
}

void sfs_stats_snapshot_free(struct sfs_stats_snapshot *s)
{
	free(s->nodes);
	free(s->datasets);
	free(s->jobs);
	free(s->hint_jobs);
	s->nodes = NULL;
	s->datasets = NULL;
	s->jobs = NULL;
	s->hint_jobs = NULL;
}

ssize_t sfs_stats_read(sfs_stats *st, char **out)
{
	struct sfs_stats_snapshot s;
	char *text = NULL;
	size_t len = 0;

	if (sfs_stats_snapshot_take(st, &s) < 0)
		return -ENOMEM;
	int rc = sfs_stats_format(&s, &text, &len);
	sfs_stats_snapshot_free(&s);
	if (rc == 0 && st->src.amend)
		rc = st->src.amend(st->src.amend_arg, &text, &len);
	if (rc < 0) {
		free(text);
		return -ENOMEM;
	}
	*out = text;
	return (ssize_t)len;
}
