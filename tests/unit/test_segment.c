// SPDX-License-Identifier: Apache-2.0
/*
 * test_segment — cache/store/segment.c (the packed small-object log) against a
 * real directory under /tmp, and once under /dev/shm (tmpfs: no O_DIRECT,
 * the buffered fallback).
 *
 * Objects are synthetic: object i has key key_of(i) and len_of(i) bytes
 * from fill(i, ...); every successful read is compared byte for byte.
 * Tests that damage files rely on the layout segment.c documents: records
 * 4096-aligned, a 64-byte header, bytes from offset 64; NNNNNNNN.idx =
 * 32-byte header {magic, seq, n, end_bytes, 0}, 40-byte entries {key,
 * xxh64, off4k, len, dataset, 0}, XXH3-64 of all that.
 *
 * open() with O_DIRECT is wrapped (--wrap=openat64) so that the /dev/shm
 * pass sees EINVAL, as on a filesystem without O_DIRECT.
 *
 * Threading: ok() on the main thread only; reader threads of the
 * concurrency test count what they saw and the main thread reports it.
 */
#include "segment.h"
#include "store_test_util.h"
#include "tap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define KiB (1u << 10)
#define MiB (1u << 20)

/* --- O_DIRECT refused (linked with -Wl,--wrap=openat64) --------------------- */

/* Tmpfs accepts O_DIRECT since Linux 6.6; to cover the buffered fallback
 * everywhere, opens with O_DIRECT fail with EINVAL while this is set, after
 * creating the file as such a filesystem may. Main thread sets it; atomic. */
static bool refuse_direct;
static unsigned n_refused; /* atomic */

int __real_openat64(int dirfd, const char *path, int flags, ...);
int __wrap_openat64(int dirfd, const char *path, int flags, ...);

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
	mode_t mode = 0;
	if (flags & O_CREAT) {
		va_list ap;
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	if ((flags & O_DIRECT) && __atomic_load_n(&refuse_direct, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&n_refused, 1, __ATOMIC_RELAXED);
		int fd = __real_openat64(dirfd, path, flags & ~O_DIRECT, mode);
		if (fd >= 0)
			close(fd);
		errno = EINVAL;
		return -1;
	}
	return __real_openat64(dirfd, path, flags, mode);
}

/* --- helpers --------------------------------------------------------------- */

static void key_of(uint32_t i, uint8_t key[16])
{
	uint64_t a = mix(i), b = mix(a ^ 0x1234);
	memcpy(key, &a, 8);
	memcpy(key + 8, &b, 8);
}

static void fill(uint32_t i, uint8_t *buf, uint32_t len)
{
	for (uint32_t k = 0; k < len; k += 8) {
		uint64_t w = mix(((uint64_t)i << 32) ^ k);
		memcpy(buf + k, &w, len - k < 8 ? len - k : 8);
	}
}

/* Random sizes 1 B .. 1 MiB, small ones more likely. */
static uint32_t len_random(uint32_t i)
{
	uint64_t r = mix(i * 7919u + 17);
	uint32_t max = (r & 3) == 0 ? SFS_SEG_MAX_OBJECT : (r & 3) == 1 ? 128 * KiB : 8 * KiB;
	return 1 + (uint32_t)((r >> 8) % max);
}

static uint8_t *obj_buf, *read_buf; /* 1 MiB scratch; 4096-aligned read buffer */

static struct sfs_seg_conf conf_of(uint64_t seg_bytes, uint32_t wbuf_bytes)
{
	static char dir[300];
	snprintf(dir, sizeof(dir), "%s/seg", tmp_root);
	return (struct sfs_seg_conf){
	    .dir = dir, .segment_bytes = seg_bytes, .write_buffer_bytes = wbuf_bytes};
}

static sfs_seg *open_or_bail(uint64_t seg_bytes, uint32_t wbuf_bytes)
{
	struct sfs_seg_conf c = conf_of(seg_bytes, wbuf_bytes);
	sfs_seg *sg;
	int rc = sfs_seg_open(&c, &sg);
	if (rc)
		bail("sfs_seg_open", rc);
	return sg;
}

/* Appends object i of dataset ds (flushing first when the buffer is
 * full). Returns the append's result. */
static int put_ds(sfs_seg *sg, uint32_t i, uint32_t len, uint32_t ds)
{
	uint8_t key[16];
	key_of(i, key);
	fill(i, obj_buf, len);
	int rc = sfs_seg_append(sg, key, obj_buf, len, ds);
	if (rc == -ENOBUFS) {
		int f = sfs_seg_flush(sg);
		if (f)
			bail("sfs_seg_flush", f);
		rc = sfs_seg_append(sg, key, obj_buf, len, ds);
	}
	return rc;
}

static int put(sfs_seg *sg, uint32_t i, uint32_t len) { return put_ds(sg, i, len, 0); }

/* Reads object i: 1 byte-exact, 0 a miss (-ENOENT / -EBADMSG), -1 wrong
 * bytes or another error. Thread-safe when buf is the caller's. */
static int check_obj(sfs_seg *sg, uint32_t i, uint32_t len, uint8_t *buf, uint8_t *exp)
{
	uint8_t key[16];
	const char *data;
	key_of(i, key);
	ssize_t n = sfs_seg_read(sg, key, buf, sfs_seg_read_buf_bytes(SFS_SEG_MAX_OBJECT), &data);
	if (n == -ENOENT || n == -EBADMSG)
		return 0;
	if (n != (ssize_t)len)
		return -1;
	fill(i, exp, len);
	return memcmp(data, exp, len) ? -1 : 1;
}

/* Counts objects [0, n) that read byte-exact / miss / are wrong. */
static void check_range(sfs_seg *sg, uint32_t a, uint32_t b, uint32_t (*len)(uint32_t),
			uint32_t *good, uint32_t *miss, uint32_t *bad)
{
	static uint8_t exp[MiB];
	*good = *miss = *bad = 0;
	for (uint32_t i = a; i < b; i++) {
		int r = check_obj(sg, i, len(i), read_buf, exp);
		*(r > 0 ? good : r == 0 ? miss : bad) += 1;
	}
}

/* Files of the segment directory named *ext. */
static int count_files(const char *ext) { return count_entries(tpath("seg"), ext); }

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) ? -1 : st.st_size;
}

static uint64_t rec_bytes(uint32_t len) { return (64u + len + 4095) / 4096 * 4096; }

static uint32_t len_10k(uint32_t i) { return 10000 + i; }
static uint32_t len_100k(uint32_t i) { return 100 * KiB + i; }
static uint32_t len_small(uint32_t i) { return 1 + i % 3000; }

/* --- tests ------------------------------------------------------------------ */

#define N_BASIC 400

/* Random sizes; 16 MiB segments (several sealed); invisible before flush;
 * byte-exact after; then a reopen finds everything. */
