// SPDX-License-Identifier: Apache-2.0
/*
 * test_prefetch — cache/prefetch/ against a fake origin (fake_origin.c).
 *
 * Linked with the prefetch library, origin_call.c, the store and log.c;
 * origin.c is replaced by the fake, whose files are synthetic (byte i of
 * file `seed` is fake_fill(seed, i)) and whose requests complete on its own
 * worker threads. Every read is compared byte for byte with what the file
 * holds.
 *
 * Each test opens its own fake origin and prefetch instance and closes them
 * in the order the daemon must: unref files, let fetches land (drain), close
 * prefetch, close origin.
 */
#include "fake_origin.h"
#include "prefetch_testing.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ull << 20)
#define KiB (1ull << 10)

static sfs_origin *org;
static sfs_prefetch *pf;

static void setup(uint32_t max_read, unsigned delay_us, unsigned n_threads, uint64_t mem_bytes,
		  unsigned window)
{
	org = fake_origin_new(&(struct fake_origin_conf){
	    .max_read = max_read, .n_threads = n_threads, .delay_us = delay_us});
	int rc = sfs_prefetch_open(
	    &(struct sfs_prefetch_conf){.mem_bytes = mem_bytes, .window_chunks = window}, org, &pf);
	if (rc) {
		printf("Bail out! sfs_prefetch_open: %d\n", rc);
		exit(1);
	}
}

/* With a store: closed first, as the daemon does, which finishes its
 * queued writes and their callbacks (they count in the prefetch's stats and
 * hold its files); then the prefetch. */
static void teardown_with(sfs_store *store)
{
	fake_origin_release(org);
	fake_origin_drain(org);
	if (store)
		sfs_store_close(store);
	sfs_prefetch_close(pf);
	fake_origin_free(org);
	pf = NULL;
	org = NULL;
}

static void teardown(void) { teardown_with(NULL); }

static struct sfs_prefetch_stats pstats(void)
{
	struct sfs_prefetch_stats s;

	sfs_prefetch_get_stats(pf, &s);
	return s;
}

static struct fake_origin_stats ostats(void)
{
	struct fake_origin_stats s;

	fake_origin_stats(org, &s);
	return s;
}

struct tfile {
	sfs_pf_file *f;
	uint32_t seed;
	uint64_t size;	      /* what prefetch was told */
	uint64_t server_size; /* what the fake serves */
};

static struct tfile topen(uint32_t seed, uint64_t size, uint64_t server_size)
{
	struct tfile t = {.seed = seed, .size = size, .server_size = server_size};
	struct sfs_fh fh;

	fake_fh(&fh, seed, server_size);
	int rc = sfs_pf_file_open(pf, &fh, size, &t.f);
	if (rc) {
		printf("Bail out! sfs_pf_file_open: %d\n", rc);
		exit(1);
	}
	return t;
}

static size_t expected_len(const struct tfile *t, uint64_t off, size_t len)
{
	uint64_t eff = t->size < t->server_size ? t->size : t->server_size;

	if (off >= eff)
		return 0;
	return len < eff - off ? len : (size_t)(eff - off);
}

/* Compares view v of [off, off + want) with the file's bytes. Returns 0, or
 * -1 with the first difference described in why. */
static int view_check(const struct tfile *t, uint64_t off, const struct sfs_pf_view *v, size_t want,
		      char *why, size_t why_len)
{
	size_t total = 0;
	int rc = 0;

	if (v->bytes != want || v->n_iov < 0 || v->n_iov > 3 || (want && !v->n_iov)) {
		snprintf(why, why_len, "view of [%llu,+%zu): bytes %zu n_iov %d, want %zu bytes",
			 (unsigned long long)off, want, v->bytes, v->n_iov, want);
		return -1;
	}
	uint8_t *exp = malloc(want + 1);
	fake_fill(t->seed, off, exp, want);
	for (int i = 0; i < v->n_iov && !rc; i++) {
		const uint8_t *p = v->iov[i].iov_base;
		size_t n = v->iov[i].iov_len;
		if (total + n > want) {
			snprintf(why, why_len, "view of [%llu,+%zu): iovs hold more than bytes",
				 (unsigned long long)off, want);
			rc = -1;
		} else if (memcmp(p, exp + total, n)) {
			size_t k = 0;
			while (p[k] == exp[total + k])
				k++;
			snprintf(why, why_len,
				 "read at %llu len %zu: byte %llu is 0x%02x, want 0x%02x",
				 (unsigned long long)off, want,
				 (unsigned long long)(off + total + k), p[k], exp[total + k]);
			rc = -1;
		}
		total += n;
	}
	if (!rc && total != want) {
		snprintf(why, why_len, "view of [%llu,+%zu): iovs hold %zu bytes",
			 (unsigned long long)off, want, total);
		rc = -1;
	}
	free(exp);
	return rc;
}

/* Reads [off, off + len) and checks result and bytes. The view is released,
 * or, when right and keep is set, handed to *keep. Returns 0, or -1 with why
 * set. */
static int read_check(const struct tfile *t, uint64_t off, size_t len, struct sfs_pf_view *keep,
		      char *why, size_t why_len)
{
	struct sfs_pf_view v;
	size_t want = expected_len(t, off, len);
	ssize_t rc = sfs_pf_read(t->f, off, len, &v);
	int ret = 0;

	if (rc != (ssize_t)want) {
		snprintf(why, why_len, "read(%llu, %zu) returned %zd, want %zu",
			 (unsigned long long)off, len, rc, want);
		ret = -1;
	} else {
		ret = view_check(t, off, &v, want, why, why_len);
	}
	if (keep && ret == 0)
		*keep = v;
	else
		sfs_pf_view_release(t->f, &v);
	return ret;
}

#define CHECK_READ(t, off, len, ...)                                                               \
	do {                                                                                       \
		char why_[256] = "";                                                               \
		int r_ = read_check((t), (off), (len), NULL, why_, sizeof(why_));                  \
		ok(r_ == 0, __VA_ARGS__);                                                          \
		if (r_)                                                                            \
			diag("%s", why_);                                                          \
	} while (0)

static uint64_t rng_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* --- byte-exact reads ------------------------------------------------------ */

static void test_exact(uint32_t max_read)
{
	diag("byte-exact reads, max_read %u", max_read);
	setup(max_read, 0, 2, 64 * MiB, 4);
	uint64_t size = 10 * MiB + 12345;
	struct tfile t = topen(1, size, size);

	CHECK_READ(&t, 0, 1, "max_read %u: first byte", max_read);
	CHECK_READ(&t, 0, 4096, "max_read %u: first page", max_read);
	CHECK_READ(&t, MiB - 1, 2, "max_read %u: 2 bytes across a chunk boundary", max_read);
	CHECK_READ(&t, 3 * MiB + 99999, 100001, "max_read %u: [3 MiB + 99999, +100001)", max_read);
	CHECK_READ(&t, 10 * MiB, MiB, "max_read %u: the last, partial chunk", max_read);
	CHECK_READ(&t, 9 * MiB + 7, MiB, "max_read %u: into the last chunk", max_read);
	CHECK_READ(&t, size - 1, 10, "max_read %u: last byte", max_read);
	CHECK_READ(&t, size - 10, 100, "max_read %u: across end of file", max_read);

	struct sfs_pf_view v;
	ssize_t rc = sfs_pf_read(t.f, MiB - 100, 200, &v);
	ok(rc == 200 && v.n_iov == 2 && v.iov[0].iov_len == 100 && v.n_pins == 2,
	   "max_read %u: a read across one boundary has 2 pieces (rc %zd, n_iov %d)", max_read, rc,
	   v.n_iov);
	sfs_pf_view_release(t.f, &v);
	rc = sfs_pf_read(t.f, 4 * MiB + 512 * KiB, 2 * MiB, &v);
	ok(rc == (ssize_t)(2 * MiB) && v.n_iov == 3 && v.iov[1].iov_len == MiB && v.n_pins == 3,
	   "max_read %u: a 2 MiB read across two boundaries has 3 pieces (rc %zd, n_iov %d)",
	   max_read, rc, v.n_iov);
	sfs_pf_view_release(t.f, &v);
	CHECK_READ(&t, 4 * MiB + 512 * KiB, 2 * MiB, "max_read %u: 2 MiB over 3 chunks", max_read);
	CHECK_READ(&t, 0, 2 * MiB + 1, "max_read %u: 2 MiB + 1 from 0 (3 chunks)", max_read);
	rc = sfs_pf_read(t.f, MiB - 1, 2 * MiB + 2, &v);
	ok(rc == -EINVAL && v.bytes == 0, "max_read %u: a read over 4 chunks is -EINVAL (%zd)",
	   max_read, rc);
	sfs_pf_view_release(t.f, &v);

	uint64_t req0 = ostats().requests;
	rc = sfs_pf_read(t.f, size, 1, &v);
	ok(rc == 0 && v.bytes == 0 && v.n_iov == 0, "max_read %u: read at EOF gives 0 (%zd)",
	   max_read, rc);
	sfs_pf_view_release(t.f, &v);
	rc = sfs_pf_read(t.f, size + 5, 10, &v);
	ok(rc == 0 && v.n_iov == 0, "max_read %u: read after EOF gives 0 (%zd)", max_read, rc);
	sfs_pf_view_release(t.f, &v);
	rc = sfs_pf_read(t.f, UINT64_MAX - 1, 100, &v);
	ok(rc == 0 && v.n_iov == 0, "max_read %u: read at 2^64-2 gives 0 (%zd)", max_read, rc);
	sfs_pf_view_release(t.f, &v);
	rc = sfs_pf_read(t.f, 5, 0, &v);
	ok(rc == 0 && v.n_iov == 0, "max_read %u: zero-length read gives 0 (%zd)", max_read, rc);
	sfs_pf_view_release(t.f, &v);
	ok(ostats().requests == req0, "max_read %u: reads at/after EOF ask the origin nothing",
	   max_read);

	/* Random ranges, len up to 1 MiB + 64 KiB, some beyond EOF. */
	uint64_t s = 0x1234567 + max_read;
	int bad = 0;
	char why[256] = "", first[256] = "";
	for (int i = 0; i < 300; i++) {
		uint64_t off = rng_next(&s) % (size + 2 * MiB);
		size_t len = (size_t)(rng_next(&s) % (MiB + 64 * KiB + 1));
		if (rng_next(&s) % 4 == 0)
			off = (off >> 20) << 20; /* chunk-aligned */
		if (read_check(&t, off, len, NULL, why, sizeof(why)) && !bad++)
			memcpy(first, why, sizeof(first));
	}
	ok(bad == 0, "max_read %u: 300 random ranges byte-exact (%d wrong)", max_read, bad);
	if (bad)
		diag("%s", first);

	/* Parts: a 1 MiB chunk is fetched as ceil(1 MiB / max_read) requests. */
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	struct tfile u = topen(2, 3 * MiB, 3 * MiB);
	req0 = ostats().requests;
	CHECK_READ(&u, 2 * MiB, MiB + 10, "max_read %u: file of exactly 3 MiB, last chunk",
		   max_read);
	uint64_t parts = (MiB + max_read - 1) / max_read;
	uint64_t reqs = ostats().requests - req0;
	ok(reqs == parts, "max_read %u: one chunk is %llu requests (%llu)", max_read,
	   (unsigned long long)parts, (unsigned long long)reqs);
	sfs_pf_file_unref(u.f);

	struct tfile z = topen(3, 0, 0);
	req0 = ostats().requests;
	rc = sfs_pf_read(z.f, 0, 100, &v);
	ok(rc == 0 && ostats().requests == req0, "max_read %u: empty file reads 0, asks nothing",
	   max_read);
	sfs_pf_view_release(z.f, &v);
	sfs_pf_file_unref(z.f);

	fake_origin_drain(org);
	ok(pstats().inflight_bytes == 0, "max_read %u: nothing in flight after drain", max_read);
	ok(ostats().wrong_thread == 0, "max_read %u: completions ran on origin threads", max_read);
	teardown();
}

