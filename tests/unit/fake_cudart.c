// SPDX-License-Identifier: Apache-2.0
// A fake libcudart.so.13 + libcuda.so.1 for exercising staging_cuda.c without a GPU.
// "Device memory" is a POSIX shm object per cudaMalloc; IPC handles carry its name.
// Async copies are deferred until the stream is synchronised (catches reuse of a
// pinned buffer before its DMA has finished). Strict: memcpyAsync src must be
// pinned, dst must lie in one device allocation of the current device.
// With MOCK_CUDA_ASYNC_US=N set (read at each call), copies are instead
// done by one "copy engine" thread, N microseconds each, in the order they
// were queued, and cudaStreamSynchronize waits for the stream's copies: the
// copies then really run while the caller goes on. mock_cuda_ctl() (found
// with dlopen(RTLD_NOLOAD) + dlsym) reads counters and injects failures.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAXA 4096
struct alloc {
	int used;
	char *p;
	size_t n;
	int dev;
	int kind; /* 1 local device, 2 imported, 3 pinned */
	int refs;
	char name[64];
};
static struct alloc allocs[MAXA];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread int cur_dev;
static int counter;
long mock_ipc_opens; /* visible for debugging */

struct op {
	char *dst;
	const char *src;
	size_t n;
	int fail; /* the copy "fails": its stream's next sync reports it */
	struct stream *s;
	struct op *next;  /* in its stream (deferred mode) */
	struct op *qnext; /* in the engine's queue (async mode) */
};
struct stream {
	int dev;
	struct op *head, *tail;
	int pending; /* async mode: copies queued, not yet done; protected by qmu */
	int failed;  /* async mode: a copy failed since the last sync; protected by qmu */
};

/* Async mode: the engine's queue and counters, under qmu. */
static pthread_mutex_t qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static struct op *qhead, *qtail;
static int engine_started;
static long inflight, max_inflight, n_copies, copy_bytes;
static long fail_copy_at, fail_sync_at, n_syncs; /* 1-based call numbers; 0: never */

/* The test's handle on the fake: op 0 resets the counters and failures,
 * 1 returns copies queued, 2 the most copies in flight at once (queued,
 * not done), 3 copies in flight now, 4 makes the arg-th cudaMemcpyAsync
 * from now fail (returns cudaErrorInvalidValue), 5 makes the copy of the
 * arg-th cudaMemcpyAsync from now fail at its stream's sync (error 700),
 * 6 bytes copied. */
long mock_cuda_ctl(int op, long arg)
{
	long r = 0;
	pthread_mutex_lock(&qmu);
	switch (op) {
	case 0:
		max_inflight = n_copies = copy_bytes = fail_copy_at = fail_sync_at = n_syncs = 0;
		break;
	case 1: r = n_copies; break;
	case 2: r = max_inflight; break;
	case 3: r = inflight; break;
	case 4: fail_copy_at = arg ? n_copies + arg : 0; break;
	case 5: fail_sync_at = arg ? n_copies + arg : 0; break;
	case 6: r = copy_bytes; break;
	}
	pthread_mutex_unlock(&qmu);
	return r;
}

static long async_us(void)
{
	const char *e = getenv("MOCK_CUDA_ASYNC_US");
	return e ? atol(e) : -1;
}

static void *engine(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&qmu);
	for (;;) {
		while (!qhead)
			pthread_cond_wait(&qcond, &qmu);
		struct op *o = qhead;
		pthread_mutex_unlock(&qmu);
		long us = async_us();
		if (us > 0)
			usleep((useconds_t)us);
		if (!o->fail)
			memcpy(o->dst, o->src, o->n);
		pthread_mutex_lock(&qmu);
		qhead = o->qnext;
		if (!qhead)
			qtail = NULL;
		inflight--;
		o->s->pending--;
		if (o->fail)
			o->s->failed = 1;
		free(o);
		pthread_cond_broadcast(&qcond);
	}
	return NULL;
}

static int ndev(void)
{
	const char *e = getenv("MOCK_CUDA_DEVICES");
	return e ? atoi(e) : 2;
}

static struct alloc *find(const void *p, size_t n, int kind)
{
	for (int i = 0; i < MAXA; i++) {
		struct alloc *a = &allocs[i];
		if (a->used && (kind == 0 || a->kind == kind) && (const char *)p >= a->p &&
		    (const char *)p + n <= a->p + a->n)
			return a;
	}
	return NULL;
}
static struct alloc *slot(void)
{
	for (int i = 0; i < MAXA; i++)
		if (!allocs[i].used)
			return &allocs[i];
	return NULL;
}

