// SPDX-License-Identifier: Apache-2.0
/*
 * test_namespace — cache/namespace/namespace.c against a real temp directory: records,
 * replay after close, a torn tail, a flipped byte, another export or root,
 * the entry bound, replacement and compaction; listings mode (lookups
 * answered from whole listings for a time: when to list, expiry, failures).
 *
 * Linked against the namespace module only (and log.c).
 */
#include "log.h"
#include "namespace.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], log_path[512];

static struct sfs_fh fh_of(uint64_t id)
{
	struct sfs_fh fh = {.len = 36};
	for (unsigned i = 0; i < fh.len; i++)
		fh.data[i] = (uint8_t)(id >> (8 * (i % 8))) ^ (uint8_t)i;
	return fh;
}

static struct sfs_attr attr_of(uint64_t id, uint64_t size)
{
	return (struct sfs_attr){.type = 0100000,
				 .mode = 0644,
				 .nlink = 1,
				 .uid = 7,
				 .size = size,
				 .fsid = 99,
				 .fileid = id,
				 .mtime = {1700000000 + (time_t)id, 5},
				 .ctime = {1700000001, 6},
				 .atime = {1, 2}};
}

static sfs_ns *open_ns(const char *d, const char *export, const char *hosts, uint64_t max)
{
	struct sfs_ns_conf c = {
	    .dir = d, .export_path = export, .hosts = hosts, .max_entries = max};
	char err[256] = "";
	sfs_ns *ns = NULL;
	int rc = sfs_ns_open(&c, &ns, err, sizeof(err));
	if (rc < 0)
		diag("open: %d %s", rc, err);
	return rc < 0 ? NULL : ns;
}

/* Does name in dir map to exactly (fileid, size)? */
static bool holds(sfs_ns *ns, uint64_t parent, const char *name, uint64_t id, uint64_t size)
{
	struct sfs_fh fh, want = fh_of(id);
	struct sfs_attr a;
	if (sfs_ns_lookup(ns, parent, name, &fh, &a) != 0)
		return false;
	return fh.len == want.len && !memcmp(fh.data, want.data, fh.len) && a.fileid == id &&
	       a.size == size && a.type == 0100000 && a.mode == 0644 && a.mtime.tv_nsec == 5;
}

struct list {
	char names[64][32];
	int n;
};
static int list_cb(void *arg, const char *name, uint64_t next, const struct sfs_fh *fh,
		   const struct sfs_attr *attr)
{
	struct list *l = arg;
	if (l->n == 64)
		return 1;
	snprintf(l->names[l->n++], 32, "%s", name);
	return 0;
}

/* Fill: root attrs, dir 100 with f0..f9 (fileid 1000+i) complete, dir 200 with g0..g2. */
static void fill(sfs_ns *ns)
{
	struct sfs_fh rfh = fh_of(1);
	struct sfs_attr ra = attr_of(1, 4096);
	ra.type = 040000;
	sfs_ns_add(ns, SFS_NS_ROOT, "", &rfh, &ra);
	for (int i = 0; i < 10; i++) {
		char n[16];
		snprintf(n, sizeof(n), "f%d", i);
		struct sfs_fh fh = fh_of(1000 + i);
		struct sfs_attr a = attr_of(1000 + i, 100 + i);
		sfs_ns_add(ns, 100, n, &fh, &a);
	}
	for (int i = 0; i < 3; i++) {
		char n[16];
		snprintf(n, sizeof(n), "g%d", i);
		struct sfs_fh fh = fh_of(2000 + i);
		struct sfs_attr a = attr_of(2000 + i, 200 + i);
		sfs_ns_add(ns, 200, n, &fh, &a);
	}
}