/* --- readahead ------------------------------------------------------------- */

static void test_sequential(void)
{
	const unsigned window = 8;
	const uint64_t size = 40 * MiB;

	setup(256 * KiB, 0, 2, 64 * MiB, window);
	struct tfile t = topen(4, size, size);

	fake_origin_hold_from(org, MiB);
	CHECK_READ(&t, 0, 128 * KiB, "sequential: first read");
	struct fake_origin_stats os = ostats();
	ok(os.held == window * 4 && os.max_end == (1 + window) * MiB,
	   "sequential: the first read starts %u chunks of readahead (held %llu parts, up to %llu "
	   "MiB)",
	   window, (unsigned long long)os.held, (unsigned long long)(os.max_end >> 20));
	fake_origin_release(org);
	fake_origin_drain(org);

	int over = 0, bad = 0;
	uint64_t max_lead = 0;
	char why[256] = "", first[256] = "";
	for (uint64_t off = 128 * KiB; off < size; off += 128 * KiB) {
		if (read_check(&t, off, 128 * KiB, NULL, why, sizeof(why)) && !bad++)
			memcpy(first, why, sizeof(first));
		uint64_t cur = (off + 128 * KiB - 1) >> 20;
		os = ostats();
		uint64_t ahead = (os.max_end >> 20) - (cur + 1);
		if (os.max_end > (cur + 1 + window) * MiB)
			over++;
		if (ahead > max_lead)
			max_lead = ahead;
	}
	ok(bad == 0, "sequential: 40 MiB in 128 KiB reads byte-exact (%d wrong)", bad);
	if (bad)
		diag("%s", first);
	ok(over == 0, "sequential: readahead never beyond %u chunks (%d reads were)", window, over);
	ok(max_lead == window, "sequential: readahead reached %u chunks ahead (%llu)", window,
	   (unsigned long long)max_lead);
	os = ostats();
	ok(os.max_outstanding <= (window + 3) * 4,
	   "sequential: at most %u requests outstanding (%llu)", (window + 3) * 4,
	   (unsigned long long)os.max_outstanding);
	int refetched = 0;
	for (uint64_t c = 0; c < size / MiB; c++)
		refetched += fake_origin_chunk_bytes(org, c) != MiB;
	ok(refetched == 0, "sequential: every chunk fetched exactly once (%d not)", refetched);
	struct sfs_prefetch_stats ps = pstats();
	ok(ps.readahead_chunks == size / MiB - 1,
	   "sequential: every chunk after the first came from readahead (%llu)",
	   (unsigned long long)ps.readahead_chunks);
	ok(ps.fetched_bytes == size, "sequential: fetched_bytes %llu == file size",
	   (unsigned long long)ps.fetched_bytes);
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	ok(pstats().wasted_chunks == 0, "sequential: no readahead wasted (%llu)",
	   (unsigned long long)pstats().wasted_chunks);
	teardown();

	/* A sequential reader that starts mid-file (its first read looks random)
	 * gets readahead from its third read, the second step in a row (one step
	 * in order happens by chance among random readers of a file). */
	setup(MiB, 0, 2, 64 * MiB, 4);
	t = topen(21, 40 * MiB, 40 * MiB);
	CHECK_READ(&t, 5 * MiB + 100 * KiB, 128 * KiB, "mid-file reader: first read");
	fake_origin_drain(org);
	uint64_t ra0 = pstats().readahead_chunks;
	CHECK_READ(&t, 5 * MiB + 228 * KiB, 128 * KiB, "mid-file reader: second read");
	fake_origin_drain(org);
	uint64_t ra1 = pstats().readahead_chunks;
	CHECK_READ(&t, 5 * MiB + 356 * KiB, 128 * KiB, "mid-file reader: third read");
	fake_origin_drain(org);
	ok(ra0 == 0 && ra1 == 0 && pstats().readahead_chunks == 4,
	   "mid-file reader: no readahead after one or two reads, 4 chunks after the third "
	   "(%llu, %llu, %llu)",
	   (unsigned long long)ra0, (unsigned long long)ra1,
	   (unsigned long long)pstats().readahead_chunks);
	sfs_pf_file_unref(t.f);
	teardown();

	/* Random readers of one big file: a record now and then lands in or
	 * next to the chunk of the one before it; that alone starts no
	 * readahead. */
	setup(MiB, 0, 2, 64 * MiB, 4);
	t = topen(22, 40 * MiB, 40 * MiB);
	static const uint64_t rec_chunk[] = {17, 3, 4, 30, 9, 9, 22, 1, 2, 35, 12};
	for (size_t k = 0; k < sizeof(rec_chunk) / sizeof(rec_chunk[0]); k++)
		CHECK_READ(&t, rec_chunk[k] * MiB + 300 * KiB, 110 * KiB, "random reader");
	fake_origin_drain(org);
	ok(pstats().readahead_chunks == 0, "random reader: single steps start no readahead (%llu)",
	   (unsigned long long)pstats().readahead_chunks);
	sfs_pf_file_unref(t.f);
	teardown();

	/* window 0 means the default (16); more than SFS_PF_MAX_WINDOW is capped. */
	static const struct {
		unsigned conf, want;
	} w[] = {{0, 16}, {100, SFS_PF_MAX_WINDOW}, {1, 1}};
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		setup(MiB, 0, 2, 256 * MiB, w[i].conf);
		t = topen(5, 200 * MiB, 200 * MiB);
		fake_origin_hold_from(org, MiB);
		CHECK_READ(&t, 0, 4096, "window_chunks %u: first read", w[i].conf);
		os = ostats();
		ok(os.held == w[i].want, "window_chunks %u reads ahead %u chunks (%llu)", w[i].conf,
		   w[i].want, (unsigned long long)os.held);
		sfs_pf_file_unref(t.f);
		teardown();
	}
}

static void test_random_reader(void)
{
	setup(MiB, 0, 2, 64 * MiB, 16);
	const uint64_t size = 1024 * MiB;
	struct tfile t = topen(6, size, size);
	uint64_t s = 0xfeedbeef, touched = 0;
	int bad = 0;
	char why[256] = "", first[256] = "";

	for (int i = 0; i < 200; i++) {
		uint64_t off = MiB + rng_next(&s) % (size - 2 * MiB);
		touched += ((off + 128 * KiB - 1) >> 20) - (off >> 20) + 1;
		if (read_check(&t, off, 128 * KiB, NULL, why, sizeof(why)) && !bad++)
			memcpy(first, why, sizeof(first));
	}
	ok(bad == 0, "random reader: 200 reads byte-exact (%d wrong)", bad);
	if (bad)
		diag("%s", first);
	struct sfs_prefetch_stats ps = pstats();
	ok(ps.readahead_chunks <= 16, "random reader: little readahead (%llu chunks for 200 reads)",
	   (unsigned long long)ps.readahead_chunks);
	ok(ps.fetched_bytes <= (touched + 16) * MiB,
	   "random reader: fetched %llu MiB for 200 reads touching %llu chunks",
	   (unsigned long long)(ps.fetched_bytes >> 20), (unsigned long long)touched);
	/* Without a store nothing would keep the rest of a chunk: a jumping
	 * reader's bytes are fetched as asked (rounded out to pages). */
	ok(ps.direct_fetches >= 190 && ps.fetched_bytes <= 200 * (128 + 4) * KiB + 16 * MiB,
	   "random reader: %llu of 200 reads fetched as asked, %llu KiB fetched for 25,600 KiB "
	   "read",
	   (unsigned long long)ps.direct_fetches, (unsigned long long)(ps.fetched_bytes >> 10));
	sfs_pf_file_unref(t.f);
	teardown();
}

/* --- memory budget --------------------------------------------------------- */

static void test_budget(void)
{
	const uint64_t mem = 4 * MiB, slack = 3 * MiB; /* one reader's in-flight demand */
	uint64_t max_buf = 0;
	char why[256] = "";
	int bad = 0;

	/* One random reader, 40 distinct chunks, each view released at once. */
	setup(MiB, 0, 2, mem, 16);
	struct tfile t = topen(7, 1024 * MiB, 1024 * MiB);
	for (uint64_t i = 0; i < 40; i++) {
		bad += read_check(&t, (5 + i * 23) * MiB + 4096, 64 * KiB, NULL, why, sizeof(why));
		uint64_t b = pstats().buffer_bytes;
		if (b > max_buf)
			max_buf = b;
	}
	ok(bad == 0, "budget: random reads byte-exact (%d wrong)", bad);
	ok(max_buf <= mem + slack,
	   "budget: one random reader stays within prefetch_mem + its demand chunks "
	   "(buffer_bytes peaked at %llu MiB, budget %llu MiB + %llu)",
	   (unsigned long long)(max_buf >> 20), (unsigned long long)(mem >> 20),
	   (unsigned long long)(slack >> 20));
	sfs_pf_file_unref(t.f);
	teardown();

	/* 30 open files, one read each, nothing pinned: only one reader at a time. */
	setup(MiB, 0, 2, mem, 16);
	struct tfile many[30];
	max_buf = 0;
	bad = 0;
	for (uint32_t i = 0; i < 30; i++) {
		many[i] = topen(100 + i, 8 * MiB, 8 * MiB);
		bad += read_check(&many[i], 3 * MiB, 64 * KiB, NULL, why, sizeof(why));
		uint64_t b = pstats().buffer_bytes;
		if (b > max_buf)
			max_buf = b;
	}
	ok(bad == 0, "budget: 30 files read byte-exact (%d wrong)", bad);
	ok(max_buf <= mem + slack,
	   "budget: 30 idle open files stay within prefetch_mem + one reader's demand "
	   "(buffer_bytes peaked at %llu MiB, budget %llu MiB + %llu)",
	   (unsigned long long)(max_buf >> 20), (unsigned long long)(mem >> 20),
	   (unsigned long long)(slack >> 20));
	for (int i = 0; i < 30; i++)
		sfs_pf_file_unref(many[i].f);
	teardown();

	/* A sequential reader with a budget smaller than its window. */
	setup(MiB, 0, 2, mem, 16);
	t = topen(8, 40 * MiB, 40 * MiB);
	max_buf = 0;
	bad = 0;
	for (uint64_t off = 0; off < 40 * MiB; off += 128 * KiB) {
		bad += read_check(&t, off, 128 * KiB, NULL, why, sizeof(why));
		fake_origin_drain(org);
		uint64_t b = pstats().buffer_bytes;
		if (b > max_buf)
			max_buf = b;
	}
	struct sfs_prefetch_stats ps = pstats();
	ok(bad == 0, "budget: small-budget sequential read byte-exact (%d wrong)", bad);
	ok(max_buf <= mem + slack,
	   "budget: a sequential reader stays within prefetch_mem + its demand chunks "
	   "(buffer_bytes peaked at %llu MiB, budget %llu MiB)",
	   (unsigned long long)(max_buf >> 20), (unsigned long long)(mem >> 20));
	ok(ps.readahead_chunks >= 30,
	   "budget: readahead goes on through the file within a 4 MiB budget "
	   "(%llu of 39 chunks read ahead)",
	   (unsigned long long)ps.readahead_chunks);
	sfs_pf_file_unref(t.f);
	teardown();

	/* An idle open file must not starve another file's readahead. */
	setup(MiB, 0, 2, 16 * MiB, 8);
	struct tfile a = topen(9, 32 * MiB, 32 * MiB), b = topen(10, 32 * MiB, 32 * MiB);
	for (uint64_t off = 0; off < 32 * MiB; off += 128 * KiB) {
		read_check(&a, off, 128 * KiB, NULL, why, sizeof(why));
		fake_origin_drain(org);
	}
	uint64_t ra0 = pstats().readahead_chunks;
	CHECK_READ(&b, 0, 128 * KiB, "budget: second file, first read");
	fake_origin_drain(org);
	uint64_t ra = pstats().readahead_chunks - ra0;
	ok(ra == 8,
	   "budget: a file read after another (now idle) one still reads ahead 8 chunks "
	   "(%llu; buffer_bytes %llu MiB of 16)",
	   (unsigned long long)ra, (unsigned long long)(pstats().buffer_bytes >> 20));
	sfs_pf_file_unref(a.f);
	sfs_pf_file_unref(b.f);
	teardown();
}

