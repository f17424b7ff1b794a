// SPDX-License-Identifier: Apache-2.0
/*
 * stats — renders MOUNTPOINT/.shardfs/stats in the Prometheus text
 * exposition format (version 0.0.4) from every module's counters.
 * Runs on a FUSE worker at open of the stats file. Reads each module's
 * counters through its get_stats call: atomics, and the gauges that the
 * store and the segment index keep under their locks (taken briefly, no
 * I/O under them); /proc/self/statm for the RSS.
 */
#include "../fs.h"
#include "../restart/carry.h"
#include "../hints/hints.h"
#include "../kernel/fusedev.h"
#include "../memtrim.h"
#include "../kernel/workers.h"
#include "../kernel/passthrough.h"
#include "../../cache/common/iobuf.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void help(FILE *f, const char *name, const char *type, const char *text)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* One unlabelled metric: its HELP, TYPE and sample. */
static void metric(FILE *f, const char *name, const char *type, const char *text, uint64_t value)
{
	help(f, name, type, text);
	fprintf(f, "%s %llu\n", name, (unsigned long long)value);
}

#define STR_(x) #x
#define STR(x)	STR_(x)

/* One labelled sample per job. */
#define PER_JOB(name, type, text, field)                                                           \
	do {                                                                                       \
		help(f, name, type, text);                                                         \
		for (size_t k = 0; k < n; k++)                                                     \
			fprintf(f, name "{job=\"%s\"} %llu\n", js[k].label,                        \
				(unsigned long long)js[k].field);                                  \
	} while (0)

/* Per-job read accounting (fs/observe/jobs.h). Returns 0 or -ENOMEM. */
static int render_jobs(FILE *f, sfs_jobs *jobs)
{
	struct sfs_jobs_totals t;
	struct sfs_job_stats *js = malloc(SFS_JOBS_MAX * sizeof(*js));

	if (!js)
		return -ENOMEM;
	size_t n = sfs_jobs_snapshot(jobs, js, SFS_JOBS_MAX, &t);
	PER_JOB("shardfs_job_read_bytes_total", "counter",
		"Bytes returned to read() and placed by STAGE, by the caller's job.", read_bytes);
	PER_JOB("shardfs_job_read_requests_total", "counter",
		"read() and STAGE calls (errors included), by the caller's job.", read_requests);
	PER_JOB("shardfs_job_read_cache_bytes_total", "counter",
		"Of the job's bytes, those served from the local cache.", cache_bytes);
	help(f, "shardfs_job_read_wait_seconds", "histogram",
	     "Time each read() or STAGE call of the job waited for its data in the daemon.");
	for (size_t k = 0; k < n; k++) {
		uint64_t cum = 0;
		for (int b = 0; b < SFS_JOBS_WAIT_BUCKETS; b++) {
			cum += js[k].wait_buckets[b];
			fprintf(f,
				"shardfs_job_read_wait_seconds_bucket{job=\"%s\",le=\"%g\"} %llu\n",
				js[k].label, sfs_jobs_wait_bounds_s[b], (unsigned long long)cum);
		}
		fprintf(f, "shardfs_job_read_wait_seconds_bucket{job=\"%s\",le=\"+Inf\"} %llu\n",
			js[k].label, (unsigned long long)js[k].wait_count);
		fprintf(f, "shardfs_job_read_wait_seconds_sum{job=\"%s\"} %.6f\n", js[k].label,
			(double)js[k].wait_ns / 1e9);
		fprintf(f, "shardfs_job_read_wait_seconds_count{job=\"%s\"} %llu\n", js[k].label,
			(unsigned long long)js[k].wait_count);
	}
	help(f, "shardfs_job_read_blocked_seconds_total", "counter",
	     "Wall time during which at least one read of the job was waiting.");
	for (size_t k = 0; k < n; k++)
		fprintf(f, "shardfs_job_read_blocked_seconds_total{job=\"%s\"} %.6f\n", js[k].label,
			(double)js[k].busy_ns / 1e9);
	free(js);
	metric(f, "shardfs_jobs", "gauge",
	       "Jobs being accounted (at most " STR(SFS_JOBS_MAX) "; idle ones age out).", t.jobs);
	metric(f, "shardfs_jobs_aged_out_total", "counter",
	       "Jobs removed from the accounting after a long time without a read.",
	       t.evicted_jobs);
	metric(f, "shardfs_job_pid_entries", "gauge",
	       "Entries of the pid -> job cache in use (at most " STR(SFS_JOBS_PID_ENTRIES) ").",
	       t.pid_entries);
	metric(f, "shardfs_job_cgroup_reads_total", "counter",
	       "/proc/PID/cgroup files read to find a caller's job (pid cache misses).",
	       t.cgroup_reads);
	return 0;
}
#undef PER_JOB

