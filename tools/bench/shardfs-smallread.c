// SPDX-License-Identifier: Apache-2.0
/*
 * shardfs-smallread: the reader of the small-file and random-record
 * benchmarks (tools/bench/shardfs-bench --small-files, --random-records). THREADS
 * threads share one list of work and each takes the next item:
 *
 *   files mode    an item is a path; open it, read it whole, close it (a
 *                 PyTorch ImageFolder loader reading JPEGs);
 *   records mode  (-r FILE) an item is OFFSET LENGTH inside FILE, which
 *                 every thread opens once; one pread per record (MXNet's
 *                 RecordIO reader on a shuffled index).
 *
 * The same work loop runs over one of two sources, so that the baseline and
 * the reader under test differ only in the source:
 *
 *   a directory            POSIX open/read/pread/close (the shardfs mount,
 *                          or a local-disk copy of the data);
 *   HOST[,HOST...]:/EXPORT libnfs 4.0's synchronous API, one context per
 *                          thread, thread i on HOST i mod n (the raw NFS
 *                          baseline; run it in the cluster's namespace).
 *
 * This file owns the work list, the threads and the two sources; it does not
 * check file contents. Threads share only the list cursor (atomic) and the
 * totals (atomic); each thread owns its buffer, file descriptor or libnfs
 * context. libnfs contexts are created and mounted one at a time on the main
 * thread before the clock starts (libnfs 4.0 has unlocked globals there).
 *
 * Last line on stdout: files=N (or records=N) bytes=B seconds=S cpu_s=C,
 * where C is this process's user+system CPU time during the timed part.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/time.h> /* before libnfs.h: it uses struct timeval */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw-nfs.h> /* NFS_V3 */

#define TIMEOUT_MS  30000
#define BUF_BYTES   (1u << 20) /* read size of files mode; the largest record */
#define MAX_THREADS 1024

/* One unit of work: a path (files mode) or a record (records mode). */
struct item {
	const char *path; /* files mode; points into the list buffer */
	uint64_t off;	  /* records mode */
	uint64_t len;	  /* records mode */
};

struct reader {
	pthread_t tid;
	char *buf;		   /* BUF_BYTES, owned */
	int fd;			   /* POSIX records mode: the record file */
	struct nfs_context *nfs;   /* NFS source only */
	const char *host;	   /* NFS source only */
	struct nfsfh *rec_fh;	   /* NFS records mode: the record file */
	uint64_t readmax;	   /* NFS source: largest READ the server takes */
	uint64_t n_items, n_bytes; /* this thread's totals */
};

/* Set at start, then read-only. */
static const char *prog = "shardfs-smallread";
static bool opt_quiet;
static const char *opt_record_file; /* records mode when set */
static const char *src_dir;	    /* POSIX source, or NULL */
static const char *src_export;	    /* NFS source: the export path */
static struct item *items;
static size_t n_items;

static _Atomic size_t next_item;
static pthread_barrier_t start_barrier;

#include "reader_common.h"

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s [-t THREADS] [-l LIST] [-q] SOURCE\n"
		"       %s -r FILE [-t THREADS] [-l LIST] [-q] SOURCE\n"
		"\n"
		"THREADS threads (default 16) share the work in LIST (default: standard\n"
		"input) and each takes the next item.\n"
		"Files mode: LIST has one path per line, relative to SOURCE; a thread opens\n"
		"the file, reads it whole and closes it.\n"
		"Records mode (-r FILE, relative to SOURCE): LIST has OFFSET LENGTH per line\n"
		"(bytes, LENGTH <= 1 MiB); every thread opens FILE once and preads records.\n"
		"\n"
		"SOURCE is a directory (POSIX calls) or HOST[,HOST...]:/EXPORT (libnfs,\n"
		"NFSv3, one synchronous context per thread, thread i on HOST i mod n).\n"
		"\n"
		"  -q   print only the machine-readable line\n"
		"  -h   this text\n"
		"\n"
		"Last line: files=N (records=N) bytes=B seconds=S cpu_s=C.\n",
		prog, prog);
}

/*
 * Reads all of f into a NUL-terminated buffer and splits it into items.
 * Returns the number of items; exits on a malformed line. The buffer is
 * kept for the life of the process (paths point into it).
 */
