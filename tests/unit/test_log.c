// SPDX-License-Identifier: Apache-2.0
/*
 * test_log — level filtering, the stderr line format and the rate limiter.
 *
 * Linked against cache/common/log.c only. stderr is redirected to a temporary file
 * around each sfs_log() call so that the test can read what was written.
 */
#include "log.h"
#include "tap.h"

#include <ctype.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static FILE *cap;
static int saved_stderr = -1;

static void capture_begin(void)
{
	fflush(stderr);
	cap = tmpfile();
	if (!cap) {
		perror("tmpfile");
		exit(99);
	}
	saved_stderr = dup(2);
	dup2(fileno(cap), 2);
}

/* Stops capturing; returns what was written to stderr (static buffer). */
static const char *capture_end(void)
{
	static char buf[8192];
	size_t n;

	fflush(stderr);
	dup2(saved_stderr, 2);
	close(saved_stderr);
	rewind(cap);
	n = fread(buf, 1, sizeof(buf) - 1, cap);
	buf[n] = 0;
	fclose(cap);
	return buf;
}

/* out with newlines shown as \n, for a one-line TAP description (static buffer). */
static const char *esc(const char *out)
{
	static char buf[300];
	size_t n = 0;

	for (; *out && n + 3 < sizeof(buf); out++) {
		if (*out == '\n') {
			buf[n++] = '\\';
			buf[n++] = 'n';
		} else {
			buf[n++] = *out;
		}
	}
	buf[n] = 0;
	return buf;
}

static int side_effects;
static int touch(void) { return ++side_effects; }

static void test_levels(void)
{
	const char *out;

	ok(sfs_log_max_level == SFS_LOG_INFO, "default level is info (%d)", sfs_log_max_level);

	side_effects = 0;
	capture_begin();
	sfs_log(SFS_LOG_DEBUG, "unit", "debug %d", touch());
	out = capture_end();
	ok(out[0] == 0, "debug dropped by default (wrote \"%s\")", esc(out));
	ok(side_effects == 0, "a dropped message's arguments are not evaluated");

	capture_begin();
	sfs_log(SFS_LOG_INFO, "unit", "hello %d", 42);
	out = capture_end();
	ok(!strcmp(out, "shardfs: info: unit: hello 42\n"), "info line format (\"%s\")", esc(out));

	capture_begin();
	sfs_log(SFS_LOG_WARN, "origin", "node %s down", "10.0.0.1");
	sfs_log(SFS_LOG_ERR, "fs", "bad");
	out = capture_end();
	ok(!strcmp(out, "shardfs: warning: origin: node 10.0.0.1 down\nshardfs: error: fs: bad\n"),
	   "warning and error lines (\"%s\")", esc(out));

	__atomic_store_n(&sfs_log_max_level, SFS_LOG_DEBUG, __ATOMIC_RELAXED);
	side_effects = 0;
	capture_begin();
	sfs_log(SFS_LOG_DEBUG, "unit", "debug %d", touch());
	out = capture_end();
	ok(!strcmp(out, "shardfs: debug: unit: debug 1\n") && side_effects == 1,
	   "debug written at level debug (\"%s\")", esc(out));

	__atomic_store_n(&sfs_log_max_level, SFS_LOG_ERR, __ATOMIC_RELAXED);
	capture_begin();
	sfs_log(SFS_LOG_WARN, "unit", "warn");
	sfs_log(SFS_LOG_INFO, "unit", "info");
	sfs_log(SFS_LOG_ERR, "unit", "err");
	out = capture_end();
	ok(!strcmp(out, "shardfs: error: unit: err\n"), "level err drops warning and info (\"%s\")",
	   esc(out));
	__atomic_store_n(&sfs_log_max_level, SFS_LOG_INFO, __ATOMIC_RELAXED);

	/* A message longer than the line buffer is cut, not overflowed. */
	char *big = malloc(5000);
	memset(big, 'x', 4999);
	big[4999] = 0;
	capture_begin();
	sfs_log(SFS_LOG_INFO, "unit", "%s", big);
	out = capture_end();
	size_t n = strlen(out);
	ok(n > 1000 && n < 1100 && out[n - 1] == '\n' && !strchr(out, 0x7f),
	   "long message truncated to one line (%zu bytes)", n);
	free(big);
}

static struct sfs_log_ratelimit shared_rl, hammer_rl;
static uint64_t hammer_until_ms;
static pthread_barrier_t barrier;

static void *rl_thread(void *arg)
{
	int *allowed = arg;

	pthread_barrier_wait(&barrier);
	for (int i = 0; i < 1000; i++)
		*allowed += sfs_log_ratelimit(&shared_rl, 60000);
	return NULL;
}

