// SPDX-License-Identifier: Apache-2.0
/*
 * fileio.c alone: whole writes to a regular file at its offset, at an
 * offset and from iovecs (empty ones among them); a write the kernel cuts
 * short (RLIMIT_FSIZE) goes on where it stopped and then reports the
 * error; into a pipe under a stream of signals (writes interrupted before
 * and after some bytes) every byte arrives once, in order.
 */
#include "../../cache/common/fileio.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define PIPE_BYTES (8u << 20)

static uint8_t pattern(size_t i) { return (uint8_t)(i * 131 + (i >> 9)); }

static uint8_t *pattern_buf(size_t n)
{
	uint8_t *b = malloc(n);
	for (size_t i = 0; b && i < n; i++)
		b[i] = pattern(i);
	return b;
}

/* Whether the n bytes of fd at off are pattern(from .. from + n). */
static bool file_is(int fd, off_t off, size_t n, size_t from)
{
	uint8_t *b = malloc(n ? n : 1);
	bool same = b && pread(fd, b, n, off) == (ssize_t)n;
	for (size_t i = 0; same && i < n; i++)
		same = b[i] == pattern(from + i);
	free(b);
	return same;
}

static void bail_out(const char *what)
{
	printf("Bail out! %s: %s\n", what, strerror(errno));
	exit(1);
}

static int tmp_file(void)
{
	char path[] = "/tmp/sfs-test_fileio-XXXXXX";
	int fd = mkstemp(path);
	if (fd >= 0)
		unlink(path);
	return fd;
}

static off_t size_of(int fd)
{
	struct stat st;
	return fstat(fd, &st) ? -1 : st.st_size;
}

static void test_file(void)
{
	size_t n = 3u << 20;
	uint8_t *p = pattern_buf(n);
	int fd = tmp_file();
	if (!p || fd < 0) {
		ok(0, "a temp file and a buffer");
		return;
	}
	ok(sfs_write_all(fd, p, 1000) == 0 && sfs_write_all(fd, p + 1000, n - 1000) == 0 &&
	       lseek(fd, 0, SEEK_CUR) == (off_t)n && file_is(fd, 0, n, 0),
	   "write_all: 3 MiB in two calls, at the file offset, which moves");
	ok(sfs_write_all(fd, p, 0) == 0 && size_of(fd) == (off_t)n, "write_all of 0 bytes: 0");
	ok(sfs_pwrite_all(fd, p, 5000, 100) == 0 && file_is(fd, 100, 5000, 0) &&
	       lseek(fd, 0, SEEK_CUR) == (off_t)n,
	   "pwrite_all at 100: those bytes, the file offset unchanged");
	ok(sfs_pwrite_all(fd, p, 1, -1) == -EINVAL, "pwrite_all at -1: -EINVAL");

	struct iovec iov[5] = {{p, 0}, {p, 4096}, {p + 4096, 0}, {p + 4096, 70000}, {p + 74096, 1}};
	struct iovec copy[5];
	memcpy(copy, iov, sizeof(iov));
	ok(sfs_pwritev_all(fd, iov, 5, 1u << 20) == 0 && file_is(fd, 1u << 20, 74097, 0) &&
	       !memcmp(copy, iov, sizeof(iov)),
	   "pwritev_all: 5 iovecs (2 empty) at 1 MiB, the iovecs unchanged");
	struct iovec many[SFS_FILEIO_IOV_MAX + 1] = {{p, 1}};
	ok(sfs_pwritev_all(fd, many, SFS_FILEIO_IOV_MAX + 1, 0) == -EINVAL &&
	       sfs_pwritev_all(fd, iov, 1, -5) == -EINVAL,
	   "pwritev_all: too many iovecs or a negative offset: -EINVAL");
	close(fd);
	free(p);
}

/* Past RLIMIT_FSIZE a write is cut at the limit, and the next fails with
 * EFBIG (SIGXFSZ ignored): the loop continues after the short write. */
static void test_short(void)
{
	struct rlimit old, lim = {.rlim_cur = 10000};
	uint8_t *p = pattern_buf(20000);
	int fd = tmp_file();

	if (!p || fd < 0 || getrlimit(RLIMIT_FSIZE, &old) != 0) {
		ok(0, "a temp file, a buffer and RLIMIT_FSIZE");
		return;
	}
	lim.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
		ok(0, "setrlimit(RLIMIT_FSIZE): %s", strerror(errno));
		return;
	}
	int rc = sfs_pwrite_all(fd, p, 20000, 0);
	ok(rc == -EFBIG && size_of(fd) == 10000 && file_is(fd, 0, 10000, 0),
	   "pwrite_all across the limit: %d (want -EFBIG), 10000 bytes written", rc);
	if (ftruncate(fd, 0) != 0)
		bail_out("ftruncate");
	struct iovec iov[3] = {{p, 6000}, {p + 6000, 6000}, {p + 12000, 6000}};
	rc = sfs_pwritev_all(fd, iov, 3, 0);
	ok(rc == -EFBIG && size_of(fd) == 10000 && file_is(fd, 0, 10000, 0),
	   "pwritev_all cut inside its second iovec: %d (want -EFBIG), 10000 bytes", rc);
	if (ftruncate(fd, 0) != 0)
		bail_out("ftruncate");
	rc = sfs_write_all(fd, p, 20000);
	ok(rc == -EFBIG && size_of(fd) == 10000, "write_all across the limit: %d", rc);
	setrlimit(RLIMIT_FSIZE, &old);
	close(fd);
	free(p);
}

static int pipe_fds[2];
static unsigned n_signals; /* atomic */

static void on_alarm(int sig)
{
	(void)sig;
	__atomic_add_fetch(&n_signals, 1, __ATOMIC_RELAXED);
}

/* Reads the pipe to its end slowly, counting bytes that differ. */
static void *slow_reader(void *arg)
{
	static uint8_t buf[65536];
	size_t at = 0, bad = 0;
	ssize_t n;

	(void)arg;
	while ((n = read(pipe_fds[0], buf, sizeof(buf))) != 0) {
		if (n < 0)
			continue; /* EINTR */
		for (ssize_t i = 0; i < n; i++)
			bad += buf[i] != pattern(at + (size_t)i);
		at += (size_t)n;
		usleep(100);
	}
	return (void *)(uintptr_t)(bad || at != PIPE_BYTES ? 1 : 0);
}

static void test_signals(void)
{
	uint8_t *p = pattern_buf(PIPE_BYTES);
	struct sigaction sa = {.sa_handler = on_alarm}; /* no SA_RESTART */
	struct itimerval every = {{0, 200}, {0, 200}}, off = {{0, 0}, {0, 0}};
	pthread_t t;
	void *res;

	if (!p || pipe(pipe_fds) != 0) {
		ok(0, "a pipe and a buffer");
		return;
	}
	sigaction(SIGALRM, &sa, NULL);
	pthread_create(&t, NULL, slow_reader, NULL);
	setitimer(ITIMER_REAL, &every, NULL);
	int rc = sfs_write_all(pipe_fds[1], p, PIPE_BYTES);
	setitimer(ITIMER_REAL, &off, NULL);
	close(pipe_fds[1]);
	pthread_join(t, &res);
	close(pipe_fds[0]);
	diag("%u signals during the write", __atomic_load_n(&n_signals, __ATOMIC_RELAXED));
	ok(rc == 0 && res == NULL, "write_all of 8 MiB into a slow pipe under signals: %d, %s", rc,
	   res ? "bytes wrong or missing" : "every byte once, in order");
	free(p);
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {
	    {"file", test_file}, {"short", test_short}, {"signals", test_signals}};
	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