static void test_basic_and_reopen(void)
{
	uint32_t good, miss, bad, len;
	uint8_t key[16];
	const char *data;

	tmp_new();
	sfs_seg *sg = open_or_bail(16 * MiB, 0);
	uint32_t failed = 0;
	for (uint32_t i = 0; i < N_BASIC; i++)
		failed += put(sg, i, len_random(i)) != 0;
	ok(!failed, "append %d objects of 1 B .. 1 MiB", N_BASIC);
	key_of(N_BASIC - 1, key);
	ok(!sfs_seg_lookup(sg, key, &len) &&
	       sfs_seg_read(sg, key, read_buf, MiB + 4096, &data) == -ENOENT,
	   "an appended object is not visible before flush");
	struct sfs_seg_stats before, flushed, again;
	sfs_seg_get_stats(sg, &before);
	ok(sfs_seg_flush(sg) == 0, "flush");
	sfs_seg_get_stats(sg, &flushed);
	ok(flushed.write_bytes - before.write_bytes >= rec_bytes(len_random(N_BASIC - 1)),
	   "the flush wrote the pending records");
	int rc = sfs_seg_flush(sg);
	sfs_seg_get_stats(sg, &again);
	ok(rc == 0 && again.write_bytes == flushed.write_bytes,
	   "a second flush has nothing to write");
	ok(sfs_seg_lookup(sg, key, &len) && len == len_random(N_BASIC - 1), "visible after flush");
	check_range(sg, 0, N_BASIC, len_random, &good, &miss, &bad);
	ok(good == N_BASIC, "all read byte-exact (%u good, %u miss, %u bad)", good, miss, bad);

	struct sfs_seg_stats st;
	sfs_seg_get_stats(sg, &st);
	uint64_t live = 0;
	for (uint32_t i = 0; i < N_BASIC; i++)
		live += len_random(i);
	ok(st.objects == N_BASIC && st.live_bytes == live && st.segments >= 3 &&
	       st.checksum_failures == 0 && st.errors == 0,
	   "stats: %llu objects, %llu segments, %llu disk bytes, %llu flushes",
	   (unsigned long long)st.objects, (unsigned long long)st.segments,
	   (unsigned long long)st.disk_bytes, (unsigned long long)st.flushes);
	int n_seg = count_files(".seg"), n_idx = count_files(".idx");
	ok(n_seg == (int)st.segments && n_idx == n_seg - 1,
	   "sealed segments have an .idx, the open one not (%d .seg, %d .idx)", n_seg, n_idx);
	sfs_seg_close(sg);

	sg = open_or_bail(16 * MiB, 0);
	check_range(sg, 0, N_BASIC, len_random, &good, &miss, &bad);
	ok(good == N_BASIC, "after reopen: all read byte-exact (%u good, %u miss, %u bad)", good,
	   miss, bad);
	ok(count_files(".idx") == n_seg, "the scanned segment got its .idx at open");
	ok(put(sg, N_BASIC, 5000) == 0 && sfs_seg_flush(sg) == 0 &&
	       check_obj(sg, N_BASIC, 5000, read_buf, obj_buf) == 1,
	   "append after reopen (a new segment)");
	sfs_seg_close(sg);
	sg = open_or_bail(16 * MiB, 0);
	check_range(sg, 0, N_BASIC, len_random, &good, &miss, &bad);
	ok(good == N_BASIC && check_obj(sg, N_BASIC, 5000, read_buf, obj_buf) == 1,
	   "second reopen: all %u read byte-exact", good + 1);
	sfs_seg_close(sg);
	tmp_remove();
}

/* -EEXIST, -E2BIG, -ENOBUFS then flush then append. */
static void test_append_errors(void)
{
	uint8_t key[16];

	tmp_new();
	sfs_seg *sg = open_or_bail(0, 64 * KiB); /* raised to one largest record */
	key_of(1, key);
	ok(sfs_seg_append(sg, key, obj_buf, 100, 0) == 0, "append");
	ok(sfs_seg_append(sg, key, obj_buf, 100, 0) == -EEXIST, "-EEXIST for a pending key");
	ok(sfs_seg_append(sg, key, obj_buf, 0, 0) == -E2BIG &&
	       sfs_seg_append(sg, key, obj_buf, SFS_SEG_MAX_OBJECT + 1, 0) == -E2BIG,
	   "-E2BIG for 0 and > 1 MiB");
	ok(sfs_seg_flush(sg) == 0, "flush");
	ok(sfs_seg_append(sg, key, obj_buf, 100, 0) == -EEXIST, "-EEXIST for a present key");
	int rc = 0;
	uint32_t i = 2;
	while ((rc = sfs_seg_append(sg, (key_of(i, key), key), obj_buf, 4000, 0)) == 0)
		i++;
	ok(rc == -ENOBUFS && i - 2 == (MiB + 4096) / 4096,
	   "-ENOBUFS once the buffer is full (%u records of 4 KiB)", i - 2);
	ok(sfs_seg_flush(sg) == 0 && sfs_seg_append(sg, key, obj_buf, 4000, 0) == 0 &&
	       sfs_seg_flush(sg) == 0,
	   "flush, then the append goes in");
	ok(sfs_seg_flush(sg) == 0, "an empty flush");
	sfs_seg_close(sg);
	tmp_remove();
}

/* 20 records of ~10 KB (12 KiB each) in one segment, in two flushes. */
static void make_20(void)
{
	sfs_seg *sg = open_or_bail(0, 0);
	for (uint32_t i = 0; i < 20; i++) {
		if (put(sg, i, len_10k(i)))
			bail("put", -EIO);
		if (i == 9 && sfs_seg_flush(sg))
			bail("flush", -EIO);
	}
	if (sfs_seg_flush(sg))
		bail("flush", -EIO);
	sfs_seg_close(sg);
}

static off_t off_20(uint32_t i)
{
	off_t off = 0;
	for (uint32_t k = 0; k < i; k++)
		off += (off_t)rec_bytes(len_10k(k));
	return off;
}

/* Recovery: torn tail (truncate), a bad byte in a record (scan stops). */
static void test_torn_tail(void)
{
	uint32_t good, miss, bad;

	tmp_new();
	make_20();
	/* the open segment got no .idx: remove none; cut record 15 in half */
	ok(count_files(".idx") == 0, "one open segment, no .idx");
	if (truncate(tpath("seg/00000000.seg"), off_20(15) + 5000))
		bail("truncate", -errno);
	sfs_seg *sg = open_or_bail(0, 0);
	check_range(sg, 0, 15, len_10k, &good, &miss, &bad);
	ok(good == 15, "truncated mid-record 15: records 0..14 read (%u)", good);
	check_range(sg, 15, 20, len_10k, &good, &miss, &bad);
	ok(miss == 5, "records 15..19 are gone (%u misses, %u bad)", miss, bad);
	ok(file_size(tpath("seg/00000000.seg")) == off_20(15), "the torn tail was cut off");
	sfs_seg_close(sg);
	tmp_remove();

	tmp_new();
	make_20();
	flip_byte(tpath("seg/00000000.seg"), off_20(17) + 64 + 1234);
	sg = open_or_bail(0, 0);
	check_range(sg, 0, 17, len_10k, &good, &miss, &bad);
	ok(good == 17, "a bad byte in record 17: records 0..16 read (%u)", good);
	check_range(sg, 17, 20, len_10k, &good, &miss, &bad);
	ok(miss == 3 && !bad, "records 17..19 are gone");
	sfs_seg_close(sg);
	tmp_remove();
}

