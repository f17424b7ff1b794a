// SPDX-License-Identifier: Apache-2.0
/*
 * shardfs-rawread: the baseline for shardfs benchmarks. Reads whole files
 * from an NFSv3 export served by every node of a scale-out cluster, striping
 * aligned preads over NCONNECT libnfs contexts per node, without FUSE.
 *
 * Every context opens every file (high-level API, one nfsfh per context and
 * file). Contexts are split over THREADS threads; each thread drives its own
 * contexts with one poll() loop. Work-pulling: a context with a free slot
 * takes the next block of the next active file (round-robin over at most
 * FILES_IN_PARALLEL files in flight). Reply data is copied out of libnfs's
 * buffer into the slot's own buffer inside the callback, as a real reader
 * (and the shardfs daemon) must do with libnfs 4.0.
 *
 * Last line on stdout: bytes=N seconds=S MBps=X (MB = 1e6 bytes).
 *
 * Owns: the contexts, the slots and their buffers, the work cursor. Does
 * not check the bytes it reads nor cache them. Threading: each context and
 * its slots belong to the one thread that polls them; the file cursor is
 * shared under a lock; contexts are made and mounted on the main thread,
 * one at a time, before the clock starts.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h> /* before libnfs.h: it uses struct timeval */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw-nfs.h> /* NFS_V3 */

#define TIMEOUT_MS	30000
#define SERVICE_TICK_MS 100

struct file {
	const char *path;
	uint64_t size;
	uint64_t nblocks;
	uint64_t next_block;  /* next block to issue (under work_lock) */
	uint64_t done_blocks; /* completed blocks (under work_lock) */
};

struct ctx;

struct slot {
	struct ctx *c;
	bool busy;
	size_t file;
	uint64_t off;
	uint64_t len;
	char *buf;
};

struct ctx {
	struct nfs_context *nfs;
	const char *host;
	struct nfsfh **fh;  /* one per file */
	struct slot *slots; /* depth of them */
	int inflight;
	bool dead;
};

struct worker {
	pthread_t tid;
	struct ctx **ctxs;
	int nctx;
};

/* Options. */
static int opt_nconnect = 2, opt_depth = 4, opt_threads = 1, opt_files_par;
static uint64_t opt_block = 1u << 20;
static bool opt_quiet;
static const char *prog = "shardfs-rawread";

/* Shared work state. */
static struct file *files;
static size_t nfiles;
static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t first_open; /* files before this one are complete */
static size_t rr_cursor;  /* round-robin position among active files */
static _Atomic uint64_t bytes_done;

#include "reader_common.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [-c NCONNECT] [-d DEPTH] [-b BLOCK_BYTES] [-j FILES_IN_PARALLEL]\n"
		"          [-t THREADS] [-q] HOST[,HOST...]:/EXPORT PATH [PATH...]\n"
		"\n"
		"Read every PATH (a path inside the export) whole over NFSv3 with libnfs,\n"
		"striping aligned preads over NCONNECT connections to every HOST: the raw\n"
		"baseline for shardfs benchmarks.\n"
		"\n"
		"  -c NCONNECT   connections per host (default 2)\n"
		"  -d DEPTH      reads in flight per connection (default 4)\n"
		"  -b BYTES      read size, K/M suffixes allowed (default 1M)\n"
		"  -j N          files read at once (default: all)\n"
		"  -t THREADS    threads driving the connections (default 1; at most one\n"
		"                per connection, more are cut to that)\n"
		"  -q            print only the machine-readable line\n"
		"  -h            this text\n"
		"\n"
		"Last line: bytes=N seconds=S MBps=X (MB = 1e6 bytes).\n",
		prog);
}

static long parse_num(const char *s, const char *what, long lo, long hi)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s)
		die("bad %s: %s", what, s);
	if (*end == 'k' || *end == 'K') {
		v *= 1024;
		end++;
	} else if (*end == 'm' || *end == 'M') {
		v *= 1024 * 1024;
		end++;
	}
	if (*end || v < lo || v > hi)
		die("bad %s: %s (%ld..%ld)", what, s, lo, hi);
	return v;
}

/*
 * Picks the next block to read, round-robin over the first opt_files_par
 * files that are not complete. Returns false when nothing is left to issue
 * within that window. Caller holds work_lock.
 */