/* Per node: metadata calls by kind and the latency histogram. */
static void render_node_calls(FILE *f, struct sfs_fs *fs)
{
	size_t n_nodes = sfs_origin_node_count(fs->origin);
	struct sfs_origin_node_stats ns;

	help(f, "shardfs_node_metadata_calls_total", "counter",
	     "Metadata requests the node answered, by kind (lookup, getattr, readdir, readlink, "
	     "fsstat).");
	for (size_t i = 0; i < n_nodes; i++) {
		sfs_origin_node_stats(fs->origin, i, &ns);
		for (int k = 0; k < SFS_ORIGIN_N_OPS; k++)
			if (k != SFS_ORIGIN_READ)
				fprintf(f,
					"shardfs_node_metadata_calls_total{node=\"%s\",kind=\"%s\"}"
					" %llu\n",
					ns.addr, sfs_origin_op_names[k],
					(unsigned long long)ns.meta_by_op[k]);
	}
	help(f, "shardfs_node_latency_seconds", "histogram",
	     "Time from sending a request to its reply.");
	for (size_t i = 0; i < n_nodes; i++) {
		sfs_origin_node_stats(fs->origin, i, &ns);
		for (int b = 0; b < SFS_ORIGIN_LAT_BUCKETS; b++)
			fprintf(f,
				"shardfs_node_latency_seconds_bucket{node=\"%s\",le=\"%g\"} %llu\n",
				ns.addr, sfs_origin_lat_bounds_s[b],
				(unsigned long long)ns.lat_buckets[b]);
		fprintf(f, "shardfs_node_latency_seconds_bucket{node=\"%s\",le=\"+Inf\"} %llu\n",
			ns.addr, (unsigned long long)ns.lat_count);
		fprintf(f, "shardfs_node_latency_seconds_sum{node=\"%s\"} %.6f\n", ns.addr,
			(double)ns.lat_sum_ns / 1e9);
		fprintf(f, "shardfs_node_latency_seconds_count{node=\"%s\"} %llu\n", ns.addr,
			(unsigned long long)ns.lat_count);
	}
}

/* Warm-ups' fetches, which yield to readers (warm_share, warm_rate). */
static void render_background(FILE *f, struct sfs_fs *fs)
{
	struct sfs_origin_background_stats b;

	sfs_origin_background_stats(fs->origin, &b);
	metric(f, "shardfs_background_fetch_slots", "gauge",
	       "Warm-up READs allowed in flight at once (warm_share of the connection slots; "
	       "4294967295: no share).",
	       b.slots);
	metric(f, "shardfs_background_fetch_inflight", "gauge", "Warm-up READs in flight now.",
	       b.inflight);
	metric(f, "shardfs_background_fetch_queued", "gauge",
	       "Warm-up READs waiting for a slot of their share, for the rate, or for readers' "
	       "requests to go first.",
	       b.queued);
	metric(f, "shardfs_background_fetch_rate_limit_bytes", "gauge",
	       "warm_rate: bytes per second warm-ups may fetch (0: no limit).", b.rate_limit);
	metric(f, "shardfs_background_fetch_bytes_total", "counter",
	       "Bytes warm-ups fetched from NFS.", b.read_bytes);
	metric(f, "shardfs_background_fetch_requests_total", "counter", "Warm-up READs answered.",
	       b.read_requests);
	metric(f, "shardfs_background_fetch_promoted_total", "counter",
	       "Warm-up READs a reader came to wait for, sent ahead of the rest of the warm-up.",
	       b.promoted);
	help(f, "shardfs_background_fetch_rate_limited_seconds_total", "counter",
	     "Time warm-up READs waited for warm_rate.");
	fprintf(f, "shardfs_background_fetch_rate_limited_seconds_total %.3f\n",
		(double)b.rate_limited_ms / 1000);
}

/* Per node: health, traffic, hedges; then the request queue. */
static void render_nodes(FILE *f, struct sfs_fs *fs)
{
	size_t n_nodes = sfs_origin_node_count(fs->origin);
	struct sfs_origin_node_stats ns;

#define PER_NODE(metric, type, text, expr)                                                         \
	do {                                                                                       \
		help(f, metric, type, text);                                                       \
		for (size_t i = 0; i < n_nodes; i++) {                                             \
			sfs_origin_node_stats(fs->origin, i, &ns);                                 \
			fprintf(f, metric "{node=\"%s\"} %llu\n", ns.addr,                         \
				(unsigned long long)(expr));                                       \
		}                                                                                  \
	} while (0)
	PER_NODE("shardfs_node_up", "gauge",
		 "1 if the node has a connection and answers in time, else 0.",
		 ns.state == SFS_NODE_UP);
	help(f, "shardfs_node_state", "gauge",
	     "Health of the node: up, suspect (timed out, probed) or down.");
	for (size_t i = 0; i < n_nodes; i++) {
		static const char *const names[] = {"up", "suspect", "down"};
		sfs_origin_node_stats(fs->origin, i, &ns);
		for (int s = 0; s < 3; s++)
			fprintf(f, "shardfs_node_state{node=\"%s\",state=\"%s\"} %d\n", ns.addr,
				names[s], (int)ns.state == s);
	}
	PER_NODE("shardfs_node_connections", "gauge", "Connections to the node that are up.",
		 ns.conns_up);
	PER_NODE("shardfs_node_read_bytes_total", "counter", "Bytes read from the node.",
		 ns.read_bytes);
	PER_NODE("shardfs_node_read_requests_total", "counter", "READ requests the node answered.",
		 ns.read_requests);
	PER_NODE("shardfs_node_metadata_requests_total", "counter",
		 "LOOKUP, GETATTR, READDIRPLUS, READLINK and FSSTAT requests the node answered.",
		 ns.meta_requests);
	PER_NODE("shardfs_node_errors_total", "counter",
		 "Failed requests and broken connections on the node.", ns.errors);
	PER_NODE("shardfs_node_reissued_total", "counter",
		 "Requests re-issued to other nodes because this node failed or did not answer "
		 "within timeo.",
		 ns.reissued);
	PER_NODE("shardfs_node_hedged_total", "counter",
		 "Slow READs on the node (waiting 4x the recent READ latency, at least 40 ms, "
		 "within timeo; every READ of a node silent that long) also sent to another "
		 "node; the first reply wins.",
		 ns.hedged);
	PER_NODE("shardfs_node_hedge_wins_total", "counter",
		 "Hedged READs of the node that the other node answered first.", ns.hedge_wins);
	PER_NODE("shardfs_node_read_slots", "gauge",
		 "READs the node may have in flight: nconnect x 4; for a node slower than 0.75 of "
		 "the median node for 0.5 s, its rate's share of what the other nodes have in "
		 "flight (its READs then take as long as theirs).",
		 ns.read_slots);
	PER_NODE("shardfs_node_read_rate_bytes", "gauge",
		 "Bytes per second the node's READs have been giving (each reply's size x the "
		 "READs in flight on the node / its latency; a moving average).",
		 ns.read_rate);
	PER_NODE("shardfs_node_reconnects_total", "counter",
		 "Connections to the node lost and re-made.", ns.reconnects);
#undef PER_NODE
	render_node_calls(f, fs);
	metric(f, "shardfs_origin_queue_depth", "gauge",
	       "Requests waiting for a free connection slot.", sfs_origin_queue_depth(fs->origin));
	render_background(f, fs);
}