/* Calls the limiter (interval 1 ms) as fast as it can until hammer_until_ms. */
static void *hammer_thread(void *arg)
{
	int *allowed = arg;

	pthread_barrier_wait(&barrier);
	while (sfs_now_ms() < hammer_until_ms)
		*allowed += sfs_log_ratelimit(&hammer_rl, 1);
	return NULL;
}

static void test_ratelimit(void)
{
	struct sfs_log_ratelimit rl = {0};
	int n = 0;

	ok(sfs_log_ratelimit(&rl, 200), "first message allowed");
	for (int i = 0; i < 1000; i++)
		n += sfs_log_ratelimit(&rl, 200);
	ok(n == 0, "none of 1000 more within the interval allowed (%d)", n);

	/* 200 ms after the first, one more is allowed, then none again. */
	uint64_t t0 = sfs_now_ms();
	n = 0;
	int first_at = -1;
	while (sfs_now_ms() < t0 + 450) {
		if (sfs_log_ratelimit(&rl, 200)) {
			n++;
			if (first_at < 0)
				first_at = (int)(sfs_now_ms() - t0);
		}
		usleep(1000);
	}
	ok(n >= 2 && n <= 3, "about one per 200 ms over 450 ms (%d allowed, first after %d ms)", n,
	   first_at);

	struct sfs_log_ratelimit zero = {0};
	n = 0;
	for (int i = 0; i < 100; i++)
		n += sfs_log_ratelimit(&zero, 0);
	ok(n == 100, "interval 0 limits nothing (%d of 100)", n);

	/* 8 threads racing on one limiter: exactly one message gets through. */
	enum { N = 8 };
	pthread_t th[N];
	int allowed[N] = {0}, total = 0;

	pthread_barrier_init(&barrier, NULL, N);
	for (int i = 0; i < N; i++)
		pthread_create(&th[i], NULL, rl_thread, &allowed[i]);
	for (int i = 0; i < N; i++) {
		pthread_join(th[i], NULL);
		total += allowed[i];
	}
	pthread_barrier_destroy(&barrier);
	ok(total == 1, "8 racing threads: exactly one allowed (%d)", total);

	/* 4 threads spinning on a 1 ms limiter for 200 ms: at most one per
	 * millisecond gets through, even when they all see it expire at once. */
	enum { H = 4 };
	int hallowed[H] = {0};
	pthread_t hth[H];
	pthread_barrier_init(&barrier, NULL, H);
	uint64_t t_start = sfs_now_ms();
	hammer_until_ms = t_start + 200;
	for (int i = 0; i < H; i++)
		pthread_create(&hth[i], NULL, hammer_thread, &hallowed[i]);
	total = 0;
	for (int i = 0; i < H; i++) {
		pthread_join(hth[i], NULL);
		total += hallowed[i];
	}
	uint64_t elapsed = sfs_now_ms() - t_start;
	pthread_barrier_destroy(&barrier);
	ok(total >= 1 && (uint64_t)total <= elapsed + 1,
	   "4 threads on a 1 ms limiter: %d allowed in %llu ms (at most one per ms)", total,
	   (unsigned long long)elapsed);

	uint64_t a = sfs_now_ns();
	struct timespec ts = {0, 20 * 1000 * 1000};
	nanosleep(&ts, NULL);
	uint64_t b = sfs_now_ns();
	ok(b - a >= 20000000ull && b - a < 2000000000ull && sfs_now_ms() >= b / 1000000u,
	   "sfs_now_ns/ms are monotonic milliseconds (%llu ns for 20 ms)",
	   (unsigned long long)(b - a));
}

/* The foreground daemon's lines start with the UTC time. Last: the switch
 * cannot be undone. */
static void test_timestamps(void)
{
	time_t before = time(NULL);

	sfs_log_use_timestamps();
	capture_begin();
	sfs_log(SFS_LOG_WARN, "origin", "node %s down", "10.0.0.1");
	const char *out = capture_end();
	struct tm tm = {0};
	const char *rest = strptime(out, "%Y-%m-%dT%H:%M:%S", &tm);
	time_t when = rest ? timegm(&tm) : 0;
	ok(rest && rest[0] == '.' && isdigit((unsigned char)rest[1]) &&
	       isdigit((unsigned char)rest[2]) && isdigit((unsigned char)rest[3]) &&
	       !strcmp(rest + 4, "Z shardfs: warning: origin: node 10.0.0.1 down\n"),
	   "timestamped line format (\"%s\")", esc(out));
	ok(rest && when >= before - 1 && when <= time(NULL) + 1,
	   "the timestamp is now, in UTC (%lld vs %lld)", (long long)when, (long long)before);
}

int main(void)
{
	test_levels();
	test_ratelimit();
	test_timestamps();
	return tap_done();
}
