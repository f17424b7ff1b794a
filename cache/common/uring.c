// SPDX-License-Identifier: Apache-2.0
/*
 * uring — batches of file I/O through liburing, with a syscall fallback.
 * See uring.h. The only file that includes liburing.
 */
#include "uring.h"
#include "log.h"

#include <errno.h>
#include <liburing.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct sfs_uring {
	struct io_uring ring; /* valid when !fallback */
	unsigned depth;
	bool fallback;
};

int sfs_uring_open(unsigned depth, sfs_uring **out)
{
	sfs_uring *r = calloc(1, sizeof(*r));
	int rc;

	if (!r)
		return -ENOMEM;
	r->depth = depth;
	rc = io_uring_queue_init(depth, &r->ring, 0);
	if (rc < 0) {
		sfs_log(SFS_LOG_WARN, "uring", "io_uring unavailable (%s): using plain syscalls",
			strerror(-rc));
		r->fallback = true;
	}
	*out = r;
	return 0;
}

void sfs_uring_close(sfs_uring *r)
{
	if (!r)
		return;
	if (!r->fallback)
		io_uring_queue_exit(&r->ring);
	free(r);
}

static void run_sync(struct sfs_uring_op *op)
{
	ssize_t n;

	switch (op->kind) {
	case SFS_URING_WRITE:
		n = op->iov ? pwritev(op->fd, op->iov, op->n_iov, op->off)
			    : pwrite(op->fd, op->buf, op->len, op->off);
		break;
	default:
		n = fdatasync(op->fd);
		break;
	}
	op->result = n < 0 ? -errno : (int)n;
}

/* Submit ops[i] for every i with kind in the wanted class; wait for all. */
static void run_phase(sfs_uring *r, struct sfs_uring_op *ops, size_t n, bool syncs)
{
	size_t next = 0, inflight = 0;

	for (;;) {
		while (next < n && inflight < r->depth) {
			struct sfs_uring_op *op = &ops[next++];
			if ((op->kind == SFS_URING_FDATASYNC) != syncs)
				continue;
			struct io_uring_sqe *sqe = io_uring_get_sqe(&r->ring);
			if (!sqe) {
				next--;
				break;
			}
			if (op->kind == SFS_URING_WRITE && op->iov)
				io_uring_prep_writev(sqe, op->fd, op->iov, (unsigned)op->n_iov,
						     (__u64)op->off);
			else if (op->kind == SFS_URING_WRITE)
				io_uring_prep_write(sqe, op->fd, op->buf, (unsigned)op->len,
						    (__u64)op->off);
			else
				io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
			io_uring_sqe_set_data(sqe, op);
			inflight++;
		}
		if (!inflight)
			return;
		int rc = io_uring_submit_and_wait(&r->ring, 1);
		if (rc < 0 && rc != -EINTR) {
			/* Should not happen; finish what is left with syscalls. */
			sfs_log(SFS_LOG_WARN, "uring", "submit failed: %s", strerror(-rc));
		}
		struct io_uring_cqe *cqe;
		unsigned head, seen = 0;
		io_uring_for_each_cqe(&r->ring, head, cqe)
		{
			struct sfs_uring_op *op = io_uring_cqe_get_data(cqe);
			op->result = cqe->res;
			seen++;
		}
		io_uring_cq_advance(&r->ring, seen);
		inflight -= seen;
	}
}

void sfs_uring_run(sfs_uring *r, struct sfs_uring_op *ops, size_t n)
{
	if (r->fallback) {
		for (size_t i = 0; i < n; i++)
			if (ops[i].kind != SFS_URING_FDATASYNC)
				run_sync(&ops[i]);
		for (size_t i = 0; i < n; i++)
			if (ops[i].kind == SFS_URING_FDATASYNC)
				run_sync(&ops[i]);
		return;
	}
	run_phase(r, ops, n, false);
	run_phase(r, ops, n, true);
}