/* --- failures -------------------------------------------------------------- */

struct waiter {
	struct tfile *t;
	uint64_t off;
	ssize_t rc;
	int bad;
	char why[256];
};

static void *waiter_thread(void *arg)
{
	struct waiter *w = arg;
	struct sfs_pf_view v;

	w->rc = sfs_pf_read(w->t->f, w->off, 64 * KiB, &v);
	if (w->rc >= 0) {
		w->bad = view_check(w->t, w->off, &v, expected_len(w->t, w->off, 64 * KiB), w->why,
				    sizeof(w->why)) != 0;
		sfs_pf_view_release(w->t->f, &v);
	}
	return NULL;
}

static void test_failures(void)
{
	setup(256 * KiB, 0, 2, 64 * MiB, 4);
	struct tfile t = topen(11, 16 * MiB, 16 * MiB);
	struct sfs_pf_view v;
	uint64_t r0 = ostats().requests;

	/* A random first read without a store is fetched as asked (direct_fetch):
	 * one request for [5 MiB, 5 MiB + 68 KiB); it fails. */
	fake_origin_fail(org, r0 + 1, 1, -EIO);
	ssize_t rc = sfs_pf_read(t.f, 5 * MiB + 100, 64 * KiB, &v);
	ok(rc == -EIO && v.bytes == 0 && v.n_iov == 0 && v.n_pins == 0,
	   "failure: a failed direct fetch fails the read with -EIO and an empty view (rc %zd)",
	   rc);
	sfs_pf_view_release(t.f, &v);
	fake_origin_drain(org); /* the fake counts a failure after its callback */
	ok(ostats().requests - r0 == 1 && ostats().failed == 1,
	   "failure: the direct fetch was 1 request, and it failed (%llu requests)",
	   (unsigned long long)(ostats().requests - r0));
	fake_origin_fail(org, 0, 0, 0);
	CHECK_READ(&t, 5 * MiB + 100, 64 * KiB, "failure: the same read retried succeeds");
	ok(pstats().direct_fetches == 1, "failure: the retry was a direct fetch too");

	/* The chunk path: a sequential reader's first read (offset 0) claims
	 * chunk 0, four parts, submitted first; its first part (the bytes the
	 * read waits for) fails. */
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	t = topen(10, 16 * MiB, 16 * MiB);
	r0 = ostats().requests;
	uint64_t f0 = ostats().failed;
	fake_origin_fail(org, r0 + 1, 1, -EIO);
	rc = sfs_pf_read(t.f, 0, 64 * KiB, &v);
	ok(rc == -EIO && v.bytes == 0 && v.n_iov == 0 && v.n_pins == 0,
	   "failure: a failed part fails a chunk read with -EIO and an empty view (rc %zd)", rc);
	sfs_pf_view_release(t.f, &v);
	fake_origin_drain(org);
	ok(ostats().failed - f0 == 1, "failure: one of the chunk's requests failed");
	fake_origin_fail(org, 0, 0, 0);
	CHECK_READ(&t, 0, 64 * KiB, "failure: the chunk read retried succeeds");
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);

	/* A random read over chunks 12 and 13 (one 128 KiB request) that fails. */
	t = topen(11, 16 * MiB, 16 * MiB);
	CHECK_READ(&t, 5 * MiB + 100, 64 * KiB, "failure: a random read first");
	fake_origin_drain(org);
	r0 = ostats().requests;
	fake_origin_fail(org, r0 + 1, 1, -EIO);
	rc = sfs_pf_read(t.f, 13 * MiB - 64 * KiB, 128 * KiB, &v);
	ok(rc == -EIO && v.bytes == 0 && v.n_pins == 0,
	   "failure: a random read across two chunks fails with its request (rc %zd)", rc);
	sfs_pf_view_release(t.f, &v);
	fake_origin_fail(org, 0, 0, 0);
	CHECK_READ(&t, 13 * MiB - 64 * KiB, 128 * KiB, "failure: two-chunk read retried succeeds");
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);

	/* A failed readahead part: at most one read sees -EIO, its retry succeeds. */
	t = topen(12, 16 * MiB, 16 * MiB);
	r0 = ostats().requests;
	f0 = ostats().failed;
	fake_origin_fail(org, r0 + 4 * 3 + 2, 1, -EIO); /* chunk 3, read ahead by the first read */
	int eio = 0, bad = 0, other = 0;
	char why[256] = "", first[256] = "";
	for (uint64_t off = 0; off < 16 * MiB; off += 128 * KiB) {
		rc = sfs_pf_read(t.f, off, 128 * KiB, &v);
		if (rc == -EIO) {
			eio++;
			rc = sfs_pf_read(t.f, off, 128 * KiB, &v);
		}
		if (rc < 0) {
			other++;
			continue;
		}
		if (view_check(&t, off, &v, 128 * KiB, why, sizeof(why)) && !bad++)
			memcpy(first, why, sizeof(first));
		sfs_pf_view_release(t.f, &v);
	}
	fake_origin_drain(org);
	ok(ostats().failed - f0 == 1 && eio <= 1 && other == 0 && bad == 0,
	   "failure: a failed readahead costs at most one -EIO and a retry (%d EIO, %d other "
	   "errors, %d wrong)",
	   eio, other, bad);
	if (bad)
		diag("%s", first);
	fake_origin_fail(org, 0, 0, 0);
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);

	/* Two readers waiting on the same chunk when it fails (sequential reads
	 * of chunk 0: the chunk path; its first part fails). */
	t = topen(13, 16 * MiB, 16 * MiB);
	r0 = ostats().requests;
	fake_origin_fail(org, r0 + 1, 1, -EIO);
	fake_origin_hold_from(org, 0);
	struct waiter w[2] = {{.t = &t, .off = 0}, {.t = &t, .off = 128 * KiB}};
	pthread_t th[2];
	pthread_create(&th[0], NULL, waiter_thread, &w[0]);
	while (ostats().held < 4)
		usleep(1000);
	pthread_create(&th[1], NULL, waiter_thread, &w[1]);
	usleep(100 * 1000); /* let the second reader find the chunk and wait on it */
	fake_origin_release(org);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	ok((w[0].rc == -EIO || w[1].rc == -EIO) && !w[0].bad && !w[1].bad &&
	       (w[0].rc == -EIO || w[0].rc == 64 * KiB) && (w[1].rc == -EIO || w[1].rc == 64 * KiB),
	   "failure: readers sharing a failed chunk get -EIO (rc %zd, %zd)", w[0].rc, w[1].rc);
	fake_origin_fail(org, 0, 0, 0);
	CHECK_READ(&t, 0, 256 * KiB, "failure: shared failed chunk, retry succeeds");
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	ok(pstats().inflight_bytes == 0, "failure: nothing left in flight");
	teardown();
}

/* --- a file that shrank after its size was taken --------------------------- */

static void test_short(uint32_t max_read)
{
	setup(max_read, 0, 2, 64 * MiB, 4);
	const uint64_t server = 2 * MiB + 512 * KiB + 1234;
	struct tfile t = topen(14, 4 * MiB + 100, server);

	CHECK_READ(&t, 0, 64 * KiB, "shrunk file (max_read %u): start", max_read);
	CHECK_READ(&t, 2 * MiB + 512 * KiB, 64 * KiB,
		   "shrunk file (max_read %u): read across new end", max_read);
	CHECK_READ(&t, server, 10, "shrunk file (max_read %u): read at new end", max_read);
	CHECK_READ(&t, 3 * MiB, 10, "shrunk file (max_read %u): read past new end", max_read);
	CHECK_READ(&t, 2 * MiB, 2 * MiB, "shrunk file (max_read %u): 2 MiB over the new end",
		   max_read);
	CHECK_READ(&t, MiB + 5, 2 * MiB, "shrunk file (max_read %u): 3 chunks, new end in the 2nd",
		   max_read);
	CHECK_READ(&t, 4 * MiB, 100, "shrunk file (max_read %u): the old last chunk", max_read);
	CHECK_READ(&t, server - 1, 1, "shrunk file (max_read %u): last byte", max_read);
	sfs_pf_file_unref(t.f);

	/* Shrunk between two fetches: chunk 3 was read at the old size, then
	 * the file lost its tail. A read over chunks 2 and 3 must stop at the
	 * new end in chunk 2, never skip the hole and go on in stale chunk 3. */
	t = topen(16, 4 * MiB, 4 * MiB);
	CHECK_READ(&t, 3 * MiB, 64 * KiB, "shrinking file (max_read %u): chunk 3 at the old size",
		   max_read);
	fake_origin_set_size(org, 16, 2 * MiB + 100);
	t.server_size = 2 * MiB + 100;
	struct sfs_pf_view v;
	ssize_t rc = sfs_pf_read(t.f, 2 * MiB, 2 * MiB, &v);
	ok(rc == 100 && v.bytes == 100 && v.n_iov == 1,
	   "shrinking file (max_read %u): a read over the new end stops there (rc %zd, %d pieces)",
	   max_read, rc, v.n_iov);
	sfs_pf_view_release(t.f, &v);
	sfs_pf_file_unref(t.f);

	/* shrunk to exactly a chunk boundary */
	t = topen(15, 3 * MiB, 2 * MiB);
	CHECK_READ(&t, 2 * MiB - 10, 100, "shrunk to 2 MiB (max_read %u): across the new end",
		   max_read);
	CHECK_READ(&t, 2 * MiB, 100, "shrunk to 2 MiB (max_read %u): at the new end", max_read);
	sfs_pf_file_unref(t.f);
	teardown();
}

/* --- concurrent readers ---------------------------------------------------- */

struct reader {
	struct tfile *t;
	int kind; /* 0 sequential, 1 random, 2 random keeping 3 views pinned */
	uint64_t start, seed;
	int reads, bad;
	char why[300];
};

