// SPDX-License-Identifier: Apache-2.0
/* memtrim — see memtrim.h. */
#include "memtrim.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool running, stopping; /* protected by lock */
static pthread_t thread;
static uint64_t (*release_fn)(void *); /* set before the thread starts */
static void *release_arg;
static uint64_t freed;		 /* atomic: blocks freed since the last trim */
static unsigned long long trims; /* atomic */

void sfs_memtrim_tune(void)
{
	mallopt(M_MMAP_THRESHOLD, SFS_MEMTRIM_MMAP_MAX);
	mallopt(M_TRIM_THRESHOLD, SFS_MEMTRIM_KEEP_TOP);
}

void sfs_memtrim_freed(size_t n) { __atomic_fetch_add(&freed, n, __ATOMIC_RELAXED); }

unsigned long long sfs_memtrim_count(void) { return __atomic_load_n(&trims, __ATOMIC_RELAXED); }

static void *trim_main(void *arg)
{
	(void)arg;
	pthread_setname_np(pthread_self(), "sfs-memtrim");
	pthread_mutex_lock(&lock);
	while (!stopping) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 1;
		pthread_cond_timedwait(&wake, &lock, &until);
		if (stopping)
			break;
		pthread_mutex_unlock(&lock);
		uint64_t released = release_fn ? release_fn(release_arg) : 0;
		if (released || __atomic_load_n(&freed, __ATOMIC_RELAXED) >= SFS_MEMTRIM_MIN) {
			__atomic_store_n(&freed, 0, __ATOMIC_RELAXED);
			malloc_trim(0);
			__atomic_fetch_add(&trims, 1, __ATOMIC_RELAXED);
		}
		pthread_mutex_lock(&lock);
	}
	pthread_mutex_unlock(&lock);
	return NULL;
}

int sfs_memtrim_start(uint64_t (*release)(void *arg), void *arg)
{
	pthread_mutex_lock(&lock);
	if (!running) {
		release_fn = release;
		release_arg = arg;
	}
	int rc = running ? 0 : -pthread_create(&thread, NULL, trim_main, NULL);
	if (rc == 0)
		running = true;
	stopping = false;
	pthread_mutex_unlock(&lock);
	return rc;
}

void sfs_memtrim_kick(void)
{
	pthread_mutex_lock(&lock);
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
}

void sfs_memtrim_stop(void)
{
	pthread_mutex_lock(&lock);
	bool join = running;
	running = false;
	stopping = true;
	pthread_cond_signal(&wake);
	pthread_mutex_unlock(&lock);
	if (join)
		pthread_join(thread, NULL);
}