/* The FUSE side: requests by operation, read bytes and errors, inodes. */
static void render_fuse(FILE *f, struct sfs_fs *fs)
{
	help(f, "shardfs_fuse_requests_total", "counter", "FUSE requests by operation.");
	for (int op = 0; op < SFS_OP_COUNT; op++)
		fprintf(f, "shardfs_fuse_requests_total{op=\"%s\"} %llu\n", sfs_fuse_op_names[op],
			(unsigned long long)__atomic_load_n(&fs->op_count[op], __ATOMIC_RELAXED));
	metric(f, "shardfs_fuse_read_bytes_total", "counter", "Bytes returned to read() callers.",
	       __atomic_load_n(&fs->read_bytes, __ATOMIC_RELAXED));
	metric(f, "shardfs_fuse_read_errors_total", "counter",
	       "read() calls answered with an error.",
	       __atomic_load_n(&fs->read_errors, __ATOMIC_RELAXED));
	metric(f, "shardfs_inodes", "gauge", "Inodes the kernel holds references to.",
	       sfs_inode_count(fs->inodes));
	metric(f, "shardfs_inodes_pruned_total", "counter",
	       "Inodes the kernel was asked to forget because it held more than inode_max.",
	       __atomic_load_n(&fs->inodes_pruned, __ATOMIC_RELAXED));
	metric(f, "shardfs_fuse_direct_opens_total", "counter",
	       "Opens answered direct_io (page_cache=, never or auto's first epochs).",
	       __atomic_load_n(&fs->direct_opens, __ATOMIC_RELAXED));
	help(f, "shardfs_fuse_small_read_share", "gauge",
	     "page_cache=auto: moving share of direct_io opens that read in small pieces; from "
	     "0.5 first reads go through the page cache.");
	fprintf(f, "shardfs_fuse_small_read_share %.3f\n",
		sfs_pc_small_share(&fs->page_cache) / 256.0);
	metric(f, "shardfs_fuse_direct_io_mmap", "gauge",
	       "1: the kernel maps direct_io files shared (FUSE_DIRECT_IO_ALLOW_MMAP).",
	       sfs_fusedev_direct_io_mmap());
	metric(f, "shardfs_fuse_kernel_protocol_minor", "gauge",
	       "The FUSE protocol 7.N the kernel speaks (7.45: inodes can be handed back).",
	       sfs_fusedev_kernel_minor());

	struct sfs_workers_stats ws;
	sfs_workers_get_stats(&ws);
	help(f, "shardfs_fuse_workers", "gauge",
	     "FUSE worker threads by state: working (taking requests), waiting (for NFS or a "
	     "chunk), parked (spare).");
	fprintf(f, "shardfs_fuse_workers{state=\"working\"} %u\n", ws.working);
	fprintf(f, "shardfs_fuse_workers{state=\"waiting\"} %u\n", ws.waiting);
	fprintf(f, "shardfs_fuse_workers{state=\"parked\"} %u\n", ws.parked);
	metric(f, "shardfs_fuse_worker_handoffs_total", "counter",
	       "Waits that woke or started a spare worker to take requests meanwhile.",
	       ws.handoffs);
	metric(f, "shardfs_fuse_worker_limit_total", "counter",
	       "Waits that wanted a spare worker with max_threads already started: requests "
	       "queued in the kernel meanwhile.",
	       ws.at_limit);
}

/* Fetching: buffers, cache writes waiting or skipped, readahead, waste. */
static void render_prefetch(FILE *f, struct sfs_fs *fs, const struct sfs_prefetch_stats *ps)
{
	metric(f, "shardfs_prefetch_inflight_bytes", "gauge",
	       "Chunk bytes being fetched from NFS now.", ps->inflight_bytes);
	metric(f, "shardfs_prefetch_buffer_bytes", "gauge", "Memory held in chunk buffers.",
	       ps->buffer_bytes);
	metric(f, "shardfs_prefetch_over_budget_buffer_bytes", "gauge",
	       "Of those, idle 1 MiB buffers kept past prefetch_mem for readers' own chunks "
	       "(32 MiB at most; freed when idle).",
	       ps->over_budget_bytes);
	metric(f, "shardfs_prefetch_write_pinned_bytes", "gauge",
	       "Chunk buffers waiting for their cache write (about prefetch_mem at most).",
	       ps->write_pinned_bytes);
	metric(f, "shardfs_cache_write_skipped_bytes_total", "counter",
	       "Fetched bytes not offered to the cache because the writes waiting already held "
	       "prefetch_mem (the cache disk is slower than the network).",
	       ps->write_skipped_bytes);
	metric(f, "shardfs_prefetch_fetched_bytes_total", "counter",
	       "Bytes fetched from NFS for reads and readahead.", ps->fetched_bytes);
	metric(f, "shardfs_prefetch_readahead_chunks_total", "counter",
	       "Chunks fetched ahead of the reader.", ps->readahead_chunks);
	help(f, "shardfs_prefetch_undelivered_bytes_total", "counter",
	     "Bytes fetched from NFS that no reader got and no cache kept, by cause: read ahead "
	     "and never read (readahead_unread), the rest of chunks read only in part "
	     "(chunk_rest).");
	fprintf(f, "shardfs_prefetch_undelivered_bytes_total{cause=\"readahead_unread\"} %llu\n",
		(unsigned long long)ps->undelivered_unread_bytes);
	fprintf(f, "shardfs_prefetch_undelivered_bytes_total{cause=\"chunk_rest\"} %llu\n",
		(unsigned long long)ps->undelivered_rest_bytes);
	metric(f, "shardfs_prefetch_wasted_chunks_total", "counter",
	       "Readahead chunks dropped unread.", ps->wasted_chunks);
	metric(f, "shardfs_prefetch_direct_fetches_total", "counter",
	       "Reads of random readers without a cache fetched from NFS as asked (no chunk).",
	       ps->direct_fetches);
	metric(f, "shardfs_prefetch_files_total", "counter", "File versions opened for fetching.",
	       ps->files_opened);

	metric(f, "shardfs_prefetch_shard_files_total", "counter",
	       "Files fetched whole (shard prefetch or shardfs-warm).", ps->shard_files);
	metric(f, "shardfs_read_stale_total", "counter",
	       "Chunks refused because the file changed on the server under an open.",
	       ps->stale_errors);
	metric(f, "shardfs_kernel_cache_invalidations_total", "counter",
	       "Kernel page caches dropped because a file changed on the server.",
	       __atomic_load_n(&fs->invalidations, __ATOMIC_RELAXED));
}

