// SPDX-License-Identifier: Apache-2.0
/*
 * origin_call — waiting for origin requests: sfs_origin_call() and
 * sfs_origin_call_batch() on top of sfs_origin_submit_batch(). Nothing here
 * depends on the transport, so the unit tests link it with their fake
 * origin. See origin.h for the contract. Owns only each call's wait, on the
 * caller's stack; the requests are the caller's.
 *
 * Threading: any thread but an origin I/O thread (a completion callback
 * must not wait); the wait is declared (blocking.h).
 */
#include "origin.h"
#include "../common/blocking.h"

#include <pthread.h>

/* The caller's wait, on its stack. */
struct call_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t pending;
};

/* Runs on an I/O thread. The waiter may return (and its stack go) once
 * pending reaches 0 and the lock is released: nothing is touched after the
 * unlock. */
static void call_done(struct sfs_origin_req *req)
{
	struct call_wait *w = req->call_wait;

	pthread_mutex_lock(&w->lock);
	if (--w->pending == 0)
		pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

void sfs_origin_call_batch(sfs_origin *pool, struct sfs_origin_req **reqs, size_t n)
{
	struct call_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, n};

	if (n == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		reqs[i]->done = call_done;
		reqs[i]->call_wait = &w;
	}
	sfs_origin_submit_batch(pool, reqs, n);
	sfs_blocking_begin();
	pthread_mutex_lock(&w.lock);
	while (w.pending)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	sfs_blocking_end();
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
}

int sfs_origin_call(sfs_origin *pool, struct sfs_origin_req *req)
{
	sfs_origin_call_batch(pool, &req, 1);
	return req->result;
}