static void test_memory(void)
{
	sfs_ns *ns = open_ns(NULL, "/ifs", "h1", 0);
	struct list l = {0};
	struct sfs_fh rfh = fh_of(1);

	ok(ns != NULL, "memory-only namespace opens");
	ok(sfs_ns_bind(ns, &rfh) == 0, "bind in memory");
	fill(ns);
	ok(holds(ns, 100, "f3", 1003, 103), "lookup of a recorded name");
	ok(sfs_ns_lookup(ns, 100, "zz", NULL, NULL) == -ENODATA,
	   "unknown name, listing not held: ENODATA");
	ok(sfs_ns_lookup(ns, 300, "f3", NULL, NULL) == -ENODATA, "unknown directory: ENODATA");
	ok(sfs_ns_readdir(ns, 100, SFS_NS_INDEX_FIRST, list_cb, &l) == -ENODATA,
	   "readdir of an incomplete listing: ENODATA");
	ok(sfs_ns_dir_complete(ns, 100, 11) == -ESTALE, "complete with a wrong count: ESTALE");
	ok(sfs_ns_dir_complete(ns, 100, 10) == 0, "complete with the right count");
	ok(sfs_ns_lookup(ns, 100, "zz", NULL, NULL) == -ENOENT,
	   "absent name in a complete listing: ENOENT");
	ok(sfs_ns_readdir(ns, 100, SFS_NS_INDEX_FIRST, list_cb, &l) == 10 && l.n == 10 &&
	       !strcmp(l.names[0], "f0") && !strcmp(l.names[9], "f9"),
	   "readdir lists all 10 in order");
	l.n = 0;
	ok(sfs_ns_readdir(ns, 100, SFS_NS_INDEX_FIRST + 7, list_cb, &l) == 3 &&
	       !strcmp(l.names[0], "f7"),
	   "readdir resumes at an offset");
	ok(sfs_ns_readdir(ns, 100, SFS_NS_INDEX_FIRST + 10, list_cb, &l) == 0,
	   "readdir at the end: 0");
	ok(sfs_ns_dir_complete(ns, 500, 0) == 0 && sfs_ns_readdir(ns, 500, 3, list_cb, &l) == 0,
	   "an empty directory completes and lists nothing");
	struct sfs_attr a;
	ok(sfs_ns_lookup(ns, SFS_NS_ROOT, "", NULL, &a) == 0 && a.type == 040000 && a.fileid == 1,
	   "the root's own attributes under the empty name");
	l.n = 0;
	sfs_ns_dir_complete(ns, SFS_NS_ROOT, 0);
	ok(sfs_ns_readdir(ns, SFS_NS_ROOT, 3, list_cb, &l) == 0, "the empty name is never listed");
	ok(sfs_ns_add(ns, 100, ".", &rfh, &a) == -EINVAL &&
	       sfs_ns_add(ns, 100, "", &rfh, &a) == -EINVAL,
	   "'.' and '' (below the root) are refused");
	struct sfs_ns_stats st;
	sfs_ns_get_stats(ns, &st);
	ok(st.entries == 14 && st.file_bytes == 0, "stats: 14 entries, no file (%llu, %llu)",
	   (unsigned long long)st.entries, (unsigned long long)st.file_bytes);
	sfs_ns_close(ns);
}

static off_t file_size(void)
{
	struct stat st;
	return stat(log_path, &st) == 0 ? st.st_size : -1;
}

static void find_log(void)
{
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "ls %s/*.log", dir);
	FILE *p = popen(cmd, "r");
	log_path[0] = 0;
	if (p && fgets(log_path, sizeof(log_path), p))
		log_path[strcspn(log_path, "\n")] = 0;
	if (p)
		pclose(p);
}

