// SPDX-License-Identifier: Apache-2.0
/*
 * test_staging_pipeline — the pipelined stage of the CUDA half of staging
 * (sfs_cuda_stage in cache/staging/staging_cuda.c) against the fake CUDA
 * runtime (tests/unit/fake_cudart.c) in its asynchronous mode: copies run on
 * the fake's copy engine thread, 300 us each, while the stager goes on.
 *
 * What it shows: bytes land exactly where asked and nowhere else; reads of
 * pieces run on several threads at once and while copies are in flight
 * (the pipeline overlaps); several copies are in flight at once (several
 * streams); 4 concurrent stagers to one GPU all finish with their bytes; a
 * failed read, a refused copy and a copy that fails at its sync each fail
 * that stage with -errno, leave every pinned buffer back in the pool, and
 * leave other stages running at the same time unaffected.
 *
 * The "device memory" is a shm object made here, imported through a handle
 * in the fake's format (the fake maps the object; the test maps it too and
 * reads the bytes back). Skips (77) unless the runtime loaded is the fake.
 */
#include "log.h"
#include "staging_cuda.h"
#include "tap.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define DEV_BYTES  (96u << 20)
#define UNTOUCHED  0x5A
#define COPY_US	   "300"
#define READ_US	   150 /* a source read's latency, as a disk's */
#define N_STAGERS  4
#define SLICE	   ((16u << 20) + 4097) /* a stager's bytes */
#define SLICE_BASE (20u << 20)

/* The handle format of fake_cudart.c's cudaIpcGetMemHandle. */
struct fake_handle {
	char magic[8];
	int pid;
	int dev;
	size_t n;
	char name[40];
};

static long (*mock_ctl)(int op, long arg);
static uint8_t *dev_mem; /* the test's own mapping of the "device memory" */

/* A file of `size` bytes whose byte x is a function of (seed, x). A read
 * fails with -EIO when it covers fail_at (UINT64_MAX: never). Counts the
 * reads running at once and those that began with a copy in flight. */
struct source {
	uint32_t seed;
	uint64_t size;
	uint64_t fail_at;
	int running, max_running; /* atomic */
	int overlapped, reads;	  /* atomic */
};

static uint8_t byte_at(uint32_t seed, uint64_t x)
{
	uint64_t h = (x + seed) * 0x9e3779b97f4a7c15ull;
	return (uint8_t)(h >> 56);
}