/* A byte flipped under an open cache: -EBADMSG once, then -ENOENT. */
static void test_flip_while_open(void)
{
	uint32_t good, miss, bad;
	uint8_t key[16];
	const char *data;

	tmp_new();
	make_20();
	sfs_seg *sg = open_or_bail(0, 0); /* scanned: now has an .idx */
	flip_byte(tpath("seg/00000000.seg"), off_20(5) + 64 + 77);
	key_of(5, key);
	ok(sfs_seg_read(sg, key, read_buf, MiB + 4096, &data) == -EBADMSG,
	   "flipped byte: -EBADMSG");
	ok(sfs_seg_read(sg, key, read_buf, MiB + 4096, &data) == -ENOENT &&
	       !sfs_seg_lookup(sg, key, NULL),
	   "then -ENOENT (the entry is dropped)");
	flip_byte(tpath("seg/00000000.seg"), off_20(6) + 30); /* in the header: the length */
	key_of(6, key);
	ok(sfs_seg_read(sg, key, read_buf, MiB + 4096, &data) == -EBADMSG,
	   "flipped header byte: -EBADMSG");
	check_range(sg, 0, 20, len_10k, &good, &miss, &bad);
	ok(good == 18 && miss == 2 && !bad, "the 18 others read byte-exact");
	struct sfs_seg_stats st;
	sfs_seg_get_stats(sg, &st);
	ok(st.checksum_failures == 2 && st.objects == 18, "2 checksum failures counted");
	sfs_seg_close(sg);
	tmp_remove();
}

/* Reads started at once and finished later, in another order and on
 * other threads (sfs_seg_read_start / _finish): byte-exact, each
 * completion handed to its own read whoever reaps it; a flipped byte is
 * a miss as with sfs_seg_read. */
struct finish_job {
	sfs_seg *sg;
	struct sfs_seg_aio **aio;
	uint8_t **bufs;
	uint32_t from, to; /* finishes [from, to) backwards */
	uint32_t good;
};

static void *finish_range(void *arg)
{
	struct finish_job *j = arg;
	static __thread uint8_t exp[16 * KiB];
	for (uint32_t i = j->to; i-- > j->from;) {
		const char *data;
		ssize_t n = sfs_seg_read_finish(j->sg, j->aio[i], &data);
		fill(i, exp, len_10k(i));
		if (n == (ssize_t)len_10k(i) && data == (const char *)j->bufs[i] + 64 &&
		    !memcmp(data, exp, len_10k(i)))
			j->good++;
	}
	return NULL;
}

static void test_async_read(void)
{
	uint8_t key[16], *bufs[20];
	struct sfs_seg_aio *aio[20];
	const char *data;
	uint32_t started = 0;

	tmp_new();
	make_20();
	sfs_seg *sg = open_or_bail(0, 0);
	for (uint32_t i = 0; i < 20; i++) {
		bufs[i] = aligned_alloc(4096, 16 * KiB);
		key_of(i, key);
		started += sfs_seg_read_start(sg, key, bufs[i], 16 * KiB, &aio[i]) == 0;
	}
	ok(started == 20, "20 reads started before any finished (%u)", started);
	struct finish_job a = {sg, aio, bufs, 0, 10, 0}, b = {sg, aio, bufs, 10, 20, 0};
	pthread_t ta, tb;
	pthread_create(&ta, NULL, finish_range, &a);
	pthread_create(&tb, NULL, finish_range, &b);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ok(a.good + b.good == 20, "finished on two threads, backwards: 20 byte-exact (%u)",
	   a.good + b.good);

	key_of(99, key);
	ok(sfs_seg_read_start(sg, key, bufs[0], 16 * KiB, &aio[0]) == -ENOENT,
	   "a key not present: -ENOENT at start");
	key_of(3, key);
	ok(sfs_seg_read_start(sg, key, bufs[0] + 1, 16 * KiB, &aio[0]) == -EINVAL &&
	       sfs_seg_read_start(sg, key, bufs[0], 4096, &aio[0]) == -EINVAL,
	   "a misaligned or short buffer: -EINVAL at start");

	flip_byte(tpath("seg/00000000.seg"), off_20(5) + 64 + 77);
	key_of(5, key);
	int rc = sfs_seg_read_start(sg, key, bufs[5], 16 * KiB, &aio[5]);
	ok(rc == 0 && sfs_seg_read_finish(sg, aio[5], &data) == -EBADMSG,
	   "flipped byte: started, then -EBADMSG at finish");
	ok(sfs_seg_read_start(sg, key, bufs[5], 16 * KiB, &aio[5]) == -ENOENT &&
	       !sfs_seg_lookup(sg, key, NULL),
	   "then -ENOENT (the entry is dropped)");
	struct sfs_seg_stats st;
	sfs_seg_get_stats(sg, &st);
	ok(st.checksum_failures == 1 && st.objects == 19, "1 checksum failure counted");
	sfs_seg_close(sg); /* asserts that nothing is left in flight */
	for (uint32_t i = 0; i < 20; i++)
		free(bufs[i]);
	tmp_remove();
}

/* A read started on one thread whose completion another thread reaps
 * while it waits for its own read: the reaper writes the first read's
 * result, so the start must publish the read to whichever thread reaps it.
 * The reaper starts its own read first, then the other thread starts one,
 * then the reaper waits: the two share nothing but relaxed flags (no
 * happens-before of their own), so under ThreadSanitizer a start that does
 * not publish its read is a reported race (whether the reaper gets the
 * other completion depends on the disk; the bytes are checked either way). */
struct reap_job {
	sfs_seg *sg;
	int mine_started, other_started; /* atomic, relaxed */
	uint8_t *buf;			 /* the reaper's own read's buffer */
	bool good;
};

static void wait_flag(int *flag)
{
	while (!__atomic_load_n(flag, __ATOMIC_RELAXED))
		sched_yield();
}

static void *reap_other(void *arg)
{
	struct reap_job *j = arg;
	uint8_t key[16];
	struct sfs_seg_aio *a;
	const char *data;

	key_of(7, key);
	bool started = sfs_seg_read_start(j->sg, key, j->buf, 16 * KiB, &a) == 0;
	__atomic_store_n(&j->mine_started, 1, __ATOMIC_RELAXED);
	wait_flag(&j->other_started);
	usleep(20 * 1000); /* the other read's completion is likely in by now */
	j->good = started && sfs_seg_read_finish(j->sg, a, &data) == (ssize_t)len_10k(7);
	return NULL;
}