static void test_persist(void)
{
	struct sfs_fh rfh = fh_of(1), got;
	sfs_ns *ns = open_ns(dir, "/ifs", "h1,h2", 0);
	struct sfs_ns_stats st;

	ok(ns && !sfs_ns_saved_root(ns, &got), "new log: nothing saved");
	ok(sfs_ns_bind(ns, &rfh) == 0, "bind writes the header");
	fill(ns);
	sfs_ns_dir_complete(ns, 100, 10);
	ok(sfs_ns_flush(ns) == 0, "flush");
	sfs_ns_get_stats(ns, &st);
	find_log();
	ok(file_size() == (off_t)st.file_bytes, "file_bytes matches the file (%lld)",
	   (long long)file_size());
	diag("%llu bytes on disk, %llu in memory for %llu entries",
	     (unsigned long long)st.file_bytes, (unsigned long long)st.mem_bytes,
	     (unsigned long long)st.entries);
	ok((st.file_bytes - 100) / st.entries < 200, "< 200 bytes per entry on disk");
	sfs_ns_close(ns);

	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	ok(ns && sfs_ns_saved_root(ns, &got) && got.len == rfh.len &&
	       !memcmp(got.data, rfh.data, got.len),
	   "reopen: the root handle is saved");
	ok(sfs_ns_bind(ns, &rfh) == 0, "bind with the same root keeps it");
	ok(holds(ns, 100, "f9", 1009, 109) && holds(ns, 200, "g2", 2002, 202), "replayed entries");
	ok(sfs_ns_lookup(ns, 100, "nope", NULL, NULL) == -ENOENT, "replayed listing is complete");
	ok(sfs_ns_lookup(ns, 200, "nope", NULL, NULL) == -ENODATA,
	   "incomplete listing stays incomplete");
	/* a changed entry replaces the old one, also after replay */
	struct sfs_fh fh = fh_of(1004);
	struct sfs_attr a = attr_of(1004, 777);
	sfs_ns_add(ns, 100, "f4", &fh, &a);
	a.atime.tv_sec = 55;
	off_t before = (off_t)({
		sfs_ns_flush(ns);
		file_size();
	});
	sfs_ns_add(ns, 100, "f4", &fh, &a);
	sfs_ns_flush(ns);
	ok(file_size() == before, "an atime-only change is not written");
	sfs_ns_close(ns);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	ok(holds(ns, 100, "f4", 1004, 777), "the replacement wins after replay");
	struct list l = {0};
	ok(sfs_ns_readdir(ns, 100, 3, list_cb, &l) == 10, "and the listing keeps 10 names");
	sfs_ns_close(ns);

	ns = open_ns(dir, "/ifs", "h1,h3", 0);
	ok(ns && !sfs_ns_saved_root(ns, &got), "another host list: the log is not used");
	sfs_ns_close(ns);
	ns = open_ns(dir, "/other", "h1,h2", 0);
	ok(ns && !sfs_ns_saved_root(ns, &got) &&
	       sfs_ns_lookup(ns, 100, "f1", NULL, NULL) == -ENODATA,
	   "another export: nothing known");
	sfs_ns_close(ns);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	ok(ns && sfs_ns_saved_root(ns, &got), "the first export's log survived");
	struct sfs_fh other = fh_of(2);
	ok(sfs_ns_bind(ns, &other) == 1, "another root handle: dropped");
	ok(sfs_ns_lookup(ns, 100, "f1", NULL, NULL) == -ENODATA, "nothing served after the drop");
	sfs_ns_close(ns);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	ok(ns && sfs_ns_saved_root(ns, &got) && !memcmp(got.data, other.data, other.len) &&
	       sfs_ns_lookup(ns, 100, "f1", NULL, NULL) == -ENODATA,
	   "the dropped log stays empty, with the new root");
	sfs_ns_close(ns);
}

/* Write the standard content freshly; returns the file size. */
static off_t fresh(void)
{
	struct sfs_fh rfh = fh_of(1);
	unlink(log_path);
	sfs_ns *ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	fill(ns);
	sfs_ns_dir_complete(ns, 100, 10);
	sfs_ns_close(ns);
	return file_size();
}

static void test_damage(void)
{
	struct sfs_fh rfh = fh_of(1);
	struct sfs_ns_stats st;
	off_t size = fresh();

	/* torn tail: the DIRDONE of dir 100 (last record) loses its end */
	ok(truncate(log_path, size - 5) == 0, "tear the last record");
	sfs_ns *ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	sfs_ns_get_stats(ns, &st);
	ok(st.discarded_bytes == 23 && file_size() == size - 28, "torn tail: cut off (%llu bytes)",
	   (unsigned long long)st.discarded_bytes);
	ok(holds(ns, 200, "g2", 2002, 202) && sfs_ns_lookup(ns, 100, "zz", NULL, NULL) == -ENODATA,
	   "torn tail: entries kept, the torn mark is gone");
	sfs_ns_dir_complete(ns, 100, 10);
	sfs_ns_close(ns);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	ok(sfs_ns_lookup(ns, 100, "zz", NULL, NULL) == -ENOENT, "appends after a cut tail replay");
	sfs_ns_close(ns);

	/* a flipped byte in the middle (inside entry f5's record) */
	size = fresh();
	int fd = open(log_path, O_RDWR);
	char buf[4096];
	ssize_t n = pread(fd, buf, sizeof(buf), 0);
	char *at = memmem(buf, (size_t)n, "f5", 2);
	ok(at != NULL, "found f5's name in the file");
	if (at) {
		at[1] ^= 0x04; /* "f1" */
		pwrite(fd, at, 2, at - buf);
	}
	close(fd);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	sfs_ns_get_stats(ns, &st);
	ok(st.discarded_bytes > 0, "flipped byte: detected (%llu bytes dropped)",
	   (unsigned long long)st.discarded_bytes);
	ok(holds(ns, 100, "f1", 1001, 101) && holds(ns, 100, "f4", 1004, 104),
	   "flipped byte: the entries before it are right");
	ok(sfs_ns_lookup(ns, 100, "f5", NULL, NULL) == -ENODATA &&
	       sfs_ns_lookup(ns, 100, "f6", NULL, NULL) == -ENODATA &&
	       sfs_ns_lookup(ns, 200, "g0", NULL, NULL) == -ENODATA,
	   "flipped byte: nothing from it on is served");
	sfs_ns_close(ns);

	/* a damaged header: nothing used, replaced at bind */
	fresh();
	fd = open(log_path, O_RDWR);
	pwrite(fd, "X", 1, 20);
	close(fd);
	struct sfs_fh got;
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	ok(ns && !sfs_ns_saved_root(ns, &got) &&
	       sfs_ns_lookup(ns, 100, "f1", NULL, NULL) == -ENODATA,
	   "damaged header: nothing used");
	sfs_ns_close(ns);
}

