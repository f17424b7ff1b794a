// SPDX-License-Identifier: Apache-2.0
/*
 * test_stats — fs/observe/stats.c: the stats file's text from a snapshot
 * of known counters. Every sample comes after a # TYPE of its metric
 * (a histogram's _bucket, _sum and _count under its own), no metric is
 * declared twice, every value is a number; then the values and labels
 * themselves: uptime and decimals, per node (state, latency histogram
 * with +Inf, metadata calls by kind), per FUSE operation, per dataset
 * (labels escaped, "(unknown)", the window ratio absent until known), per
 * job (cumulative wait buckets), hint lists, the keeper, staging labels,
 * memory by kind, the parts left out without a store or job table.
 *
 * Linked with the observe wing (sfs_observe) only; the snapshot is built
 * here by hand, so no module it reports on is linked or faked.
 */
#include "../../fs/observe/stats.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>

/* Whether text has `line` as a whole line. */
static bool has(const char *text, const char *line)
{
	size_t n = strlen(line);
	for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return true;
	return false;
}

/* Whether a line of text starts with prefix. */
static bool has_prefix_line(const char *text, const char *prefix)
{
	for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix))
		if (p == text || p[-1] == '\n')
			return true;
	return false;
}

/* The text's form: every sample's metric declared before it by # TYPE
 * (histograms: name_bucket, name_sum, name_count), each declared once with
 * a # HELP, each sample "series value\n" with a numeric value. Returns the
 * number of samples, or -(line number) of the first bad line. */
static long check_form(const char *text)
{
	char declared[512][96];
	bool histogram[512];
	int n_declared = 0;
	long samples = 0, line_no = 0;

	for (const char *line = text; *line;) {
		const char *nl = strchr(line, '\n');
		if (!nl)
			return -(line_no + 1); /* the last line must end */
		size_t len = (size_t)(nl - line);
		char buf[1024];
		line_no++;
		if (len >= sizeof(buf))
			return -line_no;
		memcpy(buf, line, len);
		buf[len] = 0;
		line = nl + 1;
		char name[96], type[32];
		if (!strncmp(buf, "# HELP ", 7))
			continue;
		if (sscanf(buf, "# TYPE %95s %31s", name, type) == 2) {
			for (int k = 0; k < n_declared; k++)
				if (!strcmp(declared[k], name))
					return -line_no; /* declared twice */
			if (n_declared == 512 ||
			    (strcmp(type, "counter") && strcmp(type, "gauge") &&
			     strcmp(type, "histogram")))
				return -line_no;
			histogram[n_declared] = !strcmp(type, "histogram");
			snprintf(declared[n_declared++], sizeof(declared[0]), "%s", name);
			continue;
		}
		if (buf[0] == '#')
			return -line_no;
		size_t nlen = strcspn(buf, "{ ");
		char *sp = strrchr(buf, ' ');
		char *end;
		if (!sp || nlen >= sizeof(name))
			return -line_no;
		strtod(sp + 1, &end);
		if (end == sp + 1 || *end)
			return -line_no; /* not a number */
		memcpy(name, buf, nlen);
		name[nlen] = 0;
		bool ok_name = false;
		for (int k = 0; k < n_declared && !ok_name; k++) {
			size_t dl = strlen(declared[k]);
			ok_name = !strcmp(declared[k], name) ||
				  (histogram[k] && !strncmp(declared[k], name, dl) &&
				   (!strcmp(name + dl, "_bucket") || !strcmp(name + dl, "_sum") ||
				    !strcmp(name + dl, "_count")));
		}
		if (!ok_name)
			return -line_no;
		samples++;
	}
	return samples;
}

/* The FUSE side's counters, as fs/ops keeps them. */
static uint64_t ops[3] = {7, 0, 123456789012ull};
static const char *const op_names[3] = {"lookup", "forget", "read"};
static uint64_t read_bytes = 1ull << 40, read_errors = 3, invalidations = 4, direct_opens = 5,
		inodes_pruned = 6;
static uint64_t stage_bytes[2] = {4096, 0}, stage_requests[2] = {1, 0}, stage_errors[2] = {0, 9};
static const char *const stage_targets[2] = {"shm", "cuda"};
static const char *const stage_reasons[2] = {"invalid", "out_of_range"};
static const char *const restart_names[SFS_RESTART_N] = {"crash", "wedge", "takeover"};
static const char *const origin_ops[SFS_ORIGIN_N_OPS] = {"read",    "getattr",	"lookup",
							 "readdir", "readlink", "fsstat"};
static const double lat_bounds[SFS_ORIGIN_LAT_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1};

static struct sfs_origin_node_stats nodes[2];
static struct sfs_store_dataset datasets[3];
static struct sfs_job_stats jobs[1];
static struct sfs_hint_job_counts hint_jobs[1];

