// SPDX-License-Identifier: Apache-2.0
/*
 * test_watchdog — fs/restart/watchdog.c: the heartbeat ticks while the
 * origin's I/O threads turn and no FUSE worker is stuck in one request, and
 * stops when either has been stuck for wedge_ms; it ticks again once they
 * move. First one check at a time, on a clock the test moves; then the
 * thread, driven by the checks it makes (each asks the origin once), never
 * by how long anything takes.
 *
 * Linked with the restart wing (sfs_restart) and the log. Its two
 * neighbours are faked here: the origin's stuck time (sfs_origin_stuck_ms,
 * from the last turn the test gave its I/O thread) and the workers'
 * (sfs_workers_stuck_ms). The keeper state is a plain struct in memory.
 */
#include "../../fs/restart/watchdog.h"
#include "../../fs/kernel/workers.h" /* the neighbour faked here */
#include "tap.h"

#include <time.h>

#define WEDGE_MS 5000

static uint64_t clock_ms = 1000000; /* atomic: the watchdog's clock, moved by the test */
static uint64_t turn_ms = 1000000;  /* atomic: the I/O thread's last turn */
static uint64_t worker_ms;	    /* atomic: since when a worker is in a request; 0: none */
static unsigned origin_calls;	    /* atomic: the checks made */
static char origin_marker;
static const sfs_origin *const origin = (const sfs_origin *)&origin_marker;
static int bad_origin; /* atomic: a check asked about another origin */

uint64_t sfs_origin_stuck_ms(const sfs_origin *pool, uint64_t now_ms)
{
	if (pool != origin)
		__atomic_store_n(&bad_origin, 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&origin_calls, 1, __ATOMIC_SEQ_CST);
	return now_ms - __atomic_load_n(&turn_ms, __ATOMIC_SEQ_CST);
}

uint64_t sfs_workers_stuck_ms(uint64_t now_ms)
{
	uint64_t since = __atomic_load_n(&worker_ms, __ATOMIC_SEQ_CST);
	return since ? now_ms - since : 0;
}

static uint64_t fake_now(void) { return __atomic_load_n(&clock_ms, __ATOMIC_SEQ_CST); }
static void advance(uint64_t ms) { __atomic_fetch_add(&clock_ms, ms, __ATOMIC_SEQ_CST); }
static void io_turns(void) { __atomic_store_n(&turn_ms, fake_now(), __ATOMIC_SEQ_CST); }

static struct sfs_keeper_state state;
static uint64_t beats(void) { return __atomic_load_n(&state.heartbeat, __ATOMIC_SEQ_CST); }

static sfs_watchdog *open_watchdog(void)
{
	struct sfs_watchdog_conf c = {
	    .origin = origin, .keeper = &state, .wedge_ms = WEDGE_MS, .now_ms = fake_now};
	sfs_watchdog *w = NULL;

	ok(sfs_watchdog_open(&c, &w) == 0 && w, "opened");
	return w;
}

/* One check at a time: the decision alone. */
static void test_checks(void)
{
	sfs_watchdog *w = open_watchdog();
	uint64_t b = beats();

	ok(sfs_watchdog_check(w) && beats() == b + 1, "healthy: the heartbeat ticks");
	advance(WEDGE_MS - 1);
	ok(sfs_watchdog_check(w) && beats() == b + 2,
	   "an I/O thread without a turn for less than wedge_ms: still live");
	advance(1);
	ok(!sfs_watchdog_check(w) && beats() == b + 2,
	   "no turn for wedge_ms on the (fake) clock: wedged, no tick");
	advance(60000);
	ok(!sfs_watchdog_check(w) && beats() == b + 2, "still stalled: still no tick");
	io_turns();
	ok(sfs_watchdog_check(w) && beats() == b + 3, "the I/O thread turns again: ticks again");
	__atomic_store_n(&worker_ms, fake_now(), __ATOMIC_SEQ_CST);
	advance(WEDGE_MS);
	io_turns();
	ok(!sfs_watchdog_check(w) && beats() == b + 3,
	   "a worker in one request for wedge_ms (the origin fine): wedged");
	__atomic_store_n(&worker_ms, 0, __ATOMIC_SEQ_CST);
	ok(sfs_watchdog_check(w) && beats() == b + 4, "the worker answered: ticks again");
	ok(state.wedge_ms == 0, "a watchdog never started does not tell the keeper a wedge time");
	ok(!__atomic_load_n(&bad_origin, __ATOMIC_RELAXED), "it asks the origin it was given");
	sfs_watchdog_close(w);
}

/* Wait until the thread has made n checks in all (the fake origin counts
 * them). A generous bound only turns a hang into a failure. */
static bool wait_checks(unsigned n)
{
	for (int i = 0; i < 120000; i++) {
		if (__atomic_load_n(&origin_calls, __ATOMIC_SEQ_CST) >= n)
			return true;
		nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
	}
	return false;
}

/* The thread: ticks while healthy, stops while stalled, and goes on. */
static void test_thread(void)
{
	io_turns();
	sfs_watchdog *w = open_watchdog();

	ok(sfs_watchdog_start(w) == 0, "started");
	ok(__atomic_load_n(&state.wedge_ms, __ATOMIC_ACQUIRE) == WEDGE_MS,
	   "the keeper is told the wedge time");
	unsigned c0 = __atomic_load_n(&origin_calls, __ATOMIC_SEQ_CST);
	uint64_t b0 = beats();
	ok(wait_checks(c0 + 2) && beats() > b0, "healthy: the thread ticks the heartbeat");

	/* Stalled: the clock moves, the I/O thread does not turn. The check
	 * under way when it stalled may still tick; every later one may not. */
	advance(WEDGE_MS);
	unsigned c1 = __atomic_load_n(&origin_calls, __ATOMIC_SEQ_CST);
	ok(wait_checks(c1 + 2), "checks go on while stalled");
	uint64_t b1 = beats();
	ok(wait_checks(c1 + 5) && beats() == b1, "stalled origin: three checks, no tick");

	io_turns();
	unsigned c2 = __atomic_load_n(&origin_calls, __ATOMIC_SEQ_CST);
	ok(wait_checks(c2 + 2) && beats() > b1, "the origin turns again: the heartbeat goes on");
	sfs_watchdog_close(w); /* joins the thread */
	ok(!__atomic_load_n(&bad_origin, __ATOMIC_RELAXED), "it asks the origin it was given");
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {{"checks", test_checks}, {"thread", test_thread}};

	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
