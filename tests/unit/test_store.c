// SPDX-License-Identifier: Apache-2.0
/*
 * test_store — cache/store/store.c against a real local directory.
 *
 * Linked with store.c, segment.c, uring.c and log.c only (sfs_store_dep);
 * segment.c is part of the store (its packed layout), not faked. The one
 * neighbour is the filesystem, so every test works in its own fresh
 * directory under /tmp and removes it at the end. Chunk bytes are synthetic
 * (byte i of file `seed` comes from fill()), and every read is compared byte
 * for byte with what was written.
 *
 * Tests that damage the cache on disk rely on the object layout that
 * store_int.h documents: a data file KEY with byte x of the version at x,
 * and KEY.sums beside it: a 64-byte header (size at offset 24, n_chunks at
 * 32, data_off 0 at 40), REC_BYTES-byte chunk records from offset 64 (one
 * XXH3-64 per SUB-byte sub-block of a 1 MiB chunk, then length and valid
 * mark). The previous layout ("SFSOBJS4": the same header and records, then
 * chunk i's bytes at data_off + i MiB in one file, data_off being 64 +
 * REC_BYTES n rounded up to 4096) is migrated at load. Versions
 * of 1 MiB or less are packed in cache_dir/segments; tests that damage those
 * find a record by its bytes and know only that a sealed segment is checked
 * at read and the one being filled by the scan at open (segment.h).
 *
 * Threading: ok() runs on the main thread only; write completions (the
 * store's writer thread) and the worker threads of the concurrency test
 * record what they saw, and the main thread reports it.
 */
#include "store.h"
#include "log.h"
#include "store_test_util.h"
#include "tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define MiB (1ull << 20)
/* The object file layout of store.c (see the top of this file). */
#define SUB	  (1u << SFS_STORE_SUB_SHIFT)
#define REC_BYTES (8 * (MiB / SUB) + 8)

/* --- helpers --------------------------------------------------------------- */

/* Bytes [off, off + len) of synthetic file `seed`; off is a multiple of 8. */
static void fill(uint32_t seed, uint64_t off, uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len; i += 8) {
		uint64_t w = mix(((uint64_t)seed << 44) ^ ((off + i) >> 3));
		memcpy(buf + i, &w, len - i < 8 ? len - i : 8);
	}
}

/* Compares buf with chunk `index` of file `seed`. Returns -1 if equal, else
 * the first differing offset within the chunk. */
static long chunk_diff(uint32_t seed, uint32_t index, const uint8_t *buf, size_t len)
{
	uint8_t *exp = malloc(len + 8);
	long at = -1;

	fill(seed, (uint64_t)index * MiB, exp, len);
	if (memcmp(exp, buf, len))
		for (size_t k = 0; k < len; k++)
			if (exp[k] != buf[k]) {
				at = (long)k;
				break;
			}
	free(exp);
	return at;
}

/*
 * A heap copy of chunk `index` of file `seed` (size bytes long) at p, which
 * is 4096-aligned when skew is 0 (the buffers prefetch hands the store, so
 * full chunks take the O_DIRECT path) and misaligned by skew bytes otherwise
 * (the buffered path). Free with chunk_free().
 */
struct chunk {
	uint8_t *base, *p;
	uint32_t len;
};

static struct chunk chunk_new(uint32_t seed, uint64_t size, uint32_t index, unsigned skew)
{
	uint64_t start = (uint64_t)index * MiB;
	struct chunk c = {.base = aligned_alloc(4096, MiB + 4096)};

	if (!c.base)
		bail("aligned_alloc", -ENOMEM);
	c.p = c.base + skew;
	c.len = (uint32_t)(size - start < MiB ? size - start : MiB);
	fill(seed, start, c.p, c.len);
	return c;
}

static void chunk_free(struct chunk *c)
{
	free(c->base);
	c->base = c->p = NULL;
}

static struct sfs_file_version version(uint64_t fileid, uint64_t size)
{
	return (struct sfs_file_version){.fsid = 7,
					 .fileid = fileid,
					 .size = size,
					 .mtime_s = 1700000000,
					 .mtime_ns = 5,
					 .ctime_s = 1700000001,
					 .ctime_ns = 6};
}

static sfs_store *store_open(const char *dir, uint64_t capacity, enum sfs_store_policy policy)
{
	sfs_store *s = NULL;
	char err[256] = "";
	int rc = sfs_store_open(
	    &(struct sfs_store_conf){
		.dir = dir, .capacity_bytes = capacity, .policy = policy, .chunk_bytes = MiB},
	    &s, err, sizeof(err));
	if (rc) {
		printf("# sfs_store_open(%s): %s\n", dir, err);
		bail("sfs_store_open", rc);
	}
	rc = sfs_store_start(s);
	if (rc)
		bail("sfs_store_start", rc);
	return s;
}

static struct sfs_store_stats stats(sfs_store *s)
{
	struct sfs_store_stats st;

	sfs_store_get_stats(s, &st);
	return st;
}

/* Write completions: one slot per queued write, signalled on the writer. */
static pthread_mutex_t done_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;

struct slot {
	bool fired;
	int err;
	unsigned calls; /* done must run exactly once */
};

static void on_done(void *arg, int err)
{
	struct slot *sl = arg;

	pthread_mutex_lock(&done_lock);
	sl->fired = true;
	sl->err = err;
	sl->calls++;
	pthread_cond_broadcast(&done_cond);
	pthread_mutex_unlock(&done_lock);
}

/* Waits for a slot; returns its err, or -ETIMEDOUT after 10 s. */
static int slot_wait(struct slot *sl)
{
	struct timespec ts;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&done_lock);
	while (!sl->fired && rc == 0)
		rc = pthread_cond_timedwait(&done_cond, &done_lock, &ts);
	int err = sl->fired ? sl->err : -ETIMEDOUT;
	pthread_mutex_unlock(&done_lock);
	return err;
}

/* Writes chunk `index` of file `seed` (size bytes) from a buffer misaligned
 * by skew bytes and waits for it. Returns write_chunk_hashed's result if non-zero,
 * else what done reported. */
static int write_sync_skew(sfs_store_obj *o, uint32_t seed, uint64_t size, uint32_t index,
			   unsigned skew)
{
	struct chunk c = chunk_new(seed, size, index, skew);
	struct slot sl = {0};
	int rc = sfs_store_write_chunk_hashed(o, index, c.p, c.len, NULL, 0, on_done, &sl);

	if (rc == 0)
		rc = slot_wait(&sl);
	chunk_free(&c);
	return rc;
}

static int write_sync(sfs_store_obj *o, uint32_t seed, uint64_t size, uint32_t index)
{
	return write_sync_skew(o, seed, size, index, 0);
}

/* Reads chunk `index` through read_chunk and checks length and bytes.
 * Returns read_chunk's result; *bad is set when the bytes are wrong. */
static ssize_t read_check(sfs_store_obj *o, uint32_t seed, uint64_t size, uint32_t index, long *bad)
{
	uint8_t *buf = malloc(MiB);
	uint64_t start = (uint64_t)index * MiB;
	size_t want = size - start < MiB ? size - start : MiB;
	ssize_t n = sfs_store_read_chunk(o, index, buf);

	*bad = -1;
	if (n == (ssize_t)want)
		*bad = chunk_diff(seed, index, buf, want);
	free(buf);
	return n;
}

static const char *state_name(enum sfs_chunk_state st)
{
	switch (st) {
	case SFS_CHUNK_ABSENT:
		return "ABSENT";
	case SFS_CHUNK_WRITING:
		return "WRITING";
	case SFS_CHUNK_PRESENT:
		return "PRESENT";
	case SFS_CHUNK_VERIFIED:
		return "VERIFIED";
	}
	return "?";
}

/* Where an "SFSOBJS4" object file began its chunk bytes. */
static uint64_t v4_data_off(uint32_t n_chunks)
{
	return (64 + (uint64_t)REC_BYTES * n_chunks + 4095) & ~4095ull;
}

/* Where byte 0 of a version is in its data file. */
static uint64_t data_off_for(uint32_t n_chunks)
{
	(void)n_chunks;
	return 0;
}

/* Finds the .sums file under dir/objects whose header says `size`; the
 * tests give every file a distinct size. Returns 0 and the path, or -1. */
static int find_sums(const char *dir, uint64_t size, char *path, size_t path_len)
{
	char top[512];
	int found = -1;

	snprintf(top, sizeof(top), "%s/objects", dir);
	DIR *t = opendir(top);
	struct dirent *d, *e;
	if (!t)
		return -1;
	while (found < 0 && (d = readdir(t))) {
		if (d->d_name[0] == '.')
			continue;
		char sub[768];
		snprintf(sub, sizeof(sub), "%s/%s", top, d->d_name);
		DIR *s = opendir(sub);
		if (!s)
			continue;
		while (found < 0 && (e = readdir(s))) {
			if (e->d_name[0] == '.' || !strstr(e->d_name, ".sums"))
				continue;
			char file[1024];
			uint64_t sz = 0;
			snprintf(file, sizeof(file), "%s/%s", sub, e->d_name);
			int fd = open(file, O_RDONLY);
			if (fd < 0)
				continue;
			if (pread(fd, &sz, 8, 24) == 8 && sz == size) {
				snprintf(path, path_len, "%s", file);
				found = 0;
			}
			close(fd);
		}
		closedir(s);
	}
	closedir(t);
	return found;
}

/* The data file of the version of `size` (find_sums without ".sums"). */
static int find_object(const char *dir, uint64_t size, char *path, size_t path_len)
{
	if (find_sums(dir, size, path, path_len) != 0)
		return -1;
	path[strlen(path) - strlen(".sums")] = 0;
	return 0;
}

/* path + ".sums" in a static buffer (one at a time). */
static const char *sums_of(const char *path)
{
	static char out[1100];
	snprintf(out, sizeof(out), "%s.sums", path);
	return out;
}

