// SPDX-License-Identifier: Apache-2.0
/* memtrim — see memtrim.h. */
#include "memtrim.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static bool running, stopping; /* protected by lock */
static pthread_t thread;
static uint64_t (*release_fn)(void *); /* set before the thread starts */
static void *release_arg;
static uint64_t freed;		 /* atomic: blocks freed since the last trim */
static unsigned long long trims; /* atomic */

static uint64_t budget_bytes; /* set before the thread starts: mem_max */

void sfs_memtrim_tune(uint64_t mem_max)
{
	uint64_t keep = mem_max / 64 < SFS_MEMTRIM_KEEP_TOP ? mem_max / 64 : SFS_MEMTRIM_KEEP_TOP;
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t arenas = mem_max / (32u << 20), glibc = 8 * (uint64_t)(cpus > 0 ? cpus : 1);

	budget_bytes = mem_max;
	mallopt(M_MMAP_THRESHOLD, SFS_MEMTRIM_MMAP_MAX);
	mallopt(M_TRIM_THRESHOLD, (int)keep);
	if (arenas < glibc)
		mallopt(M_ARENA_MAX, (int)(arenas < 4 ? 4 : arenas));
}

/* Whether the RSS is over three quarters of the budget. */
static bool over_budget(void)
{
	unsigned long long size, rss;
	FILE *f = fopen("/proc/self/statm", "r");
	bool over = false;

	if (!f)
		return false;
	if (fscanf(f, "%llu %llu", &size, &rss) == 2)
		over = rss * (uint64_t)sysconf(_SC_PAGESIZE) > budget_bytes / 4 * 3;
	fclose(f);
	return over;
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
		if (released || __atomic_load_n(&freed, __ATOMIC_RELAXED) >= SFS_MEMTRIM_MIN ||
		    (budget_bytes && over_budget())) {
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