int cudaGetDeviceCount(int *n)
{
	if (getenv("MOCK_CUDA_NODRIVER")) {
		*n = 0;
		return 35;
	}
	*n = ndev();
	return 0;
}
int cudaGetDeviceProperties(void *prop, int d)
{
	if (d < 0 || d >= ndev())
		return 101;
	memset(prop, 0, 1008);
	snprintf(prop, 256, "Mock GPU %d", d);
	unsigned char *u = (unsigned char *)prop + 256;
	for (int i = 0; i < 16; i++)
		u[i] = (unsigned char)(0x40 + i + 16 * d);
	return 0;
}
int cudaSetDevice(int d)
{
	if (d < 0 || d >= ndev())
		return 101;
	cur_dev = d;
	return 0;
}
const char *cudaGetErrorString(int e)
{
	static __thread char b[64];
	snprintf(b, sizeof(b), "mock error %d", e);
	return b;
}
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaDriverGetVersion(int *v) { *v = 13000; return 0; }
int cudaGetLastError(void) { return 0; }

int cudaMalloc(void **pp, size_t n)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = slot();
	snprintf(a->name, sizeof(a->name), "/mockcuda.%d.%d", getpid(), ++counter);
	int fd = shm_open(a->name, O_CREAT | O_EXCL | O_RDWR, 0600);
	if (fd < 0 || ftruncate(fd, (off_t)n) < 0) {
		pthread_mutex_unlock(&mu);
		return 2;
	}
	a->p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	a->n = n;
	a->dev = cur_dev;
	a->kind = 1;
	a->used = 1;
	*pp = a->p;
	pthread_mutex_unlock(&mu);
	return 0;
}
int cudaFree(void *p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find(p, 1, 1);
	if (!a || a->p != p) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	munmap(a->p, a->n);
	shm_unlink(a->name);
	a->used = 0;
	pthread_mutex_unlock(&mu);
	return 0;
}
int cudaMallocHost(void **pp, size_t n)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = slot();
	a->p = malloc(n);
	a->n = n;
	a->kind = 3;
	a->used = 1;
	*pp = a->p;
	pthread_mutex_unlock(&mu);
	return a->p ? 0 : 2;
}
int cudaFreeHost(void *p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find(p, 1, 3);
	if (a) {
		free(a->p);
		a->used = 0;
	}
	pthread_mutex_unlock(&mu);
	return a ? 0 : 1;
}
int cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return 0;
}
int cudaMemcpy(void *d, const void *s, size_t n, int kind)
{
	(void)kind;
	memcpy(d, s, n);
	return 0;
}
int cudaDeviceSynchronize(void) { return 0; }

struct handle {
	char magic[8];
	int pid;
	int dev;
	size_t n;
	char name[40];
};
int cudaIpcGetMemHandle(void *h, void *p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find(p, 1, 1);
	if (!a || a->p != p) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	struct handle hh = {"MOCKIPC", getpid(), a->dev, a->n, ""};
	snprintf(hh.name, sizeof(hh.name), "%.*s", (int)sizeof(hh.name) - 1, a->name);
	memset(h, 0, 64);
	memcpy(h, &hh, sizeof(hh));
	pthread_mutex_unlock(&mu);
	return 0;
}
struct h64 {
	char r[64];
};
int cudaIpcOpenMemHandle(void **pp, struct h64 h, unsigned flags)
{
	struct handle hh;
	_Static_assert(sizeof(struct handle) <= 64, "");
	memcpy(&hh, h.r, sizeof(hh));
	if (flags != 1 || memcmp(hh.magic, "MOCKIPC", 8))
		return 1;
	if (hh.pid == getpid())
		return 201;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < MAXA; i++)
		if (allocs[i].used && allocs[i].kind == 2 && !strcmp(allocs[i].name, hh.name) &&
		    allocs[i].dev == cur_dev) {
			allocs[i].refs++;
			*pp = allocs[i].p;
			mock_ipc_opens++;
			pthread_mutex_unlock(&mu);
			return 0;
		}
	int fd = shm_open(hh.name, O_RDWR, 0);
	if (fd < 0) {
		pthread_mutex_unlock(&mu);
		return 205;
	}
	struct alloc *a = slot();
	a->p = mmap(NULL, hh.n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	a->n = hh.n;
	a->dev = cur_dev;
	a->kind = 2;
	a->refs = 1;
	a->used = 1;
	snprintf(a->name, sizeof(a->name), "%s", hh.name);
	*pp = a->p;
	mock_ipc_opens++;
	if (getenv("MOCK_CUDA_TRACE"))
		fprintf(stderr, "mockcuda: ipc open %s on dev %d\n", hh.name, cur_dev);
	pthread_mutex_unlock(&mu);
	return 0;
}
int cudaIpcCloseMemHandle(void *p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find(p, 1, 2);
	if (!a || a->p != p) {
		pthread_mutex_unlock(&mu);
		return 1;
	}
	if (--a->refs == 0) {
		munmap(a->p, a->n);
		a->used = 0;
		if (getenv("MOCK_CUDA_TRACE"))
			fprintf(stderr, "mockcuda: ipc closed %s\n", a->name);
	}
	pthread_mutex_unlock(&mu);
	return 0;
}