static ssize_t src_read(void *arg, uint64_t pos, size_t len, void *buf, size_t buf_len,
			const char **data, size_t *cache_bytes)
{
	struct source *s = arg;
	int now = __atomic_add_fetch(&s->running, 1, __ATOMIC_RELAXED);
	int max = __atomic_load_n(&s->max_running, __ATOMIC_RELAXED);

	while (now > max && !__atomic_compare_exchange_n(&s->max_running, &max, now, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
	__atomic_add_fetch(&s->reads, 1, __ATOMIC_RELAXED);
	if (mock_ctl(3, 0) > 0)
		__atomic_add_fetch(&s->overlapped, 1, __ATOMIC_RELAXED);
	usleep(READ_US);
	ssize_t n;
	if (pos <= s->fail_at && s->fail_at - pos < len) {
		n = -EIO;
	} else {
		/* Like the store: the bytes at (pos % 16 KiB) of the buffer. */
		uint8_t *out = (uint8_t *)buf + (pos & 16383);
		n = pos >= s->size ? 0 : (ssize_t)(len < s->size - pos ? len : s->size - pos);
		if ((pos & 16383) + (size_t)n > buf_len)
			n = -EINVAL;
		for (ssize_t i = 0; i < n; i++)
			out[i] = byte_at(s->seed, pos + (uint64_t)i);
		*data = (const char *)out;
		*cache_bytes = n > 0 ? (size_t)n : 0;
	}
	__atomic_sub_fetch(&s->running, 1, __ATOMIC_RELAXED);
	return n;
}

/* Whether dev_mem[dst, dst + n) holds the source's [src, src + n). */
static bool landed(uint32_t seed, uint64_t src, uint64_t dst, uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		if (dev_mem[dst + i] != byte_at(seed, src + i)) {
			diag("device byte %llu: %#x, expected %#x", (unsigned long long)(dst + i),
			     dev_mem[dst + i], byte_at(seed, src + i));
			return false;
		}
	return true;
}

/* Whether dev_mem[a, b) still holds UNTOUCHED. */
static bool untouched(uint64_t a, uint64_t b)
{
	for (uint64_t i = a; i < b; i++)
		if (dev_mem[i] != UNTOUCHED) {
			diag("device byte %llu written outside the spans", (unsigned long long)i);
			return false;
		}
	return true;
}

static int stage(struct sfs_cuda *cu, void *base, struct source *s, struct sfs_stage_span *sp,
		 unsigned n)
{
	const struct sfs_stage_source src = {src_read, s};
	uint64_t cache_bytes = 0;

	return sfs_cuda_stage(cu, 0, base, sp, n, &src, &cache_bytes);
}

struct stager {
	pthread_t tid;
	struct sfs_cuda *cu;
	void *base;
	int t, rc, iters;
	struct source src;
};

/* Stages its slice `iters` times, a new seed each time; rc: the first
 * failure, or 0. */
static void *stager_main(void *arg)
{
	struct stager *w = arg;

	for (int it = 0; it < w->iters && !w->rc; it++) {
		w->src.seed = (uint32_t)(w->t * 1000 + it);
		struct sfs_stage_span sp = {(uint64_t)w->t * 777,
					    SLICE_BASE + (uint64_t)w->t * SLICE, SLICE, 0};
		w->rc = stage(w->cu, w->base, &w->src, &sp, 1);
		if (!w->rc && sp.placed != SLICE)
			w->rc = -EBADSLT;
	}
	return NULL;
}

/* Runs N_STAGERS stagers at once; stager 0 fails its reads when fail0.
 * Returns how many of the others failed or placed wrong bytes. */
static int run_stagers(struct sfs_cuda *cu, void *base, bool fail0, int *rc0, int *max_running)
{
	struct stager w[N_STAGERS];
	int bad = 0;

	*max_running = 0;
	for (int t = 0; t < N_STAGERS; t++) {
		w[t] = (struct stager){.cu = cu, .base = base, .t = t, .iters = 3};
		w[t].src = (struct source){.size = UINT64_MAX, .fail_at = UINT64_MAX};
		if (fail0 && t == 0)
			w[t].src.fail_at = (5u << 20) + 3;
		pthread_create(&w[t].tid, NULL, stager_main, &w[t]);
	}
	for (int t = 0; t < N_STAGERS; t++) {
		pthread_join(w[t].tid, NULL);
		if (w[t].src.max_running > *max_running)
			*max_running = w[t].src.max_running;
		if (t == 0 && fail0) {
			*rc0 = w[t].rc;
			continue;
		}
		uint32_t seed = (uint32_t)(t * 1000 + w[t].iters - 1);
		if (w[t].rc ||
		    !landed(seed, (uint64_t)t * 777, SLICE_BASE + (uint64_t)t * SLICE, SLICE)) {
			diag("stager %d: %d", t, w[t].rc);
			bad++;
		}
	}
	return bad;
}

/* The "device memory": a shm object of DEV_BYTES, mapped here, imported
 * on GPU 0 through a handle in the fake's format (then unlinked: both
 * mappings stay). Returns 0 or -1. */
static int make_device_memory(struct sfs_cuda *cu, void **base)
{
	struct fake_handle h = {"MOCKIPC", getpid() + 1, 0, DEV_BYTES, ""};
	uint8_t handle[64] = {0}, uuid[16];
	int device = -1, rc = -1;

	snprintf(h.name, sizeof(h.name), "/sfs-pipeline.%d", (int)getpid());
	int fd = shm_open(h.name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, DEV_BYTES) == 0)
		dev_mem = mmap(NULL, DEV_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (dev_mem && dev_mem != MAP_FAILED) {
		memset(dev_mem, UNTOUCHED, DEV_BYTES);
		memcpy(handle, &h, sizeof(h));
		if (sfs_cuda_gpu_uuid(cu, 0, uuid) == 0 &&
		    sfs_cuda_import(cu, handle, uuid, base, &device) == 0 && device == 0)
			rc = 0;
	}
	shm_unlink(h.name);
	return rc;
}

int main(void)
{
	struct sfs_cuda *cu = NULL;
	void *base = NULL;

	setenv("MOCK_CUDA_ASYNC_US", COPY_US, 1);
	if (sfs_cuda_open(&cu) < 0 || sfs_cuda_gpu_count(cu) == 0)
		tap_skip_all("needs the fake CUDA runtime (tests/unit/fake_cudart.c)");
	void *fake = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
	void *ctl = fake ? dlsym(fake, "mock_cuda_ctl") : NULL;
	if (!ctl) {
		sfs_cuda_close(cu);
		tap_skip_all("the CUDA runtime loaded is not the fake (tests/unit/fake_cudart.c)");
	}
	memcpy(&mock_ctl, &ctl, sizeof(ctl));
	if (!ok(make_device_memory(cu, &base) == 0, "device memory imported on GPU 0"))
		return tap_done();

	/* One stage, three spans: odd offsets, one ending past the file. */
	struct source s = {.seed = 7, .size = (40u << 20) + 5, .fail_at = UINT64_MAX};
	struct sfs_stage_span sp[3] = {
	    {3, 4099, (16u << 20) + 1, 0},
	    {(20u << 20) + 16383, (17u << 20), 1u << 20, 0},
	    {(39u << 20) + 7, (19u << 20) + 1, 2u << 20, 0}, /* 1 MiB - 2 bytes exist */
	};
	mock_ctl(0, 0);
	int rc = stage(cu, base, &s, sp, 3);
	ok(rc == 0, "3 spans (18 MiB): %d", rc);
	ok(sp[0].placed == sp[0].len && sp[1].placed == sp[1].len && sp[2].placed == (1u << 20) - 2,
	   "placed: %llu %llu %llu (the last one short at end of file)",
	   (unsigned long long)sp[0].placed, (unsigned long long)sp[1].placed,
	   (unsigned long long)sp[2].placed);
	bool exact = true;
	for (int i = 0; i < 3; i++)
		exact = exact && landed(s.seed, sp[i].src_off, sp[i].dst_off, sp[i].placed);
	ok(exact, "device bytes equal the file's");
	ok(untouched(0, 4099) && untouched(4099 + sp[0].len, 17u << 20) &&
	       untouched((18u << 20), (19u << 20) + 1) &&
	       untouched((19u << 20) + 1 + sp[2].placed, 20u << 20),
	   "nothing written outside the spans");
	ok(s.max_running > 1, "reads on several threads at once: at most %d", s.max_running);
	ok(s.overlapped > 0, "reads that began with a copy in flight: %d of %d", s.overlapped,
	   s.reads);
	ok(mock_ctl(2, 0) > 1, "copies in flight at once (streams): at most %ld", mock_ctl(2, 0));
	ok(sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF, "pool whole: %u of %u buffers free",
	   sfs_cuda_pool_free(cu, 0), SFS_CUDA_N_BUF);

	/* 4 stagers at once, 3 stages of 16 MiB each. */
	int max_running = 0, rc0 = 0;
	int bad = run_stagers(cu, base, false, &rc0, &max_running);
	ok(bad == 0, "%d concurrent stagers x 3 stages of %u bytes: %d failed or wrong", N_STAGERS,
	   SLICE, bad);
	ok(sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF, "pool whole after them");

	/* Failures: each fails its stage and leaves the pool whole. */
	s = (struct source){.seed = 9, .size = UINT64_MAX, .fail_at = (9u << 20) + 1};
	struct sfs_stage_span one = {0, 0, 16u << 20, 0};
	rc = stage(cu, base, &s, &one, 1);
	ok(rc == -EIO && sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF,
	   "a read failing mid-range: %d, %u buffers free", rc, sfs_cuda_pool_free(cu, 0));
	s.fail_at = UINT64_MAX;
	mock_ctl(4, 3);
	rc = stage(cu, base, &s, &one, 1);
	ok(rc == -EIO && sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF,
	   "the 3rd cudaMemcpyAsync refused: %d, %u buffers free", rc, sfs_cuda_pool_free(cu, 0));
	mock_ctl(0, 0);
	mock_ctl(5, 4);
	rc = stage(cu, base, &s, &one, 1);
	ok(rc == -EIO && sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF,
	   "the 4th copy failing at its sync: %d, %u buffers free", rc, sfs_cuda_pool_free(cu, 0));
	mock_ctl(0, 0);
	s.seed = 11;
	rc = stage(cu, base, &s, &one, 1);
	ok(rc == 0 && landed(s.seed, 0, 0, one.len), "the next stage: %d, bytes equal", rc);

	/* A failing stager beside three others. */
	bad = run_stagers(cu, base, true, &rc0, &max_running);
	ok(rc0 == -EIO && bad == 0, "a stager whose read fails: %d; the 3 beside it: %d failed",
	   rc0, bad);
	ok(sfs_cuda_pool_free(cu, 0) == SFS_CUDA_N_BUF, "pool whole after them");

	/* Refusals before anything moves. */
	struct sfs_stage_span past = {0, DEV_BYTES - 10, 20, 0};
	ok(stage(cu, base, &s, &past, 1) == -ERANGE, "a span crossing the allocation: -ERANGE");
	struct sfs_stage_span none = {0, 0, 0, 0};
	ok(stage(cu, base, &s, &none, 1) == 0, "an empty span: 0");

	sfs_cuda_unimport(cu, base, 0);
	sfs_cuda_close(cu);
	munmap(dev_mem, DEV_BYTES);
	return tap_done();
}
