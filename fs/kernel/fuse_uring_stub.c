// SPDX-License-Identifier: Apache-2.0
/*
 * fuse_uring_stub — FUSE over io_uring where it is not built (meson option
 * fuse_uring, or a liburing without 128-byte SQEs and URING_CMD): the same
 * functions as fuse_uring.c, answering -ENOTSUP, so that no caller needs
 * an #ifdef. A transport that does not start leaves every request on
 * /dev/fuse (fusedev.h).
 *
 * Owns: nothing. Threading: any thread.
 */
#include "fuse_uring.h"

#include <errno.h>

int sfs_fuse_uring_start(struct fuse_session *se, int devfd, unsigned depth, size_t payload_bytes)
{
	(void)se;
	(void)devfd;
	(void)depth;
	(void)payload_bytes;
	return -ENOTSUP;
}

bool sfs_fuse_uring_reply(const struct iovec *iov, int count, ssize_t *res)
{
	(void)iov;
	(void)count;
	(void)res;
	return false;
}

unsigned long long sfs_fuse_uring_requests(void) { return 0; }

bool sfs_fuse_uring_built(void) { return false; }