static void *reader_thread(void *arg)
{
	struct reader *r = arg;
	struct sfs_pf_view kept[3];
	uint64_t kept_off[3];
	size_t kept_len[3];
	int n_kept = 0;
	char why[256];
	uint64_t off = r->start, s = r->seed;

	for (int i = 0; i < r->reads; i++) {
		size_t len = 64 * KiB + (size_t)(rng_next(&s) % (256 * KiB));
		if (r->kind)
			off = rng_next(&s) % (r->t->size + MiB);
		if (r->kind == 2) {
			if (n_kept == 3) { /* recheck the oldest pinned view, then drop it */
				if (view_check(r->t, kept_off[0], &kept[0],
					       expected_len(r->t, kept_off[0], kept_len[0]), why,
					       sizeof(why)) &&
				    !r->bad++)
					snprintf(r->why, sizeof(r->why), "pinned view changed: %s",
						 why);
				sfs_pf_view_release(r->t->f, &kept[0]);
				memmove(kept, kept + 1, 2 * sizeof(kept[0]));
				memmove(kept_off, kept_off + 1, 2 * sizeof(kept_off[0]));
				memmove(kept_len, kept_len + 1, 2 * sizeof(kept_len[0]));
				n_kept--;
			}
			if (read_check(r->t, off, len, &kept[n_kept], why, sizeof(why))) {
				if (!r->bad++)
					snprintf(r->why, sizeof(r->why), "%s", why);
				continue;
			}
			if (kept[n_kept].n_pins == 0) {
				/* The direct path's view lives in this thread's scratch
				 * until its next read (checked above); only pinned chunk
				 * views are kept. */
				sfs_pf_view_release(r->t->f, &kept[n_kept]);
				continue;
			}
			kept_off[n_kept] = off;
			kept_len[n_kept++] = len;
			continue;
		}
		if (read_check(r->t, off, len, NULL, why, sizeof(why)) && !r->bad++)
			snprintf(r->why, sizeof(r->why), "%s", why);
		if (!r->kind) {
			off += len;
			if (off >= r->t->size)
				off = 0;
		}
	}
	for (int i = 0; i < n_kept; i++)
		sfs_pf_view_release(r->t->f, &kept[i]);
	return NULL;
}

static void test_concurrent(void)
{
	setup(100000, 100, 2, 16 * MiB, 4);
	struct tfile t = topen(16, 24 * MiB + 777, 24 * MiB + 777);
	struct reader r[5] = {
	    {.t = &t, .kind = 0, .start = 0, .seed = 1, .reads = 150},
	    {.t = &t, .kind = 0, .start = 12 * MiB + 3, .seed = 2, .reads = 150},
	    {.t = &t, .kind = 1, .seed = 3, .reads = 150},
	    {.t = &t, .kind = 1, .seed = 4, .reads = 150},
	    {.t = &t, .kind = 2, .seed = 5, .reads = 150},
	};
	pthread_t th[5];

	for (int i = 0; i < 5; i++)
		pthread_create(&th[i], NULL, reader_thread, &r[i]);
	int bad = 0;
	for (int i = 0; i < 5; i++) {
		pthread_join(th[i], NULL);
		bad += r[i].bad;
		if (r[i].bad)
			diag("reader %d: %s", i, r[i].why);
	}
	ok(bad == 0, "concurrent: 5 threads x 150 reads of one file, byte-exact (%d wrong)", bad);
	ok(ostats().wrong_thread == 0, "concurrent: completions ran on origin threads");
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	ok(pstats().inflight_bytes == 0, "concurrent: nothing left in flight");
	teardown();
}

/* --- closing a file with readahead in flight ------------------------------- */

static void test_close_inflight(void)
{
	setup(256 * KiB, 0, 2, 64 * MiB, 8);
	struct tfile t = topen(17, 20 * MiB, 20 * MiB);

	fake_origin_hold_from(org, MiB);
	CHECK_READ(&t, 0, 64 * KiB, "close in flight: first read");
	ok(ostats().held == 8 * 4, "close in flight: 8 chunks of readahead held (%llu parts)",
	   (unsigned long long)ostats().held);
	uint64_t wasted0 = pstats().wasted_chunks;
	sfs_pf_file_unref(t.f); /* the last opener goes while 8 chunks are in flight */
	fake_origin_release(org);
	fake_origin_drain(org);
	struct sfs_prefetch_stats ps = pstats();
	ok(ps.wasted_chunks - wasted0 == 8 && ps.inflight_bytes == 0,
	   "close in flight: the file is freed when its fetches land, dropping 8 unread chunks "
	   "(%llu)",
	   (unsigned long long)(ps.wasted_chunks - wasted0));

	/* An extra reference keeps the file usable after one unref. */
	t = topen(18, 20 * MiB, 20 * MiB);
	sfs_pf_file_ref(t.f);
	CHECK_READ(&t, 0, 64 * KiB, "ref/unref: read");
	sfs_pf_file_unref(t.f);
	CHECK_READ(&t, 5 * MiB, 64 * KiB, "ref/unref: still readable after one of two unrefs");
	sfs_pf_file_unref(t.f);
	teardown();

	/* Stress: open, read a little sequentially, close at once, while fetches are slow. */
	setup(256 * KiB, 300, 2, 32 * MiB, 8);
	int bad = 0;
	char why[256];
	for (uint32_t i = 0; i < 40; i++) {
		t = topen(200 + i, 16 * MiB, 16 * MiB);
		for (uint64_t k = 0; k <= i % 3; k++)
			bad +=
			    read_check(&t, k * 128 * KiB, 128 * KiB, NULL, why, sizeof(why)) != 0;
		sfs_pf_file_unref(t.f);
	}
	fake_origin_drain(org);
	ps = pstats();
	ok(bad == 0 && ps.inflight_bytes == 0 && ps.files_opened == 40,
	   "close in flight: 40 files closed with readahead pending (%d wrong, %llu in flight)",
	   bad, (unsigned long long)ps.inflight_bytes);
	teardown();
}

/* --- views pin their chunks ------------------------------------------------ */

static void test_pins(void)
{
	setup(MiB, 0, 2, 4 * MiB, 1); /* window 1: at most 5 chunks per file */
	struct tfile t = topen(19, 64 * MiB, 64 * MiB);
	struct sfs_pf_view v1 = {0}, v3 = {0};
	char why[256] = "";
	int bad = 0;

	/* Reads of up to a chunk that jump around take the direct path (no
	 * pins): the first view is a sequential reader's (from offset 0) and the
	 * pressure comes from reads of more than a chunk. */
	ok(read_check(&t, 1000, 64 * KiB, &v1, why, sizeof(why)) == 0 && v1.n_pins == 1,
	   "pins: first view pins its chunk (%d) %s", v1.n_pins, why);
	ok(read_check(&t, 30 * MiB + 512 * KiB, 2 * MiB, &v3, why, sizeof(why)) == 0 &&
	       v3.n_pins == 3,
	   "pins: a 3-chunk view pins 3 chunks (%d) %s", v3.n_pins, why);
	for (uint64_t i = 0; i < 30; i++)
		bad += read_check(&t, (40 + (i * 7) % 22) * MiB, MiB + 100 * KiB, NULL, why,
				  sizeof(why)) != 0;
	ok(bad == 0, "pins: 30 reads of other chunks byte-exact (%d wrong)", bad);
	ok(view_check(&t, 1000, &v1, 64 * KiB, why, sizeof(why)) == 0,
	   "pins: the pinned view is unchanged after eviction pressure %s", why);
	ok(view_check(&t, 30 * MiB + 512 * KiB, &v3, 2 * MiB, why, sizeof(why)) == 0,
	   "pins: the pinned 3-chunk view is unchanged %s", why);
	sfs_pf_view_release(t.f, &v1);
	ok(v1.n_pins == 0, "pins: release clears the view's pins");
	sfs_pf_view_release(t.f, &v1); /* a second release is a no-op */
	sfs_pf_view_release(t.f, &v3);
	bad = 0;
	for (uint64_t i = 0; i < 10; i++)
		bad += read_check(&t, (10 + i * 3) * MiB, 100 * KiB, NULL, why, sizeof(why)) != 0;
	ok(bad == 0, "pins: reads after release byte-exact (%d wrong)", bad);
	sfs_pf_file_unref(t.f);
	teardown();
}

/* --- a readahead chunk freed while its submitter is still submitting ------- */

struct race {
	sfs_origin *org;
	struct tfile *t;
	uint64_t trigger_seq;
	bool fired;
	ssize_t other_rc;
};

static void *other_reader(void *arg)
{
	struct race *r = arg;
	struct sfs_pf_view v;

	/* Chunk 40 fails too (a read of more than a chunk: the chunk path, not
	 * a direct fetch); on -EIO prefetch drops every failed idle chunk of
	 * the file, chunk 15 included. */
	r->other_rc = sfs_pf_read(r->t->f, 40 * MiB, MiB + 64 * KiB, &v);
	sfs_pf_view_release(r->t->f, &v);
	return NULL;
}

static void submit_hook(uint64_t offset, uint32_t count, uint64_t seq, void *arg)
{
	struct race *r = arg;

	if (r->fired || seq != r->trigger_seq)
		return;
	r->fired = true;
	/* The last part of readahead chunk 15 has just been queued (the 64th
	 * request of the read: the end of a 64-request batch). Let everything
	 * queued complete, then let another reader of the file run before
	 * submit returns, as an I/O thread and a second FUSE thread may while
	 * this one is preempted. */
	fake_origin_drain(r->org);
	pthread_t th;
	pthread_create(&th, NULL, other_reader, r);
	pthread_join(th, NULL);
}

static void test_submit_race(void)
{
	/* 256 KiB parts, window 16: the first read queues chunks 0..16, 68
	 * requests; requests 61..64 are chunk 15's parts. */
	setup(256 * KiB, 0, 1, 64 * MiB, 16);
	struct tfile t = topen(20, 64 * MiB, 64 * MiB);
	uint64_t r0 = ostats().requests;
	struct race r = {.org = org, .t = &t, .trigger_seq = r0 + 64};

	fake_origin_fail(org, r0 + 61, 8, -EIO); /* chunk 15, then chunk 40's 4 parts */
	fake_origin_set_hook(org, submit_hook, &r);
	CHECK_READ(&t, 0, 64 * KiB,
		   "submit race: first read, whose readahead chunk 15 fails and is dropped by "
		   "another reader while this one is still submitting");
	ok(r.fired && r.other_rc == -EIO, "submit race: the other reader ran and got -EIO (%zd)",
	   r.other_rc);
	fake_origin_set_hook(org, NULL, NULL);
	fake_origin_fail(org, 0, 0, 0);
	CHECK_READ(&t, 15 * MiB, 64 * KiB, "submit race: chunk 15 read again");
	sfs_pf_file_unref(t.f);
	teardown();
}

/* --- bytes fetched that nobody got ------------------------------------------ */

static void test_undelivered(void)
{
	setup(MiB, 0, 2, 64 * MiB, 4);
	struct tfile t = topen(21, 16 * MiB, 16 * MiB);

	/* A reader that stops after its first 100 KiB: its chunk's other 14
	 * blocks (64 KiB each, 2 of them touched) and the 4 chunks read ahead
	 * reach nobody once the file goes. */
	CHECK_READ(&t, 0, 100 * KiB, "undelivered: a first read of 100 KiB");
	fake_origin_drain(org);
	struct sfs_prefetch_stats ps = pstats();
	ok(ps.undelivered_unread_bytes == 0 && ps.undelivered_rest_bytes == 0,
	   "undelivered: nothing counted while the chunks are held");
	sfs_pf_file_unref(t.f);
	fake_origin_drain(org);
	ps = pstats();
	ok(ps.undelivered_rest_bytes == 14 * 64 * KiB,
	   "undelivered: the rest of the read chunk, per 64 KiB block (%llu KiB)",
	   (unsigned long long)(ps.undelivered_rest_bytes >> 10));
	ok(ps.undelivered_unread_bytes == ps.readahead_chunks * MiB && ps.readahead_chunks == 4,
	   "undelivered: the chunks read ahead and never read (%llu KiB, %llu chunks)",
	   (unsigned long long)(ps.undelivered_unread_bytes >> 10),
	   (unsigned long long)ps.readahead_chunks);
	teardown();
}