static void test_bounds(void)
{
	struct sfs_fh rfh = fh_of(1);
	struct sfs_ns_stats st;

	unlink(log_path);
	sfs_ns *ns = open_ns(dir, "/ifs", "h1,h2", 5);
	sfs_ns_bind(ns, &rfh);
	int rc = 0;
	for (int i = 0; i < 6; i++) {
		char n[16];
		snprintf(n, sizeof(n), "x%d", i);
		struct sfs_fh fh = fh_of(3000 + i);
		struct sfs_attr a = attr_of(3000 + i, 1);
		rc = sfs_ns_add(ns, 300, n, &fh, &a);
	}
	sfs_ns_get_stats(ns, &st);
	ok(rc == -ENOSPC && st.entries == 5 && st.not_recorded == 1,
	   "max_entries 5: the 6th is refused");
	ok(sfs_ns_dir_complete(ns, 300, 6) == -ESTALE,
	   "a listing beyond the bound never completes");
	sfs_ns_close(ns);

	/* compaction: many replacements, then a reopen rewrites the log */
	unlink(log_path);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	struct sfs_fh fh = fh_of(4000);
	for (int i = 0; i < 20000; i++) {
		struct sfs_attr a = attr_of(4000, (uint64_t)i);
		sfs_ns_add(ns, 400, "churn", &fh, &a);
	}
	sfs_ns_close(ns);
	off_t big = file_size();
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	ok(file_size() < 4096 && big > (1 << 20), "compaction: %lld -> %lld bytes", (long long)big,
	   (long long)file_size());
	ok(holds(ns, 400, "churn", 4000, 19999), "compaction keeps the last value");
	sfs_ns_close(ns);
	ns = open_ns(dir, "/ifs", "h1,h2", 0);
	sfs_ns_bind(ns, &rfh);
	ok(holds(ns, 400, "churn", 4000, 19999), "and it replays");
	sfs_ns_close(ns);

	/* another daemon holds the log */
	sfs_ns *a = open_ns(dir, "/ifs", "h1,h2", 0);
	struct sfs_ns_conf c = {.dir = dir, .export_path = "/ifs", .hosts = "h1,h2"};
	char err[256] = "";
	sfs_ns *b = NULL;
	ok(sfs_ns_open(&c, &b, err, sizeof(err)) == -EBUSY && strstr(err, "in use"),
	   "a second opener is refused: %s", err);
	sfs_ns_close(a);
}