/* A snapshot with every part present and known values. */
static struct sfs_stats_snapshot full(void)
{
	struct sfs_stats_snapshot s = {0};

	s.uptime_ns = 2500000000ull;
	s.serving_pid = 4242;
	s.crash_recovery = true;
	s.restarts[1] = 2;
	s.restart_names = restart_names;
	nodes[0] = (struct sfs_origin_node_stats){.addr = "10.0.0.1",
						  .state = SFS_NODE_UP,
						  .conns_up = 4,
						  .read_bytes = 1000,
						  .lat_count = 10,
						  .lat_sum_ns = 1500000000ull};
	nodes[0].meta_by_op[2] = 11; /* lookup */
	nodes[0].meta_by_op[0] = 99; /* read: never a metadata call */
	for (int b = 0; b < SFS_ORIGIN_LAT_BUCKETS; b++)
		nodes[0].lat_buckets[b] = b < 3 ? 0 : 10; /* cumulative, as the origin keeps them */
	nodes[1] = (struct sfs_origin_node_stats){.addr = "10.0.0.2", .state = SFS_NODE_DOWN};
	s.n_nodes = 2;
	s.nodes = nodes;
	s.origin_op_names = origin_ops;
	s.lat_bounds_s = lat_bounds;
	s.queue_depth = 3;
	s.background.slots = 8;
	s.background.rate_limited_ms = 1500;
	s.fuse = (struct sfs_stats_fuse){.ops = ops,
					 .op_names = op_names,
					 .n_ops = 3,
					 .read_bytes = &read_bytes,
					 .read_errors = &read_errors,
					 .invalidations = &invalidations,
					 .direct_opens = &direct_opens,
					 .inodes_pruned = &inodes_pruned,
					 .stage_bytes = stage_bytes,
					 .stage_requests = stage_requests,
					 .stage_targets = stage_targets,
					 .n_stage_targets = 2,
					 .stage_errors = stage_errors,
					 .stage_reasons = stage_reasons,
					 .n_stage_reasons = 2};
	s.inodes = 40;
	s.inode_bytes = 8000;
	s.small_read_share = 128;
	s.kernel_minor = 41;
	s.workers = (struct sfs_workers_stats){.working = 2, .waiting = 1, .parked = 5};
	s.prefetch.hit_bytes = 777;
	s.prefetch.miss_bytes = 333;
	s.prefetch.buffer_bytes = 1 << 20;
	s.have_store = true;
	s.store.online = true;
	s.store.index_bytes = 2048;
	s.scrub.interval_ms = 60000;
	s.scrub.last_pass_ms = 1250;
	s.pt.opens = 12;
	s.pt_available = true;
	datasets[0] = (struct sfs_store_dataset){
	    .id = 1, .name = "/export/a\"b\\c\nd", .bytes = 10, .window_hit_ppm = 500000};
	datasets[0].refused_bytes[SFS_STORE_REFUSED_SCAN] = 64;
	datasets[1] = (struct sfs_store_dataset){.id = 0, .name = NULL, .window_hit_ppm = -1};
	datasets[2] =
	    (struct sfs_store_dataset){.id = 2, .name = "/export/x", .window_hit_ppm = -1};
	s.have_datasets = true;
	s.datasets = datasets;
	s.n_datasets = 3;
	s.policy = SFS_STORE_AUTO;
	s.policy_idle_ms = 120000;
	s.immutable = true;
	s.ns.entries = 17;
	s.listings.entries = 5;
	s.listings.mem_bytes = 640;
	s.gpus = 2;
	s.staging_pinned_bytes = 1 << 21;
	s.rss_bytes = 123 << 20;
	s.mem_max = 1ull << 32;
	s.memtrims = 8;
	s.have_jobs = true;
	jobs[0] = (struct sfs_job_stats){
	    .label = "slurm/42", .read_bytes = 100, .wait_count = 3, .wait_ns = 2500000};
	jobs[0].wait_buckets[0] = 1;
	jobs[0].wait_buckets[2] = 2;
	s.jobs = jobs;
	s.n_jobs = 1;
	s.job_totals = (struct sfs_jobs_totals){.jobs = 1, .pid_entries = 3};
	s.hints.active_lists = 1;
	s.hints.refused_too_long = 2;
	hint_jobs[0] = (struct sfs_hint_job_counts){.job = "slurm/42"};
	hint_jobs[0].c.lists = 1;
	hint_jobs[0].c.passed_items = 6;
	s.hint_jobs = hint_jobs;
	s.n_hint_jobs = 1;
	return s;
}

static char *render(const struct sfs_stats_snapshot *s)
{
	char *text = NULL;
	size_t len = 0;

	if (sfs_stats_format(s, &text, &len) != 0 || !text || strlen(text) != len) {
		free(text);
		return NULL;
	}
	return text;
}