/* --- reads answered from the I/O thread ------------------------------------ */

/* What an asynchronous read's done() saw: a copy of its bytes. */
struct async_out {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int done;   /* calls of done() */
	int magic;  /* the context's magic as done() saw it */
	bool other; /* done() ran on another thread than the read */
	ssize_t n;
	struct tfile t;
	uint64_t off;
	char why[256];
	int bad; /* reads whose bytes were wrong */
};

/* The caller's context, copied by sfs_pf_read_async. */
struct async_ctx {
	struct async_out *out;
	pthread_t caller;
	uint64_t off;
	size_t want;
	int magic;
};

static void async_done(void *arg, ssize_t n, const struct sfs_pf_view *v)
{
	struct async_ctx *c = arg;
	struct async_out *o = c->out;
	char why[256];
	bool wrong = n >= 0 && view_check(&o->t, c->off, v, c->want, why, sizeof(why));

	pthread_mutex_lock(&o->lock);
	o->n = n;
	o->magic = c->magic;
	o->other = !pthread_equal(c->caller, pthread_self());
	if (wrong && !o->bad++)
		memcpy(o->why, why, sizeof(why));
	o->done++;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

/* Read [off, +len) with sfs_pf_read_async; returns its return value. */
static ssize_t async_read(struct async_out *o, uint64_t off, size_t len)
{
	struct async_ctx c = {o, pthread_self(), off, expected_len(&o->t, off, len), 42};
	struct sfs_pf_view v;

	ssize_t rc = sfs_pf_read_async(o->t.f, off, len, &v, async_done, &c, sizeof(c));
	if (rc != -EINPROGRESS) { /* answered at once: recorded as done() would */
		async_done(&c, rc, &v);
		sfs_pf_view_release(o->t.f, &v);
	}
	c.magic = 0; /* an asynchronous done() sees the copy taken at the call */
	return rc;
}

static void async_wait(struct async_out *o, int n)
{
	pthread_mutex_lock(&o->lock);
	while (o->done < n)
		pthread_cond_wait(&o->cond, &o->lock);
	pthread_mutex_unlock(&o->lock);
}

static void test_async(void)
{
	setup(MiB, 0, 2, 64 * MiB, 16);
	struct async_out o = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

	/* A small file without a store: fetched as asked, answered by done(). */
	o.t = topen(21, 110000, 110000);
	uint64_t r0 = ostats().requests, l0 = ostats().lent;
	ssize_t rc = async_read(&o, 0, 128 * KiB);
	async_wait(&o, 1);
	ok(rc == -EINPROGRESS && o.n == 110000 && !o.bad && o.magic == 42 && o.other,
	   "async: a 110,000-byte file read whole from the I/O thread (rc %zd, n %zd, %s)", rc, o.n,
	   o.bad ? o.why : "bytes exact");
	fake_origin_drain(org);
	ok(ostats().requests - r0 == 1 && pstats().fetched_bytes == 110000,
	   "async: one READ, 110,000 bytes fetched (%llu requests)",
	   (unsigned long long)(ostats().requests - r0));
	ok(pstats().buffer_bytes == 110592,
	   "async: the fetch's buffer (110,592 bytes) is kept for reuse after done (%llu bytes)",
	   (unsigned long long)pstats().buffer_bytes);
	/* The fake poisons lent bytes once done() returns: a view used later
	 * would have failed the byte check above. */
	ok(ostats().lent - l0 == 1, "async: its one READ answered from lent bytes (%llu lent)",
	   (unsigned long long)(ostats().lent - l0));
	sfs_pf_file_unref(o.t.f);

	/* A failed READ: done() gets the error. */
	o.t = topen(22, 1024 * MiB, 1024 * MiB);
	fake_origin_fail(org, ostats().requests + 1, 1, -EIO);
	rc = async_read(&o, 300 * MiB + 5, 100000);
	async_wait(&o, 2);
	ok(rc == -EINPROGRESS && o.n == -EIO, "async: a failed READ gives done() -EIO (n %zd)",
	   o.n);
	fake_origin_drain(org);
	fake_origin_fail(org, 0, 0, 0);

	/* A random reader of a big file: 64 reads in flight, the file unreffed
	 * before they land (each fetch holds it). */
	fake_origin_hold_from(org, 0);
	uint64_t s = 0x5eed;
	int started = 0;
	for (int i = 0; i < 64; i++) {
		uint64_t off = MiB + rng_next(&s) % (1000 * MiB);
		started += async_read(&o, off, 110 * KiB) == -EINPROGRESS;
	}
	sfs_pf_file_unref(o.t.f);
	fake_origin_release(org);
	fake_origin_hold_from(org, UINT64_MAX);
	async_wait(&o, 2 + 64);
	ok(started == 64 && o.done == 66 && !o.bad,
	   "async: 64 random reads in flight, the file closed meanwhile: %d answered, %s",
	   o.done - 2, o.bad ? o.why : "bytes exact");
	fake_origin_drain(org);

	/* A sequential reader takes the chunk path (readahead), synchronously. */
	o.t = topen(23, 16 * MiB, 16 * MiB);
	rc = async_read(&o, 0, 128 * KiB);
	ok(rc == 128 * KiB && o.done == 67 && !o.bad,
	   "async: a sequential reader is answered at once (%zd)", rc);
	sfs_pf_file_unref(o.t.f);
	teardown();
}

/* Buffers made to size (a small file's fetch or chunk) are kept for reuse
 * within 1/16 of the budget, give way to the pool's chunks, and an idle
 * release frees them. */
static void test_sized_keep(void)
{
	const uint64_t mem = 16 * MiB, one = 110592; /* 110,000 bytes in 4 KiB pages */
	struct async_out o = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	char why[256] = "";
	int bad = 0;

	setup(MiB, 0, 2, mem, 16);
	for (int i = 0; i < 21; i++) { /* small files read whole, one after another */
		o.t = topen(24 + i, 110000, 110000);
		async_read(&o, 0, 128 * KiB);
		async_wait(&o, i + 1);
		fake_origin_drain(org);
		sfs_pf_file_unref(o.t.f);
	}
	ok(!o.bad && pstats().buffer_bytes == one,
	   "sized: 21 files of 110,000 bytes fetched through one kept buffer (%s, "
	   "buffer_bytes %llu)",
	   o.bad ? o.why : "bytes exact", (unsigned long long)pstats().buffer_bytes);

	/* 32 reads in flight at once: what comes back past 1/16 of the budget
	 * is freed. */
	o.t = topen(60, 1024 * MiB, 1024 * MiB);
	fake_origin_hold_from(org, 0);
	uint64_t s = 0x5eed;
	for (int i = 0; i < 32; i++)
		async_read(&o, MiB + rng_next(&s) % (1000 * MiB), 110000);
	fake_origin_release(org);
	fake_origin_hold_from(org, UINT64_MAX);
	async_wait(&o, 21 + 32);
	fake_origin_drain(org);
	sfs_pf_file_unref(o.t.f);
	uint64_t kept = pstats().buffer_bytes;
	ok(!o.bad && kept > mem / 32 && kept <= mem / 16,
	   "sized: of 32 buffers in flight, %llu bytes kept (at most 1/16 of the budget, %llu)",
	   (unsigned long long)kept, (unsigned long long)(mem / 16));

	/* A sequential reader's readahead wants the whole budget in chunks:
	 * the kept buffers give way. */
	struct tfile t = topen(61, 64 * MiB, 64 * MiB);
	uint64_t peak = 0;
	for (uint64_t off = 0; off < 24 * MiB; off += 256 * KiB) {
		bad += read_check(&t, off, 256 * KiB, NULL, why, sizeof(why));
		usleep(200);
		uint64_t b = pstats().buffer_bytes;
		peak = b > peak ? b : peak;
	}
	fake_origin_drain(org);
	ok(bad == 0 && peak == mem,
	   "sized: readahead took the whole budget in chunks, the kept buffers gave way "
	   "(buffer_bytes peaked at %llu, budget %llu; %s)",
	   (unsigned long long)peak, (unsigned long long)mem, bad ? why : "bytes exact");
	sfs_pf_file_unref(t.f);

	uint64_t freed = sfs_prefetch_release_idle(pf, 0);
	ok(pstats().buffer_bytes == 0 && freed >= mem,
	   "sized: an idle release frees every buffer (%llu freed, %llu left)",
	   (unsigned long long)freed, (unsigned long long)pstats().buffer_bytes);
	teardown();
}

/* The chunk path answered from the I/O thread: a tiny rsize makes the reads
 * too many parts for a direct fetch, so they claim chunks and wait on them
 * as waiters (with a store, the cold small-file and random-record path). */
static void test_async_chunks(void)
{
	setup(16 * KiB, 200, 2, 64 * MiB, 16);
	struct async_out o = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

	o.t = topen(31, 110000, 110000);
	ssize_t rc = async_read(&o, 0, 128 * KiB);
	async_wait(&o, 1);
	ok(rc == -EINPROGRESS && o.n == 110000 && !o.bad && o.magic == 42 && o.other,
	   "async chunk: a 110,000-byte file in 7 parts answered from the I/O thread (rc %zd, n "
	   "%zd, %s)",
	   rc, o.n, o.bad ? o.why : "bytes exact");
	/* A second read: from the chunk while the first answer still pins it,
	 * else (the chunk went once read to its end) fetched as asked, from
	 * the I/O thread too. */
	rc = async_read(&o, 4096, 10000);
	async_wait(&o, 2);
	ok((rc == -EINPROGRESS || rc == 10000) && o.n == 10000 && !o.bad,
	   "async chunk: a second read of the file (rc %zd, n %zd, %s)", rc, o.n,
	   o.bad ? o.why : "bytes exact");
	sfs_pf_file_unref(o.t.f);
	fake_origin_drain(org);

	/* Random records of a big file, 8 in flight (the file's chunk limit is more), the file
	 * closed meanwhile; then one whose part fails. */
	o.t = topen(32, 1024 * MiB, 1024 * MiB);
	fake_origin_hold_from(org, 0);
	uint64_t s = 0xc0ffee;
	int started = 0;
	for (int i = 0; i < 8; i++) {
		uint64_t off = MiB + rng_next(&s) % (1000 * MiB);
		started += async_read(&o, off, 110 * KiB) == -EINPROGRESS;
	}
	fake_origin_release(org);
	fake_origin_hold_from(org, UINT64_MAX);
	async_wait(&o, 2 + 8);
	ok(started == 8 && !o.bad, "async chunk: 8 random records in flight answered, %s",
	   o.bad ? o.why : "bytes exact");
	fake_origin_drain(org);
	fake_origin_fail(org, ostats().requests + 1, 1000, -EIO);
	rc = async_read(&o, 900 * MiB + 12345, 100000);
	sfs_pf_file_unref(o.t.f);
	async_wait(&o, 2 + 8 + 1);
	ok(rc == -EINPROGRESS && o.n == -EIO,
	   "async chunk: a failed part gives done() -EIO (n %zd)", o.n);
	fake_origin_drain(org);
	fake_origin_fail(org, 0, 0, 0);
	ok(ostats().wrong_thread == 0, "async chunk: no completion ran on the submitting thread");
	teardown();
}

/* A pool full of idle 1 MiB buffers is budget nobody uses: a shard fetch's
 * tail chunk (a buffer made to size) must get room from it. It did not: the
 * pump retried the tail every 100 ms, each retry kept the pool from going
 * idle, and shardfs-warm waited for the last 4,321 bytes forever. */
/* Readers' own chunks past the budget: their buffers are kept for the next
 * such chunks (SFS_PF_OVER_BUFS), not unmapped and mapped again. */
static void test_over_budget(void)
{
	const uint64_t mem = 4 * MiB;
	struct sfs_pf_view views[8];
	char why[256] = "";
	int bad = 0;

	setup(MiB, 0, 2, mem, 16);
	/* Round 1: eight chunks held at once, twice the budget. */
	struct tfile a = topen(51, 16 * MiB, 16 * MiB);
	for (int i = 0; i < 8; i++)
		bad += read_check(&a, (uint64_t)i * MiB, MiB, &views[i], why, sizeof(why));
	uint64_t held = pstats().buffer_bytes;
	for (int i = 0; i < 8; i++)
		sfs_pf_view_release(a.f, &views[i]);
	sfs_pf_file_unref(a.f);
	fake_origin_drain(org);
	struct sfs_prefetch_stats ps = pstats();
	uint64_t over1 = ps.over_budget_bytes;
	ok(bad == 0 && held >= 8 * MiB,
	   "over budget: 8 chunks held at once (%llu MiB, %d wrong) %s",
	   (unsigned long long)(held >> 20), bad, why);
	ok(over1 > 0 && ps.buffer_bytes - over1 == mem,
	   "over budget: closed, the pool is full and the rest is kept past it "
	   "(%llu MiB pooled, %llu past the budget)",
	   (unsigned long long)((ps.buffer_bytes - over1) >> 20),
	   (unsigned long long)(over1 >> 20));

	/* Round 2: the same on another file takes the pool, then those. */
	struct tfile b = topen(52, 16 * MiB, 16 * MiB);
	for (int i = 0; i < 8; i++)
		bad += read_check(&b, (uint64_t)i * MiB, MiB, &views[i], why, sizeof(why));
	ps = pstats();
	ok(bad == 0 && ps.over_budget_bytes < over1,
	   "over budget: the next reader's own chunks reuse them (%llu MiB left of %llu, %d wrong)",
	   (unsigned long long)(ps.over_budget_bytes >> 20), (unsigned long long)(over1 >> 20),
	   bad);
	for (int i = 0; i < 8; i++)
		sfs_pf_view_release(b.f, &views[i]);
	sfs_pf_file_unref(b.f);
	fake_origin_drain(org);
	sfs_prefetch_release_idle(pf, 0);
	ps = pstats();
	ok(ps.buffer_bytes == 0 && ps.over_budget_bytes == 0,
	   "over budget: idle release frees them all (%llu bytes left, %llu past the budget)",
	   (unsigned long long)ps.buffer_bytes, (unsigned long long)ps.over_budget_bytes);
	teardown();
}

/* A started store of 256 MiB (lru, 1 MiB chunks) in a new directory made
 * from the template dir. */
static sfs_store *store_open(char *dir)
{
	char err[256] = "";
	sfs_store *store = NULL;

	if (!mkdtemp(dir)) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		exit(1);
	}
	int rc = sfs_store_open(&(struct sfs_store_conf){.dir = dir,
							 .capacity_bytes = 256 * MiB,
							 .policy = SFS_STORE_LRU,
							 .chunk_bytes = MiB},
				&store, err, sizeof(err));
	if (rc || (rc = sfs_store_start(store))) {
		printf("Bail out! sfs_store_open(%s): %d %s\n", dir, rc, err);
		exit(1);
	}
	return store;
}

