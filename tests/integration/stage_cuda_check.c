// SPDX-License-Identifier: Apache-2.0
/*
 * stage_cuda_check: the trainer of tests/integration/test_stage_cuda_fake.sh.
 * It stages ranges of a file on a shardfs mount into GPU memory with
 * SHARDFS_IOC_STAGE and compares every byte of the allocation with the
 * file's bytes, read from REF (the same file outside the mount).
 *
 *   stage_cuda_check [--label L] [--gpu N] [--calls N] [--seed S] [--procs N]
 *                    [--expect nfs|cache|any] [--range OFF:LEN]... [--refusals]
 *                    --stats STATS FILE REF
 *
 * The CUDA runtime is loaded with dlopen (cache/staging/cudart_load.h), so
 * this runs against tests/unit/fake_cudart.c (LD_LIBRARY_PATH) and against
 * a real GPU alike: the allocation is read back with cudaMemcpy.
 *
 * A STAGE call has 2 to 5 ranges of 1 to 16 MiB at unaligned file and
 * region offsets with gaps between them, one of them crossing the end of
 * the file; the first call also has a chunk-aligned 16 MiB range, one that
 * starts at the end of the file and an empty one; every fourth call from
 * the third on is instead a full batch of 64 ranges of up to 256 KiB, some
 * past the end of the file. --range OFF:LEN (repeatable) makes
 * one call of exactly those ranges instead. The region is a view at an
 * unaligned offset of a larger allocation; before each call the whole
 * allocation is set to a poison byte, after it every byte is checked: a
 * placed byte equals the file's, every other byte (gaps, the unplaced tail
 * of a range at the end of the file, outside the view) is still poison.
 * Also checked: each range's placed count (short only at the end of the
 * file), bytes_placed, the path bits (--expect: the first call's bytes
 * came from NFS, or every call's from the cache only), and the deltas of
 * the mount's stats (STATS: its .shardfs/stats): cuda bytes and requests
 * exactly this run's, no staging error. --refusals then checks that a
 * region claiming more than its allocation cannot be written past it
 * (ERANGE, nothing written) and that a range outside the region is ERANGE,
 * each counted once under its reason.
 *
 * --procs N forks N trainers (before any CUDA call here), each with its own
 * allocation on the same GPU and seed S + k; they register, then start
 * staging together. The parent checks each one's result, that all N were
 * staging at the same time, and the stats deltas of all of them.
 *
 * Output: TAP lines (ok N - ...) and diagnostics (# ...), for
 * sfs_relay_tap. Exit status: 0, 1 on a failed check, 2 for bad usage, 77
 * when the mount or this process has no CUDA staging.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cudart_load.h"
#include <shardfs/shardfs_ioctl.h>

#define MIB	     (1ull << 20)
#define REGION_BYTES (48 * MIB) /* the view staged into */
#define VIEW_OFFSET  12347	/* where the view starts in the allocation */
#define TAIL_BYTES   65536	/* allocation bytes after the view */
#define POISON	     0xA5
#define MAX_PROCS    16
#define MAX_EXPLICIT 16

static struct sfs_cudart cu; /* cudart_load.h */

enum expect { EXPECT_ANY, EXPECT_NFS, EXPECT_CACHE };

struct opts {
	const char *label, *stats, *file, *ref;
	int gpu, calls, procs;
	uint64_t seed;
	enum expect expect;
	struct shardfs_range explicit_ranges[MAX_EXPLICIT];
	unsigned n_explicit;
	bool refusals;
};

/* One trainer's device memory and its registration. */
struct target {
	char *dev;	    /* cudaMalloc'd, alloc_bytes */
	size_t alloc_bytes; /* VIEW_OFFSET + REGION_BYTES + TAIL_BYTES */
	uint8_t *host;	    /* the allocation read back */
	uint8_t handle[64];
	uint8_t uuid[16];
	int fd;
	uint64_t region_id;
};

/* What one trainer did; in shared memory with --procs. */
struct tally {
	uint64_t calls, placed_bytes, failed;
	double t_start, t_end; /* CLOCK_MONOTONIC around the STAGE calls */
};

static const uint8_t *ref;
static uint64_t ref_size;
static int n_tap;
static int n_fail;