static void test_async_reaped_elsewhere(void)
{
	uint8_t key[16], *mine = aligned_alloc(4096, 16 * KiB);
	struct reap_job j = {.buf = aligned_alloc(4096, 16 * KiB)};
	struct sfs_seg_aio *a;
	const char *data;
	pthread_t t;

	tmp_new();
	make_20();
	j.sg = open_or_bail(0, 0);
	pthread_create(&t, NULL, reap_other, &j);
	wait_flag(&j.mine_started);
	key_of(3, key);
	int rc = sfs_seg_read_start(j.sg, key, mine, 16 * KiB, &a);
	__atomic_store_n(&j.other_started, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	ok(j.good, "the reaper's own read: started, then finished");
	uint8_t exp[16 * KiB];
	fill(3, exp, len_10k(3));
	ok(rc == 0 && sfs_seg_read_finish(j.sg, a, &data) == (ssize_t)len_10k(3) &&
	       !memcmp(data, exp, len_10k(3)),
	   "a read whose completion the other thread reaped: byte-exact");
	sfs_seg_close(j.sg);
	free(mine);
	free(j.buf);
	tmp_remove();
}

/* A corrupted .idx is replaced by a scan; an .idx without .seg and
 * strangers are removed. */
static void test_bad_idx(void)
{
	uint32_t good, miss, bad;

	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	for (uint32_t i = 0; i < 40; i++)
		if (put(sg, i, len_100k(i)))
			bail("put", -EIO);
	if (sfs_seg_flush(sg))
		bail("flush", -EIO);
	sfs_seg_close(sg);
	ok(count_files(".idx") >= 3, "several sealed segments (%d .idx)", count_files(".idx"));
	flip_byte(tpath("seg/00000001.idx"), 40);
	flip_byte(tpath("seg/00000002.idx"), 3);
	int fd = open(tpath("seg/0000abcd.idx"), O_CREAT | O_WRONLY, 0600);
	close(fd);
	fd = open(tpath("seg/00000001.idx.tmp"), O_CREAT | O_WRONLY, 0600);
	close(fd);
	fd = open(tpath("seg/junk"), O_CREAT | O_WRONLY, 0600);
	close(fd);
	sg = open_or_bail(MiB, 0);
	check_range(sg, 0, 40, len_100k, &good, &miss, &bad);
	ok(good == 40, "corrupted .idx files: rebuilt by scanning (%u good)", good);
	ok(file_size(tpath("seg/0000abcd.idx")) < 0 &&
	       file_size(tpath("seg/00000001.idx.tmp")) < 0 && file_size(tpath("seg/junk")) < 0,
	   "files that are not ours are removed");
	sfs_seg_close(sg);
	sg = open_or_bail(MiB, 0);
	check_range(sg, 0, 40, len_100k, &good, &miss, &bad);
	ok(good == 40 && count_files(".idx") == count_files(".seg"), "and the .idx rewritten");
	sfs_seg_close(sg);
	tmp_remove();
}

/* A .seg deleted under an open cache: byte-exact or a miss, never wrong. */
static void test_deleted_seg(void)
{
	uint32_t good, miss, bad;

	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	for (uint32_t i = 0; i < 40; i++)
		if (put(sg, i, len_100k(i)))
			bail("put", -EIO);
	if (sfs_seg_flush(sg))
		bail("flush", -EIO);
	sfs_seg_close(sg);
	sg = open_or_bail(MiB, 0); /* no fd open yet */
	unlink(tpath("seg/00000001.seg"));
	check_range(sg, 0, 40, len_100k, &good, &miss, &bad);
	ok(!bad && miss > 0 && good + miss == 40, "deleted segment: %u good, %u miss, %u bad", good,
	   miss, bad);
	check_range(sg, 0, 40, len_100k, &good, &miss, &bad);
	ok(!bad, "again: %u good, %u miss", good, miss);
	unlink(tpath("seg/00000002.seg")); /* its fd is open now: still the same bytes */
	check_range(sg, 0, 40, len_100k, &good, &miss, &bad);
	ok(!bad, "deleted while its fd is open: %u good, %u miss", good, miss);
	sfs_seg_close(sg);
	tmp_remove();
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Eviction takes the least recently used segment (not the open one), frees
 * its bytes and entries. 1 MiB segments of 9 records of 100 KiB. */
static void test_evict(void)
{
	uint32_t good, miss, bad, len;
	uint64_t last, bytes;
	uint8_t key[16];
	struct sfs_seg_stats st0, st1;

	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	ok(!sfs_seg_coldest(sg, &last, &bytes) && sfs_seg_evict_coldest(sg) == 0,
	   "nothing to evict in an empty cache");
	for (uint32_t i = 0; i < 45; i++)
		if (put(sg, i, len_100k(i)))
			bail("put", -EIO);
	if (sfs_seg_flush(sg))
		bail("flush", -EIO);
	sfs_seg_get_stats(sg, &st0);
	ok(st0.segments == 5, "45 records of 100 KiB: 5 segments of 9 (%llu)",
	   (unsigned long long)st0.segments);
	/* use segments 0, then 2 and 3, then 1 (4 is open): 0 is the coldest */
	sleep_ms(3);
	check_range(sg, 0, 9, len_100k, &good, &miss, &bad);
	sleep_ms(3);
	check_range(sg, 18, 36, len_100k, &good, &miss, &bad);
	sleep_ms(3);
	check_range(sg, 9, 10, len_100k, &good, &miss, &bad); /* one read of segment 1 */
	ok(sfs_seg_coldest(sg, &last, &bytes) && bytes == 9 * rec_bytes(len_100k(0)),
	   "coldest: %llu bytes", (unsigned long long)bytes);
	uint64_t freed = sfs_seg_evict_coldest(sg);
	sfs_seg_get_stats(sg, &st1);
	check_range(sg, 0, 9, len_100k, &good, &miss, &bad);
	ok(freed == bytes && good == 0 && miss == 9, "the least recently used (segment 0) went");
	check_range(sg, 9, 45, len_100k, &good, &miss, &bad);
	ok(good == 36, "the others stay (%u)", good);
	ok(st1.objects == 36 && st1.segments == 4 && st1.disk_bytes == st0.disk_bytes - freed &&
	       st1.evicted_segments == 1 && st1.evicted_bytes == freed,
	   "stats: objects, segments, disk bytes, evictions");
	ok(file_size(tpath("seg/00000000.seg")) < 0 && file_size(tpath("seg/00000000.idx")) < 0,
	   "its files are unlinked");
	/* now 1 (read 9), 2, 3 and 4 (just read): the next is 1 */
	sleep_ms(3);
	check_range(sg, 9, 45, len_100k, &good, &miss, &bad); /* all once; segment 1 first */
	sfs_seg_evict_coldest(sg);
	key_of(9, key);
	ok(!sfs_seg_lookup(sg, key, &len) && (key_of(18, key), sfs_seg_lookup(sg, key, &len)),
	   "then segment 1, read before 2");
	uint32_t n = 2;
	while (sfs_seg_evict_coldest(sg))
		n++;
	sfs_seg_get_stats(sg, &st1);
	ok(n == 4 && st1.segments == 1 && st1.objects == 9,
	   "all but the open segment can go (%u evicted)", n);
	ok(put(sg, 100, 5000) == 0 && sfs_seg_flush(sg) == 0 &&
	       check_obj(sg, 100, 5000, read_buf, obj_buf) == 1,
	   "appends go on after evicting");
	sfs_seg_close(sg);
	tmp_remove();
}

/* sfs_seg_match_fn of test_evict_where: objects of dataset 1, or whose
 * key begins like one of the keys in arg (NULL-terminated list of ids). */
static bool match_ds1(void *arg, uint32_t dataset, const uint8_t key8[8])
{
	(void)arg;
	(void)key8;
	return dataset == 1;
}

static bool match_ids(void *arg, uint32_t dataset, const uint8_t key8[8])
{
	(void)dataset;
	for (const uint32_t *id = arg; *id != UINT32_MAX; id++) {
		uint8_t key[16];
		key_of(*id, key);
		if (!memcmp(key, key8, 8))
			return true;
	}
	return false;
}

/* Whether objects [0, n) read as want() says: 1 byte-exact, 0 a miss. */
static bool reads_as(sfs_seg *sg, uint32_t n, int (*want)(uint32_t))
{
	static uint8_t exp[MiB];
	bool good = true;
	for (uint32_t i = 0; i < n; i++)
		good &= check_obj(sg, i, len_100k(i), read_buf, exp) == want(i);
	return good;
}

static int after_ds1(uint32_t i) { return i % 3 != 1; }
static int after_ids(uint32_t i) { return i % 3 != 1 && i != 0 && i != 38 && i != 11; }
/* Segment 1 (objects 9-17) lost its .idx before the third eviction. */
static int after_restart(uint32_t i) { return after_ids(i) || (i >= 9 && i < 18); }

/* Evictions by dataset and by key: summaries rewritten from the segment's
 * .idx on disk (the index keeps 8 bytes of each key and no checksum) and,
 * for the segment being filled, from its entries in memory; a restart keeps
 * what was evicted gone. A summary that cannot be read is an error and its
 * records come back at the next start, byte-exact. */
static void test_evict_where(void)
{
	struct sfs_seg_evicted ev;
	struct sfs_seg_stats st;
	uint8_t key[16];

	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	for (uint32_t i = 0; i < 45; i++) {
		key_of(i, key);
		fill(i, obj_buf, len_100k(i));
		int rc = sfs_seg_append(sg, key, obj_buf, len_100k(i), i % 3);
		if (rc == -ENOBUFS && !(rc = sfs_seg_flush(sg)))
			rc = sfs_seg_append(sg, key, obj_buf, len_100k(i), i % 3);
		if (rc)
			bail("append", rc);
	}
	if (sfs_seg_flush(sg))
		bail("flush", -EIO);
	sfs_seg_get_stats(sg, &st);
	ok(st.segments == 5 && count_files(".idx") == 4,
	   "45 records of 100 KiB: 4 sealed segments and the one being filled");
	int rc = sfs_seg_evict_where(sg, match_ds1, NULL, &ev);
	ok(rc == 0 && ev.objects == 15 && ev.disk_bytes == 0 && reads_as(sg, 45, after_ds1),
	   "dataset 1 evicted from every segment, the open one included: rc %d, %llu objects", rc,
	   (unsigned long long)ev.objects);
	ok(count_files(".idx") == 5, "the open segment was sealed: 5 summaries");
	uint32_t ids[] = {0, 38, 11, 1, UINT32_MAX}; /* 1 is gone already */
	rc = sfs_seg_evict_where(sg, match_ids, ids, &ev);
	ok(rc == 0 && ev.objects == 3 && reads_as(sg, 45, after_ids),
	   "by key (8 bytes): rc %d, %llu objects", rc, (unsigned long long)ev.objects);
	sfs_seg_close(sg);

	sg = open_or_bail(MiB, 0);
	ok(reads_as(sg, 45, after_ids), "after a restart the evicted records stay gone, the others "
					"read byte-exact");
	ok(unlink(tpath("seg/00000001.idx")) == 0, "segment 1's summary deleted");
	uint32_t ids2[] = {12, UINT32_MAX};
	rc = sfs_seg_evict_where(sg, match_ids, ids2, &ev);
	key_of(12, key);
	ok(rc == -ENOENT && ev.objects == 1 && !sfs_seg_lookup(sg, key, NULL),
	   "a summary that cannot be read: rc %d, the record gone from memory", rc);
	sfs_seg_close(sg);
	sg = open_or_bail(MiB, 0);
	ok(reads_as(sg, 45, after_restart),
	   "then its records come back from a scan of the segment at the next start, byte-exact");
	ok(put(sg, 100, 5000) == 0 && sfs_seg_flush(sg) == 0 &&
	       check_obj(sg, 100, 5000, read_buf, obj_buf) == 1,
	   "appends go on");
	sfs_seg_close(sg);
	tmp_remove();
}

/* Two keys alike in their first 8 bytes (the index keeps no more) share
 * one entry: the later record wins, and a read under the other key finds a
 * header naming another key, a miss, never the other's bytes; after a
 * restart likewise. */
static void test_key8_collision(void)
{
	uint8_t a[16], b[16];
	const char *data;
	static uint8_t exp[8192];

	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	key_of(7, a);
	memcpy(b, a, 8);
	key_of(8, b); /* another key, then a's first 8 bytes */
	memcpy(b, a, 8);
	fill(7, obj_buf, 5000);
	int ra = sfs_seg_append(sg, a, obj_buf, 5000, 0);
	fill(8, obj_buf, 6000);
	int rb = sfs_seg_append(sg, b, obj_buf, 6000, 0);
	ok(ra == 0 && rb == 0 && sfs_seg_flush(sg) == 0, "two keys alike in 8 bytes appended");
	ssize_t na = sfs_seg_read(sg, a, read_buf, MiB + 4096, &data);
	ok(na == -EBADMSG, "the first key's read is a miss (%zd), not the second's bytes", na);
	ssize_t nb = sfs_seg_read(sg, b, read_buf, MiB + 4096, &data);
	fill(8, exp, 6000);
	ok(nb == -ENOENT || (nb == 6000 && !memcmp(data, exp, 6000)),
	   "the second key: its own bytes or a miss (%zd)", nb);
	sfs_seg_close(sg);
	sg = open_or_bail(MiB, 0);
	nb = sfs_seg_read(sg, b, read_buf, MiB + 4096, &data);
	ok(nb == 6000 && !memcmp(data, exp, 6000),
	   "after a restart the later record answers its own key (%zd)", nb);
	na = sfs_seg_read(sg, a, read_buf, MiB + 4096, &data);
	ok(na == -EBADMSG, "and the other key's read is a miss (%zd)", na);
	sfs_seg_close(sg);
	tmp_remove();
}

/* Hundreds of 64 KiB segments: sealing, more segments than the fd cache
 * holds, reopen. */
static void test_many_segments(void)
{
	uint32_t good, miss, bad;
	const uint32_t n = 5000;
	struct sfs_seg_stats st;

	tmp_new();
	sfs_seg *sg = open_or_bail(64 * KiB, 256 * KiB);
	uint32_t failed = 0;
	for (uint32_t i = 0; i < n; i++)
		failed += put(sg, i, len_small(i)) != 0;
	failed += sfs_seg_flush(sg) != 0;
	sfs_seg_get_stats(sg, &st);
	ok(!failed && st.objects == n && st.segments > 300, "%u objects in %llu segments", n,
	   (unsigned long long)st.segments);
	check_range(sg, 0, n, len_small, &good, &miss, &bad);
	ok(good == n, "all read byte-exact (%u good, %u miss, %u bad)", good, miss, bad);
	check_range(sg, 0, n, len_small, &good, &miss, &bad);
	ok(good == n, "twice, through the fd cache");
	diag("index bytes per object with %u objects: %.1f", n, (double)st.index_bytes / n);
	sfs_seg_close(sg);
	sg = open_or_bail(64 * KiB, 256 * KiB);
	check_range(sg, 0, n, len_small, &good, &miss, &bad);
	ok(good == n, "after reopen (%u .idx loaded)", (unsigned)count_files(".idx"));
	sfs_seg_close(sg);
	tmp_remove();
}

/* Readers on threads while the writer appends, flushes and evicts. */
struct conc {
	sfs_seg *sg;
	uint32_t published; /* objects [0, published) were flushed; atomic */
	bool stop;	    /* atomic */
	uint64_t good, miss, bad;
	uint32_t seed;
};

static void *reader(void *arg)
{
	struct conc *c = arg;
	uint8_t *buf = aligned_alloc(4096, MiB + 4096), *exp = malloc(MiB);
	uint64_t r = c->seed;
	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		uint32_t n = __atomic_load_n(&c->published, __ATOMIC_ACQUIRE);
		if (!n)
			continue;
		r = mix(r);
		uint32_t i = (uint32_t)(r % n);
		int v = check_obj(c->sg, i, len_small(i), buf, exp);
		*(v > 0 ? &c->good : v == 0 ? &c->miss : &c->bad) += 1;
	}
	free(buf);
	free(exp);
	return NULL;
}

static void test_concurrent(void)
{
	enum { N_READERS = 3, N_OBJ = 6000 };
	struct conc c[N_READERS];
	pthread_t th[N_READERS];
	struct sfs_seg_stats st;

	tmp_new();
	sfs_seg *sg = open_or_bail(64 * KiB, 256 * KiB);
	uint32_t published = 0, failed = 0;
	for (int t = 0; t < N_READERS; t++) {
		c[t] = (struct conc){.sg = sg, .seed = (uint32_t)t + 1};
		pthread_create(&th[t], NULL, reader, &c[t]);
	}
	for (uint32_t i = 0; i < N_OBJ; i++) {
		failed += put(sg, i, len_small(i)) != 0;
		if (i % 37 == 36) {
			failed += sfs_seg_flush(sg) != 0;
			published = i + 1;
			for (int t = 0; t < N_READERS; t++)
				__atomic_store_n(&c[t].published, published, __ATOMIC_RELEASE);
		}
		sfs_seg_get_stats(sg, &st);
		if (st.segments > 40)
			sfs_seg_evict_coldest(sg);
	}
	for (int t = 0; t < N_READERS; t++)
		__atomic_store_n(&c[t].stop, true, __ATOMIC_RELEASE);
	uint64_t good = 0, miss = 0, bad = 0;
	for (int t = 0; t < N_READERS; t++) {
		pthread_join(th[t], NULL);
		good += c[t].good;
		miss += c[t].miss;
		bad += c[t].bad;
	}
	sfs_seg_get_stats(sg, &st);
	ok(!failed && !bad && good > 0,
	   "%d readers while appending, flushing, evicting: %llu good, %llu miss, %llu bad",
	   N_READERS, (unsigned long long)good, (unsigned long long)miss, (unsigned long long)bad);
	ok(st.evicted_segments > 0 && st.checksum_failures == 0 && st.errors == 0,
	   "%llu segments evicted, no checksum failures", (unsigned long long)st.evicted_segments);
	sfs_seg_close(sg);
	tmp_remove();
}

static void fsize_limit(rlim_t bytes)
{
	struct rlimit rl;
	getrlimit(RLIMIT_FSIZE, &rl);
	rl.rlim_cur = bytes;
	if (setrlimit(RLIMIT_FSIZE, &rl))
		bail("setrlimit", -errno);
}

static bool visible(sfs_seg *sg, uint32_t a, uint32_t b)
{
	uint8_t key[16];
	for (uint32_t i = a; i < b; i++)
		if (key_of(i, key), sfs_seg_lookup(sg, key, NULL))
			return true;
	return false;
}

static uint32_t len_fail(uint32_t i) { return i == 14 ? MiB : len_100k(i); }

/*
 * Failed flushes (RLIMIT_FSIZE: a short write, then EFBIG): first inside the
 * segment being filled (a torn record stays behind its end), then in a new
 * segment after the old one was written and sealed. Nothing of a failed
 * flush is visible; the same objects appended again go to new segments; a
 * reopen finds each object once, byte-exact.
 */
static void test_flush_failure(void)
{
	uint32_t good, miss, bad;
	struct sfs_seg_stats st;

	signal(SIGXFSZ, SIG_IGN);
	tmp_new();
	sfs_seg *sg = open_or_bail(MiB, 0);
	for (uint32_t i = 0; i < 5; i++)
		put(sg, i, len_100k(i));
	ok(sfs_seg_flush(sg) == 0, "5 records of 100 KiB");
	fsize_limit(640 * KiB); /* record 5 fits, record 6 is cut */
	for (uint32_t i = 5; i < 8; i++)
		put(sg, i, len_100k(i));
	int rc = sfs_seg_flush(sg);
	fsize_limit(RLIM_INFINITY);
	sfs_seg_get_stats(sg, &st);
	ok(rc == -EFBIG && !visible(sg, 5, 8) && st.errors == 1 && st.objects == 5,
	   "a failed flush (%d) publishes nothing", rc);
	check_range(sg, 0, 5, len_100k, &good, &miss, &bad);
	ok(good == 5, "what was there still reads");
	for (uint32_t i = 5; i < 8; i++)
		put(sg, i, len_100k(i));
	ok(sfs_seg_flush(sg) == 0 && file_size(tpath("seg/00000001.seg")) > 0,
	   "appended again: into a new segment");

	fsize_limit(MiB); /* 6 more records fit segment 1; the 1 MiB one in 2 does not */
	for (uint32_t i = 8; i < 15; i++)
		put(sg, i, len_fail(i));
	rc = sfs_seg_flush(sg);
	fsize_limit(RLIM_INFINITY);
	ok(rc == -EFBIG && !visible(sg, 8, 15) && file_size(tpath("seg/00000002.seg")) < 0,
	   "a flush failing in its new segment: nothing visible, the new file removed");
	for (uint32_t i = 8; i < 15; i++)
		put(sg, i, len_fail(i));
	ok(sfs_seg_flush(sg) == 0, "appended again");
	check_range(sg, 0, 15, len_fail, &good, &miss, &bad);
	ok(good == 15, "all 15 read byte-exact (%u good, %u miss, %u bad)", good, miss, bad);
	sfs_seg_close(sg);

	sg = open_or_bail(MiB, 0);
	sfs_seg_get_stats(sg, &st);
	check_range(sg, 0, 15, len_fail, &good, &miss, &bad);
	ok(good == 15 && st.objects == 15, "after reopen: 15 objects, byte-exact (%u good)", good);
	uint64_t live = 0;
	for (uint32_t i = 0; i < 15; i++)
		live += len_fail(i);
	ok(st.live_bytes == live, "live bytes count each object once");
	ok(file_size(tpath("seg/00000000.seg")) == 6 * (off_t)rec_bytes(len_100k(0)),
	   "segment 0 cut after its last good record");
	sfs_seg_close(sg);
	tmp_remove();
}

static void count_one(void *arg, uint32_t dataset, uint32_t len)
{
	(void)dataset;
	(void)len;
	(*(uint64_t *)arg)++;
}

/* The index grows a part at a time: between two flushes of 100 appends its
 * memory never jumps by a quarter of what 8,000 objects take (one table
 * doubling whole would jump by half). The transient of a doubling is the
 * old table of what doubled, so this bounds the daemon's peak as well. */
static void test_index_growth(void)
{
	const uint32_t n = 8000, batch = 100;
	struct sfs_seg_stats st;
	uint64_t prev, max_step = 0;
	uint32_t failed = 0;

	tmp_new();
	sfs_seg *sg = open_or_bail(0, 0);
	sfs_seg_get_stats(sg, &st);
	prev = st.index_bytes;
	for (uint32_t i = 0; i < n; i++) {
		failed += put(sg, i, 1) != 0;
		if ((i + 1) % batch)
			continue;
		failed += sfs_seg_flush(sg) != 0;
		sfs_seg_get_stats(sg, &st);
		if (st.index_bytes > prev && st.index_bytes - prev > max_step)
			max_step = st.index_bytes - prev;
		prev = st.index_bytes;
	}
	ok(!failed && st.objects == n, "%u objects appended in batches of %u", n, batch);
	diag("index: %llu bytes at %u objects, largest step between flushes %llu",
	     (unsigned long long)st.index_bytes, n, (unsigned long long)max_step);
	ok(max_step * 4 < st.index_bytes, "the index grows a part at a time (step %llu of %llu)",
	   (unsigned long long)max_step, (unsigned long long)st.index_bytes);
	sfs_seg_close(sg);
	tmp_remove();
}

/* Memory per object at 200,000 objects: an .idx of 200,000 one-byte
 * records over a sparse segment file (no 800 MB of writes), loaded at open. */
static void test_scale(void)
{
	const uint32_t n = 200000;
	size_t size = 32 + (size_t)n * 40 + 8; /* "SFSSEGI2": 40-byte entries */
	uint8_t *buf = calloc(1, size);
	uint64_t head[4] = {0x3249474553534653ull, (uint64_t)n << 32, (uint64_t)n * 4096, 0};
	const char *data;
	struct sfs_seg_stats st;

	tmp_new();
	mkdir(tpath("seg/"), 0700);
	memcpy(buf, head, 32);
	for (uint32_t i = 0; i < n; i++) {
		uint8_t *e = buf + 32 + (size_t)i * 40;
		uint32_t off4k_len[2] = {i, 1};
		key_of(i, e);
		memcpy(e + 24, off4k_len, 8);
	}
	uint64_t sum = XXH3_64bits(buf, size - 8);
	memcpy(buf + size - 8, &sum, 8);
	int fd = open(tpath("seg/00000000.idx"), O_CREAT | O_WRONLY, 0600);
	if (fd < 0 || write(fd, buf, size) != (ssize_t)size)
		bail("write idx", -errno);
	close(fd);
	fd = open(tpath("seg/00000000.seg"), O_CREAT | O_WRONLY, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)n * 4096))
		bail("sparse seg", -errno);
	close(fd);
	free(buf);

	sfs_seg *sg = open_or_bail(0, 0);
	sfs_seg_get_stats(sg, &st);
	ok(st.objects == n, "%u entries loaded from an .idx", n);
	diag("index bytes per object at %u objects: %.1f", n, (double)st.index_bytes / n);
	ok(st.index_bytes <= (uint64_t)n * 32, "at most 2 x 16 bytes per object (%.1f)",
	   (double)st.index_bytes / n);
	struct timespec t0, t1;
	uint64_t seen = 0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sfs_seg_foreach(sg, count_one, &seen);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	diag("sfs_seg_foreach over %u objects: %.2f ms", n,
	     (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6);
	ok(seen == n, "foreach sees every object once (%llu)", (unsigned long long)seen);
	uint8_t key[16];
	key_of(777, key);
	ok(sfs_seg_read(sg, key, read_buf, 8192, &data) == -EBADMSG &&
	       !sfs_seg_lookup(sg, key, NULL),
	   "a record of zeros is a miss");
	sfs_seg_close(sg);
	tmp_remove();
}