static size_t load_list(FILE *f, bool records)
{
	size_t cap = 1 << 20, len = 0, n = 0, ncap = 1024;
	char *buf = malloc(cap), *line, *save = NULL;
	size_t got;

	if (!buf)
		die("out of memory");
	while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (cap - len - 1 == 0) {
			cap *= 2;
			buf = realloc(buf, cap);
			if (!buf)
				die("out of memory");
		}
	}
	if (ferror(f))
		die("cannot read the list: %s", strerror(errno));
	buf[len] = '\0';
	items = malloc(ncap * sizeof(*items));
	if (!items)
		die("out of memory");
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		struct item it = {0};

		if (!*line)
			continue;
		if (records) {
			char *end, *len_at;

			errno = 0;
			it.off = strtoull(line, &end, 10);
			if (errno || end == line || *end != ' ')
				die("bad record line: %s", line);
			len_at = end + 1;
			it.len = strtoull(len_at, &end, 10);
			if (errno || end == len_at || *end || it.len == 0 || it.len > BUF_BYTES)
				die("bad record line: %s (want OFFSET LENGTH, LENGTH 1..%u)", line,
				    BUF_BYTES);
		} else {
			it.path = line;
		}
		if (n == ncap) {
			ncap *= 2;
			items = realloc(items, ncap * sizeof(*items));
			if (!items)
				die("out of memory");
		}
		items[n++] = it;
	}
	return n;
}

/* Joins SOURCE and a relative path. Returns a malloc'd string; exits on ENOMEM. */
static char *join(const char *dir, const char *rel)
{
	size_t a = strlen(dir), b = strlen(rel);
	char *p = malloc(a + b + 2);

	if (!p)
		die("out of memory");
	memcpy(p, dir, a);
	p[a] = '/';
	memcpy(p + a + 1, rel[0] == '/' ? rel + 1 : rel, rel[0] == '/' ? b : b + 1);
	return p;
}

/* --- POSIX source ------------------------------------------------------- */

