// SPDX-License-Identifier: Apache-2.0
/*
 * shardfs-stage-bench: staging throughput of a shardfs mount against what a
 * trainer does without it, side by side in one run, for cached data.
 *
 *   shardfs-stage-bench [--gpu N] [--range BYTES] [--passes N] [--procs N]
 *                       [--cache-dir DIR] [--daemon-pid PID] FILE [FILE...]
 *
 * FILEs are on a shardfs mount and already in its local cache (warm them
 * first with shardfs-warm); dropping the daemon's page cache, if wanted,
 * is the caller's job. Each file is cut into ranges of --range bytes
 * (default 1 MiB) that go, in turn, to the slots of a target region of
 * min(64 MiB, the largest file) bytes. Measured, each over all the files:
 *
 *   shm  STAGE               SHARDFS_IOC_STAGE into a POSIX shm object made
 *                            here (batches of up to max_ranges ranges and
 *                            max_stage_bytes, from SHARDFS_IOC_QUERY)
 *   shm  read()+memcpy       pread() of the same ranges into a malloc'd
 *                            buffer, memcpy() into the same shm mapping
 *   gpu  STAGE               SHARDFS_IOC_STAGE into cudaMalloc'd memory,
 *                            registered by its CUDA IPC handle
 *   gpu  read()+cudaMemcpy   pread() into a pinned (cudaMallocHost) buffer,
 *                            cudaMemcpy() to the same device memory; and
 *                            the same from a pageable (malloc'd) buffer
 *   gpu  cuFile compat       cuFileRead() of the same ranges into the same
 *                            device memory, each file opened O_RDONLY |
 *                            O_DIRECT, with CUFILE_FORCE_COMPAT_MODE=true:
 *                            what torch.cuda.gds.GdsFile, KvikIO or DALI do
 *                            on a FUSE mount (libcufile.so.0 by dlopen; where
 *                            it does not load or open, the row says
 *                            "skipped" and why)
 *
 * Every pass opens each file afresh, registers its region (regions belong to
 * the open file) and counts that in its time. Before each pass the kernel
 * page cache of each FILE is dropped (posix_fadvise DONTNEED) so that
 * read() goes to the daemon as STAGE does; the daemon's own cache files are
 * left alone. The GPU half runs when QUERY reports CUDA and a GPU, and the
 * CUDA runtime loads here (dlopen: this program links no CUDA and builds
 * without its headers); otherwise it prints "GPU: skipped (reason)". After
 * the timed passes, the first region's worth of the first file is staged
 * (and read with cuFile) once more into each target and compared with
 * pread().
 *
 * The GPU half also prints the two ceilings STAGE is held to, from the same
 * run: pinned cudaMemcpy host-to-device from RAM (the link) and, with
 * --cache-dir, the O_DIRECT read rate of the daemon's cache files (the
 * disk); STAGE's rate as a ratio of each and of their minimum; and the
 * daemon's CPU-seconds (utime + stime from /proc/PID/stat) per GiB moved by
 * each GPU row. The daemon is the mount's serving process, as
 * MOUNT/.shardfs/stats names it (shardfs_serving_pid), or --daemon-pid.
 * --procs N (N > 1) adds N processes that stage the files to the same GPU
 * at once (each its own cudaMalloc'd target, started together; forked
 * before this process touches CUDA), then N that read() them into pinned
 * buffers and cudaMemcpy() them (what a user would run instead), passes
 * alternated: each's aggregate rate, STAGE's against min(link, cache read)
 * and against the other's.
 *
 * --passes N runs each measurement N times, interleaved, and reports the
 * best. MB = 1e6 bytes. Last line on stdout: key=value pairs for scripts.
 * Exit status: 0, 1 on a failure or a mismatch, 2 for bad usage, 77 when
 * FILE is not on a shardfs mount with staging.
 *
 * Threading: one thread; the --procs workers are forked processes, each
 * with its own CUDA context and targets, reporting through pipes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <ftw.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cudart_load.h"
#include <shardfs/shardfs_ioctl.h>

#define REGION_MAX_BYTES (64ull << 20)

static const char *prog = "shardfs-stage-bench";

/* --- the CUDA runtime, loaded at run time (cudart_load.h) ----------------- */

static struct sfs_cudart cu;

