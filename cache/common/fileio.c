// SPDX-License-Identifier: Apache-2.0
/* fileio — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* off < 0: write(2) at the file offset; else pwrite(2) at off. */
static int write_loop(int fd, const uint8_t *p, size_t n, off_t off)
{
	while (n) {
		ssize_t w = off < 0 ? write(fd, p, n) : pwrite(fd, p, n, off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if (w == 0)
			return -EIO;
		p += w;
		n -= (size_t)w;
		if (off >= 0)
			off += w;
	}
	return 0;
}

int sfs_write_all(int fd, const void *buf, size_t n) { return write_loop(fd, buf, n, -1); }

int sfs_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	if (off < 0)
		return -EINVAL;
	return write_loop(fd, buf, n, off);
}