static void tap(bool ok, const char *label, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void tap(bool ok, const char *label, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d - %s: ", ok ? "" : "not ", ++n_tap, label);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!ok)
		n_fail++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rnd(uint64_t *s) /* xorshift64* */
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 0x2545F4914F6CDD1Dull;
}

/* A counter of the stats file (the whole "name{labels}"); returns its value,
 * or -1 when the file or the line is missing. */
static int64_t stat_value(const char *stats, const char *name)
{
	FILE *f = fopen(stats, "r");
	char line[512];
	size_t n = strlen(name);
	int64_t v = -1;

	if (!f)
		return -1;
	while (v < 0 && fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ' ')
			v = strtoll(line + n + 1, NULL, 10);
	fclose(f);
	return v;
}

/* The staging counters that a run moves. */
struct stage_stats {
	int64_t bytes, requests, errors; /* -1: a line is missing */
};

static void stage_stats(const char *stats, struct stage_stats *s)
{
	static const char *const reasons[] = {"invalid",    "out_of_range", "no_region",
					      "permission", "unsupported",  "io"};
	char name[128];

	s->bytes = stat_value(stats, "shardfs_stage_bytes_total{target=\"cuda\"}");
	s->requests = stat_value(stats, "shardfs_stage_requests_total{target=\"cuda\"}");
	s->errors = 0;
	for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
		snprintf(name, sizeof(name), "shardfs_stage_errors_total{reason=\"%s\"}",
			 reasons[i]);
		int64_t v = stat_value(stats, name);
		s->errors = v < 0 || s->errors < 0 ? -1 : s->errors + v;
	}
}

/* Reads the whole of path into ref / ref_size. Returns 0 or -1 after a
 * message. */
static int load_ref(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	uint8_t *buf;
	uint64_t got = 0;

	if (fd < 0 || fstat(fd, &sb) < 0) {
		fprintf(stderr, "stage_cuda_check: %s: %s\n", path, strerror(errno));
		return -1;
	}
	buf = malloc((size_t)sb.st_size + 1);
	while (buf && got < (uint64_t)sb.st_size) {
		ssize_t n = pread(fd, buf + got, (size_t)sb.st_size - got, (off_t)got);
		if (n <= 0)
			break;
		got += (uint64_t)n;
	}
	close(fd);
	if (!buf || got != (uint64_t)sb.st_size) {
		fprintf(stderr, "stage_cuda_check: %s: short read\n", path);
		free(buf);
		return -1;
	}
	ref = buf;
	ref_size = got;
	return 0;
}

/* What QUERY on fd says of CUDA staging and the GPU uuid; returns 0, or 77
 * (no CUDA staging on the mount) or 1 after a message. */
static int query_mount(int fd, const uint8_t uuid[16])
{
	struct shardfs_query q;

	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	if (ioctl(fd, SHARDFS_IOC_QUERY, &q) < 0) {
		printf("# SHARDFS_IOC_QUERY: %s\n", strerror(errno));
		return errno == ENOTTY ? 77 : 1;
	}
	if (!(q.caps & SHARDFS_CAP_CUDA_IPC) || q.n_gpus == 0) {
		printf("# the mount has no CUDA staging (caps %#x, %u GPUs)\n", q.caps, q.n_gpus);
		return 77;
	}
	for (unsigned i = 0; i < q.n_gpus && i < SHARDFS_MAX_GPUS; i++)
		if (!memcmp(q.gpu_uuid[i], uuid, 16))
			return 0;
	printf("# the mount does not list this GPU's UUID among its %u\n", q.n_gpus);
	return 1;
}

/* Allocates and registers t on o->gpu. Returns 0, 77 or 1 (after a
 * message). */
