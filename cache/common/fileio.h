/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fileio — whole writes to a file descriptor. A write(2) or pwrite(2) may
 * write less than it was asked (a signal, a disk that fills part way):
 * these go on until every byte is written or a call fails, retrying a call
 * interrupted by a signal. They own nothing and keep no state.
 *
 * Threading: any thread; no locks. A waiting write is short (the local cache
 * disk, /dev/shm), so they do not call sfs_blocking_begin().
 */
#ifndef SFS_FILEIO_H
#define SFS_FILEIO_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* The most iovecs sfs_pwritev_all takes. */
#define SFS_FILEIO_IOV_MAX 8

/* Write n bytes of buf at fd's file offset. Returns 0 when all were
 * written, or -errno of the call that failed (-EIO for one that wrote
 * nothing without an error); some bytes may have been written then. */
int sfs_write_all(int fd, const void *buf, size_t n);

/* The same with pwrite(2) at offset off (fd's file offset is not used);
 * -EINVAL for a negative off. */
int sfs_pwrite_all(int fd, const void *buf, size_t n, off_t off);

/* The same for the bytes of iov[0..n_iov) one after the other, with
 * pwritev(2) from offset off; iov is not changed. -EINVAL for more than
 * SFS_FILEIO_IOV_MAX iovecs. */
int sfs_pwritev_all(int fd, const struct iovec *iov, int n_iov, off_t off);

#endif