/* --- helpers ------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || v == 0)
		return -1;
	if (*end && strchr("kKmMgG", *end)) {
		v <<= *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 30;
		end++;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}

/* pread exactly n bytes unless the file ends; returns bytes read or -errno. */
static ssize_t pread_full(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

static void uuid_str(const uint8_t u[16], char out[41])
{
	snprintf(out, 41,
		 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
		 u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
		 u[14], u[15]);
}

static const char *path_str(uint32_t path)
{
	static char buf[80];

	snprintf(buf, sizeof(buf), "%s%s%s%s", path & SHARDFS_PATH_CACHE ? "cache " : "",
		 path & SHARDFS_PATH_NFS ? "nfs " : "",
		 path & SHARDFS_PATH_SHM_COPY ? "shm_copy " : "",
		 path & SHARDFS_PATH_CUDA_PINNED ? "cuda_pinned " : "");
	size_t n = strlen(buf);
	if (n)
		buf[n - 1] = 0;
	return buf;
}

/* --- the run ------------------------------------------------------------- */

struct file {
	const char *path;
	uint64_t size;
};

struct bench {
	struct file *files;
	int n_files;
	uint64_t total_bytes;
	uint64_t range_bytes;  /* bytes per range */
	uint64_t region_bytes; /* a multiple of range_bytes */
	unsigned batch;	       /* ranges per STAGE call */
	/* shm target */
	char shm_name[64];
	uint8_t *shm_map;
	/* GPU target */
	int gpu;
	uint8_t gpu_uuid[16];
	void *dev;	    /* cudaMalloc'd, region_bytes */
	uint8_t handle[64]; /* its IPC handle */
	void *pinned;	    /* cudaMallocHost'd, range_bytes */
	uint8_t *pageable;  /* malloc'd, range_bytes */
	/* options */
	int procs;	       /* > 1: the concurrent-stagers measurement */
	const char *cache_dir; /* NULL: no O_DIRECT baseline */
	int daemon_pid;	       /* 0: no CPU figure */
};

enum target { T_SHM, T_GPU };

static int open_file(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return -1;
	}
	/* Drop this file's kernel page cache: read() must reach the daemon. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return fd;
}

/* Registers the target on fd; returns the region id, or 0 after a message. */
static uint64_t register_target(struct bench *b, int fd, enum target t, const char *path)
{
	struct shardfs_region r;

	memset(&r, 0, sizeof(r));
	r.size = sizeof(r);
	r.length = b->region_bytes;
	if (t == T_SHM) {
		r.kind = SHARDFS_REGION_SHM;
		snprintf(r.shm_name, sizeof(r.shm_name), "%s", b->shm_name);
	} else {
		r.kind = SHARDFS_REGION_CUDA;
		r.alloc_size = b->region_bytes;
		memcpy(r.cuda_ipc_handle, b->handle, 64);
		memcpy(r.gpu_uuid, b->gpu_uuid, 16);
	}
	if (ioctl(fd, SHARDFS_IOC_REGISTER, &r) < 0) {
		fprintf(stderr, "%s: %s: SHARDFS_IOC_REGISTER (%s): %s\n", prog, path,
			t == T_SHM ? "shm" : "cuda", strerror(errno));
		return 0;
	}
	return r.region_id;
}

static void unregister_target(int fd, uint64_t id)
{
	struct shardfs_unregister u;

	memset(&u, 0, sizeof(u));
	u.size = sizeof(u);
	u.region_id = id;
	ioctl(fd, SHARDFS_IOC_UNREGISTER, &u);
}

/*
 * Stage [0, limit) of file f (limit = its size for a timed pass) into the
 * target, range k to slot k % slots. ORs the path bits into *path. Returns
 * bytes placed, or -1 after a message.
 */
static int64_t stage_file(struct bench *b, const struct file *f, enum target t, uint64_t limit,
			  uint32_t *path)
{
	struct shardfs_stage *s = calloc(1, sizeof(*s));
	uint64_t slots = b->region_bytes / b->range_bytes, k = 0, placed = 0;
	int64_t rc = -1;
	int fd = open_file(f->path);

	if (!s || fd < 0)
		goto out;
	uint64_t id = register_target(b, fd, t, f->path);
	if (!id)
		goto out;
	for (uint64_t off = 0; off < limit;) {
		memset(s, 0, sizeof(*s));
		s->size = sizeof(*s);
		s->region_id = id;
		uint64_t want = 0;
		while (s->n_ranges < b->batch && off < limit) {
			struct shardfs_range *g = &s->ranges[s->n_ranges++];
			g->region_offset = (k++ % slots) * b->range_bytes;
			g->file_offset = off;
			g->length = limit - off < b->range_bytes ? limit - off : b->range_bytes;
			off += g->length;
			want += g->length;
		}
		if (ioctl(fd, SHARDFS_IOC_STAGE, s) < 0) {
			fprintf(stderr, "%s: %s: SHARDFS_IOC_STAGE at %" PRIu64 ": %s\n", prog,
				f->path, s->ranges[0].file_offset, strerror(errno));
			unregister_target(fd, id);
			goto out;
		}
		if (s->bytes_placed != want) {
			fprintf(stderr, "%s: %s: STAGE placed %" PRIu64 " of %" PRIu64 " bytes\n",
				prog, f->path, s->bytes_placed, want);
			unregister_target(fd, id);
			goto out;
		}
		placed += s->bytes_placed;
		*path |= s->path;
	}
	unregister_target(fd, id);
	rc = (int64_t)placed;
out:
	if (fd >= 0)
		close(fd);
	free(s);
	return rc;
}

enum baseline { B_MEMCPY, B_CUDA_PINNED, B_CUDA_PAGEABLE };

/* The same ranges with pread() and a copy into the target. Returns bytes
 * copied, or -1 after a message. */
static int64_t read_file(struct bench *b, const struct file *f, enum baseline how, void *heap)
{
	uint64_t slots = b->region_bytes / b->range_bytes, k = 0, done = 0;
	void *buf = how == B_CUDA_PINNED ? b->pinned : how == B_CUDA_PAGEABLE ? b->pageable : heap;
	int fd = open_file(f->path);

	if (fd < 0)
		return -1;
	for (uint64_t off = 0; off < f->size; k++) {
		size_t want = f->size - off < b->range_bytes ? f->size - off : b->range_bytes;
		ssize_t n = pread_full(fd, buf, want, off);
		if (n != (ssize_t)want) {
			fprintf(stderr, "%s: %s: pread at %" PRIu64 ": %s\n", prog, f->path, off,
				n < 0 ? strerror((int)-n) : "short read");
			close(fd);
			return -1;
		}
		uint64_t roff = (k % slots) * b->range_bytes;
		if (how == B_MEMCPY) {
			memcpy(b->shm_map + roff, buf, want);
		} else {
			int e = cu.memcpy((char *)b->dev + roff, buf, want, SFS_CUDART_MEMCPY_H2D);
			if (e) {
				fprintf(stderr, "%s: cudaMemcpy: %s\n", prog,
					cu.get_error_string(e));
				close(fd);
				return -1;
			}
		}
		off += want;
		done += want;
	}
	close(fd);
	return (int64_t)done;
}

/* One timed pass over all files; returns MB/s, or -1. */
static double pass_stage(struct bench *b, enum target t, uint32_t *path)
{
	double t0 = now_s();
	uint64_t bytes = 0;

	for (int i = 0; i < b->n_files; i++) {
		int64_t n = stage_file(b, &b->files[i], t, b->files[i].size, path);
		if (n < 0)
			return -1;
		bytes += (uint64_t)n;
	}
	return (double)bytes / 1e6 / (now_s() - t0);
}

static double pass_read(struct bench *b, enum baseline how, void *heap)
{
	double t0 = now_s();
	uint64_t bytes = 0;

	for (int i = 0; i < b->n_files; i++) {
		int64_t n = read_file(b, &b->files[i], how, heap);
		if (n < 0)
			return -1;
		bytes += (uint64_t)n;
	}
	if (how != B_MEMCPY) {
		int e = cu.device_synchronize(); /* a pageable cudaMemcpy may return early */
		if (e) {
			fprintf(stderr, "%s: cudaDeviceSynchronize: %s\n", prog,
				cu.get_error_string(e));
			return -1;
		}
	}
	return (double)bytes / 1e6 / (now_s() - t0);
}

static int64_t cufile_file(struct bench *b, const struct file *f, uint64_t limit);

/* Stage the first region's worth of the first file (with cufile, read it
 * with cuFile into the GPU target instead) and compare it with pread().
 * Returns 0, or -1 after a message. */
static int verify(struct bench *b, enum target t, bool cufile)
{
	const struct file *f = &b->files[0];
	uint64_t n = f->size < b->region_bytes ? f->size : b->region_bytes;
	uint8_t *want = malloc(n ? n : 1), *got = t == T_GPU ? malloc(n ? n : 1) : b->shm_map;
	uint32_t path = 0;
	int rc = -1, fd = -1;

	if (!want || !got) {
		fprintf(stderr, "%s: out of memory\n", prog);
		goto out;
	}
	if (t == T_SHM)
		memset(b->shm_map, 0x5a, b->region_bytes);
	else if (cu.memcpy(b->dev, memset(want, 0x5a, n), n, SFS_CUDART_MEMCPY_H2D)) { /* scrub */
		fprintf(stderr, "%s: cudaMemcpy for verify failed\n", prog);
		goto out;
	}
	if ((cufile ? cufile_file(b, f, n) : stage_file(b, f, t, n, &path)) != (int64_t)n)
		goto out;
	if ((fd = open_file(f->path)) < 0 || pread_full(fd, want, n, 0) != (ssize_t)n) {
		fprintf(stderr, "%s: %s: pread for verify failed\n", prog, f->path);
		goto out;
	}
	if (t == T_GPU) {
		int e = cu.memcpy(got, b->dev, n, SFS_CUDART_MEMCPY_D2H);
		if (e) {
			fprintf(stderr, "%s: cudaMemcpy: %s\n", prog, cu.get_error_string(e));
			goto out;
		}
	}
	uint64_t i = 0;
	while (i < n && got[i] == want[i])
		i++;
	if (i < n) {
		fprintf(stderr, "%s: %s: %s target differs from pread() at byte %" PRIu64 "\n",
			prog, f->path,
			t == T_SHM ? "shm"
			: cufile   ? "cuFile's GPU"
				   : "GPU",
			i);
		goto out;
	}
	rc = 0;
out:
	if (fd >= 0)
		close(fd);
	free(want);
	if (t == T_GPU)
		free(got);
	return rc;
}

static double best(double a, double b) { return a > b ? a : b; }

/*
 * Prepares the GPU target; returns 0, or -1 with `why` saying why the GPU
 * half is skipped.
 */
static int gpu_setup(struct bench *b, const struct shardfs_query *q, char *why, size_t why_len)
{
	char cwhy[200], us[41];
	int n = 0, e;

	if (!(q->caps & SHARDFS_CAP_CUDA_IPC) || q->n_gpus == 0) {
		snprintf(why, why_len, "the daemon reports no usable GPU (caps %#x, %u GPUs)",
			 q->caps, q->n_gpus);
		return -1;
	}
	if (sfs_cudart_open(&cu, cwhy, sizeof(cwhy)) < 0) {
		snprintf(why, why_len, "no CUDA runtime here: %s", cwhy);
		return -1;
	}
	if ((e = cu.get_device_count(&n))) {
		snprintf(why, why_len, "cudaGetDeviceCount: %s", cu.get_error_string(e));
		return -1;
	}
	if (b->gpu >= n) {
		snprintf(why, why_len, "no CUDA device %d here (%d devices)", b->gpu, n);
		return -1;
	}
	uint8_t *prop = calloc(1, SFS_CUDART_PROP_BYTES);
	if (!prop || (e = cu.get_device_properties(prop, b->gpu))) {
		snprintf(why, why_len, "cudaGetDeviceProperties: %s",
			 prop ? cu.get_error_string(e) : "out of memory");
		free(prop);
		return -1;
	}
	memcpy(b->gpu_uuid, prop + SFS_CUDART_PROP_UUID_OFFSET, 16);
	prop[255] = 0;
	uuid_str(b->gpu_uuid, us);
	bool known = false;
	for (unsigned i = 0; i < q->n_gpus && i < SHARDFS_MAX_GPUS; i++)
		known |= !memcmp(q->gpu_uuid[i], b->gpu_uuid, 16);
	if (!known) {
		snprintf(why, why_len, "CUDA device %d (%s) is not among the daemon's GPUs", b->gpu,
			 us);
		free(prop);
		return -1;
	}
	printf("GPU: CUDA device %d, %s, %s\n", b->gpu, (char *)prop, us);
	free(prop);
	const char *step = "cudaSetDevice";
	if ((e = cu.set_device(b->gpu)) == 0 &&
	    (step = "cudaMalloc", e = cu.malloc(&b->dev, b->region_bytes)) == 0 &&
	    (step = "cudaIpcGetMemHandle", e = cu.ipc_get_mem_handle(b->handle, b->dev)) == 0 &&
	    (step = "cudaMallocHost", e = cu.malloc_host(&b->pinned, b->range_bytes)) == 0)
		b->pageable = malloc(b->range_bytes);
	if (e || !b->pageable) {
		snprintf(why, why_len, "%s: %s", step,
			 e ? cu.get_error_string(e) : "out of memory");
		return -1;
	}
	return 0;
}

/* CPU-seconds (user + system) that process pid has used, or -1. */
static double cpu_seconds(int pid)
{
	char path[64], line[1024];
	unsigned long long ut, st;

	if (pid <= 0)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char *ok = fgets(line, sizeof(line), f);
	fclose(f);
	char *p = ok ? strrchr(line, ')') : NULL; /* the command may hold spaces */
	/* After ")": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime (fields 3..15). */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The daemon's CPU over some passes: the CPU-seconds it used and the bytes
 * moved meanwhile; `unknown` once a reading failed. */
struct cpu_acc {
	double cpu_s;
	uint64_t bytes;
	bool unknown;
};

/* Adds one pass to a: readings c0 and c1 of cpu_seconds() around it, and
 * the bytes it moved. */
static void cpu_add(struct cpu_acc *a, double c0, double c1, uint64_t bytes)
{
	if (c0 < 0 || c1 < 0)
		a->unknown = true;
	a->cpu_s += c1 - c0;
	a->bytes += bytes;
}

/* The daemon's CPU-seconds per GiB over a's passes, or -1 (unknown). */
static double cpu_per_gib(const struct cpu_acc *a)
{
	if (a->unknown || a->bytes == 0)
		return -1;
	return a->cpu_s / ((double)a->bytes / (1u << 30));
}

/* The best rates of the run, MB/s, and the daemon's CPU-seconds per GiB
 * over each row's passes; -1 where the row did not run (or unknown). */
struct rates {
	double shm_stage, shm_read;
	double gpu_stage, gpu_pinned, gpu_pageable;
	double h2d, disk;	   /* the ceilings: link, cache disk (O_DIRECT); -1 unknown */
	double cpu_s_per_gib;	   /* over the GPU STAGE passes */
	double procs, procs_cpu_s; /* --procs: N processes staging, aggregate */
	double procs_read, procs_read_cpu_s; /* --procs: N doing read()+pinned cudaMemcpy */
	double cufile, cufile_cpu_s;	     /* cuFile in compat mode, O_DIRECT opens */
	char cufile_skipped[300];	     /* why the cuFile row did not run, or "" */
};

/* Pinned cudaMemcpy host-to-device of total_bytes in range_bytes copies,
 * from RAM (no read): the link's rate. Returns MB/s, or -1. */
static double pass_h2d(struct bench *b)
{
	uint64_t slots = b->region_bytes / b->range_bytes, done = 0;
	double t0 = now_s();

	for (uint64_t k = 0; done < b->total_bytes; k++) {
		size_t n =
		    b->total_bytes - done < b->range_bytes ? b->total_bytes - done : b->range_bytes;
		if (cu.memcpy((char *)b->dev + (k % slots) * b->range_bytes, b->pinned, n,
			      SFS_CUDART_MEMCPY_H2D))
			return -1;
		done += n;
	}
	if (cu.device_synchronize())
		return -1;
	return (double)done / 1e6 / (now_s() - t0);
}

/* The O_DIRECT walk over the cache files (nftw has no argument). */
static struct {
	void *buf;
	uint64_t left, bytes;
} odirect;
#define ODIRECT_BUF (4u << 20)

static int odirect_file(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
	(void)ftw;
	if (type != FTW_F || !S_ISREG(sb->st_mode) || sb->st_size < (off_t)ODIRECT_BUF)
		return 0;
	int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0)
		return 0;
	for (off_t off = 0; odirect.left;) {
		ssize_t n = pread(fd, odirect.buf, ODIRECT_BUF, off);
		if (n <= 0)
			break;
		off += n;
		odirect.bytes += (uint64_t)n;
		odirect.left = odirect.left > (uint64_t)n ? odirect.left - (uint64_t)n : 0;
	}
	close(fd);
	return odirect.left ? 0 : 1;
}

/* O_DIRECT read rate of the files of at least 4 MiB under dir, up to
 * `want` bytes (the cache disk: no page cache). Returns MB/s, or -1. */
static double odirect_rate(const char *dir, uint64_t want)
{
	if (posix_memalign(&odirect.buf, 4096, ODIRECT_BUF))
		return -1;
	odirect.left = want;
	odirect.bytes = 0;
	double t0 = now_s();
	nftw(dir, odirect_file, 16, FTW_PHYS);
	double dt = now_s() - t0;
	free(odirect.buf);
	if (odirect.bytes < want / 4) {
		fprintf(stderr, "%s: %s: only %" PRIu64 " bytes in files of >= 4 MiB to read\n",
			prog, dir, odirect.bytes);
		return -1;
	}
	return (double)odirect.bytes / 1e6 / dt;
}

/* --- cuFile in compat mode (libcufile, loaded at run time) ----------------- */

/*
 * What a trainer reading with torch.cuda.gds.GdsFile (or KvikIO, DALI) does
 * instead of STAGE: cuFile reads into device memory from a file opened
 * O_RDONLY | O_DIRECT. In compat mode (CUFILE_FORCE_COMPAT_MODE=true, what
 * a FUSE mount gets: no nvidia-fs path through it) cuFile reads into its own
 * pinned buffers and copies them to the GPU. The few cufile.h types passed
 * are declared here, as cudart_load.h does for the runtime's: this program
 * builds without the toolkit.
 */
struct cufile_err { /* CUfileError_t */
	int err;    /* CUfileOpError; 0: CU_FILE_SUCCESS */
	int cu_err; /* CUresult */
};
struct cufile_descr { /* CUfileDescr_t */
	int type;     /* CUfileFileHandleType */
	union {
		int fd;
		void *handle;
	} handle;
	const void *fs_ops;
};
#define CUFILE_HANDLE_TYPE_OPAQUE_FD 1
#define CUFILE_ALIGN		     4096u /* O_DIRECT: offsets and lengths */

/* libcufile's functions, set by cufile_open; lib NULL until then. */
static struct {
	void *lib;
	struct cufile_err (*driver_open)(void);
	struct cufile_err (*driver_close)(void);
	struct cufile_err (*handle_register)(void **fh, struct cufile_descr *descr);
	void (*handle_deregister)(void *fh);
	struct cufile_err (*buf_register)(const void *base, size_t n, int flags);
	struct cufile_err (*buf_deregister)(const void *base);
	ssize_t (*read)(void *fh, void *base, size_t n, off_t file_offset, off_t base_offset);
} cf;

/* Each function of cf: its names in libcufile (names[1]: an older one, or
 * NULL) and where in cf its address goes. */
static const struct {
	const char *names[2];
	size_t off;
} cufile_syms[] = {
    {{"cuFileDriverOpen"}, offsetof(__typeof__(cf), driver_open)},
    {{"cuFileDriverClose_v2", "cuFileDriverClose"}, offsetof(__typeof__(cf), driver_close)},
    {{"cuFileHandleRegister"}, offsetof(__typeof__(cf), handle_register)},
    {{"cuFileHandleDeregister"}, offsetof(__typeof__(cf), handle_deregister)},
    {{"cuFileBufRegister"}, offsetof(__typeof__(cf), buf_register)},
    {{"cuFileBufDeregister"}, offsetof(__typeof__(cf), buf_deregister)},
    {{"cuFileRead"}, offsetof(__typeof__(cf), read)},
};

/*
 * Loads libcufile (the soname through the loader's path, then the toolkit's
 * place), forces compat mode, opens the driver and registers b->dev (the
 * GPU target, region_bytes). Returns 0, or -1 with why (why_len bytes)
 * saying what failed: the first dlopen()'s error where none loads.
 */
static int cufile_open(struct bench *b, char *why, size_t why_len)
{
	static const char *const paths[] = {"libcufile.so.0",
					    "/usr/local/cuda/lib64/libcufile.so.0"};
	struct cufile_err e;

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]) && !cf.lib; i++) {
		cf.lib = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
		const char *de = cf.lib ? NULL : dlerror();
		if (i == 0 && de)
			snprintf(why, why_len, "%s", de);
	}
	if (!cf.lib)
		return -1;
	for (size_t i = 0; i < sizeof(cufile_syms) / sizeof(cufile_syms[0]); i++) {
		void *sym = NULL;
		for (int j = 0; j < 2 && !sym && cufile_syms[i].names[j]; j++)
			sym = dlsym(cf.lib, cufile_syms[i].names[j]);
		if (!sym) {
			snprintf(why, why_len, "libcufile has no %s", cufile_syms[i].names[0]);
			dlclose(cf.lib);
			cf.lib = NULL;
			return -1;
		}
		memcpy((char *)&cf + cufile_syms[i].off, &sym, sizeof(sym));
	}
	setenv("CUFILE_FORCE_COMPAT_MODE", "true", 1);
	if ((e = cf.driver_open()).err) {
		snprintf(why, why_len, "cuFileDriverOpen: error %d (CUresult %d)", e.err, e.cu_err);
		return -1;
	}
	if ((e = cf.buf_register(b->dev, b->region_bytes, 0)).err) {
		snprintf(why, why_len, "cuFileBufRegister: error %d (CUresult %d)", e.err,
			 e.cu_err);
		cf.driver_close();
		return -1;
	}
	return 0;
}