static int target_open(const struct opts *o, struct target *t)
{
	static uint8_t prop[SFS_CUDART_PROP_BYTES];
	int e, rc;

	memset(t, 0, sizeof(*t));
	t->fd = -1;
	t->alloc_bytes = VIEW_OFFSET + REGION_BYTES + TAIL_BYTES;
	if ((e = cu.set_device(o->gpu)) || (e = cu.get_device_properties(prop, o->gpu)) ||
	    (e = cu.malloc((void **)&t->dev, t->alloc_bytes)) ||
	    (e = cu.ipc_get_mem_handle(t->handle, t->dev))) {
		printf("# GPU %d: %s\n", o->gpu, cu.get_error_string(e));
		return 1;
	}
	memcpy(t->uuid, prop + SFS_CUDART_PROP_UUID_OFFSET, 16);
	t->host = malloc(t->alloc_bytes);
	if (!t->host)
		return 1;
	if ((t->fd = open(o->file, O_RDONLY | O_CLOEXEC)) < 0) {
		printf("# %s: %s\n", o->file, strerror(errno));
		return 1;
	}
	if ((rc = query_mount(t->fd, t->uuid)))
		return rc;
	struct shardfs_region r;
	memset(&r, 0, sizeof(r));
	r.size = sizeof(r);
	r.kind = SHARDFS_REGION_CUDA;
	r.offset = VIEW_OFFSET;
	r.length = REGION_BYTES;
	r.alloc_size = t->alloc_bytes;
	memcpy(r.cuda_ipc_handle, t->handle, 64);
	memcpy(r.gpu_uuid, t->uuid, 16);
	if (ioctl(t->fd, SHARDFS_IOC_REGISTER, &r) < 0) {
		printf("# SHARDFS_IOC_REGISTER: %s\n", strerror(errno));
		return 1;
	}
	t->region_id = r.region_id;
	return 0;
}

static void target_close(struct target *t)
{
	if (t->fd >= 0)
		close(t->fd); /* drops the region */
	if (t->dev)
		cu.free(t->dev);
	free(t->host);
}

/* The ranges of call c into s (see the file's comment). */
static void make_call(const struct opts *o, int c, uint64_t *rng, struct shardfs_stage *s)
{
	uint64_t pos = 1 + rnd(rng) % 65536, size = ref_size;

	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	if (o->n_explicit) {
		for (unsigned i = 0; i < o->n_explicit; i++) {
			s->ranges[i] = o->explicit_ranges[i];
			s->ranges[i].region_offset = pos;
			pos += s->ranges[i].length + 4097;
		}
		s->n_ranges = o->n_explicit;
		return;
	}
	if (c % 4 == 2) { /* a full batch of small ranges, some past the end */
		for (unsigned i = 0; i < SHARDFS_STAGE_MAX_RANGES; i++) {
			uint64_t len = 1 + rnd(rng) % (256 << 10);
			s->ranges[s->n_ranges++] =
			    (struct shardfs_range){pos, rnd(rng) % (size + 1000), len, 0};
			pos += len + rnd(rng) % 100;
		}
		return;
	}
	if (c == 0 && size > 17 * MIB) {
		/* Chunk-aligned, one that starts at the end of the file, and an
		 * empty one. */
		s->ranges[s->n_ranges++] = (struct shardfs_range){pos, MIB, 16 * MIB, 0};
		pos += 16 * MIB + 4096;
		s->ranges[s->n_ranges++] = (struct shardfs_range){pos, size, 4096, 0};
		pos += 4096 + 13;
		s->ranges[s->n_ranges++] = (struct shardfs_range){pos, 777, 0, 0};
	}
	unsigned n = 2 + (unsigned)(rnd(rng) % 4), eof = (unsigned)(rnd(rng) % n);
	for (unsigned i = 0; i < n; i++) {
		uint64_t len = MIB + rnd(rng) % (15 * MIB + 1), off;
		if (pos + MIB > REGION_BYTES)
			break;
		if (pos + len > REGION_BYTES)
			len = REGION_BYTES - pos;
		if (i == eof || len >= size) /* crosses the end: 1 .. len - 1 bytes placed */
			off = size > len ? size - 1 - rnd(rng) % (len - 1) : rnd(rng) % size;
		else
			off = rnd(rng) % (size - len + 1);
		s->ranges[s->n_ranges++] = (struct shardfs_range){pos, off, len, 0};
		pos += len + rnd(rng) % 8192;
	}
}

/* Checks the readback of t against s: placed bytes equal the file's, all
 * else poison. Returns true when exact, else false after a diagnostic. */