/* The local cache. */
static void render_cache(FILE *f, struct sfs_fs *fs, const struct sfs_prefetch_stats *ps,
			 const struct sfs_store_stats *cs)
{
	metric(f, "shardfs_cache_enabled", "gauge",
	       "1 if a cache_dir is configured and usable now.", fs->store && cs->online);
	metric(f, "shardfs_cache_hit_bytes_total", "counter",
	       "Bytes read served from the local cache.", ps->hit_bytes);
	metric(f, "shardfs_cache_read_bytes_total", "counter",
	       "Bytes read from the cache's files to serve hits: whole 16 KiB sub-blocks, "
	       "chunks or packed records, as verification needs them.",
	       cs->read_bytes);
	metric(f, "shardfs_cache_direct_reads_total", "counter",
	       "Reads served straight from the cache, verified per 16 KiB block or object, "
	       "with no chunk buffer (small files and random readers).",
	       ps->direct_reads);
	metric(f, "shardfs_cache_preloads_total", "counter",
	       "Small cached files whose disk read started at open, ahead of the kernel's "
	       "first READ.",
	       ps->preloads);
	metric(f, "shardfs_cache_preload_misses_total", "counter",
	       "Preloads whose bytes did not check when read (fetched again from NFS).",
	       ps->preload_misses);
	metric(f, "shardfs_cache_preload_unread_total", "counter",
	       "Preloads dropped at the last close of a file that was not read.",
	       ps->preload_unread);
	metric(f, "shardfs_cache_miss_bytes_total", "counter",
	       "Bytes readers needed that were not in the local cache (fetched from NFS).",
	       (fs->store ? ps->miss_bytes : 0));
	metric(f, "shardfs_cache_used_bytes", "gauge",
	       "Bytes of chunks in the local cache, chunks being written included.",
	       cs->used_bytes);
	metric(f, "shardfs_cache_capacity_bytes", "gauge", "cache_size in effect.",
	       cs->capacity_bytes);
	metric(f, "shardfs_cache_objects", "gauge", "File versions with chunks in the local cache.",
	       cs->objects);
	metric(f, "shardfs_cache_small_objects", "gauge",
	       "File versions of one chunk or less packed in segment files (in objects too).",
	       cs->small_objects);
	metric(f, "shardfs_cache_segments", "gauge",
	       "Segment files holding packed small file versions.", cs->segments);
	metric(f, "shardfs_cache_index_bytes", "gauge",
	       "Memory held by the local cache's indexes (objects, segment index).",
	       cs->index_bytes);
	metric(f, "shardfs_cache_write_bytes_total", "counter",
	       "Bytes written durably to the local cache.", cs->write_bytes);
	metric(f, "shardfs_cache_write_queue_bytes", "gauge",
	       "Chunk bytes waiting to be written to the cache.", cs->queued_bytes);
	metric(
	    f, "shardfs_cache_not_admitted_bytes_total", "counter",
	    "Bytes not cached because the cache was full (pin) or its filesystem ran out of space.",
	    cs->not_admitted_bytes);
	metric(f, "shardfs_cache_evicted_bytes_total", "counter",
	       "Bytes evicted to stay under cache_size.", cs->evicted_bytes);
	metric(f, "shardfs_cache_checksum_failures_total", "counter",
	       "Cached chunks whose bytes did not match their checksum (refetched, never served).",
	       cs->checksum_failures);
	metric(f, "shardfs_cache_errors_total", "counter",
	       "Cache directory errors (missing, unwritable, I/O errors); reads went to NFS.",
	       cs->errors);
}

