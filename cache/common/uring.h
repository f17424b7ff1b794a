/* SPDX-License-Identifier: Apache-2.0 */
/*
 * uring — the one wrapper around liburing: run a batch of writes and
 * fdatasyncs through an io_uring and wait for all of them.
 *
 * Owns: the ring. Does not own the fds and buffers of a batch (the
 * caller's; used only until sfs_uring_run returns).
 *
 * Threading: a ring belongs to one thread (the store's writer).
 * If the kernel refuses io_uring (seccomp, old kernel), sfs_uring_open()
 * falls back to plain syscalls, so callers never care.
 */
#ifndef SFS_URING_H
#define SFS_URING_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

enum sfs_uring_kind { SFS_URING_WRITE, SFS_URING_FDATASYNC };

struct sfs_uring_op {
	enum sfs_uring_kind kind;
	int fd;
	void *buf;  /* a write of len bytes from buf, unless iov is set */
	size_t len; /* bytes to write (with iov: their sum) */
	off_t off;
	int result;		 /* out: bytes moved, 0 for fdatasync, or -errno */
	const struct iovec *iov; /* a gathered write: n_iov pieces, len bytes in all */
	int n_iov;
};

typedef struct sfs_uring sfs_uring;

/* Returns 0 (possibly in fallback mode) or -ENOMEM. */
int sfs_uring_open(unsigned depth, sfs_uring **out);
void sfs_uring_close(sfs_uring *ring);

/* Run ops[0..n): writes first, all in flight at once, then the
 * fdatasyncs (so they cover the writes). Sets every op's result. */
void sfs_uring_run(sfs_uring *ring, struct sfs_uring_op *ops, size_t n);

#endif