static bool bytes_exact(const char *label, const struct target *t, const struct shardfs_stage *s)
{
	uint8_t *want = malloc(t->alloc_bytes);
	bool ok = true;

	if (!want)
		return false;
	memset(want, POISON, t->alloc_bytes);
	for (uint32_t i = 0; i < s->n_ranges; i++) {
		const struct shardfs_range *g = &s->ranges[i];
		uint64_t n = g->file_offset >= ref_size ? 0 : ref_size - g->file_offset;
		n = n < g->length ? n : g->length;
		memcpy(want + VIEW_OFFSET + g->region_offset, ref + g->file_offset, n);
	}
	if (memcmp(want, t->host, t->alloc_bytes)) {
		size_t k = 0;
		while (want[k] == t->host[k])
			k++;
		const char *where = "outside every range (should be poison)";
		for (uint32_t i = 0; i < s->n_ranges; i++) {
			const struct shardfs_range *g = &s->ranges[i];
			uint64_t r0 = VIEW_OFFSET + g->region_offset;
			if (k >= r0 && k < r0 + g->length) {
				printf("# %s: range %u (file offset %" PRIu64 ", length %" PRIu64
				       "): byte %" PRIu64 " is %#x, want %#x\n",
				       label, i, g->file_offset, g->length, k - r0, t->host[k],
				       want[k]);
				where = NULL;
			}
		}
		if (where)
			printf("# %s: allocation byte %zu %s is %#x\n", label, k, where,
			       t->host[k]);
		ok = false;
	}
	free(want);
	return ok;
}

/* One STAGE call c on t; checks it. Returns true when every check passed.
 * Adds to *ta; *path gets the call's path bits. */
static bool one_call(const struct opts *o, const char *label, int c, uint64_t *rng,
		     struct target *t, struct tally *ta, uint32_t *path, char *what,
		     size_t what_len)
{
	struct shardfs_stage *s = calloc(1, sizeof(*s));
	uint64_t want_total = 0, len_total = 0;
	bool ok = true;
	int e;

	snprintf(what, what_len, "call failed");
	if (!s)
		return false;
	make_call(o, c, rng, s);
	s->region_id = t->region_id;
	if ((e = cu.set_device(o->gpu)) || (e = cu.memset(t->dev, POISON, t->alloc_bytes)) ||
	    (e = cu.device_synchronize())) {
		printf("# %s: poison: %s\n", label, cu.get_error_string(e));
		free(s);
		return false;
	}
	int rc = ioctl(t->fd, SHARDFS_IOC_STAGE, s);
	ta->calls++;
	if (rc < 0) {
		printf("# %s: call %d: SHARDFS_IOC_STAGE: %s\n", label, c, strerror(errno));
		free(s);
		return false;
	}
	*path = s->path;
	for (uint32_t i = 0; i < s->n_ranges; i++) {
		const struct shardfs_range *g = &s->ranges[i];
		uint64_t n = g->file_offset >= ref_size ? 0 : ref_size - g->file_offset;
		n = n < g->length ? n : g->length;
		if (g->placed != n) {
			printf("# %s: call %d range %u (file offset %" PRIu64 ", length %" PRIu64
			       "): placed %" PRIu64 ", want %" PRIu64 "\n",
			       label, c, i, g->file_offset, g->length, g->placed, n);
			ok = false;
		}
		want_total += n;
		len_total += g->length;
	}
	ta->placed_bytes += s->bytes_placed;
	if (s->bytes_placed != want_total) {
		printf("# %s: call %d: bytes_placed %" PRIu64 ", want %" PRIu64 "\n", label, c,
		       s->bytes_placed, want_total);
		ok = false;
	}
	if ((e = cu.memcpy(t->host, t->dev, t->alloc_bytes, SFS_CUDART_MEMCPY_D2H))) {
		printf("# %s: read back: %s\n", label, cu.get_error_string(e));
		ok = false;
	} else if (!bytes_exact(label, t, s)) {
		ok = false;
	}
	snprintf(what, what_len, "%u ranges, %.1f MiB asked, %.1f MiB placed", s->n_ranges,
		 (double)len_total / MIB, (double)want_total / MIB);
	free(s);
	return ok;
}

static const char *path_str(uint32_t path, char *buf, size_t len)
{
	snprintf(buf, len, "%s%s%s%s", path & SHARDFS_PATH_CACHE ? "cache " : "",
		 path & SHARDFS_PATH_NFS ? "nfs " : "",
		 path & SHARDFS_PATH_SHM_COPY ? "shm_copy " : "",
		 path & SHARDFS_PATH_CUDA_PINNED ? "cuda_pinned" : "");
	return buf;
}

/* The calls of one trainer, on t; TAP lines unless quiet (then only
 * diagnostics of failures). Fills *ta. */