/* Listings mode: names from whole listings, valid for ttl_ms. */
static void test_listings(void)
{
	const uint64_t ttl = 400;
	struct sfs_ns_conf c = {.dir = dir, .export_path = "/ifs", .max_entries = 5, .ttl_ms = ttl};
	char err[256] = "";
	sfs_ns *ns = NULL;
	struct sfs_fh fh;
	struct sfs_attr a;
	struct sfs_ns_stats st;
	uint64_t listed = 0;

	ok(sfs_ns_open(&c, &ns, err, sizeof(err)) == 0 && ns, "listings mode opens (%s)", err);
	if (!ns)
		return;
	sfs_ns_get_stats(ns, &st);
	uint64_t base_mem = st.mem_bytes;
	ok(st.file_bytes == 0 && sfs_ns_flush(ns) == 0, "no log is written");

	ok(sfs_ns_lookup_listed(ns, 10, "a", &fh, &a, &listed) == -ENODATA,
	   "no listing: not known");
	ok(!sfs_ns_listing_wanted(ns, 10), "first miss in a directory: no listing yet");
	ok(sfs_ns_listing_wanted(ns, 10), "second miss: list it");
	ok(!sfs_ns_listing_wanted(ns, 10), "not twice while it runs");
	uint64_t t0 = sfs_now_ms();
	ok(sfs_ns_add(ns, 10, "a", &(struct sfs_fh){.len = 4, .data = {1}},
		      &(struct sfs_attr){.fileid = 1, .size = 11}) == 0 &&
	       sfs_ns_add(ns, 10, "b", &(struct sfs_fh){.len = 4, .data = {2}},
			  &(struct sfs_attr){.fileid = 2, .size = 22}) == 0,
	   "names recorded while listing");
	ok(sfs_ns_lookup_listed(ns, 10, "a", &fh, &a, &listed) == -ENODATA,
	   "a listing in flight answers nothing");
	ok(sfs_ns_dir_complete(ns, 10, 2) == 0, "listing complete");
	ok(sfs_ns_lookup_listed(ns, 10, "b", &fh, &a, &listed) == 0 && a.size == 22 &&
	       a.fileid == 2 && fh.len == 4 && fh.data[0] == 2,
	   "a name of the listing answers with its handle and attributes");
	ok(listed >= t0 - 1 && listed <= sfs_now_ms(), "dated from when the listing started");
	sfs_ns_get_stats(ns, &st);
	uint64_t hits0 = st.hits, absent0 = st.listing_absent;
	ok(sfs_ns_lookup_listed(ns, 10, "zz", &fh, &a, &listed) == -ENOENT,
	   "a name not in it: ENOENT");
	sfs_ns_get_stats(ns, &st);
	ok(st.listing_absent == absent0 + 1 && st.hits == hits0,
	   "counted as absent (the caller asks NFS), not as a hit");
	ok(sfs_ns_lookup_listed(ns, 11, "a", &fh, &a, &listed) == -ENODATA,
	   "another directory: not known");
	ok(sfs_ns_lookup(ns, 10, "a", &fh, &a) == 0, "sfs_ns_lookup sees it too");

	/* how far a first listing may read: SFS_NS_NAMES_PER_MISS per miss */
	sfs_ns_listing_wanted(ns, 16);
	sfs_ns_listing_wanted(ns, 16);
	ok(sfs_ns_listing_may_go_on(ns, 16, 2 * SFS_NS_NAMES_PER_MISS - 1) &&
	       !sfs_ns_listing_may_go_on(ns, 16, 2 * SFS_NS_NAMES_PER_MISS),
	   "a first listing started by 2 misses reads at most 2 x %d names", SFS_NS_NAMES_PER_MISS);
	ok(!sfs_ns_listing_wanted(ns, 16) &&
	       sfs_ns_listing_may_go_on(ns, 16, 2 * SFS_NS_NAMES_PER_MISS),
	   "a lookup that misses while it runs lets it read further");
	ok(!sfs_ns_listing_may_go_on(ns, 17, 0), "a directory not being listed may not go on");
	sfs_ns_listing_failed(ns, 16);

	/* an empty directory */
	sfs_ns_listing_wanted(ns, 12);
	ok(sfs_ns_listing_wanted(ns, 12) && sfs_ns_dir_complete(ns, 12, 0) == 0 &&
	       sfs_ns_lookup_listed(ns, 12, "x", &fh, &a, &listed) == -ENOENT,
	   "an empty listing answers ENOENT");

	/* a count that does not match fails the listing */
	sfs_ns_listing_wanted(ns, 13);
	sfs_ns_listing_wanted(ns, 13);
	sfs_ns_add(ns, 13, "x", &fh, &a);
	ok(sfs_ns_dir_complete(ns, 13, 5) == -ESTALE &&
	       sfs_ns_lookup_listed(ns, 13, "x", &fh, &a, &listed) == -ENODATA,
	   "a listing whose count differs fails and answers nothing");
	ok(!sfs_ns_listing_wanted(ns, 13) && !sfs_ns_listing_wanted(ns, 13),
	   "a failed directory is not listed again within the ttl");

	/* over max_entries: 2 names held, room for 3 more */
	sfs_ns_listing_wanted(ns, 14);
	sfs_ns_listing_wanted(ns, 14);
	int rc = 0;
	char name[8];
	for (int k = 0; k < 4 && rc == 0; k++) {
		snprintf(name, sizeof(name), "n%d", k);
		rc = sfs_ns_add(ns, 14, name, &fh, &a);
	}
	ok(rc == -ENOSPC, "a listing past max_entries is refused (%d)", rc);
	sfs_ns_listing_wanted(ns, 15);
	ok(!sfs_ns_listing_wanted(ns, 15), "no listing starts while max_entries names are held");
	sfs_ns_listing_failed(ns, 14);
	sfs_ns_get_stats(ns, &st);
	ok(st.entries == 2 && st.listings == 5 && st.listings_failed == 3,
	   "a failed listing's names are dropped: %llu names, %llu listings, %llu failed",
	   (unsigned long long)st.entries, (unsigned long long)st.listings,
	   (unsigned long long)st.listings_failed);

	usleep((useconds_t)(ttl + 50) * 1000);
	ok(sfs_ns_lookup_listed(ns, 10, "a", &fh, &a, &listed) == -ENODATA,
	   "after the ttl the listing answers nothing");
	ok(sfs_ns_listing_wanted(ns, 10), "a directory listed before is listed again at once");
	ok(sfs_ns_listing_may_go_on(ns, 10, 100 * SFS_NS_NAMES_PER_MISS),
	   "and its listing is not held to the names-per-miss bound");
	sfs_ns_get_stats(ns, &st);
	ok(st.entries == 0, "its old names are gone (%llu held)", (unsigned long long)st.entries);
	ok(!sfs_ns_listing_wanted(ns, 13) && !sfs_ns_listing_wanted(ns, 13),
	   "a failed directory is not listed again for twice the ttl");
	sfs_ns_add(ns, 10, "c", &fh, &a);
	sfs_ns_dir_complete(ns, 10, 1);
	ok(sfs_ns_expire(ns) == 0, "expire keeps what is younger than the ttl");
	usleep((useconds_t)ttl * 1000); /* 2 x ttl + 50 ms since 13 failed */
	ok(sfs_ns_expire(ns) == 1, "and drops what is older");
	ok(!sfs_ns_listing_wanted(ns, 13) && sfs_ns_listing_wanted(ns, 13),
	   "after twice the ttl a failed directory counts misses again");
	sfs_ns_listing_failed(ns, 13); /* its second failure in a row */
	usleep((useconds_t)(2 * ttl + 50) * 1000);
	ok(!sfs_ns_listing_wanted(ns, 13) && !sfs_ns_listing_wanted(ns, 13),
	   "a second failure in a row backs off longer (4 x ttl)");
	usleep((useconds_t)(2 * ttl) * 1000);
	ok(!sfs_ns_listing_wanted(ns, 13) && sfs_ns_listing_wanted(ns, 13),
	   "and is listed again after it");
	ok(sfs_ns_add(ns, 13, "x", &fh, &a) == 0 && sfs_ns_dir_complete(ns, 13, 1) == 0,
	   "then a listing completes");
	sfs_ns_get_stats(ns, &st);
	ok(st.entries == 1 && st.dirs_complete == 1, "its name answers (%llu held)",
	   (unsigned long long)st.entries);
	usleep((useconds_t)(ttl + 50) * 1000);
	sfs_ns_expire(ns);
	sfs_ns_get_stats(ns, &st);
	ok(st.entries == 0 && st.dirs_complete == 0 && st.mem_bytes < base_mem + 1024,
	   "expired listings leave memory but a few directory records: %llu bytes, %llu at open",
	   (unsigned long long)st.mem_bytes, (unsigned long long)base_mem);
	sfs_ns_close(ns);
}

int main(void)
{
	snprintf(dir, sizeof(dir), "/tmp/test_namespace.XXXXXX");
	if (!mkdtemp(dir))
		tap_skip_all("cannot create a temp directory");
	test_memory();
	test_persist();
	test_damage();
	test_bounds();
	test_listings();
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd)) {
	}
	return tap_done();
}
