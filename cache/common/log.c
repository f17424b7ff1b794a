// SPDX-License-Identifier: Apache-2.0
/*
 * log — stderr or syslog output with levels and rate limiting. See log.h.
 */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <syslog.h>
#include <time.h>

int sfs_log_max_level = SFS_LOG_INFO;
static bool use_syslog; /* set once when the daemon detaches, before threads start */
static bool use_time;	/* set once, before threads start */

void sfs_log_use_timestamps(void) { use_time = true; }

void sfs_log_use_syslog(void)
{
	openlog("shardfs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	use_syslog = true;
}

void sfs_log_write(enum sfs_log_level level, const char *module, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (use_syslog) {
		syslog((int)level, "%s: %s", module, msg);
		return;
	}
	static const char *const names[8] = {"", "", "", "error", "warning", "", "info", "debug"};
	char when[32] = "";
	if (use_time) {
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(when + n, sizeof(when) - n, ".%03ldZ ", ts.tv_nsec / 1000000);
	}
	/* One fprintf keeps concurrent lines whole (stdio locks the stream). */
	fprintf(stderr, "%sshardfs: %s: %s: %s\n", when, names[level & 7], module, msg);
}

uint64_t sfs_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t sfs_now_ms(void) { return sfs_now_ns() / 1000000u; }

struct timespec sfs_deadline(clockid_t clock, uint64_t us)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	ts.tv_sec += (time_t)(us / 1000000u);
	ts.tv_nsec += (long)(us % 1000000u) * 1000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

bool sfs_log_ratelimit(struct sfs_log_ratelimit *rl, uint64_t interval_ms)
{
	uint64_t now = sfs_now_ms();
	uint64_t next = __atomic_load_n(&rl->next_ms, __ATOMIC_RELAXED);

	if (now < next)
		return false;
	return __atomic_compare_exchange_n(&rl->next_ms, &next, now + interval_ms, false,
					   __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