static void run_calls(const struct opts *o, const char *label, uint64_t seed, struct target *t,
		      bool quiet, struct tally *ta)
{
	uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
	int calls = o->n_explicit ? 1 : o->calls;
	char what[128], p[64];

	ta->t_start = now_s();
	for (int c = 0; c < calls; c++) {
		uint32_t path = 0;
		bool ok = one_call(o, label, c, &rng, t, ta, &path, what, sizeof(what));
		bool path_ok = path & SHARDFS_PATH_CUDA_PINNED && !(path & SHARDFS_PATH_SHM_COPY);
		if (o->expect == EXPECT_CACHE)
			path_ok =
			    path_ok && path & SHARDFS_PATH_CACHE && !(path & SHARDFS_PATH_NFS);
		if (o->expect == EXPECT_NFS && c == 0)
			path_ok = path_ok && path & SHARDFS_PATH_NFS;
		if (!path_ok)
			printf("# %s: call %d: path %#x (%s)\n", label, c, path,
			       path_str(path, p, sizeof(p)));
		if (!quiet)
			tap(ok && path_ok, label,
			    "STAGE %d: %s, placed as asked, every byte exact, "
			    "path %s",
			    c, what, path_str(path, p, sizeof(p)));
		else if (!(ok && path_ok))
			ta->failed++;
	}
	ta->t_end = now_s();
}

/* A region that claims twice its allocation, and a range outside a region:
 * both refused with ERANGE, nothing written. TAP lines. */
static void refusals(const struct opts *o, struct target *t)
{
	struct shardfs_region r;
	struct shardfs_stage *s = calloc(1, sizeof(*s));
	int64_t before =
	    stat_value(o->stats, "shardfs_stage_errors_total{reason=\"out_of_range\"}");
	int e;

	if (!s)
		return;
	memset(&r, 0, sizeof(r));
	r.size = sizeof(r);
	r.kind = SHARDFS_REGION_CUDA;
	r.length = 2 * t->alloc_bytes;
	r.alloc_size = 2 * t->alloc_bytes; /* a lie: the driver knows the true size */
	memcpy(r.cuda_ipc_handle, t->handle, 64);
	memcpy(r.gpu_uuid, t->uuid, 16);
	int rc = ioctl(t->fd, SHARDFS_IOC_REGISTER, &r);
	if ((e = cu.memset(t->dev, POISON, t->alloc_bytes)) || (e = cu.device_synchronize()))
		printf("# poison: %s\n", cu.get_error_string(e));
	int stage_rc = -1, stage_errno = 0;
	if (rc == 0) {
		/* Starts inside the allocation, ends past it. */
		s->size = sizeof(*s);
		s->region_id = r.region_id;
		s->n_ranges = 1;
		s->ranges[0] = (struct shardfs_range){t->alloc_bytes - MIB, 0, 2 * MIB, 0};
		stage_rc = ioctl(t->fd, SHARDFS_IOC_STAGE, s);
		stage_errno = errno;
	}
	tap(rc == 0 && stage_rc < 0 && stage_errno == ERANGE, o->label,
	    "a region claiming twice its allocation: STAGE past the allocation's true end "
	    "refused with ERANGE (register %d, stage %d, %s)",
	    rc, stage_rc, stage_rc < 0 ? strerror(stage_errno) : "placed");
	memset(s, 0, sizeof(*s));
	s->size = sizeof(*s);
	s->region_id = t->region_id;
	s->n_ranges = 2;
	s->ranges[0] = (struct shardfs_range){0, 0, MIB, 0};
	s->ranges[1] = (struct shardfs_range){REGION_BYTES - 100, 0, 101, 0};
	stage_rc = ioctl(t->fd, SHARDFS_IOC_STAGE, s);
	stage_errno = errno;
	tap(stage_rc < 0 && stage_errno == ERANGE, o->label,
	    "a range one byte past the region: the whole STAGE refused with ERANGE (%s)",
	    stage_rc < 0 ? strerror(stage_errno) : "placed");
	bool untouched = !cu.memcpy(t->host, t->dev, t->alloc_bytes, SFS_CUDART_MEMCPY_D2H);
	for (size_t k = 0; untouched && k < t->alloc_bytes; k++)
		untouched = t->host[k] == POISON;
	tap(untouched, o->label, "... and neither wrote a byte of the allocation");
	int64_t after = stat_value(o->stats, "shardfs_stage_errors_total{reason=\"out_of_range\"}");
	tap(before >= 0 && after == before + 2, o->label,
	    "shardfs_stage_errors_total{reason=\"out_of_range\"} counted both (%" PRId64
	    " -> %" PRId64 ")",
	    before, after);
	free(s);
}