/* --- what one 16-byte index entry names -------------------------------------- */

#define DS_BASE 1000000u /* dataset of object i: DS_BASE + i, all distinct */
#define N_DSETS 8192u	 /* the datasets an index holds (segment.c MAX_DSETS) */

static uint32_t len_one_block(uint32_t i) { return 1 + i % 4000; } /* a 4 KiB record */
static uint32_t len_1(uint32_t i) { return (void)i, 1; }

struct ds_sum {
	uint64_t sum;
	uint32_t n;
};

static void add_ds(void *arg, uint32_t dataset, uint32_t len)
{
	struct ds_sum *d = arg;
	(void)len;
	d->sum += dataset;
	d->n++;
}

static bool match_ds_mod7(void *arg, uint32_t dataset, const uint8_t key8[8])
{
	(void)arg;
	(void)key8;
	return dataset % 7 == 3;
}

/* The datasets of objects [0, n) (and 8,193 of dataset DS_BASE + 5) as
 * foreach reports them, minus those evict_where(match_ds_mod7) took. */
static bool ds_sum_is(sfs_seg *sg, uint32_t n, bool with_extra, bool evicted)
{
	struct ds_sum got = {0}, want = {0};
	for (uint32_t i = 0; i < n + with_extra; i++) {
		uint32_t ds = i < n ? DS_BASE + i : DS_BASE + 5;
		if (!evicted || ds % 7 != 3)
			add_ds(&want, ds, 0);
	}
	sfs_seg_foreach(sg, add_ds, &got);
	if (got.n != want.n || got.sum != want.sum)
		diag("foreach: %u objects, dataset sum %llu; expected %u, %llu", got.n,
		     (unsigned long long)got.sum, want.n, (unsigned long long)want.sum);
	return got.n == want.n && got.sum == want.sum;
}