static void test_form(void)
{
	struct sfs_stats_snapshot s = full();
	char *text = render(&s);

	ok(text != NULL, "rendered");
	long n = text ? check_form(text) : 0;
	ok(n > 200, "well formed: every sample under its # TYPE, each declared once (%ld)", n);
	free(text);
}

static void test_values(void)
{
	struct sfs_stats_snapshot s = full();
	char *t = render(&s);

	if (!t)
		t = strdup("");
	ok(has(t, "shardfs_build_info{version=\"" SFS_VERSION "\"} 1"), "build info");
	ok(has(t, "shardfs_uptime_seconds 2.500"), "uptime in seconds, 3 decimals");
	ok(has(t, "shardfs_serving_pid 4242") && has(t, "shardfs_crash_recovery 1"), "keeper");
	ok(has(t, "shardfs_daemon_restarts_total{reason=\"wedge\"} 2") &&
	       has(t, "shardfs_daemon_restarts_total{reason=\"crash\"} 0"),
	   "restarts by reason");
	ok(has(t, "shardfs_node_up{node=\"10.0.0.1\"} 1") &&
	       has(t, "shardfs_node_up{node=\"10.0.0.2\"} 0") &&
	       has(t, "shardfs_node_state{node=\"10.0.0.2\",state=\"down\"} 1") &&
	       has(t, "shardfs_node_state{node=\"10.0.0.2\",state=\"up\"} 0"),
	   "node health");
	ok(has(t, "shardfs_node_metadata_calls_total{node=\"10.0.0.1\",kind=\"lookup\"} 11") &&
	       !strstr(t, "kind=\"read\""),
	   "metadata calls by kind, READ not among them");
	ok(has(t, "shardfs_node_latency_seconds_bucket{node=\"10.0.0.1\",le=\"0.0005\"} 0") &&
	       has(t, "shardfs_node_latency_seconds_bucket{node=\"10.0.0.1\",le=\"0.001\"} 10") &&
	       has(t, "shardfs_node_latency_seconds_bucket{node=\"10.0.0.1\",le=\"+Inf\"} 10") &&
	       has(t, "shardfs_node_latency_seconds_sum{node=\"10.0.0.1\"} 1.500000") &&
	       has(t, "shardfs_node_latency_seconds_count{node=\"10.0.0.1\"} 10"),
	   "latency histogram: buckets, +Inf, sum, count");
	ok(has(t, "shardfs_origin_queue_depth 3") &&
	       has(t, "shardfs_background_fetch_rate_limited_seconds_total 1.500"),
	   "queue and warm-ups");
	ok(has(t, "shardfs_fuse_requests_total{op=\"read\"} 123456789012") &&
	       has(t, "shardfs_fuse_requests_total{op=\"forget\"} 0"),
	   "requests by operation, with the names given");
	ok(has(t, "shardfs_fuse_read_bytes_total 1099511627776") &&
	       has(t, "shardfs_fuse_read_errors_total 3") &&
	       has(t, "shardfs_kernel_cache_invalidations_total 4") &&
	       has(t, "shardfs_fuse_direct_opens_total 5") &&
	       has(t, "shardfs_inodes_pruned_total 6") && has(t, "shardfs_inodes 40"),
	   "the FUSE counters read where fs/ops keeps them");
	ok(has(t, "shardfs_fuse_small_read_share 0.500"), "small read share from 256ths");
	ok(has(t, "shardfs_fuse_workers{state=\"parked\"} 5") &&
	       has(t, "shardfs_fuse_kernel_protocol_minor 41"),
	   "workers, kernel protocol");
	ok(has(t, "shardfs_cache_enabled 1") && has(t, "shardfs_cache_hit_bytes_total 777") &&
	       has(t, "shardfs_cache_miss_bytes_total 333"),
	   "cache hits and misses");
	ok(has(t, "shardfs_passthrough_enabled 1") &&
	       has(t, "shardfs_passthrough_opens_total 12") &&
	       has(t, "shardfs_cache_scrub_interval_seconds 60") &&
	       has(t, "shardfs_cache_scrub_last_pass_seconds 1.250"),
	   "passthrough and scrubber");
	ok(has(t, "shardfs_cache_policy_info{policy=\"auto\"} 1") &&
	       has(t, "shardfs_cache_idle_seconds 120"),
	   "policy");
	ok(has(t, "shardfs_cache_dataset_bytes{dataset=\"/export/a\\\"b\\\\c\\nd\"} 10"),
	   "a dataset's name escaped in its label (quote, backslash, newline)");
	ok(has(t, "shardfs_cache_dataset_bytes{dataset=\"(unknown)\"} 0"), "dataset 0: (unknown)");
	ok(has(t,
	       "shardfs_cache_dataset_refused_bytes_total{dataset=\"/export/x\",reason=\"scan\"} "
	       "0") &&
	       has(t,
		   "shardfs_cache_dataset_refused_bytes_total{dataset=\"/export/a\\\"b\\\\c\\nd\","
		   "reason=\"scan\"} 64"),
	   "refusals by dataset and reason");
	ok(has(t, "shardfs_cache_dataset_window_hit_ratio{dataset=\"/export/a\\\"b\\\\c\\nd\"} "
		  "0.500000") &&
	       !strstr(t, "shardfs_cache_dataset_window_hit_ratio{dataset=\"/export/x\"}"),
	   "the window ratio, absent before a window closed");
	ok(has(t, "shardfs_immutable 1") && has(t, "shardfs_namespace_entries 17") &&
	       has(t, "shardfs_serving_from_cache 0"),
	   "namespace: a node is up, so not from the cache only");
	ok(has(t, "shardfs_listing_names 5"), "listings");
	ok(has(t, "shardfs_gpus 2") && has(t, "shardfs_stage_bytes_total{target=\"shm\"} 4096") &&
	       has(t, "shardfs_stage_requests_total{target=\"cuda\"} 0") &&
	       has(t, "shardfs_stage_errors_total{reason=\"out_of_range\"} 9"),
	   "staging by target and reason, with the labels given");
	ok(has(t, "shardfs_process_resident_bytes 128974848") &&
	       has(t, "shardfs_memory_budget_bytes 4294967296") &&
	       has(t, "shardfs_memory_bytes{kind=\"listings\"} 640") &&
	       has(t, "shardfs_memory_bytes{kind=\"inodes\"} 8000") &&
	       has(t, "shardfs_memory_bytes{kind=\"staging_pinned\"} 2097152") &&
	       has(t, "shardfs_memory_trims_total 8"),
	   "memory by kind");
	ok(has(t, "shardfs_job_read_bytes_total{job=\"slurm/42\"} 100") &&
	       has(t, "shardfs_job_read_wait_seconds_bucket{job=\"slurm/42\",le=\"+Inf\"} 3") &&
	       has(t, "shardfs_job_read_wait_seconds_sum{job=\"slurm/42\"} 0.002500") &&
	       has(t, "shardfs_jobs 1"),
	   "per job");
	char bucket[160];
	snprintf(bucket, sizeof(bucket),
		 "shardfs_job_read_wait_seconds_bucket{job=\"slurm/42\",le=\"%g\"} 3",
		 sfs_jobs_wait_bounds_s[2]);
	ok(has(t, bucket), "a job's wait buckets are cumulative (1 + 0 + 2)");
	ok(has(t, "shardfs_hint_lists 1") &&
	       has(t, "shardfs_hint_refused_total{reason=\"too_long\"} 2") &&
	       has(t, "shardfs_hint_lists_total{job=\"slurm/42\"} 1") &&
	       has(t, "shardfs_hint_skipped_items_total{job=\"slurm/42\",reason=\"passed\"} 6"),
	   "hints");
	free(t);
}