/* One trainer in this process. Returns the exit status. */
static int run_one(const struct opts *o)
{
	struct target t;
	struct tally ta = {0};
	struct stage_stats s0, s1;
	int rc = target_open(o, &t);

	if (rc) {
		target_close(&t);
		return rc;
	}
	stage_stats(o->stats, &s0);
	run_calls(o, o->label, o->seed, &t, false, &ta);
	stage_stats(o->stats, &s1);
	tap(s0.bytes >= 0 && s1.bytes - s0.bytes == (int64_t)ta.placed_bytes, o->label,
	    "shardfs_stage_bytes_total{target=\"cuda\"} grew by the bytes placed (%" PRId64
	    ", placed %" PRIu64 ")",
	    s1.bytes - s0.bytes, ta.placed_bytes);
	tap(s0.requests >= 0 && s1.requests - s0.requests == (int64_t)ta.calls, o->label,
	    "shardfs_stage_requests_total{target=\"cuda\"} grew by the calls (%" PRId64 ", %" PRIu64
	    " calls)",
	    s1.requests - s0.requests, ta.calls);
	tap(s0.errors >= 0 && s1.errors == s0.errors, o->label,
	    "no staging error counted (%" PRId64 " -> %" PRId64 ")", s0.errors, s1.errors);
	if (o->refusals)
		refusals(o, &t);
	target_close(&t);
	return n_fail ? 1 : 0;
}

/* --procs: o->procs trainers at once. Returns the exit status. */
static int run_procs(const struct opts *o)
{
	struct tally *ta = mmap(NULL, sizeof(*ta) * (size_t)o->procs, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pids[MAX_PROCS];
	int ready[2], go[2], status = 0;
	struct stage_stats s0, s1;

	if (ta == MAP_FAILED || pipe(ready) < 0 || pipe(go) < 0) {
		printf("# %s\n", strerror(errno));
		return 1;
	}
	memset(ta, 0, sizeof(*ta) * (size_t)o->procs);
	stage_stats(o->stats, &s0);
	for (int k = 0; k < o->procs; k++) {
		pids[k] = fork();
		if (pids[k] < 0) {
			printf("# fork: %s\n", strerror(errno));
			return 1;
		}
		if (pids[k] == 0) {
			struct target t;
			char label[64], c;
			close(ready[0]);
			close(go[1]);
			snprintf(label, sizeof(label), "%s trainer %d", o->label, k);
			int rc = target_open(o, &t);
			if (write(ready[1], rc ? "x" : "r", 1) != 1 || rc ||
			    read(go[0], &c, 1) != 0) { /* EOF: go */
				target_close(&t);
				_exit(rc ? rc : 1);
			}
			run_calls(o, label, o->seed + (uint64_t)k, &t, true, &ta[k]);
			target_close(&t);
			_exit(ta[k].failed ? 1 : 0);
		}
	}
	close(ready[1]);
	close(go[0]);
	char c;
	int n_ready = 0;
	for (int k = 0; k < o->procs; k++)
		n_ready += read(ready[0], &c, 1) == 1 && c == 'r';
	close(go[1]); /* all start staging */
	for (int k = 0; k < o->procs; k++) {
		int ws;
		waitpid(pids[k], &ws, 0);
		int rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
		if (rc == 77)
			status = 77;
		tap(rc == 0 && ta[k].calls == (uint64_t)o->calls, o->label,
		    "trainer %d: %" PRIu64 " STAGE calls, %.1f MiB placed, every byte exact "
		    "(exit %d)",
		    k, ta[k].calls, (double)ta[k].placed_bytes / MIB, rc);
	}
	double last_start = 0, first_end = 1e300;
	uint64_t placed = 0, calls = 0;
	for (int k = 0; k < o->procs; k++) {
		last_start = ta[k].t_start > last_start ? ta[k].t_start : last_start;
		first_end = ta[k].t_end < first_end ? ta[k].t_end : first_end;
		placed += ta[k].placed_bytes;
		calls += ta[k].calls;
	}
	tap(n_ready == o->procs && last_start < first_end, o->label,
	    "all %d trainers were staging at the same time (for %.0f ms)", o->procs,
	    (first_end - last_start) * 1e3);
	stage_stats(o->stats, &s1);
	tap(s0.bytes >= 0 && s1.bytes - s0.bytes == (int64_t)placed &&
		s1.requests - s0.requests == (int64_t)calls && s0.errors >= 0 &&
		s1.errors == s0.errors,
	    o->label,
	    "stats: cuda bytes +%" PRId64 " (placed %" PRIu64 "), requests +%" PRId64 " (%" PRIu64
	    " calls), errors +%" PRId64,
	    s1.bytes - s0.bytes, placed, s1.requests - s0.requests, calls, s1.errors - s0.errors);
	munmap(ta, sizeof(*ta) * (size_t)o->procs);
	return status == 77 ? 77 : n_fail ? 1 : 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: stage_cuda_check [--label L] [--gpu N] [--calls N] [--seed S] "
		   "[--procs N]\n"
		   "                        [--expect nfs|cache|any] [--range OFF:LEN]... "
		   "[--refusals]\n"
		   "                        --stats STATS FILE REF\n");
}

