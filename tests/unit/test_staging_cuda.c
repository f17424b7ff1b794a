// SPDX-License-Identifier: Apache-2.0
/*
 * test_staging_cuda — the CUDA half of staging (cache/staging/staging_cuda.c) on a
 * real GPU: IPC import and its cache, copies of iovecs through the pinned
 * buffers, bounds, concurrency, close and reopen.
 *
 * Linked against staging_cuda.c (or its stub), log.c and cudart_load.c; the
 * CUDA runtime is loaded with dlopen() here too (cudart_load.h), never
 * linked. Skips (exit 77) with the reason when the build has no CUDA, no
 * libcudart is found or no GPU works.
 *
 * CUDA refuses to open an IPC handle in the process that exported it, so
 * the memory belongs to an exporter: this same binary run again
 * (--exporter ORDINAL BYTES, started with posix_spawn, so that it is a new
 * program and not a fork of one that has initialised CUDA). It cudaMallocs
 * BYTES on the GPU, fills them with 0xAB, sends its IPC handle and GPU UUID,
 * then answers commands on stdin: 'R' reads the whole allocation back with
 * cudaMemcpy and sends it; 'Q' frees it and exits. Every check compares the
 * exporter's whole allocation with the image the test expects, so bytes
 * written outside a copy's range fail too.
 */
#include "cudart_load.h"
#include "fileio.h"
#include "log.h"
#include "staging_cuda.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* A multiple of 2 MiB, cudaMalloc's granularity: its end is then the
 * mapping's end whichever of the two the driver reports. */
#define ALLOC_BYTES (40u << 20)
#define FILL	    0xAB

/* --- the runtime, for what the test does itself -------------------------- */

static struct sfs_cudart rt;

/* Loads libcudart as staging_cuda.c does (cudart_load.h), once. Returns 0,
 * or -1 with *why set (static text). */
static int rt_load(const char **why)
{
	static char msg[256];
	static int rc = 1; /* not tried yet */

	if (rc > 0)
		rc = sfs_cudart_open(&rt, msg, sizeof(msg));
	*why = msg;
	return rc < 0 ? -1 : 0;
}

/* --- the exporter process ------------------------------------------------ */

struct hello {
	int32_t status; /* 0, or the CUDA error of `msg` */
	uint8_t handle[64];
	uint8_t uuid[16];
	char msg[112];
};