/* Undoes cufile_open's registration and driver open (the library stays). */
static void cufile_close(struct bench *b)
{
	cf.buf_deregister(b->dev);
	cf.driver_close();
}

/*
 * [0, limit) of file f into the GPU target with cuFileRead, range k to slot
 * k % slots, through an O_RDONLY | O_DIRECT open of the file. A range at the
 * end of the file asks for a 4 KiB multiple, as an O_DIRECT read must, and
 * gets the file's rest. Returns bytes read, or -1 after a message.
 */
static int64_t cufile_file(struct bench *b, const struct file *f, uint64_t limit)
{
	uint64_t slots = b->region_bytes / b->range_bytes, k = 0, done = 0;
	struct cufile_descr d = {.type = CUFILE_HANDLE_TYPE_OPAQUE_FD};
	void *fh = NULL;
	struct cufile_err e;
	int fd = open(f->path, O_RDONLY | O_DIRECT | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "%s: %s: open O_DIRECT: %s\n", prog, f->path, strerror(errno));
		return -1;
	}
	d.handle.fd = fd;
	if ((e = cf.handle_register(&fh, &d)).err) {
		fprintf(stderr, "%s: %s: cuFileHandleRegister: error %d (CUresult %d)\n", prog,
			f->path, e.err, e.cu_err);
		close(fd);
		return -1;
	}
	for (uint64_t off = 0; off < limit; k++) {
		uint64_t want = limit - off < b->range_bytes ? limit - off : b->range_bytes;
		uint64_t ask = (want + CUFILE_ALIGN - 1) / CUFILE_ALIGN * CUFILE_ALIGN;
		if (ask > b->range_bytes || off + want < f->size)
			ask = want; /* not the file's end, or no room: as it is */
		ssize_t n =
		    cf.read(fh, b->dev, ask, (off_t)off, (off_t)((k % slots) * b->range_bytes));
		if (n != (ssize_t)want) {
			fprintf(stderr, "%s: %s: cuFileRead of %" PRIu64 " at %" PRIu64 ": %zd\n",
				prog, f->path, ask, off, n);
			done = 0;
			break;
		}
		off += want;
		done += want;
	}
	cf.handle_deregister(fh);
	close(fd);
	return done == limit ? (int64_t)done : -1;
}

