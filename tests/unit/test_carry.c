// SPDX-License-Identifier: Apache-2.0
/*
 * test_carry — the counters that go on across a takeover (fs/restart/carry.c):
 * saved from one rendering of the stats file into a keeper state memfd,
 * loaded once, added to the next process's counter series (counters and
 * histogram parts, labelled or not, integers and decimals), never to
 * gauges or to the keeper's own restart counter. carry.c calls no
 * neighbour: main renders the text it saves, so the test hands it one.
 */
#include "../../fs/restart/carry.h"
#include "../../fs/restart/keeper.h"
#include "tap.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char old_text[] =
    "# HELP shardfs_uptime_seconds x\n# TYPE shardfs_uptime_seconds gauge\n"
    "shardfs_uptime_seconds 100.5\n"
    "# TYPE shardfs_daemon_restarts_total counter\n"
    "shardfs_daemon_restarts_total{reason=\"takeover\"} 1\n"
    "# TYPE shardfs_fuse_read_bytes_total counter\nshardfs_fuse_read_bytes_total 1000\n"
    "# TYPE shardfs_node_read_bytes_total counter\n"
    "shardfs_node_read_bytes_total{node=\"10.0.0.1\"} 70\n"
    "shardfs_node_read_bytes_total{node=\"10.0.0.2\"} 30\n"
    "# TYPE shardfs_job_read_wait_seconds histogram\n"
    "shardfs_job_read_wait_seconds_bucket{job=\"uid/0\",le=\"0.001\"} 5\n"
    "shardfs_job_read_wait_seconds_sum{job=\"uid/0\"} 0.250000\n"
    "shardfs_job_read_wait_seconds_count{job=\"uid/0\"} 9\n"
    "# TYPE shardfs_inodes gauge\nshardfs_inodes 40\n";

static const char new_text[] =
    "# HELP shardfs_uptime_seconds x\n# TYPE shardfs_uptime_seconds gauge\n"
    "shardfs_uptime_seconds 2.0\n"
    "# TYPE shardfs_daemon_restarts_total counter\n"
    "shardfs_daemon_restarts_total{reason=\"takeover\"} 1\n"
    "# TYPE shardfs_fuse_read_bytes_total counter\nshardfs_fuse_read_bytes_total 5\n"
    "# TYPE shardfs_node_read_bytes_total counter\n"
    "shardfs_node_read_bytes_total{node=\"10.0.0.1\"} 1\n"
    "shardfs_node_read_bytes_total{node=\"10.0.0.3\"} 2\n"
    "# TYPE shardfs_job_read_wait_seconds histogram\n"
    "shardfs_job_read_wait_seconds_bucket{job=\"uid/0\",le=\"0.001\"} 1\n"
    "shardfs_job_read_wait_seconds_sum{job=\"uid/0\"} 0.500000\n"
    "shardfs_job_read_wait_seconds_count{job=\"uid/0\"} 1\n"
    "# TYPE shardfs_inodes gauge\nshardfs_inodes 7\n";

static bool has(const char *text, const char *line)
{
	const char *p = strstr(text, line);
	return p && (p == text || p[-1] == '\n') && p[strlen(line)] == '\n';
}

int main(void)
{
	int fd = memfd_create("state", 0);
	struct sfs_keeper_state *k;

	ok(fd >= 0 && ftruncate(fd, sizeof(*k)) == 0 &&
	       (k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) !=
		   MAP_FAILED,
	   "a state memfd");
	ok(sfs_carry_load(fd, k) == NULL, "nothing saved: nothing carried");
	ok(sfs_carry_save(old_text, strlen(old_text), fd, k) == 0 &&
	       k->carry_len == strlen(old_text),
	   "the old process's stats saved past the state page");
	struct sfs_carry *c = sfs_carry_load(fd, k);
	ok(c && k->carry_len == 0, "loaded once (not again after a later crash)");
	ok(sfs_carry_load(fd, k) == NULL, "a second load finds nothing");

	char *text = strdup(new_text);
	size_t len = strlen(text);
	ok(sfs_carry_apply(c, &text, &len) == 0 && len == strlen(text), "applied");
	ok(has(text, "shardfs_fuse_read_bytes_total 1005"), "a counter goes on: 1000 + 5");
	ok(has(text, "shardfs_node_read_bytes_total{node=\"10.0.0.1\"} 71") &&
	       has(text, "shardfs_node_read_bytes_total{node=\"10.0.0.3\"} 2") &&
	       !strstr(text, "10.0.0.2"),
	   "labelled series go on by their labels; a new one starts, a gone one is not made up");
	ok(has(text, "shardfs_job_read_wait_seconds_bucket{job=\"uid/0\",le=\"0.001\"} 6") &&
	       has(text, "shardfs_job_read_wait_seconds_sum{job=\"uid/0\"} 0.750000") &&
	       has(text, "shardfs_job_read_wait_seconds_count{job=\"uid/0\"} 10"),
	   "a histogram's buckets, sum (decimals kept) and count go on");
	ok(has(text, "shardfs_uptime_seconds 2.0") && has(text, "shardfs_inodes 7"),
	   "gauges are the new process's own");
	ok(has(text, "shardfs_daemon_restarts_total{reason=\"takeover\"} 1"),
	   "the keeper's restart counter is not added twice");
	ok(has(text, "# TYPE shardfs_inodes gauge"), "comment lines stay");
	free(text);
	sfs_carry_free(c);
	return tap_done();
}
