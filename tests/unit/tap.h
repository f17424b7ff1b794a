/* SPDX-License-Identifier: Apache-2.0 */
/*
 * tap — the few TAP helpers the unit tests share (header only).
 *
 * ok() prints one test point; diag() a comment; tap_done() the plan and the
 * exit status (1 when any point failed); tap_skip_all() prints the reason and
 * exits 77, which meson counts as a skip; tap_run() runs a table of named
 * tests (all, or those named on the command line). Single-threaded: call ok() from the
 * main thread only (worker threads count their own failures and the main
 * thread reports them).
 */
#ifndef SFS_TEST_TAP_H
#define SFS_TEST_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

__attribute__((format(printf, 4, 5), unused)) static int tap_ok(int pass, const char *file,
								int line, const char *fmt, ...)
{
	va_list ap;

	printf("%sok %d - ", pass ? "" : "not ", ++tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!pass) {
		tap_failed++;
		printf("#   failed at %s:%d\n", file, line);
	}
	fflush(stdout);
	return pass;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

__attribute__((format(printf, 1, 2), unused)) static void diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

__attribute__((unused)) static int tap_done(void)
{
	printf("1..%d\n", tap_n);
	if (tap_failed)
		printf("# %d of %d failed\n", tap_failed, tap_n);
	fflush(stdout);
	return tap_failed ? 1 : 0;
}

struct tap_test {
	const char *name;
	void (*fn)(void);
};

/* With no arguments runs every test of the table, otherwise only the named
 * ones; returns tap_done(). */
__attribute__((unused)) static int tap_run(const struct tap_test *tests, size_t n, int argc,
					   char **argv)
{
	for (size_t i = 0; i < n; i++) {
		bool run = argc < 2;
		for (int a = 1; a < argc; a++)
			run |= !strcmp(argv[a], tests[i].name);
		if (run)
			tests[i].fn();
	}
	return tap_done();
}

__attribute__((noreturn, unused)) static void tap_skip_all(const char *reason)
{
	printf("1..0 # SKIP %s\n", reason);
	fflush(stdout);
	exit(77);
}

#endif