static bool take_block(size_t *fi, uint64_t *blk)
{
	size_t end, n, i, k;

	while (first_open < nfiles && files[first_open].done_blocks == files[first_open].nblocks)
		first_open++;
	end = first_open + (size_t)opt_files_par;
	if (end > nfiles)
		end = nfiles;
	n = end - first_open;
	for (k = 0; k < n; k++) {
		i = first_open + (rr_cursor + k) % n;
		if (files[i].next_block < files[i].nblocks) {
			*fi = i;
			*blk = files[i].next_block++;
			rr_cursor = (rr_cursor + k + 1) % n;
			return true;
		}
	}
	return false;
}

static bool all_done(void)
{
	bool done;

	pthread_mutex_lock(&work_lock);
	while (first_open < nfiles && files[first_open].done_blocks == files[first_open].nblocks)
		first_open++;
	done = first_open >= nfiles;
	pthread_mutex_unlock(&work_lock);
	return done;
}

static void read_cb(int err, struct nfs_context *nfs, void *data, void *private_data)
{
	struct slot *s = private_data;
	struct ctx *c = s->c;

	s->busy = false;
	c->inflight--;
	if (err < 0) {
		fail("read %s at %" PRIu64 " from %s: %s (%s)", files[s->file].path, s->off,
		     c->host, strerror(-err), data ? (const char *)data : nfs_err(nfs));
		c->dead = true;
		return;
	}
	if ((uint64_t)err != s->len) {
		fail("short read %s at %" PRIu64 " from %s: %d of %" PRIu64 " bytes",
		     files[s->file].path, s->off, c->host, err, s->len);
		return;
	}
	memcpy(s->buf, data, (size_t)err);
	atomic_fetch_add_explicit(&bytes_done, (uint64_t)err, memory_order_relaxed);
	pthread_mutex_lock(&work_lock);
	files[s->file].done_blocks++;
	pthread_mutex_unlock(&work_lock);
}

/* Fills the free slots of c. Returns false on a submission error. */
static bool fill(struct ctx *c)
{
	for (int i = 0; i < opt_depth && !atomic_load(&failed); i++) {
		struct slot *s = &c->slots[i];
		size_t fi;
		uint64_t blk;
		bool got;

		if (s->busy)
			continue;
		pthread_mutex_lock(&work_lock);
		got = take_block(&fi, &blk);
		pthread_mutex_unlock(&work_lock);
		if (!got)
			return true;
		s->file = fi;
		s->off = blk * opt_block;
		s->len = files[fi].size - s->off < opt_block ? files[fi].size - s->off : opt_block;
		s->busy = true;
		c->inflight++;
		if (nfs_pread_async(c->nfs, c->fh[fi], s->off, s->len, read_cb, s) != 0) {
			s->busy = false;
			c->inflight--;
			fail("cannot queue read of %s on %s: %s", files[fi].path, c->host,
			     nfs_err(c->nfs));
			return false;
		}
	}
	return true;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct pollfd *pfd = calloc((size_t)w->nctx, sizeof(*pfd));
	double last_tick = now_s();

	if (!pfd) {
		fail("out of memory");
		return NULL;
	}
	for (;;) {
		int busy = 0, r;
		double t;

		if (atomic_load(&failed))
			break;
		for (int i = 0; i < w->nctx; i++) {
			struct ctx *c = w->ctxs[i];

			if (!fill(c))
				break;
			busy += c->inflight;
			pfd[i].fd = nfs_get_fd(c->nfs);
			pfd[i].events = (short)nfs_which_events(c->nfs);
			pfd[i].revents = 0;
		}
		if (atomic_load(&failed))
			break;
		if (busy == 0) {
			/* Nothing of ours in flight and nothing to take: the
			 * file window may still open up when another thread
			 * completes a file, so only stop when all is done. */
			if (all_done())
				break;
		}
		r = poll(pfd, (nfds_t)w->nctx, busy ? SERVICE_TICK_MS : 5);
		if (r < 0 && errno != EINTR) {
			fail("poll: %s", strerror(errno));
			break;
		}
		t = now_s();
		bool tick = t - last_tick >= SERVICE_TICK_MS / 1000.0;
		if (tick)
			last_tick = t;
		for (int i = 0; i < w->nctx; i++) {
			struct ctx *c = w->ctxs[i];

			if (pfd[i].revents || tick) {
				if (nfs_service(c->nfs, pfd[i].revents) < 0) {
					fail("connection to %s failed: %s", c->host,
					     nfs_err(c->nfs));
					c->dead = true;
				}
			}
		}
	}
	free(pfd);
	return NULL;
}

/*
 * Parses the options into opt_*. Returns -1 to go on, with optind at the
 * source and at least one PATH after it, or main's exit status: 0 after -h,
 * 2 on bad usage (after the usage text). Exits 1 on a bad number.
 */