static int read_all(int fd, void *p, size_t n)
{
	for (char *c = p; n;) {
		ssize_t r = read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* main() of `test_staging_cuda --exporter ORDINAL BYTES`: stdin carries
 * commands, stdout replies (nothing else may be printed there). */
static int exporter_main(int argc, char **argv)
{
	struct hello h = {0};
	const char *why, *step = "load";
	void *p = NULL;
	int e = 0;

	if (argc != 4)
		return 2;
	int ord = atoi(argv[2]);
	size_t size = strtoull(argv[3], NULL, 10);
	unsigned char *prop = calloc(1, SFS_CUDART_PROP_BYTES);
	if (!prop)
		return 1;
	if (rt_load(&why) < 0) {
		h.status = -1;
		snprintf(h.msg, sizeof(h.msg), "%s", why);
		sfs_write_all(1, &h, sizeof(h));
		return 1;
	}
	if ((e = rt.set_device(ord)) == 0 && (step = "cudaMalloc", e = rt.malloc(&p, size)) == 0 &&
	    (step = "cudaMemset", e = rt.memset(p, FILL, size)) == 0 &&
	    (step = "cudaDeviceSynchronize", e = rt.device_synchronize()) == 0 &&
	    (step = "cudaIpcGetMemHandle", e = rt.ipc_get_mem_handle(h.handle, p)) == 0 &&
	    (step = "cudaGetDeviceProperties", e = rt.get_device_properties(prop, ord)) == 0)
		memcpy(h.uuid, prop + SFS_CUDART_PROP_UUID_OFFSET, 16);
	free(prop);
	if (e) {
		h.status = e;
		snprintf(h.msg, sizeof(h.msg), "%s: %s", step, rt.get_error_string(e));
	}
	if (sfs_write_all(1, &h, sizeof(h)) < 0 || e)
		return 1;

	char cmd;
	while (read_all(0, &cmd, 1) == 0 && cmd == 'R') {
		uint8_t *buf = malloc(size);
		int32_t st = buf ? rt.memcpy(buf, p, size, SFS_CUDART_MEMCPY_D2H) : -1;
		if (sfs_write_all(1, &st, sizeof(st)) < 0 ||
		    (st == 0 && sfs_write_all(1, buf, size) < 0))
			break;
		free(buf);
	}
	rt.free(p);
	return 0;
}

struct exporter {
	pid_t pid;
	int cmd_fd, data_fd;
	struct hello h;
	size_t size;
};

/* Starts an exporter of `size` bytes on CUDA device `ordinal`. Returns 0, or
 * -1 with ex->h.msg saying why. */
static int exporter_start(struct exporter *ex, int ordinal, size_t size)
{
	int to[2], from[2];
	char ord[16], bytes[32];
	posix_spawn_file_actions_t fa;

	memset(ex, 0, sizeof(*ex));
	ex->size = size;
	if (pipe2(to, O_CLOEXEC) < 0 || pipe2(from, O_CLOEXEC) < 0) {
		snprintf(ex->h.msg, sizeof(ex->h.msg), "pipe: %s", strerror(errno));
		return -1;
	}
	snprintf(ord, sizeof(ord), "%d", ordinal);
	snprintf(bytes, sizeof(bytes), "%zu", size);
	char *args[] = {"test_staging_cuda", "--exporter", ord, bytes, NULL};
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, to[0], 0);
	posix_spawn_file_actions_adddup2(&fa, from[1], 1);
	int rc = posix_spawn(&ex->pid, "/proc/self/exe", &fa, NULL, args, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(to[0]);
	close(from[1]);
	ex->cmd_fd = to[1];
	ex->data_fd = from[0];
	if (rc) {
		snprintf(ex->h.msg, sizeof(ex->h.msg), "posix_spawn: %s", strerror(rc));
		ex->pid = 0;
		return -1;
	}
	if (read_all(ex->data_fd, &ex->h, sizeof(ex->h)) < 0) {
		snprintf(ex->h.msg, sizeof(ex->h.msg), "exporter died before its handle");
		return -1;
	}
	ex->h.msg[sizeof(ex->h.msg) - 1] = 0;
	return ex->h.status ? -1 : 0;
}

/* The exporter's whole allocation (malloc'd, the caller frees), or NULL. */
static uint8_t *exporter_read(struct exporter *ex)
{
	int32_t st;
	uint8_t *buf = malloc(ex->size);

	if (!buf || sfs_write_all(ex->cmd_fd, "R", 1) < 0 ||
	    read_all(ex->data_fd, &st, sizeof(st)) < 0 || st != 0 ||
	    read_all(ex->data_fd, buf, ex->size) < 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* Ends the exporter; returns its wait status, or -1. */
static int exporter_stop(struct exporter *ex)
{
	int status = -1;

	if (ex->cmd_fd > 0) {
		sfs_write_all(ex->cmd_fd, "Q", 1);
		close(ex->cmd_fd);
	}
	if (ex->data_fd > 0)
		close(ex->data_fd);
	if (ex->pid > 0 && waitpid(ex->pid, &status, 0) < 0)
		status = -1;
	ex->pid = 0;
	ex->cmd_fd = ex->data_fd = -1;
	return status;
}

/* --- helpers ------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static void fill_random(uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(rnd() >> 32);
}

/* The image the exporter's allocation should hold. */
static uint8_t *expect;

/* Copy the iovecs to offset `off` of the import and update the image.
 * Returns sfs_cuda_copy_to_device's result. */
static int copy_at(struct sfs_cuda *cu, int device, void *base, size_t off, const struct iovec *iov,
		   int n_iov)
{
	int rc = sfs_cuda_copy_to_device(cu, device, (char *)base + off, iov, n_iov);
	if (rc == 0)
		for (int i = 0; i < n_iov; i++) {
			memcpy(expect + off, iov[i].iov_base, iov[i].iov_len);
			off += iov[i].iov_len;
		}
	return rc;
}

/* Whether the exporter's allocation equals the image; says where not. */
static int matches(struct exporter *ex, const char *what)
{
	uint8_t *got = exporter_read(ex);

	if (!got) {
		diag("%s: could not read the allocation back", what);
		return 0;
	}
	size_t i = 0;
	while (i < ex->size && got[i] == expect[i])
		i++;
	if (i < ex->size)
		diag("%s: first difference at byte %zu: %#x, expected %#x", what, i, got[i],
		     expect[i]);
	free(got);
	return i == ex->size;
}

static FILE *cap;
static int saved_stderr = -1;

/* Debug logging to a temporary file until capture_end. */
static void capture_begin(void)
{
	fflush(stderr);
	cap = tmpfile();
	saved_stderr = dup(2);
	if (!cap || saved_stderr < 0) {
		diag("tmpfile/dup: %s", strerror(errno));
		exit(99);
	}
	dup2(fileno(cap), 2);
	sfs_log_max_level = SFS_LOG_DEBUG;
}

/* Ends the capture; returns how many lines held `needle` and passes the
 * others on to stderr. */
static int capture_end(const char *needle)
{
	char line[512];
	int n = 0;

	sfs_log_max_level = SFS_LOG_INFO;
	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	rewind(cap);
	while (fgets(line, sizeof(line), cap)) {
		if (strstr(line, needle))
			n++;
		else
			fputs(line, stderr);
	}
	fclose(cap);
	return n;
}

/* Import `handle` `times` times; returns the result and sets *opens to the
 * number of IPC opens logged. */
static int import_counting(struct sfs_cuda *cu, const uint8_t *handle, const uint8_t *uuid,
			   int times, void **base, int *device, int *opens)
{
	int rc = 0;

	capture_begin();
	for (int i = 0; i < times && rc == 0; i++) {
		void *b = NULL;
		int d = -1;
		rc = sfs_cuda_import(cu, handle, uuid, &b, &d);
		if (rc == 0 && i > 0 && (b != *base || d != *device))
			rc = -EBADSLT; /* a hit that answered differently */
		*base = b;
		*device = d;
	}
	*opens = capture_end("opened IPC handle");
	return rc;
}

/* Drop `times` imports; returns the number of IPC closes logged. */
static int unimport_counting(struct sfs_cuda *cu, void *base, int device, int times)
{
	capture_begin();
	for (int i = 0; i < times; i++)
		sfs_cuda_unimport(cu, base, device);
	return capture_end("closed IPC handle");
}

/* --- concurrent copies --------------------------------------------------- */

#define N_THREADS	4
#define THREAD_SLICE	((1u << 20) + 512u * 1024 + 7)
#define THREAD_ITERS	16
#define THREAD_BASE_OFF (33u << 20)

struct worker {
	pthread_t tid;
	struct sfs_cuda *cu;
	int device;
	void *base;
	int t;
	uint8_t *last; /* the bytes of the last copy */
	int failed;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	uint8_t *buf = malloc(THREAD_SLICE);

	if (!buf) {
		w->failed++;
		return NULL;
	}
	for (int it = 0; it < THREAD_ITERS; it++) {
		for (size_t i = 0; i < THREAD_SLICE; i++)
			buf[i] = (uint8_t)(w->t * 31 + it * 7 + i * 13);
		/* Two pieces, as the daemon passes (rest of a chunk, next chunk). */
		size_t cut = 300001 + (size_t)it * 1000;
		struct iovec iov[2] = {{buf, cut}, {buf + cut, THREAD_SLICE - cut}};
		char *dst = (char *)w->base + THREAD_BASE_OFF + (size_t)w->t * THREAD_SLICE;
		if (sfs_cuda_copy_to_device(w->cu, w->device, dst, iov, 2) != 0)
			w->failed++;
	}
	w->last = buf;
	return NULL;
}

/* --- main ---------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct sfs_cuda *cu = NULL;
	struct exporter ex = {.cmd_fd = -1, .data_fd = -1};
	const char *why;
	char reason[300];
	uint8_t uuid[16], zero_handle[64] = {0}, bad_uuid[16];
	void *base = NULL;
	int device = -1, opens = 0, rc;

	if (argc >= 2 && !strcmp(argv[1], "--exporter"))
		return exporter_main(argc, argv);

	/* Skip before any test point: the reasons, from the bottom up. */
	rc = sfs_cuda_open(&cu);
	if (rc == -ENOTSUP) {
		if (rt_load(&why) == 0)
			why = "staging built without CUDA (staging_cuda_stub.c)";
		snprintf(reason, sizeof(reason), "no CUDA GPU (%s)", why);
		tap_skip_all(reason);
	}
	if (rc == 0 && sfs_cuda_gpu_count(cu) == 0) {
		int n = 0, e = rt_load(&why) == 0 ? rt.get_device_count(&n) : -1;
		if (e > 0)
			snprintf(reason, sizeof(reason),
				 "no CUDA GPU (cudaGetDeviceCount: %s, error %d)",
				 rt.get_error_string(e), e);
		else
			snprintf(reason, sizeof(reason), "no CUDA GPU (%d devices, none usable)",
				 n);
		sfs_cuda_close(cu);
		tap_skip_all(reason);
	}
	if (!ok(rc == 0, "sfs_cuda_open: %d", rc))
		return tap_done();
	if (rt_load(&why) < 0) {
		ok(0, "the test's own libcudart: %s", why);
		return tap_done();
	}

	/* GPUs by UUID. */
	unsigned n = sfs_cuda_gpu_count(cu);
	int distinct = 1;
	for (unsigned i = 0; i < n; i++) {
		uint8_t a[16], b[16];
		sfs_cuda_gpu_uuid(cu, i, a);
		for (unsigned j = i + 1; j < n; j++)
			if (sfs_cuda_gpu_uuid(cu, j, b) == 0 && !memcmp(a, b, 16))
				distinct = 0;
	}
	ok(distinct, "%u GPU%s with distinct UUIDs", n, n == 1 ? "" : "s");
	ok(sfs_cuda_gpu_uuid(cu, n, uuid) == -EINVAL, "uuid of GPU %u (one past the end): -EINVAL",
	   n);

	/* An exporter on CUDA device 0. */
	rc = exporter_start(&ex, 0, ALLOC_BYTES);
	if (!ok(rc == 0, "exporter: %u bytes on CUDA device 0, IPC handle received%s%s",
		ALLOC_BYTES, rc ? ": " : "", rc ? ex.h.msg : "")) {
		sfs_cuda_close(cu); /* the importer closes before the exporter frees */
		exporter_stop(&ex);
		return tap_done();
	}
	int index = -1;
	for (unsigned i = 0; i < n; i++)
		if (sfs_cuda_gpu_uuid(cu, i, uuid) == 0 && !memcmp(uuid, ex.h.uuid, 16))
			index = (int)i;
	ok(index >= 0, "the exporter's GPU is GPU %d here (same UUID)", index);
	expect = malloc(ALLOC_BYTES);
	if (!expect)
		exit(99);
	memset(expect, FILL, ALLOC_BYTES);

	/* Imports: refusals, then one open for many imports. */
	memset(bad_uuid, 0xEE, sizeof(bad_uuid));
	ok(sfs_cuda_import(cu, ex.h.handle, bad_uuid, &base, &device) == -EINVAL,
	   "import on a GPU we do not have: -EINVAL");
	rc = import_counting(cu, zero_handle, ex.h.uuid, 1, &base, &device, &opens);
	ok(rc < 0 && opens == 0, "import of an all-zero handle: %d (%s), nothing cached", rc,
	   strerror(-rc));
	rc = import_counting(cu, ex.h.handle, ex.h.uuid, 1, &base, &device, &opens);
	ok(rc == 0 && base && device == index && opens == 1,
	   "import: %d, base %p, device %d, %d IPC open", rc, base, device, opens);
	void *first = base;
	rc = import_counting(cu, ex.h.handle, ex.h.uuid, 100, &base, &device, &opens);
	ok(rc == 0 && base == first && device == index && opens == 0,
	   "100 more imports of the handle: %d, same base, %d IPC opens (the cache)", rc, opens);
	if (rc || !base) {
		sfs_cuda_close(cu); /* the importer closes before the exporter frees */
		exporter_stop(&ex);
		return tap_done();
	}
	ok(matches(&ex, "after import"), "the allocation is untouched by importing");

	/* Copies. */
	uint8_t *pool = malloc(32u << 20);
	if (!pool)
		exit(99);
	fill_random(pool, 32u << 20);

	ok(sfs_cuda_copy_to_device(cu, device, base, NULL, 0) == 0, "no iovecs: 0");
	struct iovec empty[2] = {{pool, 0}, {pool + 5, 0}};
	ok(sfs_cuda_copy_to_device(cu, device, base, empty, 2) == 0, "empty iovecs: 0");
	struct iovec one = {pool, 100};
	ok(sfs_cuda_copy_to_device(cu, (int)n, base, &one, 1) == -EINVAL &&
	       sfs_cuda_copy_to_device(cu, -1, base, &one, 1) == -EINVAL,
	   "copy to GPU -1 or %u: -EINVAL", n);

	/* Unaligned pieces, one empty, 21 MiB in all: more than all the
	 * pinned buffers together, so each is refilled. Sources scattered. */
	static const size_t sizes[] = {1, 4095,		  (3u << 20) + 7, 0,	   (9u << 20) + 13,
				       5, (2u << 20) + 1, (5u << 20) + 3, 1u << 20};
	struct iovec iov[16];
	size_t src = 17, total = 0;
	int n_iov = 0;
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		iov[n_iov++] = (struct iovec){pool + src, sizes[i]};
		total += sizes[i];
		src = (src + sizes[i] + 4093) % ((32u << 20) - (9u << 20) - 64);
	}
	rc = copy_at(cu, device, base, 4099, iov, n_iov);
	ok(rc == 0, "%d iovecs, %zu bytes, to offset 4099: %d", n_iov, total, rc);
	ok(matches(&ex, "iovecs"), "device bytes equal, nothing written outside the range");
	ok(sfs_cuda_pinned_bytes(cu) == (uint64_t)SFS_CUDA_N_BUF * SFS_CUDA_BUF_BYTES,
	   "pinned staging buffers of the one GPU copied to: %llu bytes (%u x %u)",
	   (unsigned long long)sfs_cuda_pinned_bytes(cu), SFS_CUDA_N_BUF, SFS_CUDA_BUF_BYTES);

	/* The daemon's shape: 1 MiB in two pieces, eight times back to back. */
	rc = 0;
	for (int k = 0; k < 8 && rc == 0; k++) {
		size_t cut = (1u << 20) - 300 * 1024 + (size_t)k * 4097;
		struct iovec two[2] = {{pool + (size_t)k * 1000003, cut},
				       {pool + (9u << 20) + (size_t)k * 999983, (1u << 20) - cut}};
		rc = copy_at(cu, device, base, (22u << 20) + (size_t)k * (1u << 20) + 3, two, 2);
	}
	ok(rc == 0, "8 copies of 1 MiB in 2 pieces: %d", rc);

	/* Many small pieces. */
	struct iovec small[257];
	size_t stotal = 0;
	for (int i = 0; i < 257; i++) {
		size_t len = 1 + rnd() % 9000;
		small[i] = (struct iovec){pool + rnd() % ((32u << 20) - 9001), len};
		stotal += len;
	}
	rc = copy_at(cu, device, base, (31u << 20) + 1, small, 257);
	ok(rc == 0, "257 small iovecs (%zu bytes): %d", stotal, rc);
	ok(matches(&ex, "1 MiB and small copies"), "device bytes equal");

	/* Bounds: the allocation's true end, not the caller's word. */
	one = (struct iovec){pool + 77, 10};
	rc = copy_at(cu, device, base, ALLOC_BYTES - 10, &one, 1);
	ok(rc == 0, "10 bytes ending at the allocation's last byte: %d", rc);
	struct iovec twenty = {pool, 20};
	ok(sfs_cuda_copy_to_device(cu, device, (char *)base + ALLOC_BYTES - 10, &twenty, 1) ==
	       -ERANGE,
	   "20 bytes crossing the allocation's end: -ERANGE");
	ok(sfs_cuda_copy_to_device(cu, device, (char *)base + ALLOC_BYTES, &one, 1) == -ERANGE,
	   "a copy just past the allocation: -ERANGE");
	ok(sfs_cuda_copy_to_device(cu, device, pool, &one, 1) == -ERANGE,
	   "a copy to a host address: -ERANGE");
	ok(matches(&ex, "bounds"), "refused copies wrote nothing");

	/* Concurrent copies to one GPU, disjoint slices. */
	struct worker w[N_THREADS];
	for (int t = 0; t < N_THREADS; t++) {
		w[t] = (struct worker){.cu = cu, .device = device, .base = base, .t = t};
		pthread_create(&w[t].tid, NULL, worker_main, &w[t]);
	}
	int failed = 0;
	for (int t = 0; t < N_THREADS; t++) {
		pthread_join(w[t].tid, NULL);
		failed += w[t].failed;
		if (w[t].last) {
			memcpy(expect + THREAD_BASE_OFF + (size_t)t * THREAD_SLICE, w[t].last,
			       THREAD_SLICE);
			free(w[t].last);
		}
	}
	ok(failed == 0, "%d threads x %d copies of %u bytes: %d failed", N_THREADS, THREAD_ITERS,
	   THREAD_SLICE, failed);
	ok(matches(&ex, "threads"), "device bytes equal after concurrent copies");

	/* References: 101 imports so far; all but one dropped, then the last. */
	int closes = unimport_counting(cu, base, device, 100);
	one = (struct iovec){pool + 4242, 4242};
	rc = copy_at(cu, device, base, 3, &one, 1);
	ok(closes == 0 && rc == 0, "100 unimports of 101: %d IPC closes, copy: %d", closes, rc);
	closes = unimport_counting(cu, base, device, 1);
	ok(closes == 1, "the last unimport: %d IPC close", closes);
	ok(sfs_cuda_copy_to_device(cu, device, base, &one, 1) == -ERANGE,
	   "a copy to the closed mapping: -ERANGE");
	closes = unimport_counting(cu, base, device, 1);
	ok(closes == 0, "one unimport too many: ignored");
	rc = import_counting(cu, ex.h.handle, ex.h.uuid, 1, &base, &device, &opens);
	ok(rc == 0 && opens == 1, "import again: %d, %d IPC open", rc, opens);
	one = (struct iovec){pool + 999, 5000};
	rc = rc ? rc : copy_at(cu, device, base, 12345, &one, 1);
	ok(rc == 0 && matches(&ex, "unimport"), "copy after re-import: %d, bytes equal", rc);

	/* Close releases the imports; a new instance opens the handle again. */
	sfs_cuda_close(cu);
	cu = NULL;
	rc = sfs_cuda_open(&cu);
	ok(rc == 0 && sfs_cuda_gpu_count(cu) == n, "reopen: %d, %u GPUs", rc,
	   cu ? sfs_cuda_gpu_count(cu) : 0);
	if (rc == 0) {
		rc = import_counting(cu, ex.h.handle, ex.h.uuid, 2, &base, &device, &opens);
		ok(rc == 0 && opens == 1, "import after reopen: %d, %d IPC open", rc, opens);
		one = (struct iovec){pool + 12345, 777};
		rc = rc ? rc : copy_at(cu, device, base, 7, &one, 1);
		ok(rc == 0 && matches(&ex, "after reopen"), "copy after reopen: %d, bytes equal",
		   rc);
		sfs_cuda_close(cu);
	}

	int status = exporter_stop(&ex);
	ok(status == 0, "exporter exited cleanly (wait status %d)", status);
	free(pool);
	free(expect);
	return tap_done();
}