/* Objects [a, b) read byte-exact, but those of a dataset evict_where took
 * (when evicted), which miss. */
static bool reads_after(sfs_seg *sg, uint32_t a, uint32_t b, uint32_t (*len)(uint32_t),
			bool evicted)
{
	static uint8_t exp[MiB];
	uint32_t wrong = 0;
	for (uint32_t i = a; i < b; i++) {
		int want = evicted && (DS_BASE + i) % 7 == 3 ? 0 : 1;
		wrong += check_obj(sg, i, len(i), read_buf, exp) != want;
	}
	if (wrong)
		diag("%u of objects [%u, %u) read otherwise than expected", wrong, a, b);
	return !wrong;
}

/* Segment slots past 4,096 (the top of an entry's location is in its key
 * word), one dataset per object up to the 8,192 an index names, then
 * -EMLINK for a new one; all of it through eviction by dataset and reopen. */
static void test_entry_limits(void)
{
	const uint32_t n_segs = 4200;
	struct sfs_seg_stats st;
	struct sfs_seg_evicted ev;
	uint32_t failed = 0;

	tmp_new();
	sfs_seg *sg = open_or_bail(4096, MiB);
	for (uint32_t i = 0; i < n_segs; i++)
		failed += put_ds(sg, i, len_one_block(i), DS_BASE + i) != 0;
	failed += sfs_seg_flush(sg) != 0;
	sfs_seg_get_stats(sg, &st);
	ok(!failed && st.objects == n_segs && st.segments == n_segs,
	   "%u objects of one 4 KiB record each: %llu segments", n_segs,
	   (unsigned long long)st.segments);
	ok(reads_after(sg, 0, n_segs, len_one_block, false) && ds_sum_is(sg, n_segs, false, false),
	   "each reads byte-exact from its own segment and names its own dataset");
	sfs_seg_close(sg);

	sg = open_or_bail(MiB, MiB);
	ok(reads_after(sg, 0, n_segs, len_one_block, false) && ds_sum_is(sg, n_segs, false, false),
	   "after reopen: the same");
	for (uint32_t i = n_segs; i < N_DSETS; i++)
		failed += put_ds(sg, i, 1, DS_BASE + i) != 0;
	int rc_new = put_ds(sg, N_DSETS, 1, DS_BASE + N_DSETS);
	int rc_known = put_ds(sg, N_DSETS + 1, 1, DS_BASE + 5);
	failed += sfs_seg_flush(sg) != 0;
	ok(!failed && rc_new == -EMLINK && rc_known == 0,
	   "datasets up to %u appended; a further one is refused (%d), a known one is not (%d)",
	   N_DSETS, rc_new, rc_known);
	ok(ds_sum_is(sg, N_DSETS, true, false) && reads_after(sg, n_segs, N_DSETS, len_1, false),
	   "every object names its own dataset");
	int rc = sfs_seg_evict_where(sg, match_ds_mod7, NULL, &ev);
	ok(rc == 0 && ds_sum_is(sg, N_DSETS, true, true) &&
	       reads_after(sg, 0, n_segs, len_one_block, true) &&
	       reads_after(sg, n_segs, N_DSETS, len_1, true),
	   "eviction by dataset takes the right ones (%llu objects)",
	   (unsigned long long)ev.objects);
	sfs_seg_close(sg);

	sg = open_or_bail(MiB, MiB);
	ok(ds_sum_is(sg, N_DSETS, true, true) && reads_after(sg, 0, n_segs, len_one_block, true) &&
	       reads_after(sg, n_segs, N_DSETS, len_1, true),
	   "after reopen: the same");
	sfs_seg_close(sg);
	tmp_remove();
}

