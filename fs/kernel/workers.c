// SPDX-License-Identifier: Apache-2.0
/*
 * workers — see workers.h.
 *
 * State (under pool->lock but `reading`, an atomic): n_threads started
 * (none exits before the session ends), `working` = workers neither parked
 * nor inside a wait, `parked` = workers sleeping on pool->park, `reading`
 * = workers inside fuse_session_receive_buf. While running, working +
 * parked + waiting == n_threads. A worker parks at the top of its loop
 * while working > active and another worker is reading; a worker entering
 * a wait (depth 0 -> 1) lowers working and, if that leaves fewer than
 * active and none is reading, wakes a parked worker or starts a new one.
 */
#include "workers.h"
#include "../../cache/common/blocking.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIGNAL_POLL_MS 100

struct pool {
	struct fuse_session *se;
	unsigned max_threads, active;
	pthread_mutex_t lock;
	pthread_cond_t park; /* parked workers sleep here */
	pthread_cond_t done; /* the runner sleeps here until the session ends */
	unsigned reading;    /* atomic: workers inside fuse_session_receive_buf */
	/* protected by lock */
	unsigned n_threads, working, parked;
	bool ending;
	int error;
	uint64_t handoffs, at_limit;
	pthread_t *threads;  /* [max_threads] */
	unsigned next_index; /* protected by lock: the next worker's slot in busy[] */
	/* Per worker, for sfs_workers_stuck_ms: inside a request and not in a
	 * declared wait (atomic), and how many such stretches it began (atomic). */
	struct busy {
		unsigned busy, seq;
	} * busy; /* [max_threads] */
};

/* The running pool, for sfs_workers_get_stats (set and cleared by
 * sfs_workers_run while no worker runs; cleared under live_lock, which
 * sfs_workers_stuck_ms holds while it reads the pool). */
static struct pool *live_pool;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

/* The pool of this thread (NULL: not a worker), its wait depth and slot. */
static __thread struct pool *my_pool;
static __thread unsigned my_depth, my_index;

/* This worker is inside a request (and not waiting for NFS or a chunk),
 * or not. */