/* Opens, reads whole and closes one file. Returns bytes read or -errno. */
static int64_t posix_read_file(struct reader *r, const char *rel)
{
	char path[4096];
	int64_t total = 0;
	ssize_t got;
	int fd, err;

	if (snprintf(path, sizeof(path), "%s/%s", src_dir, rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while ((got = read(fd, r->buf, BUF_BYTES)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			close(fd);
			return err;
		}
		total += got;
	}
	close(fd);
	return total;
}

/* Reads one record whole. Returns its length or -errno (-EIO at EOF). */
static int64_t posix_read_record(struct reader *r, uint64_t off, uint64_t len)
{
	uint64_t done = 0;
	ssize_t got;

	while (done < len) {
		got = pread(r->fd, r->buf + done, len - done, (off_t)(off + done));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return -EIO;
		done += (uint64_t)got;
	}
	return (int64_t)done;
}

/* --- NFS source ----------------------------------------------------------- */

/*
 * Opens, reads whole and closes one file over r's context. A READ that
 * returns less than it asked for (asked at most readmax) is the end of the
 * file, as in the server's eof flag, so a file costs one READ per readmax.
 * Returns bytes read or -errno.
 */
static int64_t nfs_read_file(struct reader *r, const char *rel)
{
	char path[4096];
	struct nfsfh *fh;
	uint64_t chunk = r->readmax < BUF_BYTES ? r->readmax : BUF_BYTES;
	int64_t total = 0;
	int got;

	if (snprintf(path, sizeof(path), "/%s", rel[0] == '/' ? rel + 1 : rel) >= (int)sizeof(path))
		return -ENAMETOOLONG;
	got = nfs_open(r->nfs, path, O_RDONLY, &fh);
	if (got < 0)
		return got;
	for (;;) {
		got = nfs_pread(r->nfs, fh, (uint64_t)total, chunk, r->buf);
		if (got < 0) {
			nfs_close(r->nfs, fh);
			return got;
		}
		total += got;
		if ((uint64_t)got < chunk)
			break;
	}
	nfs_close(r->nfs, fh);
	return total;
}

/* Reads one record whole over r's context. Returns its length or -errno. */
static int64_t nfs_read_record(struct reader *r, uint64_t off, uint64_t len)
{
	uint64_t done = 0, n;
	int got;

	while (done < len) {
		n = len - done < r->readmax ? len - done : r->readmax;
		got = nfs_pread(r->nfs, r->rec_fh, off + done, n, r->buf + done);
		if (got < 0)
			return got;
		if (got == 0)
			return -EIO;
		done += (uint64_t)got;
	}
	return (int64_t)done;
}

/* --- the work loop -------------------------------------------------------- */

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	size_t i;
	int64_t got;

	pthread_barrier_wait(&start_barrier);
	while (!atomic_load_explicit(&failed, memory_order_relaxed)) {
		i = atomic_fetch_add_explicit(&next_item, 1, memory_order_relaxed);
		if (i >= n_items)
			break;
		if (opt_record_file)
			got = r->nfs ? nfs_read_record(r, items[i].off, items[i].len)
				     : posix_read_record(r, items[i].off, items[i].len);
		else
			got = r->nfs ? nfs_read_file(r, items[i].path)
				     : posix_read_file(r, items[i].path);
		if (got < 0) {
			if (opt_record_file)
				fail("record at %" PRIu64 " (+%" PRIu64 ") of %s%s%s: %s",
				     items[i].off, items[i].len, opt_record_file,
				     r->host ? " on " : "", r->host ? r->host : "",
				     r->nfs ? nfs_err(r->nfs) : strerror((int)-got));
			else
				fail("%s%s%s: %s", items[i].path, r->host ? " on " : "",
				     r->host ? r->host : "",
				     r->nfs ? nfs_err(r->nfs) : strerror((int)-got));
			break;
		}
		r->n_items++;
		r->n_bytes += (uint64_t)got;
	}
	return NULL;
}

/*
 * Creates and mounts one context per reader, round-robin over the hosts of
 * spec (HOST[,HOST...]:/EXPORT), and in records mode opens the record file
 * on each. Runs on the main thread before any reader starts; exits on error.
 */
static void nfs_setup(struct reader *rs, int n, char *spec)
{
	char *colon = strchr(spec, ':'), *tok, *save = NULL;
	const char **hosts = NULL;
	int nhosts = 0;

	*colon = '\0';
	src_export = colon + 1;
	for (tok = strtok_r(spec, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		hosts = realloc(hosts, sizeof(*hosts) * (size_t)(nhosts + 1));
		if (!hosts)
			die("out of memory");
		hosts[nhosts++] = tok;
	}
	if (nhosts == 0)
		die("no host in the source");
	for (int i = 0; i < n; i++) {
		struct reader *r = &rs[i];

		r->host = hosts[i % nhosts];
		r->nfs = nfs_init_context();
		if (!r->nfs)
			die("cannot create an NFS context");
		nfs_set_version(r->nfs, NFS_V3);
		nfs_set_autoreconnect(r->nfs, 0);
		nfs_set_timeout(r->nfs, TIMEOUT_MS);
		if (nfs_mount(r->nfs, r->host, src_export) != 0)
			die("cannot mount %s:%s: %s", r->host, src_export, nfs_err(r->nfs));
		r->readmax = nfs_get_readmax(r->nfs);
		if (r->readmax == 0 || r->readmax > BUF_BYTES)
			r->readmax = BUF_BYTES;
		if (opt_record_file) {
			char path[4096];

			snprintf(path, sizeof(path), "/%s",
				 opt_record_file[0] == '/' ? opt_record_file + 1 : opt_record_file);
			if (nfs_open(r->nfs, path, O_RDONLY, &r->rec_fh) != 0)
				die("cannot open %s on %s: %s", path, r->host, nfs_err(r->nfs));
		}
	}
	free(hosts);
}

/*
 * Parses the options: THREADS into *n_threads, LIST into *list_path, the
 * rest into opt_*. Returns -1 to go on, with optind at SOURCE, or main's
 * exit status: 0 after -h, 2 on bad usage (after the usage text). Exits 1
 * on a bad THREADS.
 */
static int parse_args(int argc, char **argv, int *n_threads, const char **list_path)
{
	int opt;

	while ((opt = getopt(argc, argv, "t:l:r:qh")) != -1) {
		switch (opt) {
		case 't':
			*n_threads = atoi(optarg);
			if (*n_threads < 1 || *n_threads > MAX_THREADS)
				die("bad THREADS: %s (1..%d)", optarg, MAX_THREADS);
			break;
		case 'l':
			*list_path = optarg;
			break;
		case 'r':
			opt_record_file = optarg;
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
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/*
 * Loads the work list from list_path (standard input if NULL) into items and
 * n_items. Exits 1 if it cannot be read, is malformed or is empty.
 */
static void load_items(const char *list_path)
{
	FILE *lf = stdin;

	if (list_path) {
		lf = fopen(list_path, "r");
		if (!lf)
			die("%s: %s", list_path, strerror(errno));
	}
	n_items = load_list(lf, opt_record_file != NULL);
	if (lf != stdin)
		fclose(lf);
	if (n_items == 0)
		die("empty list");
}

/*
 * Returns n readers set up on source (a directory, or HOST[,HOST...]:/EXPORT
 * for which nfs_setup mounts a context per reader), each with a touched
 * buffer and, for a directory in records mode, the record file open. Sets
 * src_dir for a directory. Exits 1 on error.
 */
static struct reader *make_readers(int n, const char *source)
{
	struct reader *rs = calloc((size_t)n, sizeof(*rs));
	char *spec, *colon;

	if (!rs)
		die("out of memory");
	spec = strdup(source);
	if (!spec)
		die("out of memory");
	colon = strchr(spec, ':');
	if (colon && colon[1] == '/' && colon != spec)
		nfs_setup(rs, n, spec);
	else
		src_dir = spec;
	for (int i = 0; i < n; i++) {
		struct reader *r = &rs[i];

		r->fd = -1;
		r->buf = malloc(BUF_BYTES);
		if (!r->buf)
			die("out of memory");
		/* Touch the buffer so first use does not page-fault. */
		memset(r->buf, 0, BUF_BYTES);
		if (src_dir && opt_record_file) {
			char *p = join(src_dir, opt_record_file);

			r->fd = open(p, O_RDONLY | O_CLOEXEC);
			if (r->fd < 0)
				die("%s: %s", p, strerror(errno));
			free(p);
		}
	}
	return rs;
}

/*
 * Starts the n readers, releases them together and waits for them all.
 * Sets *secs (above 0) and *cpu to the wall and CPU seconds from the
 * release to the last join. Exits 1 if a thread cannot start.
 */
static void run_readers(struct reader *rs, int n, double *secs, double *cpu)
{
	double t0, t1, c0;

	if (pthread_barrier_init(&start_barrier, NULL, (unsigned)n + 1) != 0)
		die("cannot create a barrier");
	for (int i = 0; i < n; i++)
		if (pthread_create(&rs[i].tid, NULL, reader_main, &rs[i]) != 0)
			die("cannot start a thread");
	c0 = cpu_s();
	t0 = now_s();
	pthread_barrier_wait(&start_barrier);
	for (int i = 0; i < n; i++)
		pthread_join(rs[i].tid, NULL);
	t1 = now_s();
	*cpu = cpu_s() - c0;
	if (t1 - t0 <= 0)
		t1 = t0 + 1e-9;
	*secs = t1 - t0;
}

/*
 * Adds the n readers' totals to *done and *bytes, and closes and frees what
 * each reader holds (record file, libnfs context, buffer).
 */
static void collect_readers(struct reader *rs, int n, uint64_t *done, uint64_t *bytes)
{
	for (int i = 0; i < n; i++) {
		*done += rs[i].n_items;
		*bytes += rs[i].n_bytes;
		if (rs[i].fd >= 0)
			close(rs[i].fd);
		if (rs[i].nfs) {
			if (rs[i].rec_fh)
				nfs_close(rs[i].nfs, rs[i].rec_fh);
			nfs_destroy_context(rs[i].nfs);
		}
		free(rs[i].buf);
	}
}

int main(int argc, char **argv)
{
	const char *list_path = NULL;
	struct reader *rs;
	int n_threads = 16, rc;
	uint64_t done = 0, bytes = 0;
	double secs, cpu;

	rc = parse_args(argc, argv, &n_threads, &list_path);
	if (rc >= 0)
		return rc;
	load_items(list_path);
	rs = make_readers(n_threads, argv[optind]);
	run_readers(rs, n_threads, &secs, &cpu);

	if (atomic_load(&failed))
		return 1;
	collect_readers(rs, n_threads, &done, &bytes);
	if (done != n_items) {
		fprintf(stderr, "%s: read %" PRIu64 " of %zu items\n", prog, done, n_items);
		return 1;
	}
	if (!opt_quiet)
		printf("read %" PRIu64 " %s, %.1f MiB in %.3f s with %d thread(s) from %s: "
		       "%.0f/s, %.1f MB/s\n",
		       done, opt_record_file ? "records" : "files", (double)bytes / 1048576.0, secs,
		       n_threads, argv[optind], (double)done / secs, (double)bytes / 1e6 / secs);
	printf("%s=%" PRIu64 " bytes=%" PRIu64 " seconds=%.3f cpu_s=%.3f\n",
	       opt_record_file ? "records" : "files", done, bytes, secs, cpu);
	return 0;
}
