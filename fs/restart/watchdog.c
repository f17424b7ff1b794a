// SPDX-License-Identifier: Apache-2.0
/* watchdog — see watchdog.h. */
#include "watchdog.h"
#include "../kernel/workers.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static pthread_t thread;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool running, stopping; /* protected by lock */
static struct sfs_fs *watched; /* set at start */
static uint64_t wedge;	       /* set at start */

static void *watch(void *arg)
{
	(void)arg;
	bool said = false;

	pthread_mutex_lock(&lock);
	while (!stopping) {
		pthread_mutex_unlock(&lock);
		uint64_t now = sfs_now_ms();
		uint64_t io = sfs_origin_stuck_ms(watched->origin, now);
		uint64_t worker = sfs_workers_stuck_ms(now);
		if (io < wedge && worker < wedge) {
			__atomic_fetch_add(&watched->keeper->heartbeat, 1, __ATOMIC_RELAXED);
			said = false;
		} else if (!said) {
			sfs_log(SFS_LOG_ERR, "watchdog",
				"wedged: an I/O thread without a turn for %llu ms, a worker in one "
				"request for %llu ms; the keeper replaces this process",
				(unsigned long long)io, (unsigned long long)worker);
			said = true;
		}
		pthread_mutex_lock(&lock);
		struct timespec ts = sfs_deadline(CLOCK_MONOTONIC, SFS_WATCHDOG_TICK_MS * 1000u);
		while (!stopping && pthread_cond_timedwait(&wake, &lock, &ts) == 0)
			;
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int sfs_watchdog_start(struct sfs_fs *fs, uint64_t wedge_ms)
{
	pthread_condattr_t ca;

	if (!fs->keeper || !wedge_ms)
		return 0;
	watched = fs;
	wedge = wedge_ms;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&wake, &ca);
	pthread_condattr_destroy(&ca);
	int rc = pthread_create(&thread, NULL, watch, NULL);
	if (rc)
		return -rc;
	__atomic_store_n(&fs->keeper->wedge_ms, wedge_ms, __ATOMIC_RELEASE);
	pthread_mutex_lock(&lock);
	running = true;
	pthread_mutex_unlock(&lock);
	return 0;
}

void sfs_watchdog_stop(void)
{
	pthread_mutex_lock(&lock);
	bool was = running;
	stopping = true;
	running = false;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
	if (was)
		pthread_join(thread, NULL);
}
