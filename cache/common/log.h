/* SPDX-License-Identifier: Apache-2.0 */
/*
 * log — the one logging entry point of shardfs.
 *
 * Owns: the log level, the destination (stderr in the foreground, syslog once
 * the daemon has detached) and the rate limit for repeated warnings. Does
 * not own the counters that stand for per-request events (each module keeps
 * its own).
 * Thread-safe: every function may be called from any thread.
 * Per-request events are counters, never log lines above SFS_LOG_DEBUG.
 */
#ifndef SFS_LOG_H
#define SFS_LOG_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>

enum sfs_log_level {
	SFS_LOG_ERR = 3,
	SFS_LOG_WARN = 4,
	SFS_LOG_INFO = 6,
	SFS_LOG_DEBUG = 7,
};

/* Messages above this level are dropped before formatting. Atomic. */
extern int sfs_log_max_level;

/* Switch the destination to syslog (ident "shardfs"); call after detaching. */
void sfs_log_use_syslog(void);

/* Start stderr lines with the UTC time, to the millisecond
 * ("YYYY-MM-DDThh:mm:ss.mmmZ shardfs: ..."): for a daemon running in the
 * foreground, whose stderr is a log (journald, kubectl logs). Call before
 * threads start; syslog lines carry syslog's own time. */
void sfs_log_use_timestamps(void);

void sfs_log_write(enum sfs_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sfs_log(level, module, ...)                                                                \
	do {                                                                                       \
		if ((int)(level) <= __atomic_load_n(&sfs_log_max_level, __ATOMIC_RELAXED))         \
			sfs_log_write((level), (module), __VA_ARGS__);                             \
	} while (0)

/*
 * A rate limiter for one repeated warning: at most one message per
 * interval_ms; sfs_log_ratelimit() returns true when this one may be logged.
 * Zero-initialise; the struct is updated with atomics.
 */
struct sfs_log_ratelimit {
	uint64_t next_ms;
};
bool sfs_log_ratelimit(struct sfs_log_ratelimit *rl, uint64_t interval_ms);

/* CLOCK_MONOTONIC in milliseconds / nanoseconds. */
uint64_t sfs_now_ms(void);
uint64_t sfs_now_ns(void);

/* The time `us` microseconds from now on `clock`: a deadline for
 * pthread_cond_timedwait (on a condvar of that clock). */
struct timespec sfs_deadline(clockid_t clock, uint64_t us);

#endif