/* A prefetch of budget mem fetching files of up to 64 MiB whole for
 * store, over a fresh fake origin of READ size max_read. */
static void shard_prefetch_open(sfs_store *store, uint64_t mem, uint32_t max_read)
{
	org = fake_origin_new(&(struct fake_origin_conf){.max_read = max_read, .n_threads = 2});
	int rc = sfs_prefetch_open(&(struct sfs_prefetch_conf){.mem_bytes = mem,
							       .window_chunks = 16,
							       .mode = SFS_PREFETCH_SHARD,
							       .shard_max_bytes = 64 * MiB,
							       .store = store},
				   org, &pf);
	if (rc) {
		printf("Bail out! sfs_prefetch_open: %d\n", rc);
		exit(1);
	}
}

static void test_pool_tail(void)
{
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	const uint64_t mem = 4 * MiB, tail_size = 2 * MiB + 4321;
	sfs_store *store = store_open(dir);

	shard_prefetch_open(store, mem, MiB);

	/* A sequential reader of a file never opened for the store (no
	 * sfs_pf_file_opened): readahead fills the budget, closing pools it. */
	struct tfile a = topen(41, 16 * MiB, 16 * MiB);
	int bad = 0;
	for (uint64_t off = 0; off < a.size; off += 128 * KiB)
		bad += read_check(&a, off, 128 * KiB, NULL, why, sizeof(why));
	sfs_pf_file_unref(a.f);
	fake_origin_drain(org);
	struct sfs_prefetch_stats ps = pstats();
	ok(bad == 0 && ps.buffer_bytes - ps.over_budget_bytes == mem,
	   "pool tail: a sequential read left the pool full of idle buffers (%llu of %llu MiB, "
	   "%d wrong)",
	   (unsigned long long)((ps.buffer_bytes - ps.over_budget_bytes) >> 20),
	   (unsigned long long)(mem >> 20), bad);

	/* The whole-file fetch of a file with a 4,321-byte tail. */
	struct tfile b = topen(42, tail_size, tail_size);
	sfs_pf_file_opened(b.f);
	bool active = true;
	uint64_t cached = 0;
	for (int i = 0; i < 1000 && (active || cached < tail_size); i++) {
		usleep(10000);
		if (sfs_pf_file_warm(b.f, &active) < 0)
			break;
		cached = sfs_pf_file_cached_bytes(b.f);
	}
	ok(cached == tail_size && !active,
	   "pool tail: the whole file, its tail too, reached the store (%llu of %llu bytes, %s)",
	   (unsigned long long)cached, (unsigned long long)tail_size,
	   active ? "still active after 10 s" : "done");
	ps = pstats();
	ok(ps.buffer_bytes - ps.over_budget_bytes <= mem,
	   "pool tail: buffers stay within the budget (%llu bytes, %llu more past it for readers)",
	   (unsigned long long)(ps.buffer_bytes - ps.over_budget_bytes),
	   (unsigned long long)ps.over_budget_bytes);
	bad = 0;
	for (uint64_t off = 0; off < tail_size; off += 256 * KiB)
		bad += read_check(&b, off, 256 * KiB, NULL, why, sizeof(why));
	ok(bad == 0, "pool tail: the file reads back byte-exact (%d wrong) %s", bad, why);
	sfs_pf_file_unref(b.f);
	fake_origin_drain(org);
	uint64_t freed = sfs_prefetch_release_idle(pf, 0);
	ps = pstats();
	ok(ps.over_budget_bytes == 0 && ps.buffer_bytes == 0 && freed > 0,
	   "pool tail: idle release frees the pool and the buffers past the budget "
	   "(freed %llu MiB; left %llu bytes, %llu past the budget)",
	   (unsigned long long)(freed >> 20), (unsigned long long)ps.buffer_bytes,
	   (unsigned long long)ps.over_budget_bytes);
	sfs_prefetch_close(pf);
	fake_origin_free(org);
	pf = NULL;
	org = NULL;
	sfs_store_close(store);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
}

static void test_exact_1m(void) { test_exact(MiB); }
static void test_exact_256k(void) { test_exact(256 * KiB); }
static void test_exact_100000(void) { test_exact(100000); }
static void test_short_256k(void) { test_short(256 * KiB); }
static void test_short_100000(void) { test_short(100000); }

/* The store for test_write_full in dir, and a prefetch of budget mem on a
 * fresh fake origin. */
static sfs_store *store_setup(char *dir, uint64_t mem)
{
	sfs_store *store = store_open(dir);

	org = fake_origin_new(&(struct fake_origin_conf){.max_read = MiB, .n_threads = 2});
	int rc = sfs_prefetch_open(
	    &(struct sfs_prefetch_conf){.mem_bytes = mem, .window_chunks = 16, .store = store}, org,
	    &pf);
	if (rc) {
		printf("Bail out! sfs_prefetch_open: %d\n", rc);
		exit(1);
	}
	return store;
}

static void store_teardown(sfs_store *store, const char *dir)
{
	teardown_with(store);
	char cmd[64];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
}

/* 40 random 100 KiB reads of a 64 MiB file opened for the store: the bytes
 * fetched and the direct fetches they took. */
static int random_reads(struct tfile *t, uint64_t *fetched, uint64_t *direct, char *why,
			size_t why_len)
{
	uint64_t s = 0xf011, f0 = pstats().fetched_bytes, d0 = pstats().direct_fetches;
	int bad = 0;

	for (int i = 0; i < 40; i++)
		bad += read_check(t, rng_next(&s) % (63 * MiB), 100 * KiB, NULL, why, why_len);
	fake_origin_drain(org);
	*fetched = pstats().fetched_bytes - f0;
	*direct = pstats().direct_fetches - d0;
	return bad;
}

/* With a store, a random reader's chunk that the store lacks is fetched
 * whole for the store; while the writes waiting hold the budget (here a
 * budget under one chunk: write_admitted refuses every reader's chunk) it
 * would be dropped uncached, so the reader's own bytes are fetched. */
static void test_write_full(void)
{
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	uint64_t fetched, direct;

	sfs_store *store = store_setup(dir, 512 * KiB);
	struct tfile t = topen(51, 64 * MiB, 64 * MiB);
	sfs_pf_file_opened(t.f);
	int bad = random_reads(&t, &fetched, &direct, why, sizeof(why));
	ok(bad == 0 && direct >= 36 && fetched <= 40 * 100 * KiB + 4 * MiB,
	   "write full: 40 random reads fetched as asked (%llu direct fetches, %llu KiB fetched "
	   "for 4,000 KiB read, %d wrong) %s",
	   (unsigned long long)direct, (unsigned long long)(fetched >> 10), bad, why);
	sfs_pf_file_unref(t.f);
	store_teardown(store, dir);

	/* The same reads with room for the writes: whole chunks, for the store. */
	char dir2[] = "/tmp/test_prefetch.XXXXXX";
	store = store_setup(dir2, 64 * MiB);
	t = topen(51, 64 * MiB, 64 * MiB);
	sfs_pf_file_opened(t.f);
	bad = random_reads(&t, &fetched, &direct, why, sizeof(why));
	ok(bad == 0 && direct == 0 && fetched >= 30 * MiB,
	   "write room: the same reads fetch whole chunks (%llu direct fetches, %llu MiB fetched, "
	   "%d wrong) %s",
	   (unsigned long long)direct, (unsigned long long)(fetched >> 20), bad, why);
	sfs_pf_file_unref(t.f);
	store_teardown(store, dir2);
}

/* Waits up to 10 s for t's whole file to be in the store. */
static bool wait_cached(const struct tfile *t)
{
	bool active = true;
	uint64_t cached = 0;

	for (int i = 0; i < 1000 && (active || cached < t->size); i++) {
		usleep(10000);
		if (sfs_pf_file_warm(t->f, &active) < 0)
			return false;
		cached = sfs_pf_file_cached_bytes(t->f);
	}
	return cached == t->size;
}