/* Without a store, a job table or a node up. */
static void test_parts_absent(void)
{
	struct sfs_stats_snapshot s = full();

	s.have_store = false;
	s.store = (struct sfs_store_stats){0};
	s.have_datasets = false;
	s.have_jobs = false;
	s.nodes[0].state = SFS_NODE_SUSPECT;
	char *t = render(&s);
	if (!t)
		t = strdup("");
	ok(check_form(t) > 100, "still well formed");
	ok(has(t, "shardfs_cache_enabled 0") && has(t, "shardfs_cache_miss_bytes_total 0"),
	   "no store: no cache, no misses counted against it");
	ok(!has_prefix_line(t, "shardfs_cache_dataset_") && !has_prefix_line(t, "shardfs_job_"),
	   "no datasets, no per-job samples");
	ok(has(t, "shardfs_serving_from_cache 1"),
	   "immutable with no node up: from the cache only");
	ok(has(t, "shardfs_hint_lists 1"), "hints still rendered");
	s.immutable = false;
	free(t);
	t = render(&s);
	ok(t && has(t, "shardfs_serving_from_cache 0"), "not immutable: never from the cache only");
	free(t);
}

/* The FUSE counters are read as they are rendered, not copied at the
 * snapshot. */
static void test_live_counters(void)
{
	struct sfs_stats_snapshot s = full();

	read_errors = 3;
	char *a = render(&s);
	__atomic_fetch_add(&read_errors, 1, __ATOMIC_RELAXED);
	char *b = render(&s);
	ok(a && b && has(a, "shardfs_fuse_read_errors_total 3") &&
	       has(b, "shardfs_fuse_read_errors_total 4"),
	   "a counter fs/ops moves shows at the next rendering");
	free(a);
	free(b);
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {{"form", test_form},
						{"values", test_values},
						{"parts_absent", test_parts_absent},
						{"live_counters", test_live_counters}};

	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
