/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fuse_uring — FUSE requests over io_uring (Linux 6.14+, FUSE protocol
 * 7.42), under libfuse 3.14, which speaks only /dev/fuse.
 *
 * EXPERIMENTAL: used by tools/bench/shardfs-fusefloor --uring to compare the
 * transport with /dev/fuse; the daemon does not use it (what the floor and
 * a daemon prototype, threads per CPU with one entry each, showed is in
 * tools/bench/benchmarks.md). Where its replies come from an I/O thread's
 * callback (lent libnfs buffers), the ring costs a copy into the entry's
 * payload that writev() did not, and a commit from that thread makes the
 * kernel deliver the entry's next request as task work to it (interrupting
 * its poll()), or needs a hand-off to the ring's thread; a cached read
 * answered inline also copies into the payload. Reading into the payload
 * (an O_DIRECT read of a 4 KiB-aligned object) would remove that copy.
 *
 * The kernel offers FUSE_OVER_IO_URING in its INIT request when the fuse
 * module's enable_uring parameter is set; fusedev.c asks for it in the INIT
 * reply when this module's start and reply were registered with
 * sfs_fusedev_want_uring(), and starts this module once that reply is
 * written. The kernel wing's library carries this module, or where it is
 * not built (meson option fuse_uring) fuse_uring_stub.c, whose start answers
 * -ENOTSUP; the daemon links it but registers no ring.
 * Then every CPU has a queue (the kernel queues a request on the queue of
 * the CPU its caller runs on, and uses the ring only once every queue has
 * entries): a thread pinned to that CPU with its
 * own io_uring (128-byte SQEs, for the command's 80-byte area) and `depth`
 * entries, each a header (struct fuse_uring_req_header) and a payload
 * buffer of the connection's largest request. An entry is registered
 * (FUSE_IO_URING_CMD_REGISTER); its completion carries a request in the
 * entry's buffers, which this module lays out as libfuse expects one read
 * from /dev/fuse and hands to fuse_session_process_buf(). libfuse's reply
 * reaches fusedev's writev hook, which passes it here
 * (sfs_fuse_uring_reply): it is copied into the entry's payload and the
 * entry goes back with FUSE_IO_URING_CMD_COMMIT_AND_FETCH, which answers
 * the request and waits for the next in one submission. FORGET and
 * INTERRUPT still come through /dev/fuse (the kernel sends them there), so
 * the /dev/fuse workers keep running.
 *
 * Owns: the rings, their queue threads and their entries. Does not own the
 * requests' handling (libfuse and the ops) nor the INIT exchange
 * (fusedev.c).
 * Threading: the queue threads own their rings' completion side; replies
 * may come from any thread (a queue's submission side is under its lock).
 */
#ifndef SFS_FUSE_URING_H
#define SFS_FUSE_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fuse_session;

/* Start the queues on se's device fd, `depth` entries each, payload buffers
 * of payload_bytes (at least the connection's max_write and max_pages *
 * 4 KiB). Call right after the INIT reply that asked for the ring was
 * written. Returns 0 or -errno (then requests keep coming through /dev/fuse:
 * the kernel uses the ring only once every queue registered). */
int sfs_fuse_uring_start(struct fuse_session *se, int devfd, unsigned depth, size_t payload_bytes);

/* If iov (a reply as libfuse writes it: fuse_out_header first) answers a
 * request that came through the ring, commit it there, set *res to what a
 * writev of it would have returned and return true. Otherwise false. */
bool sfs_fuse_uring_reply(const struct iovec *iov, int count, ssize_t *res);

/* Requests served through the ring so far. */
unsigned long long sfs_fuse_uring_requests(void);

/* Whether this build has the transport (false: fuse_uring_stub.c, whose
 * start answers -ENOTSUP). */
bool sfs_fuse_uring_built(void);

#endif