static void busy_set(struct pool *p, bool busy)
{
	struct busy *b = &p->busy[my_index];

	if (busy)
		__atomic_store_n(&b->seq, __atomic_load_n(&b->seq, __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
	__atomic_store_n(&b->busy, busy, __ATOMIC_RELEASE);
}

static void *worker_main(void *arg);

/* Start one more worker, counted as working. Caller holds lock. Returns 0
 * or -errno (at max_threads: -EAGAIN). */
static int start_worker(struct pool *p)
{
	if (p->n_threads >= p->max_threads)
		return -EAGAIN;
	int rc = pthread_create(&p->threads[p->n_threads], NULL, worker_main, p);
	if (rc)
		return -rc;
	p->n_threads++;
	p->working++;
	return 0;
}

/* A worker of the pool stops taking requests for a while: someone else
 * should. */
static void hook_begin(void)
{
	struct pool *p = my_pool;

	if (!p || my_depth++)
		return;
	busy_set(p, false); /* a declared wait is not a wedge */
	pthread_mutex_lock(&p->lock);
	p->working--;
	/* Only when no worker is waiting for a request: one that is takes the
	 * next request anyway, and waking a spare (which parks again when this
	 * one is back) cost two switches per wait for nothing. */
	if (!p->ending && p->working < p->active &&
	    !__atomic_load_n(&p->reading, __ATOMIC_RELAXED)) {
		if (p->parked) {
			pthread_cond_signal(&p->park);
			p->handoffs++;
		} else if (start_worker(p) == 0) {
			p->handoffs++;
		} else {
			p->at_limit++; /* the next requests wait in the kernel */
		}
	}
	pthread_mutex_unlock(&p->lock);
}

static void hook_end(void)
{
	struct pool *p = my_pool;

	if (!p || --my_depth)
		return;
	busy_set(p, true);
	pthread_mutex_lock(&p->lock);
	p->working++; /* parks after this request if there are enough */
	pthread_mutex_unlock(&p->lock);
}

static const struct sfs_blocking_hooks hooks = {hook_begin, hook_end};

/* The session ended (or failed with err): every worker is to leave. Caller
 * holds lock. */
static void end_locked(struct pool *p, int err)
{
	if (err && !p->error)
		p->error = err;
	p->ending = true;
	pthread_cond_broadcast(&p->park);
	pthread_cond_signal(&p->done);
}

static void free_buf(void *arg) { free(((struct fuse_buf *)arg)->mem); }

static void *worker_main(void *arg)
{
	struct pool *p = arg;
	struct fuse_buf fbuf;

	memset(&fbuf, 0, sizeof(fbuf));
	my_pool = p;
	pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
	pthread_cleanup_push(free_buf, &fbuf);
	pthread_mutex_lock(&p->lock);
	my_index = p->next_index++;
	for (;;) {
		/* Surplus workers park, unless none is left to read requests. */
		while (!p->ending && p->working > p->active &&
		       __atomic_load_n(&p->reading, __ATOMIC_RELAXED)) {
			p->working--;
			p->parked++;
			pthread_cond_wait(&p->park, &p->lock);
			p->parked--;
			p->working++;
		}
		if (p->ending)
			break;
		if (fuse_session_exited(p->se)) { /* a signal's fuse_session_exit */
			end_locked(p, 0);
			break;
		}
		pthread_mutex_unlock(&p->lock);
		/* Cancellable only here, as in libfuse's loop: the runner
		 * cancels workers still reading once the session ended. */
		__atomic_fetch_add(&p->reading, 1, __ATOMIC_RELAXED);
		pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
		int res = fuse_session_receive_buf(p->se, &fbuf);
		pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
		__atomic_fetch_sub(&p->reading, 1, __ATOMIC_RELAXED);
		if (res > 0) {
			busy_set(p, true);
			fuse_session_process_buf(p->se, &fbuf);
			busy_set(p, false);
		}
		pthread_mutex_lock(&p->lock);
		if (res == -EINTR || res == -EAGAIN || res > 0)
			continue;
		/* 0: unmounted or aborted; < 0: /dev/fuse failed. */
		end_locked(p, res);
		break;
	}
	pthread_mutex_unlock(&p->lock); /* the counts matter no more: the pool ends */
	pthread_cleanup_pop(1);
	return NULL;
}

int sfs_workers_run(struct fuse_session *se, unsigned max_threads, unsigned active)
{
	struct pool p = {.se = se, .max_threads = max_threads, .active = active};
	int rc;

	if (max_threads < 1 || active < 1 || active > max_threads)
		return -EINVAL;
	if (!(p.threads = calloc(max_threads, sizeof(*p.threads))))
		return -ENOMEM;
	if (!(p.busy = calloc(max_threads, sizeof(*p.busy)))) {
		free(p.threads);
		return -ENOMEM;
	}
	pthread_mutex_init(&p.lock, NULL);
	pthread_cond_init(&p.park, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the poll below ignores clock jumps */
	pthread_cond_init(&p.done, &ca);
	pthread_condattr_destroy(&ca);
	sfs_blocking_set_hooks(&hooks);
	__atomic_store_n(&live_pool, &p, __ATOMIC_RELEASE);

	pthread_mutex_lock(&p.lock);
	for (unsigned i = 0; i < active && (rc = start_worker(&p)) == 0; i++)
		;
	if (p.n_threads == 0)
		end_locked(&p, rc);
	/* A signal handler's fuse_session_exit interrupts a worker's read
	 * (EINTR) when it lands on a worker, which then ends the session; on
	 * any other thread (this one, most often) nothing wakes, so look every
	 * SIGNAL_POLL_MS. */
	while (!p.ending) {
		if (fuse_session_exited(se)) {
			end_locked(&p, 0);
			break;
		}
		struct timespec ts = sfs_deadline(CLOCK_MONOTONIC, SIGNAL_POLL_MS * 1000u);
		pthread_cond_timedwait(&p.done, &p.lock, &ts);
	}
	unsigned n = p.n_threads;
	pthread_mutex_unlock(&p.lock);

	/* Workers inside a request finish it; those reading /dev/fuse are
	 * cancelled there (the only place they can be). */
	for (unsigned i = 0; i < n; i++)
		pthread_cancel(p.threads[i]);
	for (unsigned i = 0; i < n; i++)
		pthread_join(p.threads[i], NULL);
	sfs_blocking_set_hooks(NULL);
	pthread_mutex_lock(&live_lock);
	__atomic_store_n(&live_pool, NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&live_lock);
	free(p.busy);
	rc = p.error;
	pthread_cond_destroy(&p.done);
	pthread_cond_destroy(&p.park);
	pthread_mutex_destroy(&p.lock);
	free(p.threads);
	return rc;
}

uint64_t sfs_workers_stuck_ms(uint64_t now_ms)
{
	/* The watchdog's view: per slot, the stretch it saw last and since when. */
	static unsigned seen_seq[SFS_WORKERS_WATCH_MAX];
	static uint64_t seen_since[SFS_WORKERS_WATCH_MAX];
	uint64_t worst = 0;

	pthread_mutex_lock(&live_lock);
	struct pool *p = __atomic_load_n(&live_pool, __ATOMIC_ACQUIRE);
	unsigned n = p ? p->max_threads : 0;
	for (unsigned i = 0; i < n && i < SFS_WORKERS_WATCH_MAX; i++) {
		bool busy = __atomic_load_n(&p->busy[i].busy, __ATOMIC_ACQUIRE);
		unsigned seq = __atomic_load_n(&p->busy[i].seq, __ATOMIC_RELAXED);
		if (!busy || seq != seen_seq[i] || !seen_since[i]) {
			seen_seq[i] = seq;
			seen_since[i] = busy ? now_ms : 0;
			continue;
		}
		if (now_ms - seen_since[i] > worst)
			worst = now_ms - seen_since[i];
	}
	pthread_mutex_unlock(&live_lock);
	return worst;
}

void sfs_workers_get_stats(struct sfs_workers_stats *out)
{
	struct pool *p = __atomic_load_n(&live_pool, __ATOMIC_ACQUIRE);

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	out->working = p->working;
	out->parked = p->parked;
	out->waiting = p->n_threads - p->working - p->parked;
	out->handoffs = p->handoffs;
	out->at_limit = p->at_limit;
	pthread_mutex_unlock(&p->lock);
}