static int parse_args(int argc, char **argv)
{
	int opt;

	while ((opt = getopt(argc, argv, "c:d:b:j:t:qh")) != -1) {
		switch (opt) {
		case 'c':
			opt_nconnect = (int)parse_num(optarg, "NCONNECT", 1, 64);
			break;
		case 'd':
			opt_depth = (int)parse_num(optarg, "DEPTH", 1, 1024);
			break;
		case 'b':
			opt_block = (uint64_t)parse_num(optarg, "BLOCK_BYTES", 512, 64L << 20);
			break;
		case 'j':
			opt_files_par = (int)parse_num(optarg, "FILES_IN_PARALLEL", 1, 1 << 20);
			break;
		case 't':
			opt_threads = (int)parse_num(optarg, "THREADS", 1, 256);
			break;
		case 'q':
			opt_quiet = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind < 2) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* The source, HOST[,HOST...]:/EXPORT, taken apart. */
struct source {
	const char **hosts; /* point into a copy of the argument, kept for the run */
	int nhosts;
	const char *export;
};

/* Splits arg into src's hosts and export. Exits 1 on a malformed source. */
static void parse_source(const char *arg, struct source *src)
{
	char *spec, *colon, *tok, *save = NULL;

	src->hosts = NULL;
	src->nhosts = 0;
	spec = strdup(arg);
	colon = spec ? strchr(spec, ':') : NULL;
	if (!colon || colon[1] != '/')
		die("bad source %s: want HOST[,HOST...]:/EXPORT", arg);
	*colon = '\0';
	src->export = colon + 1;
	for (tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		src->hosts = realloc(src->hosts, sizeof(*src->hosts) * (size_t)(src->nhosts + 1));
		if (!src->hosts)
			die("out of memory");
		src->hosts[src->nhosts++] = tok;
	}
	if (src->nhosts == 0)
		die("no host in %s", arg);
}

/* Sets up files[] from the n PATH arguments and bounds opt_files_par by n. */
static void init_files(char **paths, size_t n)
{
	nfiles = n;
	files = calloc(nfiles, sizeof(*files));
	if (!files)
		die("out of memory");
	for (size_t i = 0; i < nfiles; i++)
		files[i].path = paths[i];
	if (opt_files_par <= 0 || (size_t)opt_files_par > nfiles)
		opt_files_par = (int)nfiles;
}

/*
 * Creates and mounts nctx contexts, opt_nconnect per host of src. Returns
 * them (context j * nhosts + h is connection j to host h); exits 1 on error.
 */
static struct ctx *mount_contexts(const struct source *src, int nctx)
{
	struct ctx *ctxs = calloc((size_t)nctx, sizeof(*ctxs));

	if (!ctxs)
		die("out of memory");
	/* Contexts are created and mounted one at a time (libnfs 4.0 has
	 * unlocked globals there). Order: connection j of every host before
	 * connection j+1, so that any split over threads mixes hosts. */
	for (int j = 0; j < opt_nconnect; j++) {
		for (int h = 0; h < src->nhosts; h++) {
			struct ctx *c = &ctxs[j * src->nhosts + h];

			c->host = src->hosts[h];
			c->nfs = nfs_init_context();
			if (!c->nfs)
				die("cannot create an NFS context");
			nfs_set_version(c->nfs, NFS_V3);
			nfs_set_autoreconnect(c->nfs, 0);
			nfs_set_timeout(c->nfs, TIMEOUT_MS);
			if (nfs_mount(c->nfs, c->host, src->export) != 0)
				die("cannot mount %s:%s: %s", c->host, src->export,
				    nfs_err(c->nfs));
		}
	}
	return ctxs;
}

/*
 * Fills in the size and block count of every file from context c. Returns
 * the total size; exits 1 on an error or a file that is not regular.
 */
static uint64_t stat_files(const struct ctx *c, const char *export)
{
	uint64_t total = 0;

	for (size_t i = 0; i < nfiles; i++) {
		struct nfs_stat_64 st;

		if (nfs_stat64(c->nfs, files[i].path, &st) != 0)
			die("%s:%s%s: %s", c->host, export, files[i].path, nfs_err(c->nfs));
		if ((st.nfs_mode & S_IFMT) != S_IFREG)
			die("%s: not a regular file", files[i].path);
		files[i].size = st.nfs_size;
		files[i].nblocks = (st.nfs_size + opt_block - 1) / opt_block;
		total += st.nfs_size;
	}
	return total;
}

/*
 * Opens every file on every context and gives each context opt_depth slots
 * with a touched opt_block buffer each. Exits 1 on error.
 */
static void open_files_and_slots(struct ctx *ctxs, int nctx)
{
	for (int k = 0; k < nctx; k++) {
		struct ctx *c = &ctxs[k];

		c->fh = calloc(nfiles, sizeof(*c->fh));
		c->slots = calloc((size_t)opt_depth, sizeof(*c->slots));
		if (!c->fh || !c->slots)
			die("out of memory");
		for (size_t i = 0; i < nfiles; i++)
			if (nfs_open(c->nfs, files[i].path, O_RDONLY, &c->fh[i]) != 0)
				die("cannot open %s on %s: %s", files[i].path, c->host,
				    nfs_err(c->nfs));
		for (int d = 0; d < opt_depth; d++) {
			c->slots[d].c = c;
			c->slots[d].buf = malloc(opt_block);
			if (!c->slots[d].buf)
				die("out of memory");
			/* Touch the buffer so first use does not page-fault. */
			memset(c->slots[d].buf, 0, opt_block);
		}
	}
}

/* Returns opt_threads workers with the nctx contexts dealt round-robin. */
static struct worker *assign_workers(struct ctx *ctxs, int nctx)
{
	struct worker *workers = calloc((size_t)opt_threads, sizeof(*workers));

	if (!workers)
		die("out of memory");
	for (int t = 0; t < opt_threads; t++) {
		workers[t].ctxs = calloc((size_t)nctx, sizeof(struct ctx *));
		if (!workers[t].ctxs)
			die("out of memory");
	}
	for (int k = 0; k < nctx; k++) {
		struct worker *w = &workers[k % opt_threads];

		w->ctxs[w->nctx++] = &ctxs[k];
	}
	return workers;
}

/*
 * Runs the workers, the first on this thread, until all are done. Returns
 * the seconds it took; `failed` tells whether a worker failed.
 */
static double run_workers(struct worker *workers)
{
	double t0 = now_s();

	for (int t = 1; t < opt_threads; t++)
		if (pthread_create(&workers[t].tid, NULL, worker_main, &workers[t]) != 0)
			die("cannot start a thread");
	worker_main(&workers[0]);
	for (int t = 1; t < opt_threads; t++)
		pthread_join(workers[t].tid, NULL);
	return now_s() - t0;
}

/* Closes every file on every context and destroys the contexts. */
static void close_contexts(struct ctx *ctxs, int nctx)
{
	for (int k = 0; k < nctx; k++) {
		for (size_t i = 0; i < nfiles; i++)
			nfs_close(ctxs[k].nfs, ctxs[k].fh[i]);
		nfs_destroy_context(ctxs[k].nfs);
	}
}

/* Prints the summary (unless -q) and the machine-readable last line. */
static void report(int nhosts, uint64_t total, double secs)
{
	if (!opt_quiet)
		printf("read %zu file(s), %.1f MiB in %.3f s: %.1f MiB/s "
		       "(%d host(s) x %d conn, depth %d, %" PRIu64
		       "-byte reads, %d thread(s), %d file(s) at once)\n",
		       nfiles, (double)total / 1048576.0, secs, (double)total / 1048576.0 / secs,
		       nhosts, opt_nconnect, opt_depth, opt_block, opt_threads, opt_files_par);
	printf("bytes=%" PRIu64 " seconds=%.3f MBps=%.1f\n", total, secs,
	       (double)total / 1e6 / secs);
}

int main(int argc, char **argv)
{
	struct source src;
	struct ctx *ctxs;
	struct worker *workers;
	int nctx, rc;
	double secs;
	uint64_t total, got;

	rc = parse_args(argc, argv);
	if (rc >= 0)
		return rc;
	parse_source(argv[optind], &src);
	init_files(&argv[optind + 1], (size_t)(argc - optind - 1));

	nctx = src.nhosts * opt_nconnect;
	if (opt_threads > nctx)
		opt_threads = nctx;
	ctxs = mount_contexts(&src, nctx);
	total = stat_files(&ctxs[0], src.export);
	open_files_and_slots(ctxs, nctx);
	workers = assign_workers(ctxs, nctx);
	secs = run_workers(workers);

	if (atomic_load(&failed))
		return 1; /* message already printed; exit without draining */
	got = atomic_load(&bytes_done);
	if (got != total) {
		fprintf(stderr, "%s: read %" PRIu64 " of %" PRIu64 " bytes\n", prog, got, total);
		return 1;
	}
	if (secs <= 0)
		secs = 1e-9;
	close_contexts(ctxs, nctx);
	report(src.nhosts, total, secs);
	return 0;
}