int cudaStreamCreateWithFlags(struct stream **s, unsigned flags)
{
	(void)flags;
	*s = calloc(1, sizeof(**s));
	(*s)->dev = cur_dev;
	return 0;
}
int cudaStreamCreate(struct stream **s) { return cudaStreamCreateWithFlags(s, 0); }
static void run(struct stream *s)
{
	for (struct op *o = s->head, *nx; o; o = nx) {
		nx = o->next;
		if (!o->fail)
			memcpy(o->dst, o->src, o->n);
		free(o);
	}
	s->head = s->tail = NULL;
}
int cudaStreamSynchronize(struct stream *s)
{
	if (s->dev != cur_dev && getenv("MOCK_CUDA_STRICT_DEV"))
		return 400;
	run(s);
	pthread_mutex_lock(&qmu);
	while (s->pending)
		pthread_cond_wait(&qcond, &qmu);
	int failed = s->failed;
	s->failed = 0;
	n_syncs++;
	pthread_mutex_unlock(&qmu);
	return failed ? 700 : 0;
}
int cudaStreamDestroy(struct stream *s)
{
	pthread_mutex_lock(&qmu);
	int pending = s->pending;
	pthread_mutex_unlock(&qmu);
	if (pending) {
		fprintf(stderr, "mockcuda: destroying a stream with copies in flight\n");
		abort();
	}
	if (s->head) {
		fprintf(stderr, "mockcuda: destroying a stream with pending copies\n");
		run(s);
	}
	free(s);
	return 0;
}
int cudaMemcpyAsync(void *d, const void *src, size_t n, int kind, struct stream *s)
{
	if (kind != 1)
		return 1;
	if (s->dev != cur_dev) {
		fprintf(stderr, "mockcuda: memcpyAsync on a stream of device %d, current %d\n", s->dev, cur_dev);
		return 400;
	}
	pthread_mutex_lock(&mu);
	struct alloc *ps = find(src, n, 3), *pd = find(d, n, 0);
	int bad = !ps || !pd || pd->kind == 3 || pd->dev != cur_dev;
	pthread_mutex_unlock(&mu);
	if (bad) {
		fprintf(stderr, "mockcuda: memcpyAsync %p <- %p (%zu): src pinned %d, dst device %d\n", d, src, n, !!ps, pd ? pd->dev : -1);
		return 1;
	}
	struct op *o = calloc(1, sizeof(*o));
	o->dst = d;
	o->src = src;
	o->n = n;
	o->s = s;
	pthread_mutex_lock(&qmu);
	long nth = ++n_copies;
	if (nth == fail_copy_at) {
		n_copies--;
		pthread_mutex_unlock(&qmu);
		free(o);
		return 1;
	}
	copy_bytes += (long)n;
	o->fail = nth == fail_sync_at;
	if (async_us() >= 0) {
		if (!engine_started) {
			pthread_t t;
			engine_started = pthread_create(&t, NULL, engine, NULL) == 0;
			if (engine_started)
				pthread_detach(t);
		}
		s->pending++;
		if (++inflight > max_inflight)
			max_inflight = inflight;
		if (qtail)
			qtail->qnext = o;
		else
			qhead = o;
		qtail = o;
		pthread_cond_broadcast(&qcond);
		pthread_mutex_unlock(&qmu);
		return 0;
	}
	if (o->fail)
		s->failed = 1; /* deferred mode: reported at the next sync */
	pthread_mutex_unlock(&qmu);
	if (s->tail)
		s->tail->next = o;
	else
		s->head = o;
	s->tail = o;
	return 0;
}

/* libcuda */
int cuMemGetAddressRange_v2(unsigned long long *base, size_t *size, unsigned long long p)
{
	pthread_mutex_lock(&mu);
	struct alloc *a = find((void *)(uintptr_t)p, 1, 0);
	int rc = 1;
	if (a && a->kind != 3) {
		*base = (uintptr_t)a->p;
		*size = a->n;
		rc = 0;
	}
	pthread_mutex_unlock(&mu);
	return rc;
}
