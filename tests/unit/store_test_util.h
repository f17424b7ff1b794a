/* SPDX-License-Identifier: Apache-2.0 */
/*
 * store_test_util — the helpers test_store and test_segment share (header
 * only, like tap.h): a fresh directory per test under tmp_base and its
 * removal, paths in it, counting files, bailing out, the mixer their
 * synthetic bytes come from, and a byte flipped on disk.
 *
 * Threading: the main thread only (mix() is pure: any thread).
 */
#ifndef SFS_STORE_TEST_UTIL_H
#define SFS_STORE_TEST_UTIL_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_root[256];	      /* the current test's directory */
static const char *tmp_base = "/tmp"; /* where tmp_new() makes it */

/* Prints a TAP bail-out for `what` failing with rc (-errno or errno) and
 * exits 1. */
__attribute__((noreturn)) static void bail(const char *what, int rc)
{
	printf("Bail out! %s: %d (%s)\n", what, rc, strerror(rc < 0 ? -rc : rc));
	exit(1);
}

/* A fresh tmp_base/sfs-PROGRAM-XXXXXX into tmp_root, or bail out. */
static void tmp_new(void)
{
	snprintf(tmp_root, sizeof(tmp_root), "%s/sfs-%s-XXXXXX", tmp_base,
		 program_invocation_short_name);
	if (!mkdtemp(tmp_root))
		bail("mkdtemp", -errno);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Removes tmp_root and everything under it (what it can). */
static void tmp_remove(void) { nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* Path of `rel` under the current test's directory (static buffer, one of 4:
 * valid until the fourth call after). */
static const char *tpath(const char *rel)
{
	static char bufs[4][512];
	static int next;
	char *b = bufs[next++ & 3];

	snprintf(b, sizeof(bufs[0]), "%s/%s", tmp_root, rel);
	return b;
}

/* Entries of directory `dir` whose names end in `suffix` ("": all of
 * them), dot files aside; -1 if it cannot be opened. */
static int count_entries(const char *dir, const char *suffix)
{
	size_t sl = strlen(suffix);
	struct dirent *e;
	int n = 0;
	DIR *d = opendir(dir);

	if (!d)
		return -1;
	while ((e = readdir(d))) {
		size_t l = strlen(e->d_name);
		n += e->d_name[0] != '.' && l >= sl && !strcmp(e->d_name + l - sl, suffix);
	}
	closedir(d);
	return n;
}

/* splitmix64's finalizer: the synthetic bytes and keys of the tests. */
static uint64_t mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Changes the byte at `at` of the file (several of its bits), durably, or
 * bails out. */
static void flip_byte(const char *path, off_t at)
{
	uint8_t byte;
	int fd = open(path, O_RDWR);

	if (fd < 0 || pread(fd, &byte, 1, at) != 1)
		bail("flip: pread", -errno);
	byte ^= 0x5a;
	if (pwrite(fd, &byte, 1, at) != 1)
		bail("flip: pwrite", -errno);
	fsync(fd);
	close(fd);
}

#endif
