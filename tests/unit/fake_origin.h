/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fake_origin — an in-memory stand-in for cache/nfs/origin.c in unit tests.
 *
 * Implements the origin.h functions that cache/prefetch calls
 * (sfs_origin_submit, sfs_origin_submit_batch, sfs_origin_max_read) over
 * synthetic files: the file handle carries a seed and the size the "server"
 * has, and byte i of a file is given by fake_fill(seed, i). Requests complete
 * on the fake's own worker threads, never on the submitting thread, like
 * origin's I/O threads.
 *
 * Knobs: largest read, a delay per request, failure of the Nth request (or
 * of requests N..N+k-1), holding requests at or beyond an offset until
 * fake_origin_release(), a size override (a file that shrank on the server),
 * and a hook run inside sfs_origin_submit() after each request is queued (to
 * widen races; a batch is submitted one request at a time). Counters:
 * requests, bytes, requests outstanding now and at most, bytes asked for per
 * 1 MiB chunk.
 *
 * Threading: every function may be called from any thread; the hook runs on
 * the submitting thread with no fake lock held.
 */
#ifndef SFS_FAKE_ORIGIN_H
#define SFS_FAKE_ORIGIN_H

#include "origin.h"

#include <stdint.h>

#define FAKE_MAX_CHUNKS 4096 /* per-chunk counters cover the first 4 GiB */

struct fake_origin_conf {
	uint32_t max_read;  /* returned by sfs_origin_max_read */
	unsigned n_threads; /* completion threads; 0 = 2 */
	unsigned delay_us;  /* each request takes this long on its worker */
};

struct fake_origin_stats {
	uint64_t requests;	  /* submitted */
	uint64_t bytes_requested; /* sum of counts */
	uint64_t bytes_served;	  /* sum of positive results */
	uint64_t failed;	  /* completed with an injected error */
	uint64_t outstanding;	  /* submitted, done() not yet returned */
	uint64_t max_outstanding; /* since the last reset */
	uint64_t held;		  /* waiting for fake_origin_release() */
	uint64_t max_end;	  /* largest offset + count asked for since reset */
	uint64_t wrong_thread;	  /* completions run on the submitting thread (must be 0) */
	uint64_t lent;		  /* READs answered with lent bytes (req->lend) */
	uint64_t background;	  /* submitted with req->background */
	uint64_t promoted;	  /* background requests promoted (sfs_origin_promote) */
	uint64_t demoted;	  /* requests made background (sfs_origin_demote) */
};

sfs_origin *fake_origin_new(const struct fake_origin_conf *conf);
/* Releases held requests, waits for every request, stops the workers. */
void fake_origin_free(sfs_origin *o);

/* Waits until nothing is outstanding (held requests count: release first). */
void fake_origin_drain(sfs_origin *o);

/* Requests number n .. n+count-1 (1-based, counting every submit since
 * creation) complete with result err (e.g. -EIO). n = 0 disables. */
void fake_origin_fail(sfs_origin *o, uint64_t n, uint64_t count, int err);

/* Requests with offset >= off wait until fake_origin_release(); UINT64_MAX
 * (the default) holds nothing. */
void fake_origin_hold_from(sfs_origin *o, uint64_t off);
/* Stops holding and lets every held request complete. */
void fake_origin_release(sfs_origin *o);

/* Called inside sfs_origin_submit() after the request is queued, with its
 * offset, count and number (1-based); NULL to clear. The request itself may
 * already be complete, so it is not passed. */
typedef void (*fake_submit_hook)(uint64_t offset, uint32_t count, uint64_t seq, void *arg);
void fake_origin_set_hook(sfs_origin *o, fake_submit_hook hook, void *arg);

void fake_origin_stats(sfs_origin *o, struct fake_origin_stats *out);
/* Zeroes max_outstanding, max_end and the per-chunk counters (not the
 * request numbering used by fake_origin_fail). */
void fake_origin_reset_stats(sfs_origin *o);
/* Bytes asked for in [index MiB, index+1 MiB) since the last reset. */
uint64_t fake_origin_chunk_bytes(sfs_origin *o, uint64_t index);

/* A handle for a synthetic file whose bytes depend on seed and whose size on
 * the "server" is server_size (reads beyond it are short, with eof). */
void fake_fh(struct sfs_fh *fh, uint32_t seed, uint64_t server_size);
/* From now on, file seed has size bytes on the "server" whatever its handle
 * says (the file was truncated or extended behind the client's back). */
void fake_origin_set_size(sfs_origin *o, uint32_t seed, uint64_t size);

/* The expected bytes [off, off + n) of file seed. */
void fake_fill(uint32_t seed, uint64_t off, void *buf, size_t n);

#endif
