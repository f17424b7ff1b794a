// SPDX-License-Identifier: Apache-2.0
/* fileio — see fileio.h. */
#include "fileio.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

/* Writes the k iovecs at p whole, advancing them (the caller's copy):
 * writev(2) at the file offset when off < 0, else pwritev(2) at off. */
static int write_loop(int fd, struct iovec *p, int k, off_t off)
{
	for (;;) {
		while (k && p->iov_len == 0)
			p++, k--;
		if (!k)
			return 0;
		ssize_t n = off < 0 ? writev(fd, p, k) : pwritev(fd, p, k, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		if (off >= 0)
			off += n;
		while (k && (size_t)n >= p->iov_len) {
			n -= (ssize_t)p->iov_len;
			p++, k--;
		}
		if (k) {
			p->iov_base = (char *)p->iov_base + n;
			p->iov_len -= (size_t)n;
		}
	}
}

int sfs_write_all(int fd, const void *buf, size_t n)
{
	struct iovec v = {(void *)buf, n};

	return write_loop(fd, &v, 1, -1);
}

int sfs_pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	struct iovec v = {(void *)buf, n};

	return off < 0 ? -EINVAL : write_loop(fd, &v, 1, off);
}

int sfs_pwritev_all(int fd, const struct iovec *iov, int n_iov, off_t off)
{
	struct iovec v[SFS_FILEIO_IOV_MAX];

	if (n_iov < 0 || n_iov > SFS_FILEIO_IOV_MAX || off < 0)
		return -EINVAL;
	memcpy(v, iov, (size_t)n_iov * sizeof(*iov));
	return write_loop(fd, v, n_iov, off);
}
