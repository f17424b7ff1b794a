/* SPDX-License-Identifier: Apache-2.0 */
/*
 * reader_common.h — what the benchmark readers (shardfs-rawread,
 * shardfs-smallread) share: the first-error report, fatal exits, libnfs
 * error text and a monotonic clock. Header-only, static: each tool defines
 * `static const char *prog` before including it, after <nfsc/libnfs.h>.
 *
 * Owns: the run's failed flag and the lock that lets only its first error
 * through. Does not own: the readers' work, contexts or counts (each tool's).
 * Threading: fail() and now_s() from any thread; die() only before the
 * workers start.
 */
#ifndef SFS_READER_COMMON_H
#define SFS_READER_COMMON_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static atomic_bool failed; /* a worker hit an error: the run fails */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;

/* Report the first error of the run (any thread); later ones are dropped. */
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&err_lock);
	if (!atomic_exchange(&failed, true)) {
		fprintf(stderr, "%s: ", prog);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
		fputc('\n', stderr);
	}
	pthread_mutex_unlock(&err_lock);
}

/* Report and exit 1 (setup errors, before workers start). */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static const char *nfs_err(struct nfs_context *nfs)
{
	const char *e = nfs ? nfs_get_error(nfs) : NULL;

	return e && *e ? e : "unknown error";
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#endif
