// SPDX-License-Identifier: Apache-2.0
/* watchdog — see watchdog.h. */
#include "watchdog.h"
#include "../kernel/workers.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct sfs_watchdog {
	struct sfs_watchdog_conf c; /* set at open, then read-only */
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;	/* stopping, for the thread's wait */
	bool running, stopping; /* protected by lock */
	bool said;		/* the checker's own: this stretch was logged */
};

int sfs_watchdog_open(const struct sfs_watchdog_conf *c, sfs_watchdog **out)
{
	sfs_watchdog *w = calloc(1, sizeof(*w));
	pthread_condattr_t ca;

	if (!w)
		return -ENOMEM;
	w->c = *c;
	if (!w->c.now_ms)
		w->c.now_ms = sfs_now_ms;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->wake, &ca);
	pthread_condattr_destroy(&ca);
	*out = w;
	return 0;
}

bool sfs_watchdog_check(sfs_watchdog *w)
{
	uint64_t now = w->c.now_ms();
	uint64_t io = sfs_origin_stuck_ms(w->c.origin, now);
	uint64_t worker = sfs_workers_stuck_ms(now);

	if (io < w->c.wedge_ms && worker < w->c.wedge_ms) {
		__atomic_fetch_add(&w->c.keeper->heartbeat, 1, __ATOMIC_RELAXED);
		w->said = false;
		return true;
	}
	if (!w->said)
		sfs_log(SFS_LOG_ERR, "watchdog",
			"wedged: an I/O thread without a turn for %llu ms, a worker in one "
			"request for %llu ms; the keeper replaces this process",
			(unsigned long long)io, (unsigned long long)worker);
	w->said = true;
	return false;
}

static void *watch(void *arg)
{
	sfs_watchdog *w = arg;

	pthread_mutex_lock(&w->lock);
	while (!w->stopping) {
		pthread_mutex_unlock(&w->lock);
		sfs_watchdog_check(w);
		pthread_mutex_lock(&w->lock);
		struct timespec ts = sfs_deadline(CLOCK_MONOTONIC, SFS_WATCHDOG_TICK_MS * 1000u);
		while (!w->stopping && pthread_cond_timedwait(&w->wake, &w->lock, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

int sfs_watchdog_start(sfs_watchdog *w)
{
	int rc = pthread_create(&w->thread, NULL, watch, w);

	if (rc)
		return -rc;
	__atomic_store_n(&w->c.keeper->wedge_ms, w->c.wedge_ms, __ATOMIC_RELEASE);
	pthread_mutex_lock(&w->lock);
	w->running = true;
	pthread_mutex_unlock(&w->lock);
	return 0;
}

void sfs_watchdog_close(sfs_watchdog *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	bool was = w->running;
	w->stopping = true;
	w->running = false;
	pthread_cond_signal(&w->wake);
	pthread_mutex_unlock(&w->lock);
	if (was)
		pthread_join(w->thread, NULL);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
