/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fusedev — the daemon's reads and writes of /dev/fuse, through libfuse's
 * custom I/O hooks, for what libfuse 3.14 cannot ask the kernel for.
 *
 * libfuse 3.14 answers FUSE_INIT with 32 capability bits; the kernel's
 * extended ones (FUSE_INIT_EXT, flags2) it leaves at zero. This module sets
 * them in libfuse's INIT reply, each only where the kernel's INIT request
 * offered it:
 *   FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6+): a file opened with direct_io
 *   (the `direct_io` option) can be mapped MAP_SHARED (LMDB, numpy.memmap,
 *   Arrow's memory_map); without it that mmap() fails with ENODEV. The
 *   kernel serves such a mapping through the page cache.
 *   FUSE_OVER_IO_URING (Linux 6.14+, the fuse module's enable_uring), only
 *   where sfs_fusedev_want_uring registered a ring transport: requests then
 *   come through io_uring, the transport's start hook runs once this reply
 *   is written, and every reply is offered to its reply hook before
 *   /dev/fuse. This module does not link a transport (fs/kernel/fuse_uring.c is
 *   one; tools/bench/shardfs-fusefloor registers it, the daemon does not).
 *   FUSE_PASSTHROUGH (Linux 6.9+), where sfs_fusedev_want_passthrough
 *   asked for it: an OPEN reply may then name a backing file
 *   (sfs_fusedev_reply_open), registered here (sfs_fusedev_backing_open).
 * Every other request and reply passes through unchanged: one read() or
 * writev() of the device, as libfuse makes them without hooks. Splice is
 * left to libfuse (no splice hooks: it uses plain splice()).
 *
 * Owns: the device I/O hooks, the extended INIT flags, the kernel's INIT
 * request kept for a resumed server (keeper.h), and the calls on the
 * device that libfuse 3.14 lacks (backing files, FUSE_NOTIFY_PRUNE).
 * Does not own: the requests' handling (libfuse, fs/ops), which opens are
 * passthrough (passthrough.h), a ring transport (fuse_uring.h).
 *
 * Threading: the kernel sends nothing before INIT is answered, so INIT is
 * read and answered before any other request; the state is atomics only.
 */
#ifndef SFS_FUSEDEV_H
#define SFS_FUSEDEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

struct fuse_session;
struct fuse_file_info;
struct fuse_req;
typedef struct fuse_req *fuse_req_t;

/* A FUSE-over-io_uring transport (fuse_uring.h has one), as two hooks. */
struct sfs_fusedev_uring {
	/* Start the ring on the device fd, `depth` entries per queue, payloads
	 * of payload_bytes; called once, on the thread that wrote the INIT
	 * reply asking for it, right after that write. Returns 0 or -errno
	 * (requests then stay on /dev/fuse). */
	int (*start)(struct fuse_session *se, int devfd, unsigned depth, size_t payload_bytes);
	/* Offered every reply but INIT's, from any thread: true if it answered
	 * a request of the ring (then *res is what writev would have
	 * returned), false to write it to /dev/fuse. */
	bool (*reply)(const struct iovec *iov, int count, ssize_t *res);
};

/* Route the mounted session's device I/O through this module (call after
 * fuse_session_mount, before the loop). direct_io: the mount opens files
 * with direct_io, so a kernel without ALLOW_MMAP is worth a warning.
 * Returns 0 or -errno (then libfuse does its own I/O: nothing is lost but
 * the extended capabilities). */
int sfs_fusedev_attach(struct fuse_session *se, bool direct_io);

/* EXPERIMENTAL: ask for FUSE over io_uring where the kernel offers it,
 * served by `ring` (kept, not copied) with `depth` entries per CPU; a NULL
 * ring or a depth of 0: do not. Call before sfs_fusedev_attach. */
void sfs_fusedev_want_uring(const struct sfs_fusedev_uring *ring, unsigned depth);

struct sfs_keeper_state;

/* With a keeper (keeper.h): keep the kernel's INIT request in k when it
 * comes, and mark k served at this server's first reply. Before the loop. */
void sfs_fusedev_keep_init(struct sfs_keeper_state *k);

/*
 * A resumed server, on the connection a dead one left (keeper.h), after
 * sfs_fusedev_attach and before the loop: hand libfuse the INIT request
 * kept in k (its reply is dropped: the kernel answered INIT once), then
 * ask the kernel to send again every request read and not answered
 * (FUSE_NOTIFY_RESEND). Returns 0; -EPROTO when no INIT was kept or libfuse
 * refused it; -EOPNOTSUPP on a kernel before 7.40; -errno.
 */
int sfs_fusedev_resume(struct fuse_session *se, struct sfs_keeper_state *k);

/* Ask for FUSE_PASSTHROUGH (Linux 6.9+, CONFIG_FUSE_PASSTHROUGH) where the
 * kernel offers it. Call before sfs_fusedev_attach. */
void sfs_fusedev_want_passthrough(bool want);

/* Call fn(arg) once the kernel has taken the INIT reply (or, resumed, once
 * the kernel's INIT was replayed), on the thread that wrote it, before it
 * serves another request: what needs the connection's negotiated features
 * in force (registering a backing file) may run there. Call before
 * sfs_fusedev_attach. */
void sfs_fusedev_after_init(void (*fn)(void *arg), void *arg);

/* Whether the INIT reply carries FUSE_PASSTHROUGH (known once the INIT
 * request was read; false before). */
bool sfs_fusedev_passthrough(void);

/* Register fd (a regular file, read-only) as a backing file with the
 * kernel (FUSE_DEV_IOC_BACKING_OPEN: needs CAP_SYS_ADMIN; the kernel takes
 * its own reference, the caller may close fd). Returns the backing id (>
 * 0) or -errno. After INIT, any thread. */
int sfs_fusedev_backing_open(int fd);

/* Drop a backing id (opens the kernel made with it keep the file). */
void sfs_fusedev_backing_close(int id);

/* fuse_reply_open, with FOPEN_PASSTHROUGH and backing_id in the reply when
 * backing_id > 0 (FOPEN_DIRECT_IO and FOPEN_KEEP_CACHE are then left out:
 * the kernel reads the backing file through its own page cache). Returns
 * what fuse_reply_open does. */
int sfs_fusedev_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id);

/* Whether the INIT reply carries FUSE_DIRECT_IO_ALLOW_MMAP: known once the
 * INIT request was read, before libfuse calls the filesystem's init (false
 * before that). */
bool sfs_fusedev_direct_io_mmap(void);

/* The kernel's FUSE protocol minor version from its INIT request (0
 * before it, or for another major). */
uint32_t sfs_fusedev_kernel_minor(void);

/* Whether the kernel takes FUSE_NOTIFY_PRUNE (protocol 7.45). */
bool sfs_fusedev_can_prune(void);

/* Ask the kernel to drop the unused dentries of the n inodes with these
 * node ids, so that it forgets those inodes (FORGET follows, from the
 * kernel, for each it let go). Ids the kernel does not know, and inodes in
 * use (open, a cwd, a directory with cached children), are skipped by the
 * kernel. Any thread, after INIT. Returns 0 or -errno (-EOPNOTSUPP: an
 * older kernel). */
int sfs_fusedev_prune(struct fuse_session *se, const uint64_t *ids, size_t n);

#endif