/* Direct reads from the store hold their scratch while their views live:
 * small ones share huge pages a slot each, a large one takes a page; every
 * view keeps its bytes while the others are read, and all of it is freed
 * once idle. */
static void test_scratch_slots(void)
{
	enum { SMALL = 12 };
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	const uint64_t page = 2 * MiB;
	sfs_store *store = store_setup(dir, 64 * MiB);
	struct tfile t[SMALL + 1];
	struct sfs_pf_view v[SMALL + 1];
	int cached = 0, bad = 0;

	for (int i = 0; i <= SMALL; i++) {
		t[i] = i < SMALL ? topen(60 + i, 100000 + 1000 * i, 100000 + 1000 * i)
				 : topen(60 + i, 4 * MiB, 4 * MiB);
		sfs_pf_file_opened(t[i].f);
	}
	for (int i = 0; i <= SMALL; i++)
		cached += wait_cached(&t[i]);
	ok(cached == SMALL + 1, "scratch: %d of %d files reached the store", cached, SMALL + 1);
	sfs_prefetch_release_idle(pf, 0); /* what earlier reads kept */
	uint64_t d0 = pstats().direct_reads;
	for (int i = 0; i < SMALL; i++)
		bad += read_check(&t[i], 0, t[i].size, &v[i], why, sizeof(why));
	struct sfs_prefetch_stats ps = pstats();
	ok(bad == 0 && ps.direct_reads - d0 == SMALL && ps.direct_scratch_bytes == 2 * page,
	   "scratch: %d small direct reads in flight hold %llu MiB (2 shared huge pages; %llu "
	   "direct, %d wrong) %s",
	   SMALL, (unsigned long long)(ps.direct_scratch_bytes >> 20),
	   (unsigned long long)(ps.direct_reads - d0), bad, why);
	/* 600 KiB of the big file's second MiB: a random reader's direct read. */
	bad = read_check(&t[SMALL], MiB + 5000, 600 * KiB, &v[SMALL], why, sizeof(why));
	ps = pstats();
	ok(bad == 0 && ps.direct_reads - d0 == SMALL + 1 && ps.direct_scratch_bytes == 3 * page,
	   "scratch: a 600 KiB direct read takes a page of its own (%llu MiB held, %llu direct) %s",
	   (unsigned long long)(ps.direct_scratch_bytes >> 20),
	   (unsigned long long)(ps.direct_reads - d0), why);
	bad = 0;
	for (int i = 0; i <= SMALL; i++)
		bad += view_check(&t[i], i < SMALL ? 0 : MiB + 5000, &v[i], v[i].bytes, why,
				  sizeof(why)) != 0;
	ok(bad == 0, "scratch: every view still holds its own bytes (%d wrong) %s", bad, why);
	for (int i = 0; i <= SMALL; i++)
		sfs_pf_view_release(t[i].f, &v[i]);
	uint64_t freed = sfs_prefetch_release_idle(pf, 0);
	ps = pstats();
	ok(freed >= 3 * page && ps.direct_scratch_bytes == 0,
	   "scratch: idle release frees every page (%llu MiB freed, %llu bytes left)",
	   (unsigned long long)(freed >> 20), (unsigned long long)ps.direct_scratch_bytes);
	for (int i = 0; i <= SMALL; i++)
		sfs_pf_file_unref(t[i].f);
	store_teardown(store, dir);
}

/* Reads that need at most 16 KiB (files of 1-3 KB here) take tiny slots of
 * plain pages: 20 in flight account 20 x 16 KiB, not a 2 MiB huge page per
 * 8; each view holds its own bytes; an idle release gives the pages back. */
static void test_scratch_tiny(void)
{
	enum { TINY = 20 };
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	sfs_store *store = store_setup(dir, 64 * MiB);
	struct tfile t[TINY];
	struct sfs_pf_view v[TINY];
	int cached = 0, bad = 0;
	uint64_t sized = 0;

	sfs_prefetch_release_idle(pf, 0); /* what earlier tests kept */
	for (int i = 0; i < TINY; i++) {
		t[i] = topen(90 + i, 1000 + 100 * i, 1000 + 100 * i);
		sfs_pf_file_opened(t[i].f);
		sized += 1000 + 100 * i;
	}
	for (int i = 0; i < TINY; i++)
		cached += wait_cached(&t[i]);
	ok(cached == TINY, "tiny: %d of %d files reached the store", cached, TINY);
	/* Their chunk buffers (made to size, all 4 KiB) were kept for reuse
	 * once written; an idle release frees them and counts them, so that
	 * the daemon's memtrim trims. */
	uint64_t kept = pstats().buffer_bytes, kept_freed = sfs_prefetch_release_idle(pf, 0);
	ok(kept >= 4096 && kept < sized && kept_freed >= kept && pstats().buffer_bytes == 0,
	   "tiny: %d files of %llu bytes in all were written from %llu bytes of buffers made "
	   "to size, which an idle release frees and counts (%llu)",
	   TINY, (unsigned long long)sized, (unsigned long long)kept,
	   (unsigned long long)kept_freed);
	uint64_t d0 = pstats().direct_reads;
	for (int i = 0; i < TINY; i++)
		bad += read_check(&t[i], 0, t[i].size, &v[i], why, sizeof(why));
	struct sfs_prefetch_stats ps = pstats();
	ok(bad == 0 && ps.direct_reads - d0 == TINY && ps.direct_scratch_bytes == TINY * 16 * KiB,
	   "tiny: %d direct reads in flight hold %llu KiB (%d x 16 KiB; %llu direct, %d wrong) %s",
	   TINY, (unsigned long long)(ps.direct_scratch_bytes >> 10), TINY,
	   (unsigned long long)(ps.direct_reads - d0), bad, why);
	bad = 0;
	for (int i = 0; i < TINY; i++)
		bad += view_check(&t[i], 0, &v[i], v[i].bytes, why, sizeof(why)) != 0;
	ok(bad == 0, "tiny: every view still holds its own bytes (%d wrong) %s", bad, why);
	for (int i = 0; i < TINY; i++)
		sfs_pf_view_release(t[i].f, &v[i]);
	uint64_t freed = sfs_prefetch_release_idle(pf, 0);
	ps = pstats();
	ok(freed >= TINY * 16 * KiB && ps.direct_scratch_bytes == 0,
	   "tiny: idle release gives the pages back (%llu KiB freed, %llu bytes left)",
	   (unsigned long long)(freed >> 10), (unsigned long long)ps.direct_scratch_bytes);
	for (int i = 0; i < TINY; i++)
		sfs_pf_file_unref(t[i].f);
	store_teardown(store, dir);
}

/*
 * The checksums of a chunk's 16 KiB sub-blocks are computed as its READ
 * parts land (chunk_place) and handed to the store with it: with a READ
 * size that is a multiple of 16 KiB all of them, with 100,000 bytes those
 * within a part (the writer hashes the rest). Every chunk then loads from
 * the store and passes its checks: a wrong checksum would fail the load
 * and fetch the chunk again.
 */
static void place_hashes(uint32_t max_read)
{
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	const uint64_t size = 3 * MiB + 5000;
	const uint32_t seed = 77;
	sfs_store *store = store_open(dir);

	shard_prefetch_open(store, 64 * MiB, max_read);
	struct tfile a = topen(seed, size, size);
	sfs_pf_file_opened(a.f); /* the pump fetches the file whole, for the store */
	uint64_t cached = 0;
	for (int i = 0; i < 1000 && cached < size; i++) {
		usleep(10000);
		cached = sfs_pf_file_cached_bytes(a.f);
	}
	ok(cached == size, "place %u: the file reached the store (%llu of %llu bytes)", max_read,
	   (unsigned long long)cached, (unsigned long long)size);
	sfs_pf_file_drop_idle(a.f); /* its chunks leave memory */
	sfs_pf_file_unref(a.f);
	fake_origin_drain(org);

	struct sfs_prefetch_stats p0 = pstats();
	struct tfile b = topen(seed, size, size);
	sfs_pf_file_opened(b.f);
	int bad = 0;
	for (uint64_t off = 0; off < size; off += 256 * KiB)
		bad += read_check(&b, off, 256 * KiB, NULL, why, sizeof(why));
	struct sfs_prefetch_stats p1 = pstats();
	ok(bad == 0 && p1.hit_bytes - p0.hit_bytes == size && p1.fetched_bytes == p0.fetched_bytes,
	   "place %u: every chunk loads from the store and passes its checks (%llu of %llu bytes "
	   "from the store, %llu fetched again, %d wrong) %s",
	   max_read, (unsigned long long)(p1.hit_bytes - p0.hit_bytes), (unsigned long long)size,
	   (unsigned long long)(p1.fetched_bytes - p0.fetched_bytes), bad, why);
	sfs_pf_file_drop_idle(b.f);
	sfs_pf_file_unref(b.f);
	store_teardown(store, dir);
}

static void test_place_256k(void) { place_hashes(256 * KiB); }
static void test_place_100000(void) { place_hashes(100000); }

/* --- hints: one fetch state per version, holds, fetching ahead --------------- */

static unsigned observed_reads, observed_fetches;

static void obs_read(void *arg, sfs_pf_file *f, uint64_t off, uint64_t end)
{
	__atomic_fetch_add(&observed_reads, 1, __ATOMIC_RELAXED);
}

static void obs_fetch(void *arg, sfs_pf_file *f)
{
	__atomic_fetch_add(&observed_fetches, 1, __ATOMIC_RELAXED);
}

/* Version (size, mtime) of file `seed`; the fake serves mtime 0 (another
 * mtime is another version, whose fetches fail with ESTALE). */
static sfs_pf_file *open_v(uint32_t seed, uint64_t size, int64_t mtime)
{
	struct sfs_fh fh;
	struct sfs_file_version v = {.fsid = 1, .fileid = seed, .size = size, .mtime_s = mtime};
	sfs_pf_file *f;

	fake_fh(&fh, seed, size);
	if (sfs_pf_file_open_version(pf, &fh, &v, &f)) {
		printf("Bail out! sfs_pf_file_open_version\n");
		exit(1);
	}
	return f;
}