/* Passthrough opens (passthrough.h) and the scrubber (cache/store/scrub.c). */
static void render_passthrough(FILE *f, struct sfs_fs *fs)
{
	struct sfs_pt_stats pt;
	struct sfs_store_scrub_stats sc = {0};

	sfs_pt_get_stats(fs->pt, &pt);
	if (fs->store)
		sfs_store_scrub_get_stats(fs->store, &sc);
	metric(f, "shardfs_passthrough_enabled", "gauge",
	       "1 if passthrough is on and the kernel took it at mount (Linux 6.9+).",
	       __atomic_load_n(&fs->pt->available, __ATOMIC_RELAXED));
	metric(f, "shardfs_passthrough_opens_total", "counter",
	       "Opens the kernel reads from the cache file itself (no read reaches the daemon).",
	       pt.opens);
	metric(f, "shardfs_passthrough_open_bytes_total", "counter",
	       "Sizes of the file versions opened through passthrough.", pt.open_bytes);
	metric(f, "shardfs_passthrough_stale_opens_total", "counter",
	       "Opens refused with ESTALE beside passthrough readers of an older or evicted "
	       "version (the kernel retries them on a new inode).",
	       pt.stale_opens);
	metric(f, "shardfs_passthrough_unverified_opens_total", "counter",
	       "Opens of wholly cached versions not yet verified since the cache was loaded "
	       "(served by the daemon; the scrubber verifies them).",
	       pt.unverified);
	metric(f, "shardfs_passthrough_backing_files_total", "counter",
	       "Backing files registered with the kernel (one per file and version opened).",
	       pt.backing_files);
	metric(f, "shardfs_passthrough_backing_errors_total", "counter",
	       "Backing files the kernel refused (no CAP_SYS_ADMIN, a stacked cache_dir).",
	       pt.backing_errors);
	metric(f, "shardfs_cache_scrub_interval_seconds", "gauge",
	       "scrub_interval in effect; 0: no passes.", sc.interval_ms / 1000);
	metric(f, "shardfs_cache_scrub_rate_bytes", "gauge",
	       "scrub_rate in effect (0: the scrubber is not running).",
	       sc.running ? sc.rate_bytes : 0);
	metric(f, "shardfs_cache_scrub_passes_total", "counter",
	       "Scrub passes completed over every cached file.", sc.passes);
	metric(f, "shardfs_cache_scrub_bytes_total", "counter",
	       "Bytes the scrubber read and checked.", sc.bytes);
	metric(f, "shardfs_cache_scrub_versions_total", "counter",
	       "Cached file versions the scrubber checked.", sc.versions);
	metric(f, "shardfs_cache_scrub_failures_total", "counter",
	       "Cached file versions that failed a scrub (evicted, fetched again).", sc.failures);
	metric(f, "shardfs_cache_scrub_verified_for_open_total", "counter",
	       "Versions verified ahead of the passes because a passthrough open wanted them.",
	       sc.queued_verified);
	help(f, "shardfs_cache_scrub_last_pass_seconds", "gauge",
	     "How long the last complete scrub pass took.");
	fprintf(f, "shardfs_cache_scrub_last_pass_seconds %.3f\n", sc.last_pass_ms / 1000.0);
}

/* A dataset's name as a label value: \ " and newline escaped; id 0 is
 * "(unknown)". */