/* Number of regular files under dir/objects (two levels). */
static int count_files(const char *dir)
{
	char top[512];
	int n = 0;

	snprintf(top, sizeof(top), "%s/objects", dir);
	DIR *t = opendir(top);
	struct dirent *d, *e;
	if (!t)
		return -1;
	while ((d = readdir(t))) {
		if (d->d_name[0] == '.')
			continue;
		char sub[768];
		snprintf(sub, sizeof(sub), "%s/%s", top, d->d_name);
		DIR *s = opendir(sub);
		if (!s) {
			n++;
			continue;
		}
		while ((e = readdir(s)))
			if (e->d_name[0] != '.' && !strstr(e->d_name, ".sums"))
				n++; /* a version's data file (its .sums is not counted) */
		closedir(s);
	}
	closedir(t);
	return n;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* --- open, lock, paths ------------------------------------------------------ */

static void test_open_lock(void)
{
	diag("open: creates the directory, takes the lock");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct stat st;

	ok(stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 07777) == 0700,
	   "cache_dir created with mode 0700 (got %o)", (unsigned)(st.st_mode & 07777));
	ok(exists(tpath("cache/LOCK")), "cache_dir/LOCK exists");
	ok(stat(tpath("cache/objects"), &st) == 0 && S_ISDIR(st.st_mode),
	   "cache_dir/objects/ is a directory");
	struct sfs_store_stats ss = stats(s);
	ok(ss.online && ss.errors == 0 && ss.used_bytes == 0 && ss.objects == 0,
	   "fresh store: online %d errors %llu used %llu objects %llu (want 1 0 0 0)", ss.online,
	   (unsigned long long)ss.errors, (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.objects);
	ok(ss.capacity_bytes > 0, "capacity 0 means 90%% of the filesystem: got %llu bytes",
	   (unsigned long long)ss.capacity_bytes);

	sfs_store *s2 = NULL;
	char err[256] = "";
	int rc = sfs_store_open(&(struct sfs_store_conf){.dir = dir, .chunk_bytes = MiB}, &s2, err,
				sizeof(err));
	ok(rc == -EBUSY && s2 == NULL, "second open of the same dir: %d (want -EBUSY %d)", rc,
	   -EBUSY);
	ok(strstr(err, dir) != NULL, "the -EBUSY message names the dir: \"%s\"", err);
	if (rc == 0)
		sfs_store_close(s2);

	sfs_store_close(s);
	s2 = NULL;
	rc = sfs_store_open(&(struct sfs_store_conf){.dir = dir, .chunk_bytes = MiB}, &s2, err,
			    sizeof(err));
	ok(rc == 0, "open after close: %d (want 0) %s", rc, rc ? err : "");
	if (rc == 0)
		sfs_store_close(s2);

	/* A pre-existing, group-readable directory is tightened to 0700. */
	mkdir(tpath("loose"), 0755);
	chmod(tpath("loose"), 0755);
	s = store_open(tpath("loose"), 0, SFS_STORE_LRU);
	ok(stat(tpath("loose"), &st) == 0 && (st.st_mode & 07777) == 0700,
	   "existing 0755 cache_dir becomes 0700 (got %o)", (unsigned)(st.st_mode & 07777));
	sfs_store_close(s);
	tmp_remove();
}

static void test_bad_path(void)
{
	diag("open: bad paths");
	sfs_store *s = NULL;
	char err[256] = "";
	int rc =
	    sfs_store_open(&(struct sfs_store_conf){.dir = "relative/cache", .chunk_bytes = MiB},
			   &s, err, sizeof(err));
	ok(rc == -EINVAL && s == NULL, "relative dir: %d (want -EINVAL %d), \"%s\"", rc, -EINVAL,
	   err);
	if (rc == 0)
		sfs_store_close(s);
	s = NULL;
	rc = sfs_store_open(&(struct sfs_store_conf){.dir = NULL, .chunk_bytes = MiB}, &s, err,
			    sizeof(err));
	ok(rc == -EINVAL && s == NULL, "NULL dir: %d (want -EINVAL %d)", rc, -EINVAL);
	if (rc == 0)
		sfs_store_close(s);
}

/* --- write, read, persistence, corruption ---------------------------------- */

#define RW_SIZE (2 * MiB + 12345) /* 3 chunks, the last partial */
#define RW_SEED 11

static void check_all_bytes(sfs_store_obj *o, uint32_t seed, uint64_t size, uint32_t n,
			    const char *when)
{
	for (uint32_t i = 0; i < n; i++) {
		long bad;
		uint64_t want = size - i * MiB < MiB ? size - i * MiB : MiB;
		ssize_t r = read_check(o, seed, size, i, &bad);
		ok(r == (ssize_t)want && bad < 0,
		   "%s: read_chunk(%u) = %zd (want %llu), first bad byte %ld", when, i, r,
		   (unsigned long long)want, bad);
	}
}

static void test_write_read(void)
{
	diag("write, read, lengths, -EEXIST");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1, RW_SIZE);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);

	ok(o != NULL, "obj_get returns an object");
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_ABSENT &&
	       sfs_store_chunk_state(o, 99) == SFS_CHUNK_ABSENT,
	   "new object: chunk 0 and out-of-range chunk 99 are ABSENT");

	uint8_t *buf = calloc(1, MiB);
	ok(sfs_store_read_chunk(o, 0, buf) == -ENOENT, "read_chunk of an ABSENT chunk: -ENOENT");

	struct slot sl = {0};
	int rc = sfs_store_write_chunk_hashed(o, 0, buf, (uint32_t)MiB - 1, NULL, 0, on_done, &sl);
	ok(rc == -EINVAL, "chunk 0 with len 1 MiB - 1: %d (want -EINVAL)", rc);
	rc = sfs_store_write_chunk_hashed(o, 2, buf, (uint32_t)MiB, NULL, 0, on_done, &sl);
	ok(rc == -EINVAL, "last chunk (12345 bytes) with len 1 MiB: %d (want -EINVAL)", rc);
	rc = sfs_store_write_chunk_hashed(o, 3, buf, 1, NULL, 0, on_done, &sl);
	ok(rc == -EINVAL, "chunk 3 of a 3-chunk file: %d (want -EINVAL)", rc);
	ok(!sl.fired, "done not called for rejected writes");

	/* Chunk 0: check the state while it is queued, and -EEXIST then. */
	struct chunk c0 = chunk_new(RW_SEED, RW_SIZE, 0, 0);
	rc = sfs_store_write_chunk_hashed(o, 0, c0.p, c0.len, NULL, 0, on_done, &sl);
	enum sfs_chunk_state st0 = sfs_store_chunk_state(o, 0);
	struct slot sl2 = {0};
	int rc2 = sfs_store_write_chunk_hashed(o, 0, c0.p, c0.len, NULL, 0, on_done, &sl2);
	ok(rc == 0, "write_chunk_hashed(0) queued: %d", rc);
	ok(st0 == SFS_CHUNK_WRITING || st0 == SFS_CHUNK_VERIFIED,
	   "state right after write_chunk_hashed: %s (want WRITING or VERIFIED)", state_name(st0));
	ok(rc2 == -EEXIST, "second write of chunk 0 while queued: %d (want -EEXIST)", rc2);
	rc = slot_wait(&sl);
	ok(rc == 0 && sl.calls == 1, "done(0) err %d, called %u times (want 0, once)", rc,
	   sl.calls);
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_VERIFIED,
	   "chunk 0 VERIFIED after done (got %s)", state_name(sfs_store_chunk_state(o, 0)));
	chunk_free(&c0);

	rc = write_sync_skew(o, RW_SEED, RW_SIZE, 1, 8);
	ok(rc == 0, "write chunk 1 from a misaligned buffer (buffered path): %d", rc);
	rc = write_sync(o, RW_SEED, RW_SIZE, 2);
	ok(rc == 0, "write chunk 2 (partial, 12345 bytes): %d", rc);
	for (uint32_t i = 0; i < 3; i++)
		ok(sfs_store_chunk_state(o, i) == SFS_CHUNK_VERIFIED, "chunk %u VERIFIED (got %s)",
		   i, state_name(sfs_store_chunk_state(o, i)));
	check_all_bytes(o, RW_SEED, RW_SIZE, 3, "after write");
	rc = write_sync(o, RW_SEED, RW_SIZE, 1);
	ok(rc == -EEXIST, "rewriting VERIFIED chunk 1: %d (want -EEXIST)", rc);

	uint64_t cb = sfs_store_obj_cached_bytes(o);
	ok(cb == RW_SIZE, "obj_cached_bytes %llu (want %llu)", (unsigned long long)cb,
	   (unsigned long long)RW_SIZE);
	cb = sfs_store_cached_bytes(s, &v);
	ok(cb == RW_SIZE, "store_cached_bytes %llu (want %llu)", (unsigned long long)cb,
	   (unsigned long long)RW_SIZE);
	struct sfs_file_version other = version(999, 5);
	cb = sfs_store_cached_bytes(s, &other);
	struct sfs_store_stats ss = stats(s);
	ok(cb == 0 && ss.objects == 1,
	   "cached_bytes of an unknown version: %llu, objects %llu (want 0, 1)",
	   (unsigned long long)cb, (unsigned long long)ss.objects);
	ok(ss.used_bytes == RW_SIZE && ss.write_bytes == RW_SIZE,
	   "stats: used %llu write %llu (want %llu both)", (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.write_bytes, (unsigned long long)RW_SIZE);

	char path[1024];
	ok(find_object(dir, RW_SIZE, path, sizeof(path)) == 0, "object file on disk: %s", path);
	struct stat fst;
	ok(stat(path, &fst) == 0 && (uint64_t)fst.st_size == data_off_for(3) + RW_SIZE,
	   "object file size %lld (want data_off %llu + %llu)", (long long)fst.st_size,
	   (unsigned long long)data_off_for(3), (unsigned long long)RW_SIZE);

	sfs_store_obj_put(o);
	free(buf);

	/* Persistence: reopen finds the chunks PRESENT, reading verifies them. */
	sfs_store_close(s);
	s = store_open(dir, 0, SFS_STORE_LRU);
	ss = stats(s);
	ok(ss.used_bytes == RW_SIZE && ss.objects == 1,
	   "reopen: used %llu objects %llu (want %llu, 1)", (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.objects, (unsigned long long)RW_SIZE);
	ok(sfs_store_cached_bytes(s, &v) == RW_SIZE, "reopen: cached_bytes of the version");
	o = sfs_store_obj_get(s, &v);
	for (uint32_t i = 0; i < 3; i++)
		ok(sfs_store_chunk_state(o, i) == SFS_CHUNK_PRESENT,
		   "reopen: chunk %u PRESENT (got %s)", i, state_name(sfs_store_chunk_state(o, i)));
	check_all_bytes(o, RW_SEED, RW_SIZE, 3, "after reopen");
	for (uint32_t i = 0; i < 3; i++)
		ok(sfs_store_chunk_state(o, i) == SFS_CHUNK_VERIFIED,
		   "after read: chunk %u VERIFIED (got %s)", i,
		   state_name(sfs_store_chunk_state(o, i)));
	ss = stats(s);
	ok(ss.checksum_failures == 0 && ss.write_bytes == 0,
	   "reopen: checksum_failures %llu write_bytes %llu (want 0, 0)",
	   (unsigned long long)ss.checksum_failures, (unsigned long long)ss.write_bytes);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

static void test_corruption(void)
{
	diag("corruption: a flipped data byte is a miss, and the record is cleared");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(2, RW_SIZE);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int rc = 0;
	for (uint32_t i = 0; i < 3 && rc == 0; i++)
		rc = write_sync(o, RW_SEED, RW_SIZE, i);
	ok(rc == 0, "3 chunks written: %d", rc);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	char path[1024];
	if (find_object(dir, RW_SIZE, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	int fd = open(path, O_RDWR);
	uint64_t hdr_off = 0;
	uint8_t byte = 0;
	off_t at = (off_t)(data_off_for(3) + MiB + 777); /* chunk 1 */
	int sfd = open(sums_of(path), O_RDONLY);
	ok(fd >= 0 && sfd >= 0 && pread(sfd, &hdr_off, 8, 40) == 8 && hdr_off == 0,
	   "header data_off %llu (want 0)", (unsigned long long)hdr_off);
	if (sfd >= 0)
		close(sfd);
	if (pread(fd, &byte, 1, at) != 1)
		bail("pread", -errno);
	byte ^= 0x40;
	if (pwrite(fd, &byte, 1, at) != 1)
		bail("pwrite", -errno);
	close(fd);

	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_PRESENT,
	   "corrupt chunk 1 PRESENT before reading");
	long bad;
	ssize_t n = read_check(o, RW_SEED, RW_SIZE, 1, &bad);
	struct sfs_store_stats ss = stats(s);
	ok(n == -EBADMSG, "read_chunk(1) of a flipped byte: %zd (want -EBADMSG %d)", n, -EBADMSG);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_ABSENT,
	   "chunk 1 ABSENT after the mismatch (got %s)", state_name(sfs_store_chunk_state(o, 1)));
	ok(ss.checksum_failures == 1, "checksum_failures %llu (want 1)",
	   (unsigned long long)ss.checksum_failures);
	ok(ss.used_bytes == RW_SIZE - MiB, "used %llu (want %llu)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)(RW_SIZE - MiB));
	n = read_check(o, RW_SEED, RW_SIZE, 1, &bad);
	ok(n == -ENOENT, "read_chunk(1) again: %zd (want -ENOENT, a plain miss now)", n);
	check_all_bytes(o, RW_SEED, 2 * MiB + 12345, 1, "chunk 0 unaffected");
	n = read_check(o, RW_SEED, RW_SIZE, 2, &bad);
	ok(n == 12345 && bad < 0, "chunk 2 unaffected: %zd bytes, bad byte %ld", n, bad);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	ss = stats(s);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_ABSENT,
	   "after another reopen chunk 1 is ABSENT (record cleared on disk), got %s",
	   state_name(sfs_store_chunk_state(o, 1)));
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_PRESENT &&
	       sfs_store_chunk_state(o, 2) == SFS_CHUNK_PRESENT,
	   "chunks 0 and 2 still PRESENT");
	ok(ss.used_bytes == RW_SIZE - MiB, "used %llu after reopen (want %llu)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)(RW_SIZE - MiB));
	rc = write_sync(o, RW_SEED, RW_SIZE, 1);
	ok(rc == 0, "chunk 1 rewritten: %d", rc);
	check_all_bytes(o, RW_SEED, RW_SIZE, 3, "after rewrite");
	sfs_store_obj_put(o);
	sfs_store_close(s);

	/* A record whose data was lost (the file is short): -EBADMSG at read. */
	if (truncate(path, (off_t)(data_off_for(3) + 2 * MiB + 100)) != 0)
		bail("truncate", -errno);
	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	ok(sfs_store_chunk_state(o, 2) == SFS_CHUNK_ABSENT,
	   "chunk 2 beyond the end of a truncated file: ABSENT at load (got %s)",
	   state_name(sfs_store_chunk_state(o, 2)));
	ss = stats(s);
	ok(ss.used_bytes == 2 * MiB, "used %llu (want %llu)", (unsigned long long)ss.used_bytes,
	   (unsigned long long)(2 * MiB));
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* --- damaged cache directories ---------------------------------------------- */

static void test_damaged_files(void)
{
	diag("damaged objects and stray files are discarded at load");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	/* Distinct sizes so that find_object tells the files apart. */
	uint64_t sz[4] = {2 * MiB + 1, 2 * MiB + 2, 2 * MiB + 3, 2 * MiB + 4};
	struct sfs_file_version v[4];
	int rc = 0;
	for (int f = 0; f < 4; f++) {
		v[f] = version(100 + (uint64_t)f, sz[f]);
		sfs_store_obj *o = sfs_store_obj_get(s, &v[f]);
		for (uint32_t i = 0; i < 3 && rc == 0; i++)
			rc = write_sync(o, 20 + (uint32_t)f, sz[f], i);
		sfs_store_obj_put(o);
	}
	ok(rc == 0, "4 objects written: %d", rc);
	sfs_store_close(s);

	char p[4][1024];
	for (int f = 0; f < 4; f++)
		if (find_object(dir, sz[f], p[f], sizeof(p[f])) != 0)
			bail("object file not found", -ENOENT);
	/* 0: truncated inside chunk 1; chunk 2 gone too. */
	if (truncate(p[0], (off_t)(data_off_for(3) + MiB + 10)) != 0)
		bail("truncate", -errno);
	/* 1: header zeroed. */
	int fd = open(sums_of(p[1]), O_RDWR);
	uint8_t zero[64] = {0};
	if (fd < 0 || pwrite(fd, zero, 64, 0) != 64)
		bail("zero header", -errno);
	close(fd);
	/* 2: its .sums truncated to 10 bytes (a torn header). */
	if (truncate(sums_of(p[2]), 10) != 0)
		bail("truncate", -errno);
	/* 3: intact. Stray files next to it. */
	char sub[1024], stray[1200], copy[1200];
	snprintf(sub, sizeof(sub), "%s", p[3]);
	*strrchr(sub, '/') = 0;
	snprintf(stray, sizeof(stray), "%s/leftover.tmp", sub);
	snprintf(copy, sizeof(copy), "%s/%s", sub, "0123456789abcdef0123456789abcdef");
	int sfd = open(stray, O_CREAT | O_WRONLY, 0600);
	if (sfd < 0 || write(sfd, "junk", 4) != 4)
		bail("stray", -errno);
	close(sfd);
	/* A valid object under a name that is not its key. */
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", p[3], copy);
	if (system(cmd) != 0)
		bail("cp", -EIO);
	sfd = open(tpath("cache/objects/junk"), O_CREAT | O_WRONLY, 0600);
	if (sfd < 0 || write(sfd, "junk", 4) != 4)
		bail("stray", -errno);
	close(sfd);

	s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_store_stats ss = stats(s);
	uint64_t want_used = MiB + sz[3];
	ok(ss.used_bytes == want_used,
	   "used %llu after load (want %llu: chunk 0 of the truncated one + the intact one)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)want_used);
	ok(ss.objects == 2, "objects %llu (want 2: the truncated one and the intact one)",
	   (unsigned long long)ss.objects);
	uint64_t cb[4];
	for (int f = 0; f < 4; f++)
		cb[f] = sfs_store_cached_bytes(s, &v[f]);
	ok(cb[0] == MiB && cb[1] == 0 && cb[2] == 0 && cb[3] == sz[3],
	   "cached bytes %llu %llu %llu %llu (want %llu 0 0 %llu)", (unsigned long long)cb[0],
	   (unsigned long long)cb[1], (unsigned long long)cb[2], (unsigned long long)cb[3],
	   (unsigned long long)MiB, (unsigned long long)sz[3]);
	ok(ss.used_bytes == cb[0] + cb[1] + cb[2] + cb[3],
	   "used_bytes %llu equals the sum of cached bytes %llu", (unsigned long long)ss.used_bytes,
	   (unsigned long long)(cb[0] + cb[1] + cb[2] + cb[3]));
	ok(!exists(p[1]) && !exists(p[2]), "zeroed-header and torn-header files deleted (%d %d)",
	   exists(p[1]), exists(p[2]));
	ok(!exists(stray) && !exists(copy),
	   "stray objects/KK/leftover.tmp and misnamed object deleted (%d %d)", exists(stray),
	   exists(copy));
	if (exists(tpath("cache/objects/junk")))
		diag("note: stray regular file objects/junk is ignored, not deleted");

	sfs_store_obj *o0 = sfs_store_obj_get(s, &v[0]);
	sfs_store_obj *o3 = sfs_store_obj_get(s, &v[3]);
	ok(sfs_store_chunk_state(o0, 0) == SFS_CHUNK_PRESENT &&
	       sfs_store_chunk_state(o0, 1) == SFS_CHUNK_ABSENT &&
	       sfs_store_chunk_state(o0, 2) == SFS_CHUNK_ABSENT,
	   "truncated object: chunk states %s %s %s (want PRESENT ABSENT ABSENT)",
	   state_name(sfs_store_chunk_state(o0, 0)), state_name(sfs_store_chunk_state(o0, 1)),
	   state_name(sfs_store_chunk_state(o0, 2)));
	check_all_bytes(o0, 20, sz[0], 1, "truncated object, chunk 0");
	rc = write_sync(o0, 20, sz[0], 1);
	ok(rc == 0, "truncated object: chunk 1 rewritten: %d", rc);
	check_all_bytes(o0, 20, sz[0], 2, "truncated object after rewrite");
	check_all_bytes(o3, 23, sz[3], 3, "intact object");
	sfs_store_obj_put(o0);
	sfs_store_obj_put(o3);
	sfs_store_obj *o1 = sfs_store_obj_get(s, &v[1]);
	rc = write_sync(o1, 21, sz[1], 0);
	ok(rc == 0, "discarded object rewritable: %d", rc);
	check_all_bytes(o1, 21, sz[1], 1, "discarded object rewritten");
	sfs_store_obj_put(o1);
	ss = stats(s);
	ok(ss.used_bytes == 2 * MiB + sz[3] + MiB, "used %llu (want %llu)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)(2 * MiB + sz[3] + MiB));
	sfs_store_close(s);
	tmp_remove();
}

/* A stray entry directly in objects/ whose name starts like an object
 * directory (objects/KKsomething) must not make that directory load twice. */
static void test_stray_prefix(void)
{
	diag("stray objects/KK* entry next to objects/KK/");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	uint64_t size = MiB + 77;
	struct sfs_file_version v = version(300, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int rc = write_sync(o, 30, size, 0);
	rc = rc ? rc : write_sync(o, 30, size, 1);
	sfs_store_obj_put(o);
	ok(rc == 0, "object written: %d", rc);
	sfs_store_close(s);

	char path[1024], stray[1200];
	if (find_object(dir, size, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	char *kk = strrchr(path, '/') - 2;
	snprintf(stray, sizeof(stray), "%s/objects/%.2s.old", dir, kk);
	int fd = open(stray, O_CREAT | O_WRONLY, 0600);
	if (fd < 0)
		bail("stray", -errno);
	close(fd);

	s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_store_stats ss = stats(s);
	ok(ss.used_bytes == size && ss.objects == 1,
	   "with a stray file objects/%.2s.old: used %llu objects %llu (want %llu, 1)", kk,
	   (unsigned long long)ss.used_bytes, (unsigned long long)ss.objects,
	   (unsigned long long)size);
	o = sfs_store_obj_get(s, &v);
	check_all_bytes(o, 30, size, 2, "stray prefix");
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* --- identity ---------------------------------------------------------------- */

static void test_versions(void)
{
	diag("a changed file is a new object");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	uint64_t size = 2 * MiB;
	struct sfs_file_version v1 = version(400, size);
	sfs_store_obj *o1 = sfs_store_obj_get(s, &v1);
	int rc = write_sync(o1, 40, size, 0);
	rc = rc ? rc : write_sync(o1, 40, size, 1);
	ok(rc == 0, "v1 written: %d", rc);

	struct sfs_file_version v2 = v1;
	v2.mtime_s++;
	struct sfs_file_version v3 = v1;
	v3.ctime_ns++;
	struct sfs_file_version v4 = v1;
	v4.fsid++;
	const struct sfs_file_version *vs[3] = {&v2, &v3, &v4};
	const char *what[3] = {"mtime_s + 1", "ctime_ns + 1", "fsid + 1"};
	for (int k = 0; k < 3; k++) {
		sfs_store_obj *o2 = sfs_store_obj_get(s, vs[k]);
		ok(o2 != o1 && sfs_store_chunk_state(o2, 0) == SFS_CHUNK_ABSENT &&
		       sfs_store_chunk_state(o2, 1) == SFS_CHUNK_ABSENT &&
		       sfs_store_obj_cached_bytes(o2) == 0 && sfs_store_cached_bytes(s, vs[k]) == 0,
		   "%s: another object, chunks ABSENT, 0 bytes cached", what[k]);
		uint8_t *buf = malloc(MiB);
		ok(sfs_store_read_chunk(o2, 0, buf) == -ENOENT, "%s: read_chunk -ENOENT", what[k]);
		free(buf);
		sfs_store_obj_put(o2);
	}
	sfs_store_obj *again = sfs_store_obj_get(s, &v1);
	ok(again == o1, "the same version gives the same object");
	sfs_store_obj_put(again);

	/* v2 gets its own bytes; v1's stay. */
	sfs_store_obj *o2 = sfs_store_obj_get(s, &v2);
	rc = write_sync(o2, 41, size, 0);
	ok(rc == 0, "v2 chunk 0 written: %d", rc);
	check_all_bytes(o2, 41, size, 1, "v2");
	check_all_bytes(o1, 40, size, 2, "v1 unaffected by v2");
	struct sfs_store_stats ss = stats(s);
	ok(ss.objects == 2 && ss.used_bytes == 3 * MiB, "objects %llu used %llu (want 2, %llu)",
	   (unsigned long long)ss.objects, (unsigned long long)ss.used_bytes,
	   (unsigned long long)(3 * MiB));
	sfs_store_obj_put(o2);
	sfs_store_obj_put(o1);
	sfs_store_close(s);
	tmp_remove();
}

/*
 * Two references to one new version taken before its first chunk is
 * written (two opens of one file, prefetch + a reader): store.h says
 * obj_get returns "the object for a file version", so both are one object
 * and a chunk written through one is served right through the other.
 */
static void test_same_version_twice(void)
{
	diag("one version referenced twice before its first write");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	uint64_t size = 2 * MiB + 5;
	struct sfs_file_version v = version(500, size);
	sfs_store_obj *a = sfs_store_obj_get(s, &v);
	sfs_store_obj *b = sfs_store_obj_get(s, &v);
	ok(a == b, "two obj_get of a new version: same object (%p, %p)", (void *)a, (void *)b);

	int rc = write_sync(a, 50, size, 0);
	ok(rc == 0, "chunk 0 written through the first reference: %d", rc);
	enum sfs_chunk_state st = sfs_store_chunk_state(b, 0);
	ok(st == SFS_CHUNK_VERIFIED,
	   "chunk 0 seen through the second reference: %s (want VERIFIED)", state_name(st));
	rc = write_sync(b, 50, size, 1);
	ok(rc == 0, "chunk 1 written through the second reference: %d", rc);
	long bad;
	ssize_t n = read_check(a, 50, size, 0, &bad);
	ok(n == (ssize_t)MiB && bad < 0, "read_chunk(0) = %zd (want %llu), bad byte %ld", n,
	   (unsigned long long)MiB, bad);
	struct sfs_store_stats ss = stats(s);
	ok(ss.objects == 1, "one version, objects %llu (want 1)", (unsigned long long)ss.objects);
	sfs_store_obj_put(a);
	sfs_store_obj_put(b);
	ss = stats(s);
	uint64_t cb = sfs_store_cached_bytes(s, &v);
	ok(ss.used_bytes == cb, "used_bytes %llu equals cached bytes of the version %llu",
	   (unsigned long long)ss.used_bytes, (unsigned long long)cb);
	sfs_store_close(s);
	tmp_remove();
}

/* --- capacity ------------------------------------------------------------------ */

static void lru_write(sfs_store *s, uint64_t fileid, uint32_t seed, uint64_t size, uint64_t cap,
		      const char *name)
{
	struct sfs_file_version v = version(fileid, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int rc = 0;
	uint64_t max_used = 0;
	for (uint32_t i = 0; i < 2 && rc == 0; i++) {
		rc = write_sync(o, seed, size, i);
		uint64_t u = stats(s).used_bytes;
		max_used = u > max_used ? u : max_used;
	}
	sfs_store_obj_put(o);
	ok(rc == 0 && max_used <= cap, "object %s written: %d, used peaked at %llu (cap %llu)",
	   name, rc, (unsigned long long)max_used, (unsigned long long)cap);
}

static void test_lru(void)
{
	diag("lru: evicts the coldest unreferenced object");
	tmp_new();
	const char *dir = tpath("cache");
	uint64_t cap = 4 * MiB, size = 2 * MiB;
	sfs_store *s = store_open(dir, cap, SFS_STORE_LRU);
	struct sfs_file_version A = version(601, size), B = version(602, size),
				C = version(603, size), D = version(604, size),
				E = version(605, size), F = version(606, size);

	lru_write(s, 601, 61, size, cap, "A");
	lru_write(s, 602, 62, size, cap, "B");
	sfs_store_obj_put(sfs_store_obj_get(s, &A)); /* touch A: B is now coldest */
	lru_write(s, 603, 63, size, cap, "C");
	struct sfs_store_stats ss = stats(s);
	ok(sfs_store_cached_bytes(s, &B) == 0 && sfs_store_cached_bytes(s, &A) == size &&
	       sfs_store_cached_bytes(s, &C) == size,
	   "after C: B evicted, A (touched by obj_get) and C kept (A %llu B %llu C %llu)",
	   (unsigned long long)sfs_store_cached_bytes(s, &A),
	   (unsigned long long)sfs_store_cached_bytes(s, &B),
	   (unsigned long long)sfs_store_cached_bytes(s, &C));
	ok(ss.evicted_bytes == size && ss.used_bytes == cap && ss.objects == 2,
	   "evicted %llu used %llu objects %llu (want %llu %llu 2)",
	   (unsigned long long)ss.evicted_bytes, (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.objects, (unsigned long long)size, (unsigned long long)cap);
	ok(count_files(dir) == 2, "2 object files on disk (got %d)", count_files(dir));

	/* Touch by read: get A then C (C hotter), read A: C is now coldest. */
	sfs_store_obj *a = sfs_store_obj_get(s, &A);
	sfs_store_obj *c = sfs_store_obj_get(s, &C);
	long bad;
	ssize_t n = read_check(a, 61, size, 1, &bad);
	ok(n == (ssize_t)MiB && bad < 0, "read A chunk 1: %zd, bad byte %ld", n, bad);
	sfs_store_obj_put(c);
	sfs_store_obj_put(a);
	lru_write(s, 604, 64, size, cap, "D");
	ok(sfs_store_cached_bytes(s, &C) == 0 && sfs_store_cached_bytes(s, &A) == size,
	   "after D: C evicted, A (touched by read_chunk) kept (A %llu C %llu)",
	   (unsigned long long)sfs_store_cached_bytes(s, &A),
	   (unsigned long long)sfs_store_cached_bytes(s, &C));

	/* A referenced and coldest: D goes instead. */
	a = sfs_store_obj_get(s, &A);
	sfs_store_obj *d = sfs_store_obj_get(s, &D);
	sfs_store_obj_put(d); /* order: A (held), D */
	lru_write(s, 605, 65, size, cap, "E");
	ss = stats(s);
	ok(sfs_store_cached_bytes(s, &A) == size && sfs_store_cached_bytes(s, &D) == 0 &&
	       sfs_store_cached_bytes(s, &E) == size,
	   "after E: referenced A kept though coldest, D evicted (A %llu D %llu E %llu)",
	   (unsigned long long)sfs_store_cached_bytes(s, &A),
	   (unsigned long long)sfs_store_cached_bytes(s, &D),
	   (unsigned long long)sfs_store_cached_bytes(s, &E));
	ok(ss.evicted_bytes == 3 * size, "evicted %llu (want %llu)",
	   (unsigned long long)ss.evicted_bytes, (unsigned long long)(3 * size));
	check_all_bytes(a, 61, size, 2, "referenced A");

	/* Everything referenced: nothing to evict, the write is dropped. */
	sfs_store_obj *e = sfs_store_obj_get(s, &E);
	sfs_store_obj *f = sfs_store_obj_get(s, &F);
	int rc = write_sync(f, 66, size, 0);
	ss = stats(s);
	ok(rc == -ENOSPC, "all cached objects referenced: write F reports %d (want -ENOSPC)", rc);
	ok(sfs_store_chunk_state(f, 0) == SFS_CHUNK_ABSENT,
	   "F chunk 0 ABSENT after the drop (got %s)", state_name(sfs_store_chunk_state(f, 0)));
	ok(ss.not_admitted_bytes == MiB && ss.used_bytes == cap && ss.evicted_bytes == 3 * size,
	   "not_admitted %llu used %llu evicted %llu (want %llu %llu %llu)",
	   (unsigned long long)ss.not_admitted_bytes, (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.evicted_bytes, (unsigned long long)MiB, (unsigned long long)cap,
	   (unsigned long long)(3 * size));
	sfs_store_obj_put(f);
	sfs_store_obj_put(e);
	sfs_store_obj_put(a);
	ok(count_files(dir) == 2, "2 object files on disk (got %d)", count_files(dir));

	/* Eviction survives a restart: what is on disk is what is counted. */
	sfs_store_close(s);
	s = store_open(dir, cap, SFS_STORE_LRU);
	ss = stats(s);
	ok(ss.used_bytes == cap && ss.objects == 2 && sfs_store_cached_bytes(s, &A) == size &&
	       sfs_store_cached_bytes(s, &E) == size,
	   "reopen: used %llu objects %llu (want %llu 2, A and E)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)ss.objects,
	   (unsigned long long)cap);
	sfs_store_close(s);
	tmp_remove();
}

static void test_pin(void)
{
	diag("pin: once full, admit nothing and keep what is cached");
	tmp_new();
	uint64_t cap = 2 * MiB, size = 3 * MiB;
	sfs_store *s = store_open(tpath("a"), cap, SFS_STORE_PIN);
	struct sfs_file_version v = version(700, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int r0 = write_sync(o, 70, size, 0), r1 = write_sync(o, 70, size, 1);
	int r2 = write_sync(o, 70, size, 2);
	struct sfs_store_stats ss = stats(s);
	ok(r0 == 0 && r1 == 0, "chunks 0 and 1 admitted: %d %d", r0, r1);
	ok(r2 == -ENOSPC, "third chunk with capacity 2 MiB: %d (want -ENOSPC)", r2);
	ok(ss.not_admitted_bytes == MiB, "not_admitted %llu (want %llu)",
	   (unsigned long long)ss.not_admitted_bytes, (unsigned long long)MiB);
	ok(ss.used_bytes == cap && ss.evicted_bytes == 0, "used %llu evicted %llu (want %llu 0)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)ss.evicted_bytes,
	   (unsigned long long)cap);
	ok(sfs_store_chunk_state(o, 2) == SFS_CHUNK_ABSENT, "chunk 2 ABSENT (got %s)",
	   state_name(sfs_store_chunk_state(o, 2)));
	check_all_bytes(o, 70, size, 2, "pinned chunks");
	sfs_store_obj_put(o);
	/* Another file: still nothing admitted, nothing evicted. */
	struct sfs_file_version w = version(701, MiB);
	sfs_store_obj *o2 = sfs_store_obj_get(s, &w);
	int rc = write_sync(o2, 71, MiB, 0);
	sfs_store_obj_put(o2);
	ss = stats(s);
	ok(rc == -ENOSPC && ss.used_bytes == cap && sfs_store_cached_bytes(s, &v) == cap,
	   "a new file while full: %d, used %llu, first file keeps %llu", rc,
	   (unsigned long long)ss.used_bytes, (unsigned long long)sfs_store_cached_bytes(s, &v));
	sfs_store_close(s);

	/* Three writes queued at once: at most two admitted, in either path. */
	s = store_open(tpath("b"), cap, SFS_STORE_PIN);
	o = sfs_store_obj_get(s, &v);
	struct chunk bufs[3];
	struct slot sl[3] = {{0}};
	int rcs[3], admitted = 0, refused = 0;
	for (uint32_t i = 0; i < 3; i++) {
		bufs[i] = chunk_new(70, size, i, 0);
		rcs[i] = sfs_store_write_chunk_hashed(o, i, bufs[i].p, bufs[i].len, NULL, 0,
						      on_done, &sl[i]);
	}
	for (int i = 0; i < 3; i++) {
		int e = rcs[i] ? rcs[i] : slot_wait(&sl[i]);
		admitted += e == 0;
		refused += e == -ENOSPC;
		chunk_free(&bufs[i]);
	}
	ss = stats(s);
	ok(admitted == 2 && refused == 1 && ss.used_bytes == cap && ss.not_admitted_bytes == MiB,
	   "3 queued at once: %d admitted, %d -ENOSPC, used %llu, not_admitted %llu (want 2 1 %llu "
	   "%llu)",
	   admitted, refused, (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.not_admitted_bytes, (unsigned long long)cap,
	   (unsigned long long)MiB);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* --- offline ------------------------------------------------------------------ */

static void test_offline(void)
{
	diag("offline: a missing parent, then the directory comes back");
	tmp_new();
	const char *dir = tpath("parent/cache");
	sfs_store *s = NULL;
	char err[256] = "";
	uint64_t t0 = sfs_now_ms();
	int rc = sfs_store_open(
	    &(struct sfs_store_conf){.dir = dir, .chunk_bytes = MiB, .capacity_bytes = 64 * MiB},
	    &s, err, sizeof(err));
	ok(rc == 0, "open with a missing parent succeeds: %d %s", rc, err);
	if (rc)
		bail("sfs_store_open", rc);
	struct sfs_store_stats ss = stats(s);
	ok(!ss.online && ss.errors >= 1, "offline: online %d errors %llu (want 0, >= 1)", ss.online,
	   (unsigned long long)ss.errors);
	uint64_t size = MiB + 3;
	struct sfs_file_version v = version(800, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	ok(o != NULL, "obj_get works offline");
	uint8_t *buf = malloc(MiB);
	fill(80, 0, buf, MiB);
	struct slot sl = {0};
	rc = sfs_store_write_chunk_hashed(o, 0, buf, (uint32_t)MiB, NULL, 0, on_done, &sl);
	ok(rc == -EAGAIN && !sl.fired, "write offline: %d (want -EAGAIN), done not called", rc);
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_ABSENT, "chunk ABSENT offline");
	ok(sfs_store_start(s) == 0, "writer started");

	if (mkdir(tpath("parent"), 0700) != 0)
		bail("mkdir parent", -errno);
	uint64_t t_online = 0;
	while (sfs_now_ms() - t0 < 10000) {
		if (stats(s).online) {
			t_online = sfs_now_ms();
			break;
		}
		usleep(50 * 1000);
	}
	ok(t_online && t_online - t0 <= 7500, "online again %llu ms after open (want <= ~6 s)",
	   t_online ? (unsigned long long)(t_online - t0) : 0ull);
	ok(exists(tpath("parent/cache/LOCK")) && exists(tpath("parent/cache/objects")),
	   "LOCK and objects/ created once the parent exists");
	rc = write_sync(o, 80, size, 0);
	ok(rc == 0, "write after coming online: %d", rc);
	rc = write_sync(o, 80, size, 1);
	ok(rc == 0, "write of the last chunk: %d", rc);
	check_all_bytes(o, 80, size, 2, "after coming online");
	ss = stats(s);
	ok(ss.online && ss.used_bytes == size, "online %d used %llu (want 1 %llu)", ss.online,
	   (unsigned long long)ss.used_bytes, (unsigned long long)size);
	sfs_store_obj_put(o);
	free(buf);

	/* The lock was taken when it came online. */
	sfs_store *s2 = NULL;
	rc = sfs_store_open(&(struct sfs_store_conf){.dir = dir, .chunk_bytes = MiB}, &s2, err,
			    sizeof(err));
	ok(rc == -EBUSY, "a second open after coming online: %d (want -EBUSY)", rc);
	if (rc == 0)
		sfs_store_close(s2);
	sfs_store_close(s);
	tmp_remove();
}

/* --- range reads ------------------------------------------------------------- */

#define RG_SIZE (3 * MiB + 12345) /* 4 chunks, the last short */
#define RG_SEED 33

/* Compares n bytes at data with bytes [off, off + n) of file `seed`.
 * Returns -1 if equal, else the first differing index. */
static long range_diff(uint32_t seed, uint64_t off, const char *data, size_t n)
{
	uint64_t base = off & ~7ull;
	uint8_t *exp = malloc(n + 16);
	long at = -1;

	fill(seed, base, exp, n + (off - base));
	const uint8_t *e = exp + (off - base);
	if (memcmp(e, data, n))
		for (size_t k = 0; k < n; k++)
			if (e[k] != (uint8_t)data[k]) {
				at = (long)k;
				break;
			}
	free(exp);
	return at;
}

static uint64_t rg_rand(uint64_t *st)
{
	*st = mix(*st);
	return *st;
}

/* One range read checked: returns 0 if it gave exactly the bytes the
 * version has there (min(len, size - off) of them), else -1 with why set. */
static int range_check(sfs_store_obj *o, uint32_t seed, uint64_t size, uint64_t off, size_t len,
		       uint8_t *buf, char *why, size_t why_len)
{
	const char *data = NULL;
	size_t want = off >= size ? 0 : (size - off < len ? (size_t)(size - off) : len);
	ssize_t n = sfs_store_read_range(o, off, len, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	long at = -1;

	if (n == (ssize_t)want && n > 0)
		at = range_diff(seed, off, data, (size_t)n);
	if (n != (ssize_t)want || at >= 0) {
		snprintf(why, why_len, "read_range(%llu, %zu) = %zd (want %zu), bad byte %ld",
			 (unsigned long long)off, len, n, want, at);
		return -1;
	}
	return 0;
}

static uint8_t *range_buf(void)
{
	uint8_t *b = aligned_alloc(4096, SFS_STORE_RANGE_BUF_BYTES);

	if (!b)
		bail("aligned_alloc", -ENOMEM);
	return b;
}

/* The edge cases and n random ranges; returns how many were wrong. */
static int range_sweep(sfs_store_obj *o, uint32_t seed, uint64_t size, int n, uint64_t rnd,
		       uint8_t *buf)
{
	static const struct {
		uint64_t off;
		size_t len;
	} edges[] = {
	    {0, 1},
	    {0, MiB},
	    {1, MiB},
	    {MiB - 1, 2},
	    {MiB - 100, 200},
	    {MiB / 2, MiB},
	    {65535, 2},
	    {65536, 65536},
	    {2 * MiB + 7, MiB}, /* into the short chunk */
	    {3 * MiB, 12345},
	    {3 * MiB + 12344, 1},
	    {3 * MiB + 12300, 1000}, /* past EOF: short */
	    {3 * MiB - 3, MiB},
	    {RG_SIZE, 10}, /* at EOF: 0 */
	    {RG_SIZE + 5000, 10},
	};
	char why[256];
	int wrong = 0;

	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		if (range_check(o, seed, size, edges[i].off, edges[i].len, buf, why, sizeof(why))) {
			diag("%s", why);
			wrong++;
		}
	for (int i = 0; i < n; i++) {
		uint64_t r = rg_rand(&rnd);
		size_t len = r % 4 == 0 ? 1 + (size_t)(rg_rand(&rnd) % MiB) : 110 * 1000;
		uint64_t off = rg_rand(&rnd) % size;
		if (range_check(o, seed, size, off, len, buf, why, sizeof(why))) {
			if (wrong < 5)
				diag("%s", why);
			wrong++;
		}
	}
	return wrong;
}

static sfs_store_obj *write_all(sfs_store *s, const struct sfs_file_version *v, uint32_t seed)
{
	sfs_store_obj *o = sfs_store_obj_get(s, v);
	uint32_t n = (uint32_t)((v->size + MiB - 1) / MiB);
	int rc = 0;

	for (uint32_t i = 0; i < n && rc == 0; i++)
		rc = write_sync(o, seed, v->size, i);
	if (rc)
		bail("write_all", rc);
	return o;
}

static void test_range(void)
{
	diag("read_range: random offsets and lengths, byte-exact");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1000, RG_SIZE);
	sfs_store_obj *o = write_all(s, &v, RG_SEED);
	uint8_t *buf = range_buf();

	int wrong = range_sweep(o, RG_SEED, RG_SIZE, 2000, 1, buf);
	ok(wrong == 0, "written this run (VERIFIED, records in memory): %d of 2015 wrong", wrong);
	const char *data = NULL;
	ssize_t n = sfs_store_read_range(o, 0, MiB + 1, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -EINVAL, "len 1 MiB + 1: %zd (want -EINVAL)", n);
	n = sfs_store_read_range(o, 100, MiB, buf, MiB, &data);
	ok(n == -EINVAL, "buf_len too small for the sub-blocks: %zd (want -EINVAL)", n);
	n = sfs_store_read_range(o, 100, 10, buf, 65536, &data);
	ok(n == 10 && range_diff(RG_SEED, 100, data, 10) < 0,
	   "a small range with a small buffer: %zd (want 10)", n);
	/* A misaligned buffer takes the buffered fd. */
	char why[256] = "";
	int r = 0;
	for (uint64_t off = 5; off < RG_SIZE && r == 0; off += 700001)
		r = range_check(o, RG_SEED, RG_SIZE, off, 110 * 1000, buf, why, sizeof(why));
	const char *d2 = NULL;
	n = sfs_store_read_range(o, MiB - 50, 100, buf + 8, SFS_STORE_RANGE_BUF_BYTES - 8, &d2);
	ok(r == 0 && n == 100 && range_diff(RG_SEED, MiB - 50, d2, 100) < 0,
	   "misaligned buffer across a chunk boundary: %zd %s", n, why);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_VERIFIED, "range reads keep chunks VERIFIED");
	sfs_store_obj_put(o);
	sfs_store_close(s);

	/* After a restart: PRESENT chunks, records read from the file. */
	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	wrong = range_sweep(o, RG_SEED, RG_SIZE, 1000, 2, buf);
	ok(wrong == 0, "after reopen (PRESENT, records from disk): %d of 1015 wrong", wrong);
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_PRESENT,
	   "range reads verify sub-blocks, not chunks: chunk 0 stays PRESENT (got %s)",
	   state_name(sfs_store_chunk_state(o, 0)));
	sfs_store_obj_put(o);
	/* Dropped and taken again: records read again. */
	o = sfs_store_obj_get(s, &v);
	wrong = range_sweep(o, RG_SEED, RG_SIZE, 200, 3, buf);
	ok(wrong == 0, "after the last reference went and came back: %d wrong", wrong);
	long bad;
	n = read_check(o, RG_SEED, RG_SIZE, 3, &bad);
	ok(n == 12345 && bad < 0, "read_chunk of the short chunk after range reads: %zd", n);

	sfs_store_obj_put(o);

	/* A missing chunk (another version, chunk 2 never written): ranges
	 * that touch it are -ENOENT, others work. */
	struct sfs_file_version gap = version(1001, RG_SIZE);
	o = sfs_store_obj_get(s, &gap);
	for (uint32_t i = 0; i < 4; i++)
		if (i != 2 && write_sync(o, RG_SEED, RG_SIZE, i) != 0)
			bail("write around the gap", -EIO);
	n = sfs_store_read_range(o, 2 * MiB - 10, 20, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -ENOENT, "range across into an ABSENT chunk: %zd (want -ENOENT)", n);
	n = sfs_store_read_range(o, 3 * MiB - 10, 20, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -ENOENT, "range across out of an ABSENT chunk: %zd (want -ENOENT)", n);
	r = range_check(o, RG_SEED, RG_SIZE, 2 * MiB - 110000, 110000, buf, why, sizeof(why));
	ok(r == 0, "range ending at the ABSENT chunk's start %s", why);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	free(buf);
	tmp_remove();
}

/* Flips one byte of the object file at `at`. */
static void test_range_corruption(void)
{
	diag("read_range: a flipped byte in one sub-block is a miss for its chunk only");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1100, RG_SIZE);
	sfs_store_obj_put(write_all(s, &v, RG_SEED));
	sfs_store_close(s);
	char path[1024];
	if (find_object(dir, RG_SIZE, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	uint64_t d0 = data_off_for(4);
	flip_byte(path, (off_t)(d0 + MiB + 5 * SUB + 100)); /* chunk 1, sub-block 5 */

	s = store_open(dir, 0, SFS_STORE_LRU);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	uint8_t *buf = range_buf();
	char why[256] = "";
	int r = range_check(o, RG_SEED, RG_SIZE, MiB + 3 * SUB + 5, 2 * SUB - 10, buf, why,
			    sizeof(why));
	ok(r == 0, "chunk 1, sub-blocks 3-4 (not the flipped one): exact %s", why);
	const char *data = NULL;
	ssize_t n =
	    sfs_store_read_range(o, MiB + 5 * SUB, 10, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	struct sfs_store_stats ss = stats(s);
	ok(n == -EBADMSG, "range in the flipped sub-block: %zd (want -EBADMSG)", n);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_ABSENT && ss.checksum_failures == 1 &&
	       ss.used_bytes == RG_SIZE - MiB,
	   "chunk 1 %s, checksum_failures %llu, used %llu (want ABSENT 1 %llu)",
	   state_name(sfs_store_chunk_state(o, 1)), (unsigned long long)ss.checksum_failures,
	   (unsigned long long)ss.used_bytes, (unsigned long long)(RG_SIZE - MiB));
	n = sfs_store_read_range(o, MiB + 3 * SUB, 10, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -ENOENT, "a good sub-block of that chunk now: %zd (want -ENOENT)", n);
	long bad;
	ok(read_check(o, RG_SEED, RG_SIZE, 1, &bad) == -ENOENT, "read_chunk(1): -ENOENT");
	r = range_check(o, RG_SEED, RG_SIZE, 10, MiB - 20, buf, why, sizeof(why));
	r |= range_check(o, RG_SEED, RG_SIZE, 2 * MiB + 1000, MiB, buf, why, sizeof(why));
	ok(r == 0, "chunks 0, 2 and 3 still served exactly %s", why);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	/* The record was cleared on disk; a rewrite makes it whole again. */
	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	ok(sfs_store_chunk_state(o, 1) == SFS_CHUNK_ABSENT, "after reopen chunk 1 ABSENT (got %s)",
	   state_name(sfs_store_chunk_state(o, 1)));
	int rc = write_sync(o, RG_SEED, RG_SIZE, 1);
	r = range_check(o, RG_SEED, RG_SIZE, MiB - 7, MiB, buf, why, sizeof(why));
	ok(rc == 0 && r == 0, "rewritten chunk 1 served across both its boundaries: %d %s", rc,
	   why);

	/* A flip under a held object whose records are in memory, in the first
	 * sub-block of chunk 3, reached by a range that starts in chunk 2:
	 * chunk 3 goes, chunk 2 stays. */
	flip_byte(path, (off_t)(d0 + 3 * MiB + 1));
	n = sfs_store_read_range(o, 3 * MiB - 100, 200, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -EBADMSG && sfs_store_chunk_state(o, 3) == SFS_CHUNK_ABSENT &&
	       sfs_store_chunk_state(o, 2) != SFS_CHUNK_ABSENT,
	   "range across into a bad sub-block: %zd, chunk 3 %s, chunk 2 %s", n,
	   state_name(sfs_store_chunk_state(o, 3)), state_name(sfs_store_chunk_state(o, 2)));
	r = range_check(o, RG_SEED, RG_SIZE, 3 * MiB - 100000, 100000, buf, why, sizeof(why));
	ok(r == 0, "chunk 2 up to the boundary still exact %s", why);
	/* A damaged record (one sub-block hash) fails that sub-block. */
	uint64_t junk = 0x5555;
	int fd = open(sums_of(path), O_RDWR);
	if (fd < 0 || pwrite(fd, &junk, 8, 64 + REC_BYTES * 0 + 8 * 2) != 8)
		bail("damage record", -errno);
	close(fd);
	sfs_store_obj_put(o);
	o = sfs_store_obj_get(s, &v); /* records read from disk again */
	n = sfs_store_read_range(o, 2 * SUB + 3, 5, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
	ok(n == -EBADMSG && sfs_store_chunk_state(o, 0) == SFS_CHUNK_ABSENT,
	   "a damaged sub-block hash in chunk 0's record: %zd, chunk 0 %s", n,
	   state_name(sfs_store_chunk_state(o, 0)));
	ss = stats(s);
	ok(ss.checksum_failures == 2, "checksum_failures %llu this run (want 2)",
	   (unsigned long long)ss.checksum_failures);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	free(buf);
	tmp_remove();
}

/* An object file of the previous layout (one hash per chunk) is discarded. */
static void test_old_layout(void)
{
	diag("objects of the previous layout are discarded at load");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1200, MiB + 1);
	sfs_store_obj_put(write_all(s, &v, 12));
	sfs_store_close(s);
	char path[1024];
	if (find_object(dir, MiB + 1, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	int fd = open(sums_of(path), O_RDWR);
	if (fd < 0 || pwrite(fd, "SFSOBJS1", 8, 0) != 8)
		bail("old magic", -errno);
	close(fd);
	s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_store_stats ss = stats(s);
	ok(ss.objects == 0 && ss.used_bytes == 0 && !exists(path) && !exists(sums_of(path)),
	   "old magic: objects %llu used %llu, files %s (want 0 0 deleted)",
	   (unsigned long long)ss.objects, (unsigned long long)ss.used_bytes,
	   exists(path) ? "kept" : "deleted");
	sfs_store_close(s);
	tmp_remove();
}

static int count_seg_files(const char *dir);

/* A segment file of the previous layout ("SFSSEGR1" records, no dataset id):
 * one record of 1000 bytes that the old scan would have accepted. */
static void write_old_segment(const char *dir)
{
	uint8_t rec[4096] = {0}, bytes[1000];
	char path[600];
	uint64_t magic = 0x3152474553534653ull, xxh;
	uint32_t len = sizeof(bytes);

	memset(bytes, 0x5a, sizeof(bytes));
	xxh = XXH3_64bits(bytes, len);
	memcpy(rec, &magic, 8);
	memset(rec + 8, 0x11, 16); /* key */
	memcpy(rec + 24, &len, 4);
	memcpy(rec + 32, &xxh, 8);
	uint64_t hx = XXH3_64bits(rec, 64); /* [56, 64) still zero */
	memcpy(rec + 56, &hx, 8);
	memcpy(rec + 64, bytes, len);
	snprintf(path, sizeof(path), "%s/segments", dir);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/segments/00000000.seg", dir);
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
	if (fd < 0 || write(fd, rec, sizeof(rec)) != (ssize_t)sizeof(rec))
		bail("old segment", -errno);
	close(fd);
}

static void test_old_segments(void)
{
	diag("segments of the previous layout are discarded at open");
	tmp_new();
	const char *dir = tpath("cache");
	mkdir(dir, 0700);
	write_old_segment(dir);
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_store_stats st = stats(s);
	ok(st.objects == 0 && st.used_bytes == 0 && count_seg_files(dir) == 0,
	   "old records: %llu objects, %llu B, %d segment files (want 0 0 0)",
	   (unsigned long long)st.objects, (unsigned long long)st.used_bytes, count_seg_files(dir));
	sfs_store_close(s);
	tmp_remove();
}

/* --- concurrent range readers ------------------------------------------------ */

#define RC_THREADS 8
#define RC_READS   300

static sfs_store_obj *rc_obj;
static long rc_wrong, rc_errors; /* atomic */

static void *rc_reader(void *arg)
{
	uint64_t rnd = 77 + (uint64_t)(intptr_t)arg;
	uint8_t *buf = range_buf();
	uint8_t *chunk = aligned_alloc(4096, MiB);
	char why[256];

	for (int i = 0; i < RC_READS; i++) {
		uint64_t off = rg_rand(&rnd) % RG_SIZE;
		size_t len = i % 5 ? 110 * 1000 : 1 + (size_t)(rg_rand(&rnd) % MiB);
		if (range_check(rc_obj, RG_SEED, RG_SIZE, off, len, buf, why, sizeof(why))) {
			printf("# thread %d: %s\n", (int)(intptr_t)arg, why);
			__atomic_fetch_add(&rc_wrong, 1, __ATOMIC_RELAXED);
		}
		if (i % 50 == 0) {
			uint32_t c = (uint32_t)(off / MiB);
			ssize_t n = sfs_store_read_chunk(rc_obj, c, chunk);
			if (n < 0 || chunk_diff(RG_SEED, c, chunk, (size_t)n) >= 0)
				__atomic_fetch_add(&rc_errors, 1, __ATOMIC_RELAXED);
		}
	}
	free(chunk);
	free(buf);
	return NULL;
}

static void test_range_concurrency(void)
{
	diag("read_range: %d threads on one object, records loaded under the race", RC_THREADS);
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1300, RG_SIZE);
	sfs_store_obj_put(write_all(s, &v, RG_SEED));
	sfs_store_close(s);
	s = store_open(dir, 0, SFS_STORE_LRU); /* PRESENT: records from disk */
	rc_obj = sfs_store_obj_get(s, &v);
	pthread_t t[RC_THREADS];
	for (int i = 0; i < RC_THREADS; i++)
		pthread_create(&t[i], NULL, rc_reader, (void *)(intptr_t)i);
	for (int i = 0; i < RC_THREADS; i++)
		pthread_join(t[i], NULL);
	struct sfs_store_stats ss = stats(s);
	ok(rc_wrong == 0 && rc_errors == 0,
	   "%d concurrent range reads: %ld wrong, %ld read_chunk errors (want 0 0)",
	   RC_THREADS * RC_READS, rc_wrong, rc_errors);
	ok(ss.checksum_failures == 0 && ss.used_bytes == RG_SIZE,
	   "checksum_failures %llu used %llu (want 0 %llu)",
	   (unsigned long long)ss.checksum_failures, (unsigned long long)ss.used_bytes,
	   (unsigned long long)RG_SIZE);
	sfs_store_obj_put(rc_obj);
	sfs_store_close(s);
	tmp_remove();
}

/* --- packed small versions ---------------------------------------------------- */

/* Number of entries in dir/segments (segment files and their summaries). */
static int count_seg_files(const char *dir)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/segments", dir);
	return count_entries(path, "");
}

static sfs_store *store_open_seg(const char *dir, uint64_t capacity, enum sfs_store_policy policy,
				 uint64_t segment_bytes)
{
	sfs_store *s = NULL;
	char err[256] = "";
	int rc = sfs_store_open(&(struct sfs_store_conf){.dir = dir,
							 .capacity_bytes = capacity,
							 .policy = policy,
							 .chunk_bytes = MiB,
							 .segment_bytes = segment_bytes},
				&s, err, sizeof(err));
	if (rc) {
		printf("# sfs_store_open(%s): %s\n", dir, err);
		bail("sfs_store_open", rc);
	}
	if ((rc = sfs_store_start(s)))
		bail("sfs_store_start", rc);
	return s;
}

/* Checks a packed version through every read path: read_chunk into an
 * aligned chunk buffer and into a misaligned one, read_range at its edges
 * and at random. Returns the number of wrong reads (diag says which). */
static int small_check(sfs_store *s, uint64_t fileid, uint32_t seed, uint64_t size, uint8_t *rbuf)
{
	struct sfs_file_version v = version(fileid, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	uint8_t *cbuf = aligned_alloc(4096, MiB + 4096);
	char why[256];
	int wrong = 0;

	for (int skew = 0; skew <= 16; skew += 16) {
		ssize_t n = sfs_store_read_chunk(o, 0, cbuf + skew);
		long at = n == (ssize_t)size ? chunk_diff(seed, 0, cbuf + skew, size) : -2;
		if (at != -1) {
			diag("size %llu: read_chunk (skew %d) = %zd, bad byte %ld",
			     (unsigned long long)size, skew, n, at);
			wrong++;
		}
	}
	uint64_t edges[][2] = {{0, 1},		{0, MiB},  {size - 1, 1},
			       {size - 1, 100}, {size, 5}, {size / 2, size}};
	for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++)
		if (range_check(o, seed, size, edges[i][0], (size_t)edges[i][1], rbuf, why,
				sizeof(why))) {
			diag("size %llu: %s", (unsigned long long)size, why);
			wrong++;
		}
	uint64_t rnd = fileid;
	for (int i = 0; i < 20; i++) {
		uint64_t off = rg_rand(&rnd) % size;
		size_t len = 1 + (size_t)(rg_rand(&rnd) % size);
		if (range_check(o, seed, size, off, len, rbuf, why, sizeof(why))) {
			diag("size %llu: %s", (unsigned long long)size, why);
			wrong++;
		}
	}
	if (sfs_store_chunk_state(o, 0) != SFS_CHUNK_PRESENT ||
	    sfs_store_obj_cached_bytes(o) != size || sfs_store_cached_bytes(s, &v) != size) {
		diag("size %llu: state %s or cached bytes wrong", (unsigned long long)size,
		     state_name(sfs_store_chunk_state(o, 0)));
		wrong++;
	}
	free(cbuf);
	sfs_store_obj_put(o);
	return wrong;
}

static void test_small(void)
{
	diag("packed versions: written, read back through every path, kept across a restart");
	static const uint64_t sizes[] = {1, 4000, 5000, 110 * 1000, MiB - 64, MiB - 63, MiB};
	const int n_sizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	uint8_t *rbuf = range_buf();

	for (int i = 0; i < n_sizes; i++) {
		struct sfs_file_version v = version(2000 + (uint64_t)i, sizes[i]);
		sfs_store_obj *a = sfs_store_obj_get(s, &v), *b = sfs_store_obj_get(s, &v);
		struct chunk c = chunk_new(100 + (uint32_t)i, sizes[i], 0, 0);
		struct slot sl = {0}, sl2 = {0};
		uint8_t *rb = range_buf();
		const char *data;
		ok(a == b && sfs_store_chunk_state(a, 0) == SFS_CHUNK_ABSENT &&
		       sfs_store_read_chunk(a, 0, rb) == -ENOENT &&
		       sfs_store_read_range(a, 0, 1, rb, SFS_STORE_RANGE_BUF_BYTES, &data) ==
			   -ENOENT,
		   "size %llu: one object for two holders, ABSENT, reads -ENOENT",
		   (unsigned long long)sizes[i]);
		int rc = sfs_store_write_chunk_hashed(a, 0, c.p, c.len, NULL, 0, on_done, &sl);
		enum sfs_chunk_state st = sfs_store_chunk_state(b, 0);
		int rc2 = sfs_store_write_chunk_hashed(b, 0, c.p, c.len, NULL, 0, on_done, &sl2);
		int err = rc ? rc : slot_wait(&sl);
		ok(rc == 0 && err == 0 && (st == SFS_CHUNK_WRITING || st == SFS_CHUNK_PRESENT) &&
		       rc2 == -EEXIST && !sl2.fired,
		   "size %llu: written %d/%d, seen %s by the other holder, its write %d (want "
		   "-EEXIST)",
		   (unsigned long long)sizes[i], rc, err, state_name(st), rc2);
		rc = write_sync(b, 100 + (uint32_t)i, sizes[i], 0);
		ok(rc == -EEXIST, "size %llu: a write once durable: %d (want -EEXIST)",
		   (unsigned long long)sizes[i], rc);
		chunk_free(&c);
		free(rb);
		sfs_store_obj_put(a);
		sfs_store_obj_put(b);
		int wrong = small_check(s, 2000 + (uint64_t)i, 100 + (uint32_t)i, sizes[i], rbuf);
		ok(wrong == 0, "size %llu: every read byte-exact (%d wrong)",
		   (unsigned long long)sizes[i], wrong);
	}
	struct sfs_store_stats ss = stats(s);
	uint64_t total = 0;
	for (int i = 0; i < n_sizes; i++)
		total += sizes[i];
	ok(ss.small_objects == (uint64_t)n_sizes && ss.objects == (uint64_t)n_sizes &&
	       ss.write_bytes == total && ss.segments >= 1 && ss.used_bytes >= total,
	   "stats: small_objects %llu objects %llu write %llu segments %llu used %llu",
	   (unsigned long long)ss.small_objects, (unsigned long long)ss.objects,
	   (unsigned long long)ss.write_bytes, (unsigned long long)ss.segments,
	   (unsigned long long)ss.used_bytes);
	ok(count_files(dir) == 0, "no object files for packed versions (%d)", count_files(dir));
	struct sfs_file_version nv = version(2999, 777);
	sfs_store_obj *held = sfs_store_obj_get(s, &nv);
	ok(stats(s).objects == (uint64_t)n_sizes, "a held, unwritten small version is no object");
	sfs_store_obj_put(held);
	sfs_store_close(s);

	s = store_open(dir, 0, SFS_STORE_LRU);
	ss = stats(s);
	int wrong = 0;
	for (int i = 0; i < n_sizes; i++)
		wrong += small_check(s, 2000 + (uint64_t)i, 100 + (uint32_t)i, sizes[i], rbuf);
	ok(ss.small_objects == (uint64_t)n_sizes && wrong == 0,
	   "after reopen: %llu packed versions, %d wrong reads",
	   (unsigned long long)ss.small_objects, wrong);
	sfs_store_close(s);
	free(rbuf);
	tmp_remove();
}

/* Many small versions from several threads, each waiting for its writes. */
#define SM_THREADS 4
#define SM_PER	   100

static sfs_store *sm_store;
static long sm_errors; /* atomic */

static uint64_t sm_size(uint64_t k) { return 1000 + mix(k) % (150 * 1000); }

static void *sm_writer(void *arg)
{
	int t = (int)(intptr_t)arg;

	for (int i = 0; i < SM_PER; i++) {
		uint64_t k = (uint64_t)t * SM_PER + (uint64_t)i;
		struct sfs_file_version v = version(10000 + k, sm_size(k));
		sfs_store_obj *o = sfs_store_obj_get(sm_store, &v);
		int rc = write_sync(o, 5000 + (uint32_t)k, v.size, 0);
		sfs_store_obj_put(o);
		if (rc) {
			printf("# thread %d version %d: %d\n", t, i, rc);
			__atomic_fetch_add(&sm_errors, 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static int sm_check_all(sfs_store *s, uint8_t *rbuf)
{
	char why[256];
	int wrong = 0;

	for (uint64_t k = 0; k < SM_THREADS * SM_PER; k++) {
		struct sfs_file_version v = version(10000 + k, sm_size(k));
		sfs_store_obj *o = sfs_store_obj_get(s, &v);
		if (range_check(o, 5000 + (uint32_t)k, v.size, k % 1000, 110 * 1000, rbuf, why,
				sizeof(why))) {
			if (wrong++ < 3)
				diag("version %llu: %s", (unsigned long long)k, why);
		}
		sfs_store_obj_put(o);
	}
	return wrong;
}

static void test_small_many(void)
{
	diag("%d small versions from %d threads: few files", SM_THREADS * SM_PER, SM_THREADS);
	tmp_new();
	const char *dir = tpath("cache");
	sm_store = store_open(dir, 0, SFS_STORE_LRU);
	uint64_t t0 = sfs_now_ms();
	pthread_t t[SM_THREADS];
	for (int i = 0; i < SM_THREADS; i++)
		pthread_create(&t[i], NULL, sm_writer, (void *)(intptr_t)i);
	for (int i = 0; i < SM_THREADS; i++)
		pthread_join(t[i], NULL);
	diag("%d writes in %llu ms", SM_THREADS * SM_PER, (unsigned long long)(sfs_now_ms() - t0));
	struct sfs_store_stats ss = stats(sm_store);
	int files = count_files(dir) + count_seg_files(dir);
	ok(sm_errors == 0 && ss.small_objects == SM_THREADS * SM_PER,
	   "%ld write errors, %llu packed versions (want 0, %d)", sm_errors,
	   (unsigned long long)ss.small_objects, SM_THREADS * SM_PER);
	ok(files >= 1 && files <= 4, "%d files in cache_dir for %d versions (want 1..4)", files,
	   SM_THREADS * SM_PER);
	ok(ss.index_bytes > 0 && ss.index_bytes < 64 * 1024,
	   "index_bytes %llu for %d packed versions (want < 64 KiB)",
	   (unsigned long long)ss.index_bytes, SM_THREADS * SM_PER);
	uint8_t *rbuf = range_buf();
	int wrong = sm_check_all(sm_store, rbuf);
	ok(wrong == 0, "every version byte-exact (%d wrong)", wrong);
	sfs_store_close(sm_store);
	sm_store = store_open(dir, 0, SFS_STORE_LRU);
	wrong = sm_check_all(sm_store, rbuf);
	ss = stats(sm_store);
	ok(wrong == 0 && ss.small_objects == SM_THREADS * SM_PER,
	   "after reopen: %llu versions, %d wrong", (unsigned long long)ss.small_objects, wrong);
	sfs_store_close(sm_store);
	sm_store = NULL;
	free(rbuf);
	tmp_remove();
}

static int write_small(sfs_store *s, uint64_t fileid, uint64_t size)
{
	struct sfs_file_version v = version(fileid, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int rc = write_sync(o, (uint32_t)fileid, size, 0);

	sfs_store_obj_put(o);
	return rc;
}

static void test_small_lru(void)
{
	diag("lru with both layouts: the colder of objects and segments goes first");
	tmp_new();
	const char *dir = tpath("cache");
	uint64_t cap = 8 * MiB, seg = MiB, sz = 100 * 1000;
	sfs_store *s = store_open_seg(dir, cap, SFS_STORE_LRU, seg);
	struct sfs_file_version A = version(3001, 2 * MiB), B = version(3002, 2 * MiB);
	lru_write(s, 3001, 31, 2 * MiB, cap, "A");
	lru_write(s, 3002, 32, 2 * MiB, cap, "B");
	usleep(20 * 1000);
	int rc = 0;
	uint64_t max_used = 0, k = 0;
	for (; k < 20 && rc == 0; k++) { /* ~2 MiB packed: 2 sealed segments or so */
		rc = write_small(s, 3100 + k, sz);
		uint64_t u = stats(s).used_bytes;
		max_used = u > max_used ? u : max_used;
	}
	usleep(20 * 1000);
	sfs_store_obj_put(sfs_store_obj_get(s, &A)); /* A is now the hottest */
	usleep(20 * 1000);
	for (; k < 75 && rc == 0; k++) { /* segments of the first 20 go, then A would */
		rc = write_small(s, 3100 + k, sz);
		uint64_t u = stats(s).used_bytes;
		max_used = u > max_used ? u : max_used;
	}
	struct sfs_store_stats ss = stats(s);
	ok(rc == 0 && max_used <= cap,
	   "60 small versions written: %d, used peaked at %llu (cap %llu)", rc,
	   (unsigned long long)max_used, (unsigned long long)cap);
	ok(sfs_store_cached_bytes(s, &B) == 0 && sfs_store_cached_bytes(s, &A) == 2 * MiB,
	   "B (coldest) evicted, A (touched after the first segments) kept: A %llu B %llu",
	   (unsigned long long)sfs_store_cached_bytes(s, &A),
	   (unsigned long long)sfs_store_cached_bytes(s, &B));
	int first = 0, last = 0;
	for (uint64_t i = 0; i < 5; i++) {
		struct sfs_file_version v1 = version(3100 + i, sz), v2 = version(3170 + i, sz);
		first += sfs_store_cached_bytes(s, &v1) == sz;
		last += sfs_store_cached_bytes(s, &v2) == sz;
	}
	ok(first == 0 && last == 5,
	   "oldest packed versions evicted (%d of 5 left), newest kept (%d)", first, last);
	ok(ss.evicted_bytes > 2 * MiB && ss.segments <= cap / seg + 1 && ss.used_bytes <= cap,
	   "evicted %llu, %llu segments, used %llu", (unsigned long long)ss.evicted_bytes,
	   (unsigned long long)ss.segments, (unsigned long long)ss.used_bytes);
	uint8_t *rbuf = range_buf();
	int wrong = 0;
	for (uint64_t i = 0; i < 75; i++) {
		struct sfs_file_version v = version(3100 + i, sz);
		if (sfs_store_cached_bytes(s, &v) == sz)
			wrong += small_check(s, 3100 + i, (uint32_t)(3100 + i), sz, rbuf) != 0;
	}
	ok(wrong == 0, "every packed version still cached reads back exact (%d wrong)", wrong);
	free(rbuf);
	sfs_store_close(s);
	tmp_remove();
}

static void test_small_pin(void)
{
	diag("pin with packed versions: nothing admitted once full, nothing evicted");
	tmp_new();
	const char *dir = tpath("cache");
	uint64_t cap = MiB, sz = 100 * 1000;
	sfs_store *s = store_open_seg(dir, cap, SFS_STORE_PIN, MiB);
	int admitted = 0, rc = 0;
	for (uint64_t k = 0; k < 20; k++) {
		rc = write_small(s, 4000 + k, sz);
		if (rc == 0)
			admitted++;
		else if (rc != -ENOSPC)
			break;
	}
	struct sfs_store_stats ss = stats(s);
	ok(rc == -ENOSPC && admitted >= 8 && admitted <= 10,
	   "%d of 20 admitted under 1 MiB (want 8-10), then %d", admitted, rc);
	ok(ss.used_bytes <= cap && ss.evicted_bytes == 0 && ss.not_admitted_bytes > 0,
	   "used %llu evicted %llu not_admitted %llu", (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.evicted_bytes, (unsigned long long)ss.not_admitted_bytes);
	struct sfs_file_version v = version(4000, sz);
	ok(sfs_store_cached_bytes(s, &v) == sz, "the first version is kept");
	struct sfs_file_version big = version(4100, 2 * MiB);
	sfs_store_obj *o = sfs_store_obj_get(s, &big);
	rc = write_sync(o, 41, 2 * MiB, 0);
	ok(rc == -ENOSPC, "a chunk of a large file while full: %d (want -ENOSPC)", rc);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* Finds `len` bytes of `needle` in the files under dir/segments and flips
 * the byte at their start + at. Returns 0 if found. */
static int flip_in_segments(const char *dir, const uint8_t *needle, size_t len, size_t at)
{
	char path[512], file[800];
	struct dirent *e;
	int rc = -1;

	snprintf(path, sizeof(path), "%s/segments", dir);
	DIR *d = opendir(path);
	while (d && rc && (e = readdir(d))) {
		if (!strstr(e->d_name, ".seg"))
			continue;
		snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
		FILE *f = fopen(file, "rb");
		struct stat st;
		if (!f || stat(file, &st))
			continue;
		uint8_t *all = malloc((size_t)st.st_size + 1);
		size_t n = fread(all, 1, (size_t)st.st_size, f);
		fclose(f);
		uint8_t *p = n >= len ? memmem(all, n, needle, len) : NULL;
		if (p) {
			flip_byte(file, (off_t)(p - all) + (off_t)at);
			rc = 0;
		}
		free(all);
	}
	if (d)
		closedir(d);
	return rc;
}

static void test_small_corruption(void)
{
	diag("a flipped byte in a packed version: a miss, then rewritable");
	tmp_new();
	const char *dir = tpath("cache");
	/* Segments of 64 KiB: one version each, so the first is sealed (its
	 * entries come from its summary and its bytes are checked at read);
	 * the last, being filled, is checked by the scan at open. */
	sfs_store *s = store_open_seg(dir, 0, SFS_STORE_LRU, 64 * 1024);
	uint64_t sz = 50000;
	int rc = 0;
	for (uint64_t k = 0; k < 3 && rc == 0; k++)
		rc = write_small(s, 4500 + k, sz);
	ok(rc == 0, "three small versions written: %d", rc);
	sfs_store_close(s);
	uint8_t head[64];
	fill(4500, 0, head, sizeof(head));
	ok(flip_in_segments(dir, head, sizeof(head), 30000) == 0, "found the first in a segment");
	fill(4502, 0, head, sizeof(head));
	ok(flip_in_segments(dir, head, sizeof(head), 100) == 0, "found the last in a segment");

	s = store_open_seg(dir, 0, SFS_STORE_LRU, 64 * 1024);
	struct sfs_file_version v = version(4500, sz), last = version(4502, sz);
	ok(sfs_store_cached_bytes(s, &v) == sz && sfs_store_cached_bytes(s, &last) == 0,
	   "at open: the sealed one listed (%llu), the scanned bad one not (%llu)",
	   (unsigned long long)sfs_store_cached_bytes(s, &v),
	   (unsigned long long)sfs_store_cached_bytes(s, &last));
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	uint8_t *rbuf = range_buf();
	const char *data = NULL;
	ssize_t n = sfs_store_read_range(o, 100, 10, rbuf, SFS_STORE_RANGE_BUF_BYTES, &data);
	struct sfs_store_stats ss = stats(s);
	ok(n == -EBADMSG && ss.checksum_failures == 1,
	   "read_range of the flipped version: %zd (want -EBADMSG), checksum_failures %llu", n,
	   (unsigned long long)ss.checksum_failures);
	ok(sfs_store_chunk_state(o, 0) == SFS_CHUNK_ABSENT &&
	       sfs_store_read_chunk(o, 0, rbuf) == -ENOENT && sfs_store_cached_bytes(s, &v) == 0,
	   "then ABSENT, read_chunk -ENOENT, 0 bytes cached");
	rc = write_sync(o, 4500, sz, 0);
	ok(rc == 0 && small_check(s, 4500, 4500, sz, rbuf) == 0, "rewritten and exact: %d", rc);
	ok(small_check(s, 4501, 4501, sz, rbuf) == 0, "its neighbour unaffected");
	sfs_store_obj_put(o);
	free(rbuf);
	sfs_store_close(s);
	tmp_remove();
}

/* Small and large chunks queued at once land in one batch. */
static void test_mixed_batch(void)
{
	diag("packed and per-file writes queued together");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	enum { N = 12 };
	struct chunk c[N];
	struct slot sl[N];
	sfs_store_obj *o[N];
	uint64_t size[N];
	int rcs[N], bad = 0;
	memset(sl, 0, sizeof(sl));
	for (int i = 0; i < N; i++) {
		size[i] = i % 3 == 0 ? 2 * MiB + 5 : 3000 + 7000 * (uint64_t)i;
		struct sfs_file_version v = version(5000 + (uint64_t)i, size[i]);
		o[i] = sfs_store_obj_get(s, &v);
		c[i] = chunk_new(50 + (uint32_t)i, size[i], 0, i % 2 ? 8 : 0);
		rcs[i] = sfs_store_write_chunk_hashed(o[i], 0, c[i].p, c[i].len, NULL, 0, on_done,
						      &sl[i]);
	}
	for (int i = 0; i < N; i++) {
		int e = rcs[i] ? rcs[i] : slot_wait(&sl[i]);
		long b = -1;
		ssize_t n = read_check(o[i], 50 + (uint32_t)i, size[i], 0, &b);
		if (e || n != (ssize_t)(size[i] < MiB ? size[i] : MiB) || b >= 0) {
			diag("version %d: write %d, read %zd, bad byte %ld", i, e, n, b);
			bad++;
		}
		chunk_free(&c[i]);
		sfs_store_obj_put(o[i]);
	}
	struct sfs_store_stats ss = stats(s);
	ok(bad == 0 && ss.small_objects == 8 && ss.objects == 12 && count_files(dir) == 4,
	   "%d wrong; small_objects %llu objects %llu object files %d (want 0 8 12 4)", bad,
	   (unsigned long long)ss.small_objects, (unsigned long long)ss.objects, count_files(dir));
	sfs_store_close(s);
	tmp_remove();
}

/* Chunks of one object queued together are written as runs of consecutive
 * chunks (one gathered write each): a gap, a misaligned buffer (not
 * O_DIRECT) and the short last chunk end runs; every chunk reads back
 * exact, before and after a restart. */
static void test_runs(void)
{
	diag("runs of consecutive chunks in one batch");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	enum { N = 11, GAP = 4, SKEWED = 7 };
	const uint64_t size = 10 * MiB + 12345; /* 11 chunks, the last short */
	struct sfs_file_version v = version(6000, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	struct chunk c[N];
	struct slot sl[N];
	int rcs[N], bad = 0;
	memset(sl, 0, sizeof(sl));
	/* Queued out of order, all at once: the writer sorts them. */
	static const uint32_t order[N] = {9, 2, 10, 0, 6, 3, 8, 1, 5, 7, 4};
	for (uint32_t i = 0; i < N; i++)
		c[i] = chunk_new(60, size, i, i == SKEWED ? 8 : 0);
	for (int k = 0; k < N; k++) {
		uint32_t i = order[k];
		rcs[i] = i == GAP ? 1
				  : sfs_store_write_chunk_hashed(o, i, c[i].p, c[i].len, NULL, 0,
								 on_done, &sl[i]);
	}
	for (uint32_t i = 0; i < N; i++) {
		int e = i == GAP ? 0 : rcs[i] ? rcs[i] : slot_wait(&sl[i]);
		long b = -1;
		ssize_t n = i == GAP ? 0 : read_check(o, 60, size, i, &b);
		if (e || (i != GAP && (n != (ssize_t)c[i].len || b >= 0))) {
			diag("chunk %u: write %d, read %zd, bad byte %ld", i, e, n, b);
			bad++;
		}
	}
	ok(bad == 0 && sfs_store_chunk_state(o, GAP) == SFS_CHUNK_ABSENT,
	   "10 chunks written as runs read back exact, the gap absent (%d wrong)", bad);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	bad = 0;
	for (uint32_t i = 0; i < N; i++) {
		long b = -1;
		ssize_t n = read_check(o, 60, size, i, &b);
		if (i == GAP ? n >= 0 : n != (ssize_t)c[i].len || b >= 0) {
			diag("after restart, chunk %u: read %zd, bad byte %ld", i, n, b);
			bad++;
		}
	}
	ok(bad == 0, "after a restart the same chunks read back exact (%d wrong)", bad);
	for (uint32_t i = 0; i < N; i++)
		chunk_free(&c[i]);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* --- concurrency ------------------------------------------------------------- */

#define CC_FILES   2
#define CC_WRITERS 4
#define CC_READERS 2

static const uint64_t cc_size[CC_FILES] = {8 * MiB + 4097, 6 * MiB};
static const uint32_t cc_seed[CC_FILES] = {90, 91};
static sfs_store *cc_store;
static sfs_store_obj *cc_obj[CC_FILES]; /* set before the threads, then read-only */
static struct sfs_file_version cc_ver[CC_FILES];
static int cc_writers_done;			       /* atomic */
static long cc_write_errors, cc_read_errors, cc_reads; /* atomic */

static uint32_t cc_chunks(int f) { return (uint32_t)((cc_size[f] + MiB - 1) / MiB); }

static void *cc_writer(void *arg)
{
	int t = (int)(intptr_t)arg;
	unsigned k = 0;

	for (int f = 0; f < CC_FILES; f++)
		for (uint32_t i = 0; i < cc_chunks(f); i++, k++) {
			if (k % CC_WRITERS != (unsigned)t)
				continue;
			/* Every third chunk misaligned: buffered and O_DIRECT
			 * writes into one file at once. */
			struct chunk c = chunk_new(cc_seed[f], cc_size[f], i, k % 3 ? 0 : 8);
			struct slot sl = {0};
			int rc = sfs_store_write_chunk_hashed(cc_obj[f], i, c.p, c.len, NULL, 0,
							      on_done, &sl);
			if (rc == 0)
				rc = slot_wait(&sl);
			if (rc) {
				printf("# writer %d: file %d chunk %u: %d\n", t, f, i, rc);
				__atomic_fetch_add(&cc_write_errors, 1, __ATOMIC_RELAXED);
			}
			chunk_free(&c);
			/* Lookups of the same version race the writes too. */
			sfs_store_obj *o = sfs_store_obj_get(cc_store, &cc_ver[f ^ 1]);
			if (o)
				sfs_store_obj_put(o);
		}
	__atomic_fetch_add(&cc_writers_done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static void *cc_reader(void *arg)
{
	(void)arg;
	uint8_t *buf = malloc(MiB);
	bool last = false;

	while (!last) {
		last = __atomic_load_n(&cc_writers_done, __ATOMIC_ACQUIRE) == CC_WRITERS;
		for (int f = 0; f < CC_FILES; f++) {
			for (uint32_t i = 0; i < cc_chunks(f); i++) {
				enum sfs_chunk_state st = sfs_store_chunk_state(cc_obj[f], i);
				if (st != SFS_CHUNK_VERIFIED)
					continue;
				uint64_t start = (uint64_t)i * MiB;
				uint32_t want =
				    (uint32_t)(cc_size[f] - start < MiB ? cc_size[f] - start : MiB);
				ssize_t n = sfs_store_read_chunk(cc_obj[f], i, buf);
				long at = -1;
				if (n == (ssize_t)want)
					at = chunk_diff(cc_seed[f], i, buf, want);
				if (n != (ssize_t)want || at >= 0) {
					printf("# reader: file %d chunk %u: read %zd (want %u), "
					       "bad byte %ld\n",
					       f, i, n, want, at);
					__atomic_fetch_add(&cc_read_errors, 1, __ATOMIC_RELAXED);
				}
				__atomic_fetch_add(&cc_reads, 1, __ATOMIC_RELAXED);
			}
			(void)sfs_store_obj_cached_bytes(cc_obj[f]);
			(void)sfs_store_cached_bytes(cc_store, &cc_ver[f]);
		}
		struct sfs_store_stats ss;
		sfs_store_get_stats(cc_store, &ss);
	}
	free(buf);
	return NULL;
}

static void test_concurrency(void)
{
	diag("concurrency: %d writers, %d readers, %d files", CC_WRITERS, CC_READERS, CC_FILES);
	tmp_new();
	const char *dir = tpath("cache");
	cc_store = store_open(dir, 0, SFS_STORE_LRU);
	for (int f = 0; f < CC_FILES; f++) {
		cc_ver[f] = version(900 + (uint64_t)f, cc_size[f]);
		cc_obj[f] = sfs_store_obj_get(cc_store, &cc_ver[f]);
	}
	pthread_t w[CC_WRITERS], r[CC_READERS];
	for (int i = 0; i < CC_READERS; i++)
		pthread_create(&r[i], NULL, cc_reader, NULL);
	for (int i = 0; i < CC_WRITERS; i++)
		pthread_create(&w[i], NULL, cc_writer, (void *)(intptr_t)i);
	for (int i = 0; i < CC_WRITERS; i++)
		pthread_join(w[i], NULL);
	for (int i = 0; i < CC_READERS; i++)
		pthread_join(r[i], NULL);
	ok(cc_write_errors == 0, "concurrent writes: %ld failed (want 0)", cc_write_errors);
	ok(cc_read_errors == 0, "concurrent reads: %ld of %ld wrong (want 0)", cc_read_errors,
	   cc_reads);
	uint64_t total = 0;
	int wrong = 0;
	for (int f = 0; f < CC_FILES; f++) {
		total += cc_size[f];
		for (uint32_t i = 0; i < cc_chunks(f); i++) {
			long bad;
			uint64_t want = cc_size[f] - i * MiB < MiB ? cc_size[f] - i * MiB : MiB;
			ssize_t n = read_check(cc_obj[f], cc_seed[f], cc_size[f], i, &bad);
			if (n != (ssize_t)want || bad >= 0 ||
			    sfs_store_chunk_state(cc_obj[f], i) != SFS_CHUNK_VERIFIED) {
				diag("file %d chunk %u: read %zd, bad byte %ld, %s", f, i, n, bad,
				     state_name(sfs_store_chunk_state(cc_obj[f], i)));
				wrong++;
			}
		}
	}
	ok(wrong == 0, "after the threads: every chunk VERIFIED and exact (%d wrong)", wrong);
	struct sfs_store_stats ss = stats(cc_store);
	ok(ss.used_bytes == total && ss.write_bytes == total && ss.objects == CC_FILES &&
	       ss.checksum_failures == 0,
	   "used %llu write %llu objects %llu checksum_failures %llu (want %llu %llu %d 0)",
	   (unsigned long long)ss.used_bytes, (unsigned long long)ss.write_bytes,
	   (unsigned long long)ss.objects, (unsigned long long)ss.checksum_failures,
	   (unsigned long long)total, (unsigned long long)total, CC_FILES);
	for (int f = 0; f < CC_FILES; f++)
		sfs_store_obj_put(cc_obj[f]);
	sfs_store_close(cc_store);

	/* And the same bytes after a restart. */
	cc_store = store_open(dir, 0, SFS_STORE_LRU);
	wrong = 0;
	for (int f = 0; f < CC_FILES; f++) {
		sfs_store_obj *o = sfs_store_obj_get(cc_store, &cc_ver[f]);
		for (uint32_t i = 0; i < cc_chunks(f); i++) {
			long bad;
			uint64_t want = cc_size[f] - i * MiB < MiB ? cc_size[f] - i * MiB : MiB;
			ssize_t n = read_check(o, cc_seed[f], cc_size[f], i, &bad);
			if (n != (ssize_t)want || bad >= 0)
				wrong++;
		}
		sfs_store_obj_put(o);
	}
	ok(wrong == 0, "after reopen: every chunk exact (%d wrong)", wrong);
	sfs_store_close(cc_store);
	cc_store = NULL;
	tmp_remove();
}

/* --- datasets: list, evict, purge ---------------------------------------------- */

/* The listing entry of dataset `name` (NULL: the unknown group), or a zero
 * entry. */
static struct sfs_store_dataset ds_entry(sfs_store *s, const char *name)
{
	struct sfs_store_dataset *l, e = {0};
	size_t n;

	if (sfs_store_list(s, &l, &n))
		bail("sfs_store_list", -ENOMEM);
	for (size_t i = 0; i < n; i++)
		if ((!name && !l[i].name) || (name && l[i].name && !strcmp(l[i].name, name)))
			e = l[i];
	free(l);
	return e;
}

/* A version of dataset ds: big (3 chunks + 1 byte) or packed (100 KB). */
static struct sfs_file_version ds_version(uint64_t fileid, bool big, uint32_t ds)
{
	struct sfs_file_version v = version(fileid, big ? 3 * MiB + 1 : 100000 + fileid);
	v.dataset = ds;
	return v;
}

/* Writes versions fileid0 .. + n_big + n_small of dataset ds. Returns their bytes. */
static uint64_t ds_fill(sfs_store *s, uint32_t ds, uint64_t fileid0, int n_big, int n_small)
{
	uint64_t bytes = 0;

	for (int i = 0; i < n_big + n_small; i++) {
		struct sfs_file_version v = ds_version(fileid0 + (uint64_t)i, i < n_big, ds);
		sfs_store_obj_put(write_all(s, &v, (uint32_t)v.fileid));
		bytes += v.size;
	}
	return bytes;
}

/* Whether every version written by ds_fill reads back byte-exact (want
 * true) or is absent (want false). */
static bool ds_all(sfs_store *s, uint32_t ds, uint64_t fileid0, int n_big, int n_small, bool want)
{
	bool good = true;

	for (int i = 0; i < n_big + n_small; i++) {
		struct sfs_file_version v = ds_version(fileid0 + (uint64_t)i, i < n_big, ds);
		sfs_store_obj *o = sfs_store_obj_get(s, &v);
		uint32_t n = (uint32_t)((v.size + MiB - 1) / MiB);
		for (uint32_t c = 0; c < n; c++) {
			long bad;
			ssize_t got = read_check(o, (uint32_t)v.fileid, v.size, c, &bad);
			good &= want ? got > 0 && bad == -1 : got == -ENOENT;
		}
		sfs_store_obj_put(o);
	}
	return good;
}

/* Reads 5000 bytes of version fileid (big, per-file) and of fileid + 1
 * (packed) of dataset ds through read_range, after a read_chunk of the
 * first. Returns the bytes the range reads returned. */
static uint64_t ds_range_reads(sfs_store *s, uint32_t ds, uint64_t fileid)
{
	void *buf = aligned_alloc(4096, SFS_STORE_RANGE_BUF_BYTES);
	uint64_t got = 0;
	const char *data;
	long bad;

	for (int k = 0; k < 2; k++) {
		struct sfs_file_version v = ds_version(fileid + (uint64_t)k, k == 0, ds);
		sfs_store_obj *o = sfs_store_obj_get(s, &v);
		if (k == 0)
			read_check(o, (uint32_t)v.fileid, v.size, 0, &bad);
		ssize_t n =
		    sfs_store_read_range(o, 1000, 5000, buf, SFS_STORE_RANGE_BUF_BYTES, &data);
		got += n > 0 ? (uint64_t)n : 0;
		sfs_store_obj_put(o);
	}
	free(buf);
	return got;
}

static void test_datasets(void)
{
	diag("datasets: list, evict one under a holder, restart, purge");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open_seg(dir, 0, SFS_STORE_LRU, 4 * MiB);
	uint32_t a = sfs_store_dataset(s, "/ifs/a"), b = sfs_store_dataset(s, "/ifs/b");
	uint32_t a2 = sfs_store_dataset(s, "/ifs/a2");
	const char *odd = "/ifs/a b%20c\nd\te";
	uint32_t odd_id = sfs_store_dataset(s, odd);
	ok(a && b && a2 && a != b && sfs_store_dataset(s, "/ifs/a") == a &&
	       !sfs_store_dataset(s, ""),
	   "ids: distinct, stable, none for an empty name");
	uint64_t bytes_a = ds_fill(s, a, 100, 2, 30), bytes_b = ds_fill(s, b, 200, 1, 30);
	uint64_t bytes_a2 = ds_fill(s, a2, 300, 0, 1);
	sfs_store_dataset_read(s, a, 3000, 1000);
	struct sfs_store_dataset ea = ds_entry(s, "/ifs/a"), eb = ds_entry(s, "/ifs/b");
	ok(ea.bytes == bytes_a && ea.objects == 32 && ea.packed_objects == 30 &&
	       eb.bytes == bytes_b && eb.objects == 31 && ds_entry(s, "/ifs/a2").bytes == bytes_a2,
	   "list: a %llu B in %llu objects, b %llu B in %llu (want %llu/32, %llu/31)",
	   (unsigned long long)ea.bytes, (unsigned long long)ea.objects,
	   (unsigned long long)eb.bytes, (unsigned long long)eb.objects,
	   (unsigned long long)bytes_a, (unsigned long long)bytes_b);
	ok(ea.hit_bytes == 3000 && ea.miss_bytes == 1000 && ea.last_use_s > 0,
	   "read counters and last use");
	/* A range read is a reader's: its bytes count for the version's
	 * dataset, where the store finds them (a packed version and a
	 * per-file one); a chunk read (a load, maybe ahead of any reader)
	 * does not. */
	uint64_t ranged = ds_range_reads(s, b, 200);
	eb = ds_entry(s, "/ifs/b");
	ok(ranged == 2 * 5000 && eb.hit_bytes == ranged && eb.miss_bytes == 0 &&
	       ds_entry(s, "/ifs/a").hit_bytes == 3000,
	   "range reads count their bytes as b's hits (%llu of %llu), chunk reads do not",
	   (unsigned long long)eb.hit_bytes, (unsigned long long)ranged);

	/* A holder of a's first big version, across the eviction. */
	struct sfs_file_version hv = ds_version(100, true, a);
	sfs_store_obj *held = sfs_store_obj_get(s, &hv);
	long bad;
	read_check(held, 100, hv.size, 1, &bad);
	struct sfs_store_evicted ev;
	int rc = sfs_store_evict(s, "/ifs/a/", &ev);
	ok(rc == 0 && ev.datasets == 1 && ev.objects == 32 && ev.bytes == bytes_a,
	   "evict /ifs/a: rc %d, %u datasets, %llu objects, %llu B", rc, ev.datasets,
	   (unsigned long long)ev.objects, (unsigned long long)ev.bytes);
	ok(sfs_store_chunk_state(held, 1) == SFS_CHUNK_ABSENT &&
	       read_check(held, 100, hv.size, 1, &bad) == -ENOENT &&
	       write_sync(held, 100, hv.size, 0) == -EAGAIN,
	   "the held version: chunks are misses, nothing is written to it again");
	sfs_store_obj *fresh = sfs_store_obj_get(s, &hv);
	ok(fresh != held && sfs_store_obj_cached_bytes(fresh) == 0 &&
	       write_sync(fresh, 100, hv.size, 0) == 0 &&
	       read_check(fresh, 100, hv.size, 0, &bad) > 0 && bad == -1,
	   "a new open of it caches again");
	sfs_store_obj_put(fresh);
	sfs_store_obj_put(held);
	ea = ds_entry(s, "/ifs/a");
	ok(ea.bytes == MiB && ea.objects == 1 && ea.hit_bytes == 0,
	   "a lists what was cached since (%llu B), counters reset", (unsigned long long)ea.bytes);
	ok(ds_all(s, a, 101, 1, 30, false) && ds_all(s, b, 200, 1, 30, true) &&
	       ds_all(s, a2, 300, 0, 1, true),
	   "a's other versions are misses; b and a2 (a name that starts with a's) read byte-exact");
	ok(sfs_store_evict(s, "/ifs/zz", &ev) == -ENOENT &&
	       sfs_store_evict(s, "/ifs/b/x", &ev) == -ENOENT,
	   "-ENOENT for no dataset, or for a path inside one");

	sfs_store_close(s);
	s = store_open_seg(dir, 0, SFS_STORE_LRU, 4 * MiB);
	ok(ds_all(s, a, 101, 1, 30, false) && ds_all(s, b, 200, 1, 30, true),
	   "after a restart: evicted records stay gone, b's read byte-exact");
	eb = ds_entry(s, "/ifs/b");
	ok(eb.bytes == bytes_b && eb.objects == 31 && sfs_store_dataset(s, "/ifs/b") == b,
	   "names and ids kept in cache_dir/datasets");
	struct sfs_store_dataset *l;
	size_t n;
	bool odd_kept = false;
	if (sfs_store_list(s, &l, &n) == 0) {
		for (size_t i = 0; i < n; i++)
			odd_kept |= l[i].name && !strcmp(l[i].name, odd) && l[i].id == odd_id;
		free(l);
	}
	ok(odd_kept, "a name with a space, %%, a newline and a tab comes back as it was");

	rc = sfs_store_evict(s, NULL, &ev);
	struct sfs_store_stats st = stats(s);
	ok(rc == 0 && st.objects == 0 && st.used_bytes == 0 && count_seg_files(dir) == 0,
	   "purge: %llu objects, %llu B used, %d segment files left",
	   (unsigned long long)st.objects, (unsigned long long)st.used_bytes, count_seg_files(dir));
	ok(ds_all(s, b, 200, 1, 30, false), "purged versions are misses");
	sfs_store_close(s);
	s = store_open_seg(dir, 0, SFS_STORE_LRU, 4 * MiB);
	st = stats(s);
	ok(st.objects == 0 && ds_entry(s, "/ifs/b").objects == 0, "still empty after a restart");
	sfs_store_close(s);
	tmp_remove();
}

static void test_evict_keys(void)
{
	diag("evict single versions by key (the files under a path of a mount)");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open_seg(dir, 0, SFS_STORE_LRU, 4 * MiB);
	uint32_t a = sfs_store_dataset(s, "/ifs/a");
	uint64_t bytes = ds_fill(s, a, 100, 3, 6);
	uint8_t keys[4][16];
	struct sfs_file_version gone[4] = {ds_version(101, true, a), ds_version(104, false, a),
					   ds_version(105, false, a), ds_version(999, false, a)};
	for (int i = 0; i < 4; i++)
		sfs_store_key(&gone[i], keys[i]);
	struct sfs_store_evicted ev;
	int rc = sfs_store_evict_keys(s, (const uint8_t(*)[16])keys, 4, &ev);
	uint64_t want = gone[0].size + gone[1].size + gone[2].size;
	ok(rc == 0 && ev.objects == 3 && ev.bytes == want,
	   "3 of 4 keys were cached: rc %d, %llu objects, %llu B (want %llu)", rc,
	   (unsigned long long)ev.objects, (unsigned long long)ev.bytes, (unsigned long long)want);
	ok(ds_all(s, a, 101, 1, 0, false) && ds_all(s, a, 100, 1, 0, true) &&
	       ds_all(s, a, 102, 1, 0, true) && ds_entry(s, "/ifs/a").bytes == bytes - want,
	   "the evicted versions are misses, the others read byte-exact");
	sfs_store_close(s);
	s = store_open_seg(dir, 0, SFS_STORE_LRU, 4 * MiB);
	struct sfs_store_dataset e = ds_entry(s, "/ifs/a");
	ok(e.bytes == bytes - want && e.objects == 6,
	   "after a restart: %llu objects, the evicted ones stay gone",
	   (unsigned long long)e.objects);
	sfs_store_close(s);
	tmp_remove();
}

/* trust_verified: a chunk VERIFIED in this run is read without its checks
 * (a flip made under it is served: the passthrough trade, found by the
 * scrubber); one loaded by a restart is checked at its first read. */
static void test_trust_verified(void)
{
	diag("trust_verified: verified chunks read unchecked, loaded ones checked");
	tmp_new();
	const char *dir = tpath("cache");
	char err[256] = "";
	sfs_store *s = NULL;
	struct sfs_store_conf conf = {.dir = dir, .chunk_bytes = MiB, .trust_verified = true};
	if (sfs_store_open(&conf, &s, err, sizeof(err)) || sfs_store_start(s))
		bail("sfs_store_open", -EIO);
	struct sfs_file_version v = version(31, RW_SIZE);
	sfs_store_obj *o = write_all(s, &v, RW_SEED);
	char path[1024];
	if (find_object(dir, RW_SIZE, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	flip_byte(path, (off_t)(MiB + 4321)); /* chunk 1, VERIFIED (written here) */
	long bad;
	ssize_t n = read_check(o, RW_SEED, RW_SIZE, 1, &bad);
	ok(n == (ssize_t)MiB && bad == 4321,
	   "a VERIFIED chunk is not checked: read %zd, the flip served at %ld", n, bad);
	n = read_check(o, RW_SEED, RW_SIZE, 0, &bad);
	ok(n == (ssize_t)MiB && bad < 0, "chunk 0 byte-exact (%zd, %ld)", n, bad);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	s = NULL;
	if (sfs_store_open(&conf, &s, err, sizeof(err)) || sfs_store_start(s))
		bail("sfs_store_open", -EIO);
	o = sfs_store_obj_get(s, &v);
	n = read_check(o, RW_SEED, RW_SIZE, 1, &bad);
	ok(n == -EBADMSG && stats(s).checksum_failures == 1,
	   "after a restart the chunk is PRESENT: checked, the flip found (%zd)", n);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* A version evicted while referenced (a reader's open, a passthrough open:
 * the file is unlinked, the holder's fds keep it on disk) is counted as held
 * until its last reference; while held versions alone fill the capacity
 * nothing is admitted. */
static void test_held(void)
{
	diag("held: an evicted version still open counts until its last release");
	tmp_new();
	const char *dir = tpath("cache");
	uint64_t cap = 4 * MiB, size = 2 * MiB;
	sfs_store *s = store_open(dir, cap, SFS_STORE_LRU);
	struct sfs_file_version A = version(701, size), B = version(702, size),
				C = version(703, size);
	uint8_t keys[2][16];

	lru_write(s, 701, 71, size, cap, "A");
	lru_write(s, 702, 72, size, cap, "B");
	sfs_store_obj *a = sfs_store_obj_get(s, &A), *b = sfs_store_obj_get(s, &B);
	sfs_store_key(&A, keys[0]);
	sfs_store_key(&B, keys[1]);
	struct sfs_store_evicted ev;
	int rc = sfs_store_evict_keys(s, (const uint8_t(*)[16])keys, 1, &ev);
	struct sfs_store_stats ss = stats(s);
	ok(rc == 0 && ev.bytes == size && ss.held_bytes == size && ss.used_bytes == cap,
	   "A evicted while held: held %llu used %llu (want %llu %llu)",
	   (unsigned long long)ss.held_bytes, (unsigned long long)ss.used_bytes,
	   (unsigned long long)size, (unsigned long long)cap);
	ok(sfs_store_cached_bytes(s, &A) == 0 && count_files(dir) == 1,
	   "A is no longer cached, its file unlinked (%d files)", count_files(dir));

	/* Room for C: B is held by its reader, A's bytes by its holder. */
	sfs_store_obj *c = sfs_store_obj_get(s, &C);
	rc = write_sync(c, 73, size, 0);
	ok(rc == -ENOSPC, "A held, B referenced: C not admitted (%d)", rc);
	sfs_store_obj_put(b);
	rc = sfs_store_evict_keys(s, (const uint8_t(*)[16])keys + 1, 1, &ev);
	sfs_store_obj_put(b = sfs_store_obj_get(s, &B)); /* B's reader is gone: freed */
	ss = stats(s);
	ok(ss.held_bytes == size && ss.used_bytes == size,
	   "B evicted with nobody holding it: not held (held %llu used %llu)",
	   (unsigned long long)ss.held_bytes, (unsigned long long)ss.used_bytes);

	/* Held bytes alone at the capacity: nothing admitted, nothing evicted. */
	sfs_store_held_add(s, (int64_t)(cap - size));
	uint64_t evicted = stats(s).evicted_bytes;
	rc = write_sync(c, 73, size, 0);
	ss = stats(s);
	ok(rc == -ENOSPC && ss.evicted_bytes == evicted,
	   "held bytes fill the capacity: C refused (%d), nothing evicted", rc);
	sfs_store_held_add(s, -(int64_t)(cap - size));

	sfs_store_obj_put(a); /* A's last holder: its bytes go */
	ss = stats(s);
	ok(ss.held_bytes == 0 && ss.used_bytes == 0,
	   "A's last release: held %llu used %llu (want 0 0)", (unsigned long long)ss.held_bytes,
	   (unsigned long long)ss.used_bytes);
	rc = write_sync(c, 73, size, 0);
	ok(rc == 0, "then C is admitted (%d)", rc);
	sfs_store_obj_put(c);
	sfs_store_close(s);
	tmp_remove();
}

/* The cost of a listing at many packed objects: written without waiting
 * for each, then listed. */
static void test_list_cost(void)
{
	enum { N = 20000 };
	static struct slot slots[N];
	uint8_t *buf = aligned_alloc(4096, 4096);

	diag("list cost at %d packed objects", N);
	tmp_new();
	sfs_store *s = store_open_seg(tpath("cache"), 0, SFS_STORE_LRU, 0);
	uint32_t ds[4] = {sfs_store_dataset(s, "/x/0"), sfs_store_dataset(s, "/x/1"),
			  sfs_store_dataset(s, "/x/2"), sfs_store_dataset(s, "/x/3")};
	memset(buf, 7, 4096);
	memset(slots, 0, sizeof(slots));
	for (int i = 0; i < N; i++) {
		struct sfs_file_version v = version(10000 + (uint64_t)i, 1000);
		v.dataset = ds[i % 4];
		sfs_store_obj *o = sfs_store_obj_get(s, &v);
		if (sfs_store_write_chunk_hashed(o, 0, buf, 1000, NULL, 0, on_done, &slots[i]) != 0)
			slots[i].fired = true;
		sfs_store_obj_put(o);
	}
	for (int i = 0; i < N; i++)
		slot_wait(&slots[i]);
	struct timespec t0, t1;
	struct sfs_store_dataset *l;
	size_t n;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int rc = sfs_store_list(s, &l, &n);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	uint64_t objects = 0;
	for (size_t i = 0; !rc && i < n; i++)
		objects += l[i].objects;
	double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	diag("sfs_store_list over %llu objects: %.2f ms", (unsigned long long)objects, ms);
	ok(rc == 0 && n == 4 && objects == N, "4 datasets, %d objects listed", N);
	if (!rc)
		free(l);
	struct sfs_store_evicted ev;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	rc = sfs_store_evict(s, "/x/0", &ev);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
	diag("sfs_store_evict of one dataset (%llu of %d packed objects, summaries "
	     "rewritten): %.2f ms",
	     (unsigned long long)ev.objects, N, ms);
	ok(rc == 0 && ev.objects == N / 4, "evicted a quarter");
	sfs_store_close(s);
	free(buf);
	tmp_remove();
}

/* sfs_store_write_chunk_hashed records the checksums it is given for the
 * sub-blocks in `known` and computes the others: given right, the chunk
 * reads back (garbage in the slots not in known is ignored); given wrong,
 * every load fails its check. */
static void test_write_hashed(void)
{
	diag("write_chunk_hashed: checksums computed by the caller");
	tmp_new();
	sfs_store *s = store_open(tpath("cache"), 0, SFS_STORE_LRU);
	const uint64_t size = 2 * MiB + 5000; /* a chunk, a chunk, a tail */
	struct sfs_file_version v = version(41, size);
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	const uint32_t sub = 1u << SFS_STORE_SUB_SHIFT;

	for (uint32_t index = 0; index < 3; index++) {
		struct chunk c = chunk_new(41, size, index, 0);
		uint64_t h[64], known = 0;
		for (uint32_t k = 0; k < 64; k++) {
			h[k] = 0x5a5a5a5a5a5a5a5aull; /* garbage unless known */
			uint32_t at = k * sub;
			if (at < c.len && k % 2 == index % 2) {
				h[k] = XXH3_64bits(c.p + at, c.len - at < sub ? c.len - at : sub);
				known |= 1ull << k;
			}
		}
		if (index == 1)
			h[3] ^= 1; /* sub-block 3 of chunk 1: known, and wrong */
		struct slot sl = {0};
		int rc = sfs_store_write_chunk_hashed(o, index, c.p, c.len, h, known, on_done, &sl);
		if (rc == 0)
			rc = slot_wait(&sl);
		ok(rc == 0, "hashed write of chunk %u: %d", index, rc);
		chunk_free(&c);
	}
	long bad = -1;
	ssize_t n0 = read_check(o, 41, size, 0, &bad);
	ok(n0 == (ssize_t)MiB && bad == -1,
	   "chunk 0, half its checksums given: reads back (%zd, %ld)", n0, bad);
	ssize_t n2 = read_check(o, 41, size, 2, &bad);
	ok(n2 == 5000 && bad == -1, "the tail, its checksum given: reads back (%zd, %ld)", n2, bad);
	ssize_t n1 = read_check(o, 41, size, 1, &bad);
	ok(n1 == -EBADMSG, "chunk 1, a wrong checksum given: its load fails its check (%zd)", n1);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* --- auto ---------------------------------------------------------------------- */

/* A 1 MiB version of dataset ds, one chunk written: its outcome. */
static int auto_write(sfs_store *s, uint32_t ds, uint64_t fileid)
{
	struct sfs_file_version v = version(fileid, 2 * MiB);
	v.dataset = ds;
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	int rc = write_sync(o, (uint32_t)fileid, 2 * MiB, 0);
	sfs_store_obj_put(o);
	return rc;
}

/* Write chunk 0 of n versions of ds from fileid on; count the admitted. */
static int auto_pass(sfs_store *s, uint32_t ds, uint64_t fileid, int n)
{
	int admitted = 0;
	for (int k = 0; k < n; k++) {
		sfs_store_dataset_read(s, ds, 0, MiB); /* a reader missed it */
		admitted += auto_write(s, ds, fileid + (uint64_t)k) == 0;
	}
	return admitted;
}

static struct sfs_store_dataset auto_ds(sfs_store *s, uint32_t id)
{
	struct sfs_store_dataset *d = NULL, out = {0};
	size_t n = 0;
	if (sfs_store_list(s, &d, &n) == 0)
		for (size_t i = 0; i < n; i++)
			if (d[i].id == id)
				out = d[i];
	free(d);
	return out;
}

static void auto_sleep_ms(unsigned ms) { usleep(ms * 1000u); }

/* A started store under auto in tpath(dir): capacity cap, idle_ms idle (0:
 * the default). */
static sfs_store *auto_open(const char *dir, uint64_t cap, uint64_t idle)
{
	sfs_store *s = NULL;
	char err[256] = "";
	int rc = sfs_store_open(&(struct sfs_store_conf){.dir = tpath(dir),
							 .capacity_bytes = cap,
							 .policy = SFS_STORE_AUTO,
							 .idle_ms = idle,
							 .chunk_bytes = MiB},
				&s, err, sizeof(err));
	if (rc || (rc = sfs_store_start(s)))
		bail("sfs_store_open", rc);
	return s;
}

static void test_auto(void)
{
	diag("auto: a stable part of a dataset larger than the cache; reuse, scans, shares, idle");
	tmp_new();
	const uint64_t cap = 4 * MiB, idle = 2000; /* in use: read within 100 ms */
	sfs_store *s = auto_open("c", cap, idle);
	uint32_t A = sfs_store_dataset(s, "/ifs/A"), B = sfs_store_dataset(s, "/ifs/B");
	uint32_t C = sfs_store_dataset(s, "/ifs/C");

	/* 1: A is 6 MiB, the cache 4: epoch 1 fills it, epoch 2 churns nothing. */
	int e1 = auto_pass(s, A, 100, 6), e2 = auto_pass(s, A, 100, 6);
	struct sfs_store_dataset a = auto_ds(s, A);
	ok(e1 == 4 && e2 == 0 && a.bytes == cap && stats(s).evicted_bytes == 0,
	   "larger than the cache: epoch 1 admits %d, epoch 2 %d (want 4 0), A holds %llu, "
	   "evicted %llu",
	   e1, e2, (unsigned long long)a.bytes, (unsigned long long)stats(s).evicted_bytes);
	ok(a.refused_bytes[SFS_STORE_REFUSED_FULL] == 4 * MiB && a.admitted_bytes == cap,
	   "refused as full %llu, admitted %llu", (unsigned long long)a.refused_bytes[0],
	   (unsigned long long)a.admitted_bytes);

	/* 2: B's first pass while A is read: a scan, refused. */
	sfs_store_dataset_read(s, A, MiB, 0);
	int b1 = auto_pass(s, B, 200, 3);
	struct sfs_store_dataset b = auto_ds(s, B);
	ok(b1 == 0 && b.refused_bytes[SFS_STORE_REFUSED_SCAN] == 3 * MiB && !b.reused,
	   "a first pass of B takes nothing of A (read now): %d admitted, scan %llu", b1,
	   (unsigned long long)b.refused_bytes[SFS_STORE_REFUSED_SCAN]);
	/* ... and read again while A is read too: B takes up to an equal share. */
	sfs_store_dataset_read(s, A, MiB, 0);
	int b2 = auto_pass(s, B, 200, 3);
	b = auto_ds(s, B);
	a = auto_ds(s, A);
	ok(b.reused && b2 == 2 && b.bytes == cap / 2 && a.bytes == cap / 2,
	   "B read again while A is read: %d admitted (want 2), B holds %llu, A %llu (want %llu "
	   "each), B refused for its share %llu",
	   b2, (unsigned long long)b.bytes, (unsigned long long)a.bytes,
	   (unsigned long long)(cap / 2),
	   (unsigned long long)b.refused_bytes[SFS_STORE_REFUSED_SHARE]);
	/* ... and once A is no longer read (past idle / 20), B takes the rest it needs. */
	auto_sleep_ms((unsigned)(idle / 20) + 50);
	int b3 = auto_pass(s, B, 200, 1); /* the one the second ghost hit came after */
	b = auto_ds(s, B);
	ok(b3 == 1 && b.bytes == 3 * MiB,
	   "A not read now: B's first version admitted (%d), B %llu; refused full/scan/share "
	   "%llu/%llu/%llu",
	   b3, (unsigned long long)b.bytes, (unsigned long long)b.refused_bytes[0],
	   (unsigned long long)b.refused_bytes[1], (unsigned long long)b.refused_bytes[2]);

	/* 3: a first pass (C) takes nothing of datasets read within idle... */
	int c1 = auto_pass(s, C, 300, 2);
	ok(c1 == 0, "C's first pass while A and B were read within idle: %d admitted", c1);
	/* ... but a warm-up is no first pass. */
	struct sfs_file_version w = version(310, 2 * MiB);
	w.dataset = C;
	sfs_store_obj *wo = sfs_store_obj_get(s, &w);
	sfs_store_obj_wanted(wo);
	sfs_store_dataset_read(s, C, 0, MiB);
	int rc = write_sync(wo, 310, 2 * MiB, 0);
	sfs_store_obj_put(wo);
	ok(rc == 0 && auto_ds(s, C).reused, "a warm-up of C is admitted: %d", rc);
	/* 4: past idle, anyone takes an idle dataset's space. */
	auto_sleep_ms((unsigned)idle + 100);
	uint32_t D = sfs_store_dataset(s, "/ifs/D");
	int d1 = auto_pass(s, D, 400, 2);
	ok(d1 == 2 && auto_ds(s, D).bytes == 2 * MiB,
	   "after idle, a first pass takes idle datasets' space: %d admitted", d1);
	ok(stats(s).used_bytes <= cap, "never over capacity: %llu",
	   (unsigned long long)stats(s).used_bytes);
	sfs_store_close(s);

	/* The policy changes on a cache filled under another: nothing lost. */
	s = store_open(tpath("c"), cap, SFS_STORE_LRU);
	struct sfs_file_version v = version(400, 2 * MiB);
	ok(sfs_store_cached_bytes(s, &v) == MiB, "reopened under lru: D's version is there");
	sfs_store_close(s);

	/* A restart does not make the datasets read just before it idle: a
	 * first pass after it is still a scan. */
	s = auto_open("c", cap, 600000);
	uint32_t E = sfs_store_dataset(s, "/ifs/E");
	int r1 = auto_pass(s, E, 500, 1);
	ok(r1 == 0 && auto_ds(s, E).refused_bytes[SFS_STORE_REFUSED_SCAN] == MiB,
	   "after a restart, a first pass takes nothing of datasets read before it: %d", r1);
	sfs_store_close(s);
	tmp_remove();
}

/* More datasets than the table holds: the rest are counted under id 0 and
 * as overflows, never under another's id, and the cache keeps working. */
static void test_auto_overflow(void)
{
	diag("auto: more datasets than the table holds");
	tmp_new();
	sfs_store *s = auto_open("c", 4 * MiB, 0);
	char name[64];
	uint32_t last = 0, n = 0;
	for (int k = 0; k < 5000; k++) {
		snprintf(name, sizeof(name), "/ifs/d%05d", k);
		uint32_t id = sfs_store_dataset(s, name);
		n += id != 0;
		last = id ? id : last;
	}
	snprintf(name, sizeof(name), "/ifs/d%05d", 4999);
	uint64_t over = sfs_store_dataset_overflows(s);
	ok(n >= 3000 && n < 5000 && over == 5000 - n && sfs_store_dataset(s, name) == 0,
	   "%u datasets got ids, %llu lookups overflowed", n, (unsigned long long)over);
	int a = auto_write(s, 0, 900), b = auto_write(s, last, 901);
	struct sfs_store_dataset u = auto_ds(s, 0), l = auto_ds(s, last);
	ok(a == 0 && b == 0 && u.bytes == MiB && l.bytes == MiB,
	   "an overflowed dataset's version is cached under id 0 (%llu bytes), a known one's "
	   "under its own (%llu)",
	   (unsigned long long)u.bytes, (unsigned long long)l.bytes);
	struct sfs_store_dataset *d = NULL;
	size_t nd = 0;
	int rc = sfs_store_dataset_stats(s, &d, &nd);
	ok(rc == 0 && nd == 2, "the stats list the two: %zu", nd);
	free(d);
	sfs_store_close(s);
	tmp_remove();
}

/* Two datasets filling an empty cache together split it: the faster one
 * stops at its share while the other is still being offered bytes. */
static void test_auto_fill(void)
{
	diag("auto: two datasets filling the cache at once split it");
	tmp_new();
	sfs_store *s = auto_open("c", 4 * MiB, 0);
	uint32_t P = sfs_store_dataset(s, "/ifs/P"), Q = sfs_store_dataset(s, "/ifs/Q");
	int q1 = auto_pass(s, Q, 100, 1), p3 = auto_pass(s, P, 200, 3),
	    q2 = auto_pass(s, Q, 101, 1);
	struct sfs_store_dataset p = auto_ds(s, P), q = auto_ds(s, Q);
	ok(q1 == 1 && p3 == 2 && q2 == 1 && p.bytes == 2 * MiB && q.bytes == 2 * MiB &&
	       p.refused_bytes[SFS_STORE_REFUSED_SHARE] == MiB,
	   "Q 1, P 3 offered, Q 1 more: P admitted %d (want 2), Q %d; P holds %llu, Q %llu", p3,
	   q1 + q2, (unsigned long long)p.bytes, (unsigned long long)q.bytes);
	sfs_store_close(s);
	tmp_remove();
}

/* Rewrite the object of size bytes (today's pair of files) as one
 * "SFSOBJS4" file: header (magic, data_off), records, then the data at
 * data_off; the .sums removed. */
static void make_v4(const char *dir, uint64_t size, uint32_t n_chunks, char *path, size_t len)
{
	if (find_object(dir, size, path, len) != 0)
		bail("object file not found", -ENOENT);
	uint64_t off = v4_data_off(n_chunks);
	size_t head = 64 + (size_t)REC_BYTES * n_chunks;
	uint8_t *h = malloc(head), *data = malloc(size);
	int sfd = open(sums_of(path), O_RDONLY), dfd = open(path, O_RDWR);
	if (!h || !data || sfd < 0 || dfd < 0 || pread(sfd, h, head, 0) != (ssize_t)head ||
	    pread(dfd, data, size, 0) != (ssize_t)size)
		bail("read object", -EIO);
	memcpy(h, "SFSOBJS4", 8);
	memcpy(h + 40, &off, 8);
	if (ftruncate(dfd, 0) != 0 || pwrite(dfd, h, head, 0) != (ssize_t)head ||
	    pwrite(dfd, data, size, (off_t)off) != (ssize_t)size)
		bail("write v4", -EIO);
	close(sfd);
	close(dfd);
	unlink(sums_of(path));
	free(h);
	free(data);
}

/* An object file of the previous layout ("SFSOBJS4") is migrated in place
 * at load: same bytes, byte x at x, .sums beside it; a leftover .sums.tmp
 * of a migration cut short goes. */
static void test_migrate_v4(void)
{
	diag("objects of the previous layout (SFSOBJS4) are migrated at load");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1300, RW_SIZE);
	sfs_store_obj_put(write_all(s, &v, RW_SEED));
	sfs_store_close(s);
	char path[1024], tmp[1200];
	make_v4(dir, RW_SIZE, 3, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp", sums_of(path));
	int fd = open(tmp, O_CREAT | O_WRONLY, 0600); /* a migration cut short */
	if (fd < 0 || write(fd, "half", 4) != 4)
		bail("tmp", -errno);
	close(fd);

	s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_store_stats ss = stats(s);
	struct stat st;
	ok(ss.objects == 1 && ss.used_bytes == RW_SIZE,
	   "migrated: objects %llu used %llu (want 1 %llu)", (unsigned long long)ss.objects,
	   (unsigned long long)ss.used_bytes, (unsigned long long)RW_SIZE);
	ok(stat(path, &st) == 0 && (uint64_t)st.st_size == RW_SIZE && exists(sums_of(path)) &&
	       !exists(tmp),
	   "data file %lld bytes (want %llu), .sums there, .sums.tmp gone (%d)",
	   (long long)st.st_size, (unsigned long long)RW_SIZE, exists(tmp));
	sfs_store_obj *o = sfs_store_obj_get(s, &v);
	check_all_bytes(o, RW_SEED, RW_SIZE, 3, "migrated");
	ss = stats(s);
	ok(ss.checksum_failures == 0, "migrated: checksum_failures %llu (want 0)",
	   (unsigned long long)ss.checksum_failures);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	/* Cut short after the front was cut: no .sums, no V4 header: discarded. */
	fd = open(sums_of(path), O_RDONLY);
	(void)fd;
	if (fd >= 0)
		close(fd);
	unlink(sums_of(path));
	s = store_open(dir, 0, SFS_STORE_LRU);
	ss = stats(s);
	ok(ss.objects == 0 && !exists(path), "a data file without .sums: discarded (%llu, %d)",
	   (unsigned long long)ss.objects, exists(path));
	sfs_store_close(s);
	tmp_remove();
}

/* The bytes of fd [0, size) are the version's, and nothing follows. */
static bool backing_exact(int fd, uint32_t seed, uint64_t size)
{
	struct stat st;
	uint8_t *got = malloc(size), *want = malloc(size);
	bool same = got && want && fstat(fd, &st) == 0 && (uint64_t)st.st_size == size &&
		    pread(fd, got, size, 0) == (ssize_t)size;

	if (same) {
		fill(seed, 0, want, size);
		same = !memcmp(got, want, size);
	}
	free(got);
	free(want);
	return same;
}

/* sfs_store_obj_backing_fd: a version written this run is VERIFIED and
 * served; after a reload it is not until verified (queued for the
 * scrubber), a partial version never, a packed one never. */
static void test_backing_fd(void)
{
	diag("backing fd: whole and verified versions only, bytes at their own offsets");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version v = version(1400, RW_SIZE), part = version(1401, RW_SIZE),
				small = version(1402, 5000);
	sfs_store_obj *o = write_all(s, &v, RW_SEED);
	int fd = sfs_store_obj_backing_fd(o);
	ok(fd >= 0 && backing_exact(fd, RW_SEED, RW_SIZE),
	   "written this run: fd %d, byte x at x, %llu bytes", fd, (unsigned long long)RW_SIZE);
	if (fd >= 0)
		close(fd);
	sfs_store_obj_put(o);
	o = sfs_store_obj_get(s, &part);
	int rc = write_sync(o, RW_SEED, RW_SIZE, 0);
	fd = sfs_store_obj_backing_fd(o);
	ok(rc == 0 && fd == -ENOENT, "1 of 3 chunks: %d (want -ENOENT)", fd);
	sfs_store_obj_put(o);
	o = write_all(s, &small, 7);
	fd = sfs_store_obj_backing_fd(o);
	ok(fd == -ENOENT, "packed version: %d (want -ENOENT)", fd);
	sfs_store_obj_put(o);
	sfs_store_close(s);

	s = store_open(dir, 0, SFS_STORE_LRU);
	o = sfs_store_obj_get(s, &v);
	fd = sfs_store_obj_backing_fd(o);
	ok(fd == -EAGAIN, "after reload, not verified: %d (want -EAGAIN)", fd);
	struct sfs_store_scrub_conf sc = {.interval_ms = 0, .rate_bytes = 0};
	ok(sfs_store_scrub_start(s, &sc) == 0, "scrubber started (no passes)");
	fd = sfs_store_obj_backing_fd(o);
	struct sfs_store_scrub_stats st = {0};
	for (int t = 0; t < 500 && st.queued_verified < 1; t++) {
		usleep(10000);
		sfs_store_scrub_get_stats(s, &st);
	}
	int fd2 = sfs_store_obj_backing_fd(o);
	ok(fd == -EAGAIN && st.queued_verified == 1 && st.passes == 0 && fd2 >= 0 &&
	       backing_exact(fd2, RW_SEED, RW_SIZE),
	   "queued, verified by the scrubber (%llu), then served: %d %d",
	   (unsigned long long)st.queued_verified, fd, fd2);
	if (fd2 >= 0)
		close(fd2);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

/* The scrubber's passes find a flipped byte, evict the version (counted),
 * and leave sound versions and their recency alone. */
static void test_scrub(void)
{
	diag("scrub: a flipped byte is found within a pass and its version evicted");
	tmp_new();
	const char *dir = tpath("cache");
	sfs_store *s = store_open(dir, 0, SFS_STORE_LRU);
	struct sfs_file_version good = version(1500, RW_SIZE), bad = version(1501, RW_SIZE + 7);
	sfs_store_obj_put(write_all(s, &good, RW_SEED));
	sfs_store_obj *o = write_all(s, &bad, RW_SEED + 1);
	char path[1024];
	if (find_object(dir, RW_SIZE + 7, path, sizeof(path)) != 0)
		bail("object file not found", -ENOENT);
	flip_byte(path, (off_t)(2 * MiB + 1234)); /* chunk 2, under a holder */
	int fd = sfs_store_obj_backing_fd(o);
	ok(fd >= 0, "before the scrub the flip is not seen: backing fd %d", fd);
	if (fd >= 0)
		close(fd);
	struct sfs_store_scrub_conf sc = {.interval_ms = 200, .rate_bytes = 64 * MiB};
	ok(sfs_store_scrub_start(s, &sc) == 0, "scrubber started (200 ms, 64 MiB/s)");
	struct sfs_store_scrub_stats st = {0};
	for (int t = 0; t < 1000 && st.passes < 2; t++) {
		usleep(10000);
		sfs_store_scrub_get_stats(s, &st);
	}
	struct sfs_store_stats ss = stats(s);
	fd = sfs_store_obj_backing_fd(o);
	ok(st.passes >= 2 && st.failures == 1 && ss.objects == 1 && ss.held_bytes > 0 &&
	       ss.used_bytes == RW_SIZE + ss.held_bytes && fd == -ENOENT,
	   "passes %llu failures %llu; objects %llu used %llu held %llu; backing %d (want >=2 1 1 "
	   "%llu + held -ENOENT)",
	   (unsigned long long)st.passes, (unsigned long long)st.failures,
	   (unsigned long long)ss.objects, (unsigned long long)ss.used_bytes,
	   (unsigned long long)ss.held_bytes, fd, (unsigned long long)RW_SIZE);
	ok(st.bytes >= RW_SIZE * 2 && st.versions >= 3 && st.last_pass_ms > 0,
	   "bytes %llu versions %llu last pass %llu ms (the rate: a 3 MiB pass >= 40 ms)",
	   (unsigned long long)st.bytes, (unsigned long long)st.versions,
	   (unsigned long long)st.last_pass_ms);
	ok(!exists(path), "the failed version's data file is gone");
	sfs_store_obj_put(o);
	ss = stats(s);
	ok(ss.held_bytes == 0 && ss.used_bytes == RW_SIZE,
	   "its holder gone: held %llu used %llu (want 0 %llu)", (unsigned long long)ss.held_bytes,
	   (unsigned long long)ss.used_bytes, (unsigned long long)RW_SIZE);
	o = sfs_store_obj_get(s, &bad);
	int rc = 0;
	for (uint32_t i = 0; i < 3 && rc == 0; i++)
		rc = write_sync(o, RW_SEED + 1, RW_SIZE + 7, i);
	fd = sfs_store_obj_backing_fd(o);
	ok(rc == 0 && fd >= 0 && backing_exact(fd, RW_SEED + 1, RW_SIZE + 7),
	   "fetched again: served exact (%d %d)", rc, fd);
	if (fd >= 0)
		close(fd);
	sfs_store_obj_put(o);
	sfs_store_close(s);
	tmp_remove();
}

static const struct tap_test tests[] = {
    {"open_lock", test_open_lock},
    {"bad_path", test_bad_path},
    {"write_read", test_write_read},
    {"write_hashed", test_write_hashed},
    {"corruption", test_corruption},
    {"damaged_files", test_damaged_files},
    {"stray_prefix", test_stray_prefix},
    {"versions", test_versions},
    {"same_version_twice", test_same_version_twice},
    {"lru", test_lru},
    {"pin", test_pin},
    {"auto", test_auto},
    {"auto_overflow", test_auto_overflow},
    {"auto_fill", test_auto_fill},
    {"concurrency", test_concurrency},
    {"range", test_range},
    {"range_corruption", test_range_corruption},
    {"old_layout", test_old_layout},
    {"migrate_v4", test_migrate_v4},
    {"backing_fd", test_backing_fd},
    {"scrub", test_scrub},
    {"old_segments", test_old_segments},
    {"range_concurrency", test_range_concurrency},
    {"small", test_small},
    {"small_many", test_small_many},
    {"small_lru", test_small_lru},
    {"small_pin", test_small_pin},
    {"small_corruption", test_small_corruption},
    {"mixed_batch", test_mixed_batch},
    {"runs", test_runs},
    {"offline", test_offline},
    {"datasets", test_datasets},
    {"evict_keys", test_evict_keys},
    {"held", test_held},
    {"trust_verified", test_trust_verified},
    {"list_cost", test_list_cost},
};

/* With no arguments, runs every test; otherwise only the named ones. */
int main(int argc, char **argv)
{
	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