static void test_hinted(void)
{
	const uint64_t size = 300 * KiB, big = 8 * MiB;
	char why[256] = "";

	setup(MiB, 0, 2, 64 * MiB, 16);
	sfs_prefetch_set_observers(pf, obs_read, obs_fetch, NULL);
	sfs_pf_file *a = open_v(21, size, 0), *b = open_v(21, size, 0), *c = open_v(21, size, 6);
	ok(a == b, "hinted: two opens of one version share its fetch state");
	ok(c != a, "hinted: another version has its own");

	sfs_pf_file_hint_hold(a);
	struct sfs_pf_ahead ah;
	sfs_pf_file_fetch_ahead(a, 0, size, 2000, &ah);
	ok(ah.started_bytes == size && !ah.busy && !ah.cached && !ah.pending,
	   "hinted: fetch_ahead started the file's chunk and waited for it (%llu bytes)",
	   (unsigned long long)ah.started_bytes);
	/* The observer runs after the chunk's lock is dropped: it may follow
	 * the wait by a moment. */
	for (int i = 0; i < 1000 && !__atomic_load_n(&observed_fetches, __ATOMIC_RELAXED); i++)
		usleep(1000);
	ok(__atomic_load_n(&observed_fetches, __ATOMIC_RELAXED) == 1,
	   "hinted: the fetch observer saw its chunk land");
	sfs_pf_file_fetch_ahead(a, 0, size, 0, &ah);
	ok(ah.started_bytes == 0 && !ah.busy, "hinted: a second call starts nothing");
	uint64_t fetched = pstats().fetched_bytes;
	struct tfile t = {.f = b, .seed = 21, .size = size, .server_size = size};
	sfs_pf_file_opened(b); /* the reader's open, sharing a's state */
	int bad = read_check(&t, 0, 128 * KiB, NULL, why, sizeof(why)) +
		  read_check(&t, 128 * KiB, size - 128 * KiB, NULL, why, sizeof(why));
	ok(!bad, "hinted: the reader's bytes are right %s", why);
	ok(pstats().fetched_bytes == fetched, "hinted: the reader got the chunk fetched ahead");
	ok(observed_reads == 2, "hinted: the read observer saw both reads (%u)", observed_reads);
	sfs_pf_file_drop_idle(b);

	/* A big file held for ranges: chunks past the per-file limit start,
	 * and a range ahead is fetched without the rest of the file. */
	sfs_pf_file *d = open_v(22, big, 0);
	sfs_pf_file_hint_hold(d);
	sfs_pf_file_fetch_ahead(d, 5 * MiB + 100, 5 * MiB + 110 * KiB, 2000, &ah);
	ok(ah.started_bytes == MiB && !ah.busy, "hinted: a record's range fetches its chunk only");
	t = (struct tfile){.f = d, .seed = 22, .size = big, .server_size = big};
	unsigned reads = observed_reads;
	fetched = pstats().fetched_bytes;
	ok(!read_check(&t, 5 * MiB + 100, 110 * KiB - 100, NULL, why, sizeof(why)) &&
	       pstats().fetched_bytes == fetched && observed_reads == reads + 1,
	   "hinted: the record read from memory, seen by the observer %s", why);
	sfs_pf_file_hint_release(d);
	sfs_pf_file_unref(d);

	/* Not held: reads are not reported. */
	sfs_pf_file_hint_release(a);
	reads = observed_reads;
	sfs_pf_file_opened(a);
	t = (struct tfile){.f = a, .seed = 21, .size = size, .server_size = size};
	ok(!read_check(&t, 0, 4 * KiB, NULL, why, sizeof(why)) && observed_reads == reads,
	   "hinted: reads of a file no list holds are not reported");
	sfs_pf_file_drop_idle(a);
	sfs_pf_file_unref(a);
	sfs_pf_file_unref(b);
	sfs_pf_file_unref(c);
	teardown();
}

/* A warm-up's fetches go to the origin as background (origin.h); a reader
 * that comes to wait for one of its chunks promotes that chunk's READs. */
static void test_warm_background(void)
{
	char dir[] = "/tmp/test_prefetch.XXXXXX";
	sfs_store *store = store_setup(dir, 64 * MiB);
	struct tfile t = topen(61, 16 * MiB, 16 * MiB);
	bool active = false;

	sfs_pf_file_opened(t.f);
	fake_origin_hold_from(org, 8 * MiB);
	struct fake_origin_stats s0 = ostats();
	ok(sfs_pf_file_warm(t.f, &active) == 0 && active, "warm background: the warm-up starts");
	for (int i = 0; i < 5000 && ostats().held < 8; i++)
		usleep(1000);
	struct fake_origin_stats s1 = ostats();
	ok(s1.background - s0.background == 16 && s1.requests - s0.requests == 16,
	   "warm background: its %llu READs went as background (%llu)",
	   (unsigned long long)(s1.requests - s0.requests),
	   (unsigned long long)(s1.background - s0.background));
	struct waiter w = {.t = &t, .off = 12 * MiB + 64 * KiB};
	pthread_t th;
	pthread_create(&th, NULL, waiter_thread, &w);
	for (int i = 0; i < 5000 && ostats().promoted == s1.promoted; i++)
		usleep(1000);
	struct fake_origin_stats s2 = ostats();
	ok(s2.promoted - s1.promoted == 1,
	   "warm background: a reader waiting for a chunk still being warmed promoted its READ "
	   "(%llu)",
	   (unsigned long long)(s2.promoted - s1.promoted));
	fake_origin_release(org);
	pthread_join(th, NULL);
	ok(w.rc == 64 * KiB && !w.bad, "warm background: the reader got its bytes (rc %zd) %s",
	   w.rc, w.why);
	ok(wait_cached(&t), "warm background: the warm-up completes");
	sfs_pf_file_unref(t.f);
	store_teardown(store, dir);
}

/* --- per-dataset read counters, kept where the bytes are found ------------- */

/* The hit and miss bytes the store counted for dataset id. */
static void dataset_counts(sfs_store *store, uint32_t id, uint64_t *hit, uint64_t *miss)
{
	struct sfs_store_dataset *l;
	size_t n;

	*hit = *miss = UINT64_MAX;
	if (sfs_store_list(store, &l, &n))
		return;
	for (size_t i = 0; i < n; i++)
		if (l[i].id == id) {
			*hit = l[i].hit_bytes;
			*miss = l[i].miss_bytes;
		}
	free(l);
}

/* An open of file `seed` (size bytes) as a version of dataset ds. */
static struct tfile topen_ds(uint32_t seed, uint64_t size, uint32_t ds)
{
	struct tfile t = {.seed = seed, .size = size, .server_size = size};
	struct sfs_file_version v = {.fsid = 1, .fileid = seed, .size = size, .dataset = ds};
	struct sfs_fh fh;

	fake_fh(&fh, seed, size);
	if (sfs_pf_file_open_version(pf, &fh, &v, &t.f)) {
		printf("Bail out! sfs_pf_file_open_version\n");
		exit(1);
	}
	sfs_pf_file_opened(t.f);
	return t;
}

static void tclose(struct tfile *t)
{
	sfs_pf_file_drop_idle(t->f);
	sfs_pf_file_unref(t->f);
	fake_origin_drain(org);
}

/*
 * A reader's bytes count for its dataset as prefetch or the store find
 * them, each read once: a cold sequential pass (the chunk path, from the
 * origin: misses), the same pass again (chunks loaded from the store:
 * hits), and a record read by the direct path (the store counts it).
 */
static void test_dataset_reads(void)
{
	char dir[] = "/tmp/test_prefetch.XXXXXX", why[256] = "";
	const uint64_t size = 3 * MiB + 5000;
	sfs_store *store = store_setup(dir, 64 * MiB);
	uint32_t ds = sfs_store_dataset(store, "/ifs/ds");
	uint64_t hit, miss;
	int bad = 0;

	struct tfile t = topen_ds(31, size, ds);
	for (uint64_t off = 0; off < size; off += 256 * KiB)
		bad += read_check(&t, off, 256 * KiB, NULL, why, sizeof(why)) != 0;
	dataset_counts(store, ds, &hit, &miss);
	ok(bad == 0 && miss == size && hit == 0,
	   "dataset reads: a cold pass counts its bytes as misses (%llu, hits %llu) %s",
	   (unsigned long long)miss, (unsigned long long)hit, why);
	ok(wait_cached(&t), "dataset reads: the file reaches the store");
	tclose(&t);

	t = topen_ds(31, size, ds);
	for (uint64_t off = 0; off < size; off += 256 * KiB)
		bad += read_check(&t, off, 256 * KiB, NULL, why, sizeof(why)) != 0;
	dataset_counts(store, ds, &hit, &miss);
	ok(bad == 0 && hit == size && miss == size,
	   "dataset reads: a warm pass through chunks counts hits (%llu, misses %llu) %s",
	   (unsigned long long)hit, (unsigned long long)miss, why);
	tclose(&t);

	t = topen_ds(31, size, ds);
	uint64_t direct = pstats().direct_reads;
	bad += read_check(&t, 2 * MiB + 100, 100 * KiB, NULL, why, sizeof(why)) != 0;
	dataset_counts(store, ds, &hit, &miss);
	ok(bad == 0 && pstats().direct_reads == direct + 1 && hit == size + 100 * KiB &&
	       miss == size,
	   "dataset reads: a record by the direct path counts as hits, once (%llu) %s",
	   (unsigned long long)hit, why);
	tclose(&t);

	/* A cold record answered by the thread that lands its chunk (a waiter). */
	struct async_out o = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
	o.t = topen_ds(32, 3 * MiB, ds);
	ssize_t rc = async_read(&o, MiB + 100, 100 * KiB);
	async_wait(&o, 1);
	dataset_counts(store, ds, &hit, &miss);
	ok(rc == -EINPROGRESS && o.n == 100 * KiB && !o.bad && miss == size + 100 * KiB &&
	       hit == size + 100 * KiB,
	   "dataset reads: a record answered from the I/O thread counts as a miss, once (rc %zd, "
	   "misses %llu)",
	   rc, (unsigned long long)miss);
	tclose(&o.t);
	store_teardown(store, dir);
}

/* --- the invariants are asserts, and they are compiled in ------------------ */

/* In a child: a view released twice through a copy taken before the first
 * release unpins its chunk a second time, which chunk_unpin must refuse
 * (abort) rather than let the pin count wrap. */
static void unpin_twice_child(void)
{
	setup(MiB, 0, 2, 4 * MiB, 1);
	struct tfile t = topen(23, 8 * MiB, 8 * MiB);
	struct sfs_pf_view v = {0};

	/* From offset 0 (a sequential reader's first read): the chunk path,
	 * and a range that does not end the chunk, so the chunk stays. */
	if (sfs_pf_read(t.f, 1000, 64 * KiB, &v) != 64 * KiB || v.n_pins != 1)
		_exit(2);
	struct sfs_pf_view copy = v;
	sfs_pf_view_release(t.f, &v);
	sfs_pf_view_release(t.f, &copy); /* the pin is gone: must abort */
	_exit(0);
}

static void test_invariants(void)
{
#ifdef NDEBUG
	ok(0, "invariants: prefetch's asserts are compiled out (NDEBUG: keep meson's b_ndebug "
	      "false)");
#else
	ok(1, "invariants: prefetch's asserts are compiled in (no NDEBUG)");
#endif
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		if (!freopen("/dev/null", "w", stderr))
			_exit(3);
		unpin_twice_child();
	}
	int status = 0;
	waitpid(pid, &status, 0);
	ok(pid > 0 && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
	   "invariants: a pin dropped twice aborts (child %s %d)",
	   WIFSIGNALED(status) ? "signal" : "exit",
	   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
}

static const struct tap_test tests[] = {
    {"exact_1m", test_exact_1m},
    {"exact_256k", test_exact_256k},
    {"exact_100000", test_exact_100000},
    {"sequential", test_sequential},
    {"random_reader", test_random_reader},
    {"budget", test_budget},
    {"failures", test_failures},
    {"short_256k", test_short_256k},
    {"short_100000", test_short_100000},
    {"concurrent", test_concurrent},
    {"close_inflight", test_close_inflight},
    {"pins", test_pins},
    {"submit_race", test_submit_race},
    {"undelivered", test_undelivered},
    {"async", test_async},
    {"sized_keep", test_sized_keep},
    {"async_chunks", test_async_chunks},
    {"over_budget", test_over_budget},
    {"pool_tail", test_pool_tail},
    {"write_full", test_write_full},
    {"scratch_slots", test_scratch_slots},
    {"scratch_tiny", test_scratch_tiny},
    {"place_256k", test_place_256k},
    {"place_100000", test_place_100000},
    {"hinted", test_hinted},
    {"warm_background", test_warm_background},
    {"dataset_reads", test_dataset_reads},
    {"invariants", test_invariants},
};

/* With no arguments, runs every test; otherwise only the named ones. */
int main(int argc, char **argv)
{
	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