static void put_dataset_label(FILE *f, const struct sfs_store_dataset *d)
{
	fputs("dataset=\"", f);
	for (const char *p = d->name ? d->name : "(unknown)"; *p; p++) {
		if (*p == '\\' || *p == '"')
			fputc('\\', f);
		if (*p == '\n')
			fputs("\\n", f);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

#define PER_DATASET(name, type, text, expr)                                                        \
	do {                                                                                       \
		help(f, name, type, text);                                                         \
		for (size_t k = 0; k < n; k++) {                                                   \
			fputs(name "{", f);                                                        \
			put_dataset_label(f, &ds[k]);                                              \
			fprintf(f, "} %llu\n", (unsigned long long)(expr));                        \
		}                                                                                  \
	} while (0)

/* The cache by dataset: what each holds and what the policy decided. */
static void render_datasets(FILE *f, struct sfs_fs *fs)
{
	static const char *const policy[] = {
	    [SFS_STORE_LRU] = "lru", [SFS_STORE_PIN] = "pin", [SFS_STORE_AUTO] = "auto"};
	static const char *const reason[] = {[SFS_STORE_REFUSED_FULL] = "full",
					     [SFS_STORE_REFUSED_SCAN] = "scan",
					     [SFS_STORE_REFUSED_SHARE] = "share"};
	struct sfs_store_dataset *ds = NULL;
	size_t n = 0;
	uint64_t idle_ms = 0;

	if (!fs->store || sfs_store_dataset_stats(fs->store, &ds, &n) < 0)
		return;
	enum sfs_store_policy p = sfs_store_policy_of(fs->store, &idle_ms);
	help(f, "shardfs_cache_policy_info", "gauge", "The cache policy in effect (cache_policy).");
	fprintf(f, "shardfs_cache_policy_info{policy=\"%s\"} 1\n", policy[p]);
	metric(f, "shardfs_cache_idle_seconds", "gauge",
	       "cache_policy=auto: a dataset not read this long is idle (cache_idle).",
	       idle_ms / 1000);
	metric(f, "shardfs_cache_dataset_overflows_total", "counter",
	       "Lookups of datasets the cache's table had no room for (their files are counted "
	       "under dataset \"(unknown)\").",
	       sfs_store_dataset_overflows(fs->store));
	PER_DATASET("shardfs_cache_dataset_bytes", "gauge",
		    "Bytes a dataset holds in the local cache (a segment of packed files is "
		    "counted under its files' dataset, under \"(unknown)\" when they are of "
		    "several).",
		    ds[k].bytes);
	PER_DATASET("shardfs_cache_dataset_hit_bytes_total", "counter",
		    "Bytes readers of a dataset got from the local cache.", ds[k].hit_bytes);
	PER_DATASET("shardfs_cache_dataset_miss_bytes_total", "counter",
		    "Bytes readers of a dataset got from NFS.", ds[k].miss_bytes);
	PER_DATASET("shardfs_cache_dataset_admitted_bytes_total", "counter",
		    "Bytes of a dataset admitted into the cache (written, or being written).",
		    ds[k].admitted_bytes);
	help(f, "shardfs_cache_dataset_refused_bytes_total", "counter",
	     "Bytes of a dataset cache_policy=auto did not admit, by reason: full (the cache is "
	     "full of this dataset, or of what it may not take), scan (a first pass; the other "
	     "datasets were read within cache_idle), share (read again, but at its share of the "
	     "cache among the datasets being read).");
	for (size_t k = 0; k < n; k++)
		for (int r = 0; r < SFS_STORE_REFUSALS; r++) {
			fputs("shardfs_cache_dataset_refused_bytes_total{", f);
			put_dataset_label(f, &ds[k]);
			fprintf(f, ",reason=\"%s\"} %llu\n", reason[r],
				(unsigned long long)ds[k].refused_bytes[r]);
		}
	help(f, "shardfs_cache_dataset_window_hit_ratio", "gauge",
	     "Share of a dataset's bytes read from the cache over its last window of "
	     "max(2 x its cached bytes, 256 MiB) read (absent before the first window closed).");
	for (size_t k = 0; k < n; k++)
		if (ds[k].window_hit_ppm >= 0) {
			fputs("shardfs_cache_dataset_window_hit_ratio{", f);
			put_dataset_label(f, &ds[k]);
			fprintf(f, "} %.6f\n", ds[k].window_hit_ppm / 1e6);
		}
	PER_DATASET("shardfs_cache_dataset_reused", "gauge",
		    "1 if cache_policy=auto counts the dataset as read again (chunks refused or "
		    "evicted before offered again, or a warm-up) within cache_idle.",
		    ds[k].reused);
	PER_DATASET("shardfs_cache_dataset_reading", "gauge",
		    "1 if the dataset was read within cache_idle/20 (it counts for the shares).",
		    ds[k].in_use);
	free(ds);
}

/* The immutable namespace, and whether the mount serves from the cache only. */
static void render_namespace(FILE *f, struct sfs_fs *fs, const struct sfs_ns_stats *nss)
{
	size_t n_nodes = sfs_origin_node_count(fs->origin);
	struct sfs_origin_node_stats ns;
	bool any_up = false;
	for (size_t i = 0; i < n_nodes && !any_up; i++) {
		sfs_origin_node_stats(fs->origin, i, &ns);
		any_up = ns.state == SFS_NODE_UP;
	}
	metric(f, "shardfs_immutable", "gauge", "1 if mounted immutable (never revalidates).",
	       fs->ns != NULL);
	metric(f, "shardfs_namespace_entries", "gauge",
	       "Names (with handles and attributes) held by the immutable namespace.",
	       nss->entries);
	metric(f, "shardfs_namespace_complete_dirs", "gauge",
	       "Directories whose whole listing the namespace holds.", nss->dirs_complete);
	metric(f, "shardfs_namespace_disk_bytes", "gauge",
	       "Bytes of the namespace log in cache_dir.", nss->file_bytes);
	metric(f, "shardfs_namespace_memory_bytes", "gauge",
	       "Bytes of memory held by the namespace index.", nss->mem_bytes);
	metric(f, "shardfs_namespace_hits_total", "counter",
	       "Lookups and listings answered from the namespace without NFS.", nss->hits);
	metric(f, "shardfs_namespace_misses_total", "counter",
	       "Lookups and listings the namespace could not answer (asked NFS).", nss->misses);
	metric(f, "shardfs_namespace_not_recorded_total", "counter",
	       "Names not kept because namespace_max was reached.", nss->not_recorded);
	metric(f, "shardfs_namespace_discarded_bytes", "gauge",
	       "Bytes of a damaged namespace log cut off at mount (re-read from NFS).",
	       nss->discarded_bytes);
	metric(f, "shardfs_serving_from_cache", "gauge",
	       "1 if immutable and no node is up: names and data come from the cache only.",
	       fs->ns && !any_up);
}

/* Not immutable: lookups answered from directory listings (fs->listings). */
static void render_listings(FILE *f, const struct sfs_ns_stats *ls)
{
	metric(f, "shardfs_listing_names", "gauge",
	       "Names held from directory listings made to answer lookups (not immutable; each "
	       "for actimeo; listing_max).",
	       ls->entries);
	metric(f, "shardfs_listing_dirs", "gauge", "Directories whose listing answers lookups now.",
	       ls->dirs_complete);
	metric(f, "shardfs_listings_total", "counter",
	       "Directories listed whole because their names missed (READDIRPLUS instead of a "
	       "LOOKUP per file).",
	       ls->listings);
	metric(f, "shardfs_listings_failed_total", "counter",
	       "Of those, listings that failed or did not fit listing_max (lookups went to NFS).",
	       ls->listings_failed);
	metric(f, "shardfs_listing_hits_total", "counter",
	       "Lookups answered from a listing without an NFS call.", ls->hits);
	metric(f, "shardfs_listing_misses_total", "counter",
	       "Lookups no listing could answer (asked NFS).", ls->misses);
	metric(f, "shardfs_listing_absent_total", "counter",
	       "Lookups of names a current listing lacks (asked NFS: a name created since the "
	       "listing is found).",
	       ls->listing_absent);
}

/* Staging into GPU or shared memory. */
static void render_staging(FILE *f, struct sfs_fs *fs)
{
	metric(f, "shardfs_gpus", "gauge", "GPUs usable for staging (0 without CUDA).",
	       fs->staging ? sfs_staging_gpu_count(fs->staging) : 0);
	help(f, "shardfs_stage_bytes_total", "counter",
	     "Bytes placed by SHARDFS_IOC_STAGE, by target.");
	for (int t = 0; t < SFS_STAGE_KIND_COUNT; t++)
		fprintf(f, "shardfs_stage_bytes_total{target=\"%s\"} %llu\n",
			sfs_stage_target_name((enum sfs_stage_kind)t),
			(unsigned long long)__atomic_load_n(&fs->stage_bytes[t], __ATOMIC_RELAXED));
	help(f, "shardfs_stage_requests_total", "counter",
	     "SHARDFS_IOC_STAGE calls served, by target.");
	for (int t = 0; t < SFS_STAGE_KIND_COUNT; t++)
		fprintf(
		    f, "shardfs_stage_requests_total{target=\"%s\"} %llu\n",
		    sfs_stage_target_name((enum sfs_stage_kind)t),
		    (unsigned long long)__atomic_load_n(&fs->stage_requests[t], __ATOMIC_RELAXED));
	help(f, "shardfs_stage_errors_total", "counter",
	     "Staging ioctls refused or failed, by reason.");
	for (int r = 0; r < SFS_STAGE_E_COUNT; r++)
		fprintf(
		    f, "shardfs_stage_errors_total{reason=\"%s\"} %llu\n",
		    sfs_stage_reason_name((enum sfs_stage_reason)r),
		    (unsigned long long)__atomic_load_n(&fs->stage_errors[r], __ATOMIC_RELAXED));
}

/* The process's resident memory, and the bytes the daemon accounts for, by
 * kind, so that an operator sees where memory goes. */
static void render_memory(FILE *f, struct sfs_fs *fs, const struct sfs_prefetch_stats *ps,
			  const struct sfs_store_stats *cs, const struct sfs_ns_stats *nss,
			  const struct sfs_ns_stats *ls)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned long long size_pages = 0, rss_pages = 0;
	FILE *statm = fopen("/proc/self/statm", "r");

	if (statm) {
		if (fscanf(statm, "%llu %llu", &size_pages, &rss_pages) != 2)
			rss_pages = 0;
		fclose(statm);
	}
	metric(f, "shardfs_process_resident_bytes", "gauge", "Resident memory of the daemon (RSS).",
	       rss_pages * (unsigned long long)page);
	metric(f, "shardfs_memory_budget_bytes", "gauge",
	       "mem_max: the memory budget prefetch_mem, inode_max, listing_max and namespace_max "
	       "are derived from where not given.",
	       fs->opts->mem_max);
	help(f, "shardfs_memory_bytes", "gauge",
	     "Memory the daemon accounts for, by kind: chunk buffers (fetches, cache loads and "
	     "writes waiting; prefetch_mem), free halves of their huge pages kept for reuse, "
	     "the direct-read scratch (in flight and kept), the cache index, "
	     "the immutable namespace, the directory listings, the inodes the kernel holds, the "
	     "pinned GPU staging buffers.");
	struct sfs_iobuf_stats io;
	sfs_iobuf_get_stats(&io);
	const struct {
		const char *kind;
		uint64_t bytes;
	} kinds[] = {
	    {"chunk_buffers", ps->buffer_bytes},
	    {"chunk_buffers_kept", io.kept_bytes},
	    {"read_scratch", ps->direct_scratch_bytes},
	    {"cache_index", cs->index_bytes},
	    {"namespace", nss->mem_bytes},
	    {"listings", ls->mem_bytes},
	    {"inodes", sfs_inode_bytes(fs->inodes)},
	    {"staging_pinned", fs->staging ? sfs_staging_pinned_bytes(fs->staging) : 0},
	};
	for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
		fprintf(f, "shardfs_memory_bytes{kind=\"%s\"} %llu\n", kinds[k].kind,
			(unsigned long long)kinds[k].bytes);
	metric(
	    f, "shardfs_memory_trims_total", "counter",
	    "Times memory freed in bulk (inodes the kernel forgot) was given back to the system.",
	    sfs_memtrim_count());
}

/* The keeper (keeper.h): who serves, how often it was restarted and why. */
static void render_keeper(FILE *f, struct sfs_fs *fs)
{
	const struct sfs_keeper_state *k = fs->keeper;

	metric(f, "shardfs_serving_pid", "gauge",
	       "The process that serves the mount now (its keeper restarts it).",
	       (uint64_t)getpid());
	metric(f, "shardfs_crash_recovery", "gauge",
	       "1 if a keeper holds the mount and the kernel resends what a dead server left "
	       "unanswered (FUSE 7.40): a crash of the serving process costs a pause.",
	       k && k->kernel_minor >= SFS_FUSE_RESEND_MINOR);
	help(f, "shardfs_daemon_restarts_total", "counter",
	     "Serving processes started on the mount's connection after the first, by reason.");
	for (int r = 0; r < SFS_RESTART_N; r++)
		fprintf(f, "shardfs_daemon_restarts_total{reason=\"%s\"} %llu\n",
			sfs_restart_reason_names[r],
			(unsigned long long)(k ? __atomic_load_n(&k->restarts[r], __ATOMIC_RELAXED)
					       : 0));
}

/* One labelled sample per job's hint lists. */
#define PER_HINT_JOB(name, type, text, field)                                                      \
	do {                                                                                       \
		help(f, name, type, text);                                                         \
		for (size_t k = 0; k < n; k++)                                                     \
			fprintf(f, name "{job=\"%s\"} %llu\n", js[k].job,                          \
				(unsigned long long)js[k].c.field);                                \
	} while (0)

/* Epoch hints (fs/hints/hints.h): the lists alive, and per job what they asked
 * for, fetched, got read and wasted. Returns 0 or -ENOMEM. */
static int render_hints(FILE *f, struct sfs_fs *fs)
{
	struct sfs_hints_stats t;
	struct sfs_hint_job_counts *js = malloc(SFS_HINT_JOBS_MAX * sizeof(*js));

	if (!js)
		return -ENOMEM;
	size_t n = sfs_hints_stats(fs->hints, &t, js, SFS_HINT_JOBS_MAX);
	metric(f, "shardfs_hint_lists", "gauge", "Hint lists with items left to fetch or read.",
	       t.active_lists);
	metric(
	    f, "shardfs_hint_held_bytes", "gauge",
	    "Bytes of hinted items fetched ahead and not yet read (at most half of prefetch_mem).",
	    t.held_bytes);
	metric(f, "shardfs_hint_list_memory_bytes", "gauge",
	       "Memory of the hint lists' items and paths.", t.list_mem_bytes);
	help(f, "shardfs_hint_refused_total", "counter",
	     "Hint batches or lists refused: malformed (EINVAL), too long (E2BIG), or past the "
	     "lists' memory, mem_max / 8 (ENOMEM).");
	fprintf(f, "shardfs_hint_refused_total{reason=\"invalid\"} %llu\n",
		(unsigned long long)t.refused_invalid);
	fprintf(f, "shardfs_hint_refused_total{reason=\"too_long\"} %llu\n",
		(unsigned long long)t.refused_too_long);
	fprintf(f, "shardfs_hint_refused_total{reason=\"memory\"} %llu\n",
		(unsigned long long)t.refused_memory);
	PER_HINT_JOB("shardfs_hint_lists_total", "counter", "Hint lists committed, by job.", lists);
	PER_HINT_JOB("shardfs_hint_items_total", "counter",
		     "Items in committed hint lists, by job.", items);
	PER_HINT_JOB("shardfs_hint_item_bytes_total", "counter",
		     "Bytes of the hinted items resolved (fetched ahead or found cached), by job.",
		     item_bytes);
	PER_HINT_JOB("shardfs_hint_fetched_items_total", "counter",
		     "Hinted items fetched ahead of the reader (not in the cache), by job.",
		     fetched_items);
	PER_HINT_JOB("shardfs_hint_fetched_bytes_total", "counter",
		     "Bytes of the hinted items fetched ahead, by job.", fetched_bytes);
	PER_HINT_JOB("shardfs_hint_read_items_total", "counter",
		     "Items fetched ahead that a reader then read, by job.", read_items);
	PER_HINT_JOB("shardfs_hint_read_bytes_total", "counter",
		     "Bytes of the items fetched ahead that a reader then read, by job.",
		     read_bytes);
	PER_HINT_JOB("shardfs_hint_wasted_bytes_total", "counter",
		     "Bytes fetched ahead and dropped unread (passed by the reader, list replaced, "
		     "cancelled or closed), by job.",
		     wasted_bytes);
	help(
	    f, "shardfs_hint_skipped_items_total", "counter",
	    "Hinted items not fetched, by job and reason: cached (in the local cache), unknown "
	    "(missing, not a regular file, a range past its end), denied (the sender may not "
	    "read it), passed (the reader opened it before its fetch began: the fetch skips to the "
	    "reader).");
	for (size_t k = 0; k < n; k++) {
		fprintf(f, "shardfs_hint_skipped_items_total{job=\"%s\",reason=\"cached\"} %llu\n",
			js[k].job, (unsigned long long)js[k].c.cached_items);
		fprintf(f, "shardfs_hint_skipped_items_total{job=\"%s\",reason=\"unknown\"} %llu\n",
			js[k].job, (unsigned long long)js[k].c.unknown_items);
		fprintf(f, "shardfs_hint_skipped_items_total{job=\"%s\",reason=\"denied\"} %llu\n",
			js[k].job, (unsigned long long)js[k].c.denied_items);
		fprintf(f, "shardfs_hint_skipped_items_total{job=\"%s\",reason=\"passed\"} %llu\n",
			js[k].job, (unsigned long long)js[k].c.passed_items);
	}
	free(js);
	return 0;
}

ssize_t sfs_stats_render(struct sfs_fs *fs, char **out)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct sfs_prefetch_stats ps;
	struct sfs_store_stats cs = {0};
	struct sfs_ns_stats nss = {0}, ls = {0};

	if (!f)
		return -ENOMEM;
	sfs_prefetch_get_stats(fs->prefetch, &ps);
	if (fs->store)
		sfs_store_get_stats(fs->store, &cs);
	if (fs->ns)
		sfs_ns_get_stats(fs->ns, &nss);
	if (fs->listings)
		sfs_ns_get_stats(fs->listings, &ls);
	help(f, "shardfs_build_info", "gauge", "Version of the running daemon.");
	fprintf(f, "shardfs_build_info{version=\"%s\"} 1\n", SFS_VERSION);
	help(f, "shardfs_uptime_seconds", "gauge", "Seconds since the daemon mounted.");
	fprintf(f, "shardfs_uptime_seconds %.3f\n", (double)(sfs_now_ns() - fs->start_ns) / 1e9);
	render_keeper(f, fs);
	render_nodes(f, fs);
	render_fuse(f, fs);
	render_prefetch(f, fs, &ps);
	render_cache(f, fs, &ps, &cs);
	render_passthrough(f, fs);
	render_datasets(f, fs);
	render_namespace(f, fs, &nss);
	render_listings(f, &ls);
	render_staging(f, fs);
	render_memory(f, fs, &ps, &cs, &nss, &ls);
	int rc = fs->jobs ? render_jobs(f, fs->jobs) : 0;
	if (rc == 0)
		rc = render_hints(f, fs);
	if (fclose(f) != 0 || rc < 0) {
		free(buf);
		return -ENOMEM;
	}
	if (fs->carry && sfs_carry_apply(fs->carry, &buf, &len) < 0) {
		free(buf);
		return -ENOMEM;
	}
	*out = buf;
	return (ssize_t)len;
}