/* A record's offset is 18 bits of 4 KiB blocks: a record at the last one a
 * 1 GiB segment has reads byte-exact; one past it (a segment no longer than
 * segment.c writes has none there) is left out of the index at open. The
 * segment is sparse: a real record copied to both offsets, an .idx naming
 * them. */
static void test_far_offset(void)
{
	const uint64_t last = (1u << 18) - 1;
	uint8_t rec[4096];

	tmp_new();
	sfs_seg *sg = open_or_bail(0, 0);
	if (put(sg, 1, 3000) || put(sg, 2, 3000) || sfs_seg_flush(sg))
		bail("put", -EIO);
	sfs_seg_close(sg);
	int src = open(tpath("seg/00000000.seg"), O_RDONLY); /* a fresh directory's first */
	tmp_remove();

	tmp_new();
	mkdir(tpath("seg/"), 0700);
	int dst = open(tpath("seg/00000000.seg"), O_CREAT | O_WRONLY, 0600);
	uint8_t idx[32 + 2 * 40 + 8] = {0};
	uint64_t head[4] = {0x3249474553534653ull, 2ull << 32, (last + 2) * 4096, 0};
	memcpy(idx, head, 32);
	for (uint32_t k = 0; k < 2; k++) {
		if (src < 0 || dst < 0 || pread(src, rec, 4096, k * 4096) != 4096 ||
		    pwrite(dst, rec, 4096, (off_t)((last + k) * 4096)) != 4096)
			bail("copy record", -errno);
		uint8_t *e = idx + 32 + k * 40;
		uint32_t off4k_len_ds[3] = {(uint32_t)(last + k), 3000, 0};
		memcpy(e, rec + 8, 16);	     /* key */
		memcpy(e + 16, rec + 32, 8); /* xxh64 */
		memcpy(e + 24, off4k_len_ds, 12);
	}
	uint64_t sum = XXH3_64bits(idx, sizeof(idx) - 8);
	memcpy(idx + sizeof(idx) - 8, &sum, 8);
	int fd = open(tpath("seg/00000000.idx"), O_CREAT | O_WRONLY, 0600);
	if (fd < 0 || write(fd, idx, sizeof(idx)) != (ssize_t)sizeof(idx))
		bail("write idx", -errno);
	close(fd);
	close(src);
	close(dst);

	static uint8_t exp[MiB];
	uint8_t key[16];
	struct sfs_seg_stats st;
	sg = open_or_bail(0, 0);
	sfs_seg_get_stats(sg, &st);
	key_of(2, key);
	ok(st.objects == 1 && !sfs_seg_lookup(sg, key, NULL),
	   "the record past block 2^18 - 1 is left out (%llu indexed)",
	   (unsigned long long)st.objects);
	ok(check_obj(sg, 1, 3000, read_buf, exp) == 1,
	   "the one at block 2^18 - 1 (1 GiB - 4 KiB) reads byte-exact");
	sfs_seg_close(sg);
	tmp_remove();
}