/* Fills o from argv; returns -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"label", 1, 0, 'l'}, {"gpu", 1, 0, 'g'},	{"calls", 1, 0, 'c'},
	    {"seed", 1, 0, 's'},  {"procs", 1, 0, 'p'}, {"expect", 1, 0, 'e'},
	    {"range", 1, 0, 'r'}, {"stats", 1, 0, 'S'}, {"refusals", 0, 0, 'R'},
	    {"help", 0, 0, 'h'},  {0, 0, 0, 0},
	};
	int ch;

	while ((ch = getopt_long(argc, argv, "", lo, NULL)) != -1) {
		switch (ch) {
		case 'l':
			o->label = optarg;
			break;
		case 'g':
			o->gpu = atoi(optarg);
			break;
		case 'c':
			o->calls = atoi(optarg);
			break;
		case 's':
			o->seed = strtoull(optarg, NULL, 0);
			break;
		case 'p':
			o->procs = atoi(optarg);
			break;
		case 'R':
			o->refusals = true;
			break;
		case 'S':
			o->stats = optarg;
			break;
		case 'e':
			o->expect = !strcmp(optarg, "nfs")     ? EXPECT_NFS
				    : !strcmp(optarg, "cache") ? EXPECT_CACHE
							       : EXPECT_ANY;
			break;
		case 'r': {
			char *end;
			struct shardfs_range *g = &o->explicit_ranges[o->n_explicit];
			if (o->n_explicit == MAX_EXPLICIT)
				return 2;
			g->file_offset = strtoull(optarg, &end, 0);
			if (*end != ':')
				return 2;
			g->length = strtoull(end + 1, &end, 0);
			if (*end || !g->length)
				return 2;
			o->n_explicit++;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2 || !o->stats || o->calls < 1 || o->procs < 1 ||
	    o->procs > MAX_PROCS) {
		usage(stderr);
		return 2;
	}
	o->file = argv[optind];
	o->ref = argv[optind + 1];
	return -1;
}

int main(int argc, char **argv)
{
	struct opts o = {.label = "stage", .calls = 4, .procs = 1, .seed = 1};
	char why[256];
	int n = 0, e, rc;

	setvbuf(stdout, NULL, _IOLBF, 0); /* one write per line: several trainers */
	if ((rc = parse_args(argc, argv, &o)) >= 0)
		return rc;
	if (load_ref(o.ref) < 0)
		return 1;
	if (o.n_explicit && o.procs > 1) {
		usage(stderr);
		return 2;
	}
	if (sfs_cudart_open(&cu, why, sizeof(why)) < 0) {
		printf("# no CUDA runtime here: %s\n", why);
		return 77;
	}
	if (o.procs > 1) /* no CUDA call in the parent: it does not survive fork() */
		return run_procs(&o);
	if ((e = cu.get_device_count(&n)) || n <= o.gpu) {
		printf("# %d GPUs here (%s)\n", n, e ? cu.get_error_string(e) : "ok");
		return 77;
	}
	return run_one(&o);
}