/* One timed cuFile pass over all files; returns MB/s, or -1. */
static double pass_cufile(struct bench *b)
{
	double t0 = now_s();

	for (int i = 0; i < b->n_files; i++)
		if (cufile_file(b, &b->files[i], b->files[i].size) < 0)
			return -1;
	return (double)b->total_bytes / 1e6 / (now_s() - t0);
}

/* What a --procs child reports. */
struct proc_result {
	double t0, t1; /* CLOCK_MONOTONIC: system-wide */
	uint64_t bytes;
	int ok;
};

/* What the --procs children do: stage with the ioctl, or what a trainer
 * does without shardfs, read() into a pinned buffer + cudaMemcpy. */
enum proc_work { W_STAGE, W_READ };

/* A --procs child: its own GPU target, then, at the parent's word, one pass
 * of `w` over all files; the result to out_fd. Never returns. */
static void proc_child(struct bench *b, const struct shardfs_query *q, enum proc_work w, int go_fd,
		       int ready_fd, int out_fd)
{
	struct proc_result res = {0};
	char why[300], c = 1, g;
	uint32_t path = 0;

	res.ok = gpu_setup(b, q, why, sizeof(why)) == 0;
	if (!res.ok)
		fprintf(stderr, "%s: child %d: %s\n", prog, (int)getpid(), why);
	if (write(ready_fd, &c, 1) != 1 || read(go_fd, &g, 1) < 0)
		res.ok = 0;
	res.t0 = now_s();
	if (res.ok) {
		double r =
		    w == W_STAGE ? pass_stage(b, T_GPU, &path) : pass_read(b, B_CUDA_PINNED, NULL);
		res.ok = r > 0;
		res.bytes = b->total_bytes;
	}
	res.t1 = now_s();
	if (write(out_fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		_exit(1);
	_exit(res.ok ? 0 : 1);
}

/* Forks b->procs children doing w into *n, all waiting on go[0]. Returns 0,
 * or -1 (the pipes closed, no child left waiting: they see EOF on go). */
static int procs_start(struct bench *b, const struct shardfs_query *q, enum proc_work w, int go[2],
		       int ready[2], int out[2], int *n)
{
	*n = 0;
	if (pipe(go))
		return -1;
	if (pipe(ready)) {
		close(go[0]);
		close(go[1]);
		return -1;
	}
	if (pipe(out)) {
		close(go[0]);
		close(go[1]);
		close(ready[0]);
		close(ready[1]);
		return -1;
	}
	fflush(stdout);
	for (; *n < b->procs; (*n)++) {
		pid_t pid = fork();
		if (pid == 0) {
			close(go[1]);
			proc_child(b, q, w, go[0], ready[1], out[1]);
		}
		if (pid < 0)
			break;
	}
	close(go[0]);
	close(ready[1]);
	close(out[1]);
	return 0;
}

/*
 * One pass of w by b->procs processes at once (forked here, before this
 * process has touched CUDA: it does not survive fork), each with its own
 * GPU target. Returns the aggregate MB/s (all their bytes over the span
 * from the first start to the last end), or -1 after a message; adds the
 * daemon's CPU meanwhile to *cpu.
 */
static double run_procs(struct bench *b, const struct shardfs_query *q, enum proc_work w,
			struct cpu_acc *cpu)
{
	int go[2], ready[2], out[2], n;
	double t0 = 1e300, t1 = 0;
	uint64_t bytes = 0;
	bool ok = true;

	if (procs_start(b, q, w, go, ready, out, &n) < 0) {
		fprintf(stderr, "%s: pipe: %s\n", prog, strerror(errno));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char c;
		if (read(ready[0], &c, 1) != 1)
			ok = false;
	}
	double cpu0 = cpu_seconds(b->daemon_pid);
	close(go[1]); /* EOF: all start */
	for (int i = 0; i < n; i++) {
		struct proc_result r;
		if (read(out[0], &r, sizeof(r)) != (ssize_t)sizeof(r) || !r.ok) {
			ok = false;
			continue;
		}
		t0 = r.t0 < t0 ? r.t0 : t0;
		t1 = r.t1 > t1 ? r.t1 : t1;
		bytes += r.bytes;
	}
	cpu_add(cpu, cpu0, cpu_seconds(b->daemon_pid), bytes);
	while (wait(NULL) > 0)
		;
	close(ready[0]);
	close(out[0]);
	if (!ok || n < b->procs) {
		fprintf(stderr, "%s: --procs %d: a %s process failed\n", prog, b->procs,
			w == W_STAGE ? "staging" : "read()+cudaMemcpy");
		return -1;
	}
	return (double)bytes / 1e6 / (t1 - t0);
}

/*
 * --procs: `passes` rounds of b->procs processes staging at once, then as
 * many doing read()+cudaMemcpy from pinned buffers, alternated; the best
 * aggregate rate of each, and the daemon's CPU per GiB over each, into r.
 * Nothing when the daemon stages to no GPU. Returns 0, or -1 after a
 * message.
 */
static int run_procs_passes(struct bench *b, const struct shardfs_query *q, int passes,
			    struct rates *r)
{
	struct cpu_acc stage = {0}, rd = {0};

	if (!(q->caps & SHARDFS_CAP_CUDA_IPC) || q->n_gpus == 0)
		return 0;
	for (int p = 0; p < passes; p++) {
		double s = run_procs(b, q, W_STAGE, &stage);
		double d = s < 0 ? -1 : run_procs(b, q, W_READ, &rd);
		if (s < 0 || d < 0)
			return -1;
		r->procs = best(r->procs, s);
		r->procs_read = best(r->procs_read, d);
	}
	r->procs_cpu_s = cpu_per_gib(&stage);
	r->procs_read_cpu_s = cpu_per_gib(&rd);
	return 0;
}
static void usage(FILE *to)
{
	fprintf(to,
		"usage: %s [--gpu N] [--range BYTES] [--passes N] [--procs N] [--cache-dir DIR]\n"
		"       [--daemon-pid PID] FILE [FILE...]\n"
		"  FILEs on a shardfs mount, already in its cache (shardfs-warm).\n"
		"  --gpu N        CUDA device for the GPU half (default 0)\n"
		"  --range BYTES  bytes per staged range and per read() (default 1M)\n"
		"  --passes N     repeat each measurement, report the best (default 1)\n"
		"  --procs N      also N processes staging to the GPU at once, then N doing\n"
		"                 read()+cudaMemcpy (default 1: no)\n"
		"  --cache-dir DIR  the daemon's cache_dir: O_DIRECT read rate of its files\n"
		"  --daemon-pid PID the daemon whose CPU-seconds per GiB are reported (default:\n"
		"                 shardfs_serving_pid in the mount's .shardfs/stats)\n",
		prog);
}

/*
 * Parses the options into b (gpu, range_bytes) and *passes. Returns -1 to
 * go on, with optind at the first FILE, or main's exit status: 0 after
 * --help, 2 on bad usage (after the usage text).
 */
static int parse_args(int argc, char **argv, struct bench *b, int *passes)
{
	static const struct option opts[] = {{"gpu", required_argument, NULL, 'g'},
					     {"range", required_argument, NULL, 'r'},
					     {"passes", required_argument, NULL, 'p'},
					     {"procs", required_argument, NULL, 'n'},
					     {"cache-dir", required_argument, NULL, 'c'},
					     {"daemon-pid", required_argument, NULL, 'd'},
					     {"help", no_argument, NULL, 'h'},
					     {NULL, 0, NULL, 0}};
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'g':
			b->gpu = atoi(optarg);
			break;
		case 'r':
			if (parse_size(optarg, &b->range_bytes) < 0 ||
			    b->range_bytes > (1ull << 30)) {
				usage(stderr);
				return 2;
			}
			break;
		case 'p':
			*passes = atoi(optarg);
			if (*passes < 1) {
				usage(stderr);
				return 2;
			}
			break;
		case 'n':
			b->procs = atoi(optarg);
			if (b->procs < 1 || b->procs > 64) {
				usage(stderr);
				return 2;
			}
			break;
		case 'c':
			b->cache_dir = optarg;
			break;
		case 'd':
			b->daemon_pid = atoi(optarg);
			if (b->daemon_pid <= 0) {
				usage(stderr);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc || b->gpu < 0) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/*
 * Fills b's files from the n paths (stat'ed: regular files, not all empty)
 * and total_bytes, and sets *largest to the largest size. Returns 0, or -1
 * (after a message, but for out of memory).
 */
static int load_files(struct bench *b, char **paths, int n, uint64_t *largest)
{
	b->n_files = n;
	b->files = calloc((size_t)b->n_files, sizeof(*b->files));
	if (!b->files)
		return -1;
	*largest = 0;
	for (int i = 0; i < b->n_files; i++) {
		struct stat sb;
		b->files[i].path = paths[i];
		if (stat(b->files[i].path, &sb) < 0) {
			fprintf(stderr, "%s: %s: %s\n", prog, b->files[i].path, strerror(errno));
			return -1;
		}
		if (!S_ISREG(sb.st_mode)) {
			fprintf(stderr, "%s: %s: not a regular file\n", prog, b->files[i].path);
			return -1;
		}
		b->files[i].size = (uint64_t)sb.st_size;
		b->total_bytes += b->files[i].size;
		if (b->files[i].size > *largest)
			*largest = b->files[i].size;
	}
	if (b->total_bytes == 0) {
		fprintf(stderr, "%s: the files are empty\n", prog);
		return -1;
	}
	return 0;
}

/*
 * The process serving the mount that holds path, as the mount's stats file
 * names it (shardfs_serving_pid in MOUNT/.shardfs/stats, MOUNT being the top
 * directory above path on path's filesystem): where the daemon runs behind
 * a wrapper (shardfs-cluster exec) and forks its serving process, no pid the
 * caller holds is that process. Returns the pid, or 0 when there is no
 * stats file or no such line in it; *mnt (mnt_len bytes) gets MOUNT, or "".
 */
static int serving_pid(const char *path, char *mnt, size_t mnt_len)
{
	char *top = realpath(path, NULL), line[256];
	struct stat sb, up;
	int pid = 0;

	*mnt = 0;
	if (!top || stat(top, &sb) < 0)
		goto out;
	for (char *slash; (slash = strrchr(top, '/')) && slash != top;) {
		*slash = 0;
		if (stat(top, &up) < 0 || up.st_dev != sb.st_dev) {
			*slash = '/';
			break;
		}
	}
	snprintf(mnt, mnt_len, "%s", top);
	snprintf(line, sizeof(line), "%s/.shardfs/stats", top);
	FILE *f = fopen(line, "re");
	if (!f)
		goto out;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "shardfs_serving_pid %d", &pid) == 1)
			break;
	fclose(f);
out:
	free(top);
	return pid > 0 ? pid : 0;
}

/* Sets b->daemon_pid, unless --daemon-pid gave it, to the serving process
 * of the first file's mount, and prints where the CPU figures come from. */
static void find_daemon(struct bench *b)
{
	char mnt[PATH_MAX];

	if (b->daemon_pid) {
		printf("daemon: pid %d (--daemon-pid), CPU from /proc/%d/stat\n", b->daemon_pid,
		       b->daemon_pid);
		return;
	}
	b->daemon_pid = serving_pid(b->files[0].path, mnt, sizeof(mnt));
	if (b->daemon_pid)
		printf("daemon: pid %d (shardfs_serving_pid of %s/.shardfs/stats), CPU from "
		       "/proc/%d/stat\n",
		       b->daemon_pid, mnt, b->daemon_pid);
	else
		printf("daemon: not found (no shardfs_serving_pid in %s/.shardfs/stats): no CPU "
		       "figures\n",
		       mnt);
}

/*
 * Asks the mount of the first file what it can do, into *q. Returns 0 when
 * it stages into shm, else main's exit status after a message: 77 when the
 * file is not on a shardfs mount with shm staging, 1 on another error.
 */
static int query_mount(const struct bench *b, struct shardfs_query *q)
{
	int fd = open(b->files[0].path, O_RDONLY | O_CLOEXEC);

	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	if (fd < 0 || ioctl(fd, SHARDFS_IOC_QUERY, q) < 0) {
		int e = errno;
		fprintf(stderr, "%s: %s: SHARDFS_IOC_QUERY: %s\n", prog, b->files[0].path,
			strerror(e));
		if (fd >= 0)
			close(fd);
		return e == ENOTTY ? 77 : 1;
	}
	close(fd);
	if (q->abi_version != SHARDFS_ABI_VERSION || !(q->caps & SHARDFS_CAP_SHM)) {
		fprintf(stderr, "%s: the mount speaks ABI %u, caps %#x: no shm staging\n", prog,
			q->abi_version, q->caps);
		return 77;
	}
	return 0;
}

/*
 * Sizes ranges, batches and the region within the daemon's limits (q) and
 * the largest file, and prints the plan of the run.
 */
static void plan(struct bench *b, const struct shardfs_query *q, uint64_t largest, int passes)
{
	if (q->max_stage_bytes && b->range_bytes > q->max_stage_bytes)
		b->range_bytes = q->max_stage_bytes;
	b->region_bytes = largest < REGION_MAX_BYTES ? largest : REGION_MAX_BYTES;
	b->region_bytes = (b->region_bytes + b->range_bytes - 1) / b->range_bytes * b->range_bytes;
	uint64_t slots = b->region_bytes / b->range_bytes;
	b->batch =
	    q->max_ranges < SHARDFS_STAGE_MAX_RANGES ? q->max_ranges : SHARDFS_STAGE_MAX_RANGES;
	if (q->max_stage_bytes && b->batch > q->max_stage_bytes / b->range_bytes)
		b->batch = (unsigned)(q->max_stage_bytes / b->range_bytes);
	if (b->batch > slots)
		b->batch = (unsigned)slots; /* no two ranges of a batch on one slot */
	if (b->batch == 0)
		b->batch = 1;
	printf("%d file%s, %.1f MB; ranges of %" PRIu64
	       " bytes, up to %u per STAGE; region %" PRIu64 " bytes\n",
	       b->n_files, b->n_files == 1 ? "" : "s", (double)b->total_bytes / 1e6, b->range_bytes,
	       b->batch, b->region_bytes);
	printf("(each file's kernel page cache dropped before each pass; best of %d pass%s)\n",
	       passes, passes == 1 ? "" : "es");
}

/*
 * Creates the shm object b->shm_name, region_bytes long. Returns its fd, or
 * -1 after a message (an object created here is unlinked again).
 */
static int shm_create(struct bench *b)
{
	snprintf(b->shm_name, sizeof(b->shm_name), "/shardfs-stage-bench.%d", (int)getpid());
	int sfd = shm_open(b->shm_name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (sfd < 0 || ftruncate(sfd, (off_t)b->region_bytes) < 0) {
		fprintf(stderr, "%s: shm %s: %s\n", prog, b->shm_name, strerror(errno));
		if (sfd >= 0)
			shm_unlink(b->shm_name);
		return -1;
	}
	return sfd;
}

/*
 * The shm half: passes of STAGE and of read()+memcpy (via heap, range_bytes),
 * their best rates into r and printed, then the verify. Returns 0, or -1
 * after a message.
 */
static int run_shm(struct bench *b, int passes, uint8_t *heap, struct rates *r)
{
	uint32_t shm_path = 0;

	for (int p = 0; p < passes; p++) {
		double s = pass_stage(b, T_SHM, &shm_path);
		double rd = s < 0 ? -1 : pass_read(b, B_MEMCPY, heap);
		if (s < 0 || rd < 0)
			return -1;
		r->shm_stage = best(r->shm_stage, s);
		r->shm_read = best(r->shm_read, rd);
	}
	printf("shm  STAGE ioctl                   %9.1f MB/s   path: %s\n", r->shm_stage,
	       path_str(shm_path));
	printf("shm  read() + memcpy               %9.1f MB/s\n", r->shm_read);
	printf("shm  STAGE / read()                %9.2f\n", r->shm_stage / r->shm_read);
	if (verify(b, T_SHM, false) < 0)
		return -1;
	printf("shm  verify                        ok\n");
	return 0;
}

/* A CPU figure for a row, "    0.123 s" or "  unknown" (-1: no daemon pid),
 * into buf (at least 32 bytes); returns buf. */
static const char *cpu_str(double cpu_s_per_gib, char *buf)
{
	if (cpu_s_per_gib < 0)
		return strcpy(buf, "  unknown");
	snprintf(buf, 32, "%9.3f s", cpu_s_per_gib);
	return buf;
}

/* The ceilings and STAGE's ratios to them (GPU half). */
static void print_ceilings(const struct bench *b, struct rates *r)
{
	char c1[32], c2[32];

	if (b->cache_dir)
		r->disk = odirect_rate(b->cache_dir, b->total_bytes);
	double link = r->h2d, lim = r->disk > 0 && r->disk < link ? r->disk : link;
	printf("link pinned cudaMemcpy H2D, RAM    %9.1f MB/s\n", link);
	if (r->disk > 0)
		printf("disk cache files, O_DIRECT read    %9.1f MB/s\n", r->disk);
	else
		printf("disk cache files, O_DIRECT read    (no --cache-dir)\n");
	printf("gpu  STAGE / link                  %9.2f\n", r->gpu_stage / link);
	if (r->disk > 0)
		printf("gpu  STAGE / disk                  %9.2f\n", r->gpu_stage / r->disk);
	printf("gpu  STAGE / min(link, disk)       %9.2f\n", r->gpu_stage / lim);
	printf("gpu  daemon CPU per GiB staged     %s\n", cpu_str(r->cpu_s_per_gib, c1));
	if (r->procs > 0) {
		printf("gpu  %2d procs STAGE, aggregate     %9.1f MB/s\n", b->procs, r->procs);
		printf("gpu  %2d procs read()+cudaMemcpy    %9.1f MB/s   (pinned, aggregate)\n",
		       b->procs, r->procs_read);
		printf("gpu  %2d procs STAGE / read()       %9.2f\n", b->procs,
		       r->procs / r->procs_read);
		printf("gpu  %2d procs / min(link, disk)    %9.2f\n", b->procs, r->procs / lim);
		printf("gpu  %2d procs daemon CPU per GiB   %s   (read()+cudaMemcpy: %s)\n",
		       b->procs, cpu_str(r->procs_cpu_s, c1), cpu_str(r->procs_read_cpu_s, c2));
	}
}

/* The cuFile row: its rate beside STAGE's, or why it was skipped. */
static void print_cufile(const struct rates *r)
{
	char c[32];

	if (r->cufile_skipped[0]) {
		printf("gpu  cuFile compat, O_DIRECT       skipped (%s)\n", r->cufile_skipped);
		return;
	}
	printf("gpu  cuFile compat, O_DIRECT       %9.1f MB/s\n", r->cufile);
	printf("gpu  STAGE / cuFile                %9.2f\n", r->gpu_stage / r->cufile);
	printf("gpu  cuFile daemon CPU per GiB     %s\n", cpu_str(r->cufile_cpu_s, c));
}

/*
 * One round of the GPU half's passes: STAGE, the link, read()+cudaMemcpy
 * from a pinned and a pageable buffer, and cuFile where it opened; the
 * best rates into r, the daemon's CPU into *stage_cpu and *cufile_cpu.
 * Returns 0, or -1 after a message.
 */
static int gpu_round(struct bench *b, bool cufile, struct rates *r, uint32_t *gpu_path,
		     struct cpu_acc *stage_cpu, struct cpu_acc *cufile_cpu)
{
	double c0 = cpu_seconds(b->daemon_pid);
	double s = pass_stage(b, T_GPU, gpu_path);
	cpu_add(stage_cpu, c0, cpu_seconds(b->daemon_pid), b->total_bytes);
	double h = s < 0 ? -1 : pass_h2d(b);
	double r1 = h < 0 ? -1 : pass_read(b, B_CUDA_PINNED, NULL);
	double r2 = r1 < 0 ? -1 : pass_read(b, B_CUDA_PAGEABLE, NULL);
	if (s < 0 || h < 0 || r1 < 0 || r2 < 0)
		return -1;
	r->gpu_stage = best(r->gpu_stage, s);
	r->h2d = best(r->h2d, h);
	r->gpu_pinned = best(r->gpu_pinned, r1);
	r->gpu_pageable = best(r->gpu_pageable, r2);
	if (!cufile)
		return 0;
	c0 = cpu_seconds(b->daemon_pid);
	double c = pass_cufile(b);
	cpu_add(cufile_cpu, c0, cpu_seconds(b->daemon_pid), b->total_bytes);
	if (c < 0)
		return -1;
	r->cufile = best(r->cufile, c);
	return 0;
}

/*
 * The GPU half, when gpu_setup allows it (else it prints why it is
 * skipped): rounds of gpu_round (cuFile where libcufile loads and opens,
 * else its row says why not), the best rates into r and printed, then the
 * verifies. Returns 0 (run or skipped), or -1 after a message. What
 * gpu_setup allocated, even when it fails, is the caller's to free.
 */
static int run_gpu(struct bench *b, const struct shardfs_query *q, int passes, struct rates *r)
{
	struct cpu_acc stage_cpu = {0}, cufile_cpu = {0};
	char why[300];
	uint32_t gpu_path = 0;
	int rc = -1;

	if (gpu_setup(b, q, why, sizeof(why)) < 0) {
		printf("GPU: skipped (%s)\n", why);
		return 0;
	}
	bool cufile = cufile_open(b, r->cufile_skipped, sizeof(r->cufile_skipped)) == 0;
	for (int p = 0; p < passes; p++)
		if (gpu_round(b, cufile, r, &gpu_path, &stage_cpu, &cufile_cpu) < 0)
			goto out;
	r->cpu_s_per_gib = cpu_per_gib(&stage_cpu);
	r->cufile_cpu_s = cpu_per_gib(&cufile_cpu);
	printf("gpu  STAGE ioctl                   %9.1f MB/s   path: %s\n", r->gpu_stage,
	       path_str(gpu_path));
	printf("gpu  read() + cudaMemcpy, pinned   %9.1f MB/s\n", r->gpu_pinned);
	printf("gpu  read() + cudaMemcpy, pageable %9.1f MB/s\n", r->gpu_pageable);
	printf("gpu  STAGE / read()+pinned         %9.2f\n", r->gpu_stage / r->gpu_pinned);
	printf("gpu  STAGE / read()+pageable       %9.2f\n", r->gpu_stage / r->gpu_pageable);
	print_cufile(r);
	print_ceilings(b, r);
	if (verify(b, T_GPU, false) < 0 || (cufile && verify(b, T_GPU, true) < 0))
		goto out;
	printf("gpu  verify                        ok%s\n", cufile ? " (STAGE and cuFile)" : "");
	rc = 0;
out:
	if (cufile)
		cufile_close(b);
	return rc;
}

/* Prints the last line: key=value pairs for scripts (GPU ones if run). */
static void print_keys(const struct bench *b, const struct rates *r)
{
	printf("bytes=%" PRIu64 " range_bytes=%" PRIu64 " shm_stage_MBps=%.1f shm_read_MBps=%.1f",
	       b->total_bytes, b->range_bytes, r->shm_stage, r->shm_read);
	if (r->gpu_stage >= 0)
		printf(" gpu_stage_MBps=%.1f gpu_read_pinned_MBps=%.1f gpu_read_pageable_MBps=%.1f"
		       " h2d_MBps=%.1f disk_MBps=%.1f daemon_cpu_s_per_GiB=%.3f"
		       " cufile_MBps=%.1f cufile_cpu_s_per_GiB=%.3f",
		       r->gpu_stage, r->gpu_pinned, r->gpu_pageable, r->h2d, r->disk,
		       r->cpu_s_per_gib, r->cufile, r->cufile_cpu_s);
	if (r->procs > 0)
		printf(" procs=%d procs_stage_MBps=%.1f procs_cpu_s_per_GiB=%.3f"
		       " procs_read_MBps=%.1f procs_read_cpu_s_per_GiB=%.3f",
		       b->procs, r->procs, r->procs_cpu_s, r->procs_read, r->procs_read_cpu_s);
	printf("\n");
}

/* Frees the GPU target's memory (what of it gpu_setup allocated). */
static void gpu_free(struct bench *b)
{
	if (b->dev)
		cu.free(b->dev);
	if (b->pinned)
		cu.free_host(b->pinned);
	free(b->pageable);
}

/* Unmaps and unlinks the shm target and frees heap and the file list. */
static void shm_free(struct bench *b, uint8_t *heap)
{
	if (b->shm_map && b->shm_map != MAP_FAILED)
		munmap(b->shm_map, b->region_bytes);
	shm_unlink(b->shm_name);
	free(heap);
	free(b->files);
}

int main(int argc, char **argv)
{
	struct bench b = {.gpu = 0, .range_bytes = 1u << 20, .procs = 1};
	struct rates r = {0};
	struct shardfs_query q;
	int passes = 1, status, sfd;
	uint64_t largest;
	uint8_t *heap = NULL;

	r.shm_stage = r.shm_read = r.gpu_stage = r.gpu_pinned = r.gpu_pageable = r.h2d = r.disk =
	    r.cpu_s_per_gib = r.procs = r.procs_cpu_s = r.procs_read = r.procs_read_cpu_s =
		r.cufile = r.cufile_cpu_s = -1; /* the row did not run */
	status = parse_args(argc, argv, &b, &passes);
	if (status >= 0)
		return status;
	if (load_files(&b, &argv[optind], argc - optind, &largest) < 0)
		return 1;
	status = query_mount(&b, &q);
	if (status)
		return status;
	plan(&b, &q, largest, passes);
	find_daemon(&b);

	/* The shm target. */
	status = 1;
	sfd = shm_create(&b);
	if (sfd < 0)
		return 1;
	b.shm_map = mmap(NULL, b.region_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
	close(sfd);
	heap = malloc(b.range_bytes);
	if (b.shm_map == MAP_FAILED || !heap) {
		fprintf(stderr, "%s: mmap/malloc: %s\n", prog, strerror(errno));
		goto out_shm;
	}
	memset(b.shm_map, 0, b.region_bytes); /* first-touch faults out of the timings */
	memset(heap, 0, b.range_bytes);

	if (run_shm(&b, passes, heap, &r) < 0)
		goto out_shm;
	if (b.procs > 1 && run_procs_passes(&b, &q, passes, &r) < 0)
		goto out_shm;
	if (run_gpu(&b, &q, passes, &r) < 0)
		goto out_gpu;
	print_keys(&b, &r);
	status = 0;
out_gpu:
	gpu_free(&b);
out_shm:
	shm_free(&b, heap);
	return status;
}