int main(void)
{
	obj_buf = aligned_alloc(4096, MiB + 4096);
	read_buf = aligned_alloc(4096, MiB + 4096);

	test_basic_and_reopen();
	test_append_errors();
	test_torn_tail();
	test_flip_while_open();
	test_async_read();
	test_async_reaped_elsewhere();
	test_bad_idx();
	test_deleted_seg();
	test_evict();
	test_evict_where();
	test_key8_collision();
	test_many_segments();
	test_concurrent();
	test_flush_failure();
	test_index_growth();
	test_scale();
	test_entry_limits();
	test_far_offset();

	/* O_DIRECT refused: the buffered fallback, on tmpfs where there is one. */
	struct stat st;
	if (!stat("/dev/shm", &st) && S_ISDIR(st.st_mode) && !access("/dev/shm", W_OK))
		tmp_base = "/dev/shm";
	__atomic_store_n(&refuse_direct, true, __ATOMIC_RELAXED);
	diag("again under %s, O_DIRECT refused (EINVAL): the buffered fallback", tmp_base);
	test_basic_and_reopen();
	test_torn_tail();
	test_evict();
	test_flip_while_open();
	ok(n_refused > 0 && n_refused < 20, "O_DIRECT was tried once per open cache (%u refusals)",
	   n_refused);
	free(obj_buf);
	free(read_buf);
	return tap_done();
}
