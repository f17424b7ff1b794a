// SPDX-License-Identifier: Apache-2.0
/* fusedev — see fusedev.h. */
#define FUSE_USE_VERSION 312
#include "fusedev.h"
#include "../restart/keeper.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <linux/fuse.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

/* Linux 6.6 (protocol 7.39); Debian 12's uapi headers are 7.38. */
#define SFS_FUSE_DIRECT_IO_ALLOW_MMAP (1ull << 36)
/* FUSE_OVER_IO_URING (protocol 7.42), a flags2 bit of INIT. */
#define SFS_FUSE_OVER_IO_URING_FLAGS2 (1u << (41 - 32))
/* FUSE_PASSTHROUGH (protocol 7.40, Linux 6.9): a flags2 bit of INIT; the
 * reply's max_stack_depth (the word after flags2) must be 1 or 2; an
 * open's reply carries FOPEN_PASSTHROUGH and the backing id (the word
 * after open_flags). The device's ioctls register and drop backing files. */
#define SFS_FUSE_PASSTHROUGH_FLAGS2 (1u << (37 - 32))
#define SFS_FOPEN_PASSTHROUGH	    (1u << 7)
struct sfs_fuse_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define SFS_FUSE_DEV_IOC_BACKING_OPEN  _IOW(229, 1, struct sfs_fuse_backing_map)
#define SFS_FUSE_DEV_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)
/* Backing files on a filesystem stacked at most this deep (1: ext4, XFS;
 * a cache_dir on overlayfs is 1 deep and refused by the kernel: ELOOP). */
#define SFS_PASSTHROUGH_STACK_DEPTH 1
/* Protocol 7.45: the server asks the kernel to drop the unused dentries of
 * the inodes named (struct fuse_notify_prune_out, then count node ids). */
#define SFS_FUSE_NOTIFY_PRUNE 9
#define SFS_FUSE_PRUNE_MINOR  45
struct sfs_fuse_notify_prune_out {
	uint32_t count;
	uint32_t padding;
	uint64_t spare;
};

/* The largest INIT reply we rewrite: the header and a fuse_init_out, which
 * has grown by using its reserved words, never in size since 7.23. */
#define INIT_REPLY_MAX (sizeof(struct fuse_out_header) + sizeof(struct fuse_init_out))

static bool init_done;		/* atomic: INIT answered, pass everything through */
static uint64_t init_unique;	/* atomic: the INIT request's id, 0 before it */
static uint32_t flags2_wanted;	/* atomic: the flags2 bits to add to the reply */
static bool direct_io_mmap;	/* atomic: the reply carried ALLOW_MMAP */
static bool passthrough_wanted; /* set before the loop */
static bool passthrough_on;	/* atomic: the reply carried FUSE_PASSTHROUGH */
/* The backing id the open reply this thread writes next carries (0: none):
 * set by sfs_fusedev_reply_open around its fuse_reply_open. */
static __thread int reply_backing_id;
static bool mount_direct_io;	     /* set before the loop */
static uint32_t kernel_minor;	     /* atomic: the INIT request's protocol minor */
static struct fuse_session *session; /* set before the loop */
/* With a keeper (keeper.h): where the INIT request is kept for a resumed
 * server, and where this server says it has answered a request. */
static struct sfs_keeper_state *keeper; /* set before the loop */
static bool served;			/* atomic: keeper->served was set */
static bool swallow_init;	 /* set before the loop: resuming, INIT is not the kernel's */
#define SFS_FUSE_NOTIFY_RESEND 7 /* protocol 7.40 */
/* Set before the loop (sfs_fusedev_want_uring); uring NULL: no ring. */
static const struct sfs_fusedev_uring *uring;
static unsigned uring_depth;
/* Set before the loop (sfs_fusedev_after_init); NULL: none. */
static void (*after_init)(void *arg);
static void *after_init_arg;

static size_t iov_length(const struct iovec *iov, int count);

/* The INIT request: what the kernel offers in flags2 that we want. */
static void init_seen(const void *buf, size_t n)
{
	const struct fuse_in_header *h = buf;
	const struct fuse_init_in *in = (const void *)(h + 1);
	uint32_t want = 0;

	if (n >= sizeof(*h) + offsetof(struct fuse_init_in, flags2) + sizeof(in->flags2) &&
	    (in->flags & FUSE_INIT_EXT))
		want = in->flags2 & ((uint32_t)(SFS_FUSE_DIRECT_IO_ALLOW_MMAP >> 32) |
				     (uring ? SFS_FUSE_OVER_IO_URING_FLAGS2 : 0) |
				     (passthrough_wanted ? SFS_FUSE_PASSTHROUGH_FLAGS2 : 0));
	if (uring && !(want & SFS_FUSE_OVER_IO_URING_FLAGS2))
		sfs_log(
		    SFS_LOG_WARN, "fuse",
		    "this kernel does not offer FUSE over io_uring (Linux 6.14+ with "
		    "/sys/module/fuse/parameters/enable_uring set): requests stay on /dev/fuse");
	if (!want && mount_direct_io)
		sfs_log(SFS_LOG_WARN, "fuse",
			"this kernel cannot map direct_io files shared (needs Linux 6.6): "
			"mmap(MAP_SHARED) of a file here fails with ENODEV");
	__atomic_store_n(&direct_io_mmap,
			 (want & (uint32_t)(SFS_FUSE_DIRECT_IO_ALLOW_MMAP >> 32)) != 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&passthrough_on, (want & SFS_FUSE_PASSTHROUGH_FLAGS2) != 0,
			 __ATOMIC_RELAXED);
	__atomic_store_n(&flags2_wanted, want, __ATOMIC_RELAXED);
	__atomic_store_n(&kernel_minor, in->major == FUSE_KERNEL_VERSION ? in->minor : 0,
			 __ATOMIC_RELAXED);
	if (keeper && !swallow_init) {
		size_t len = n < SFS_KEEPER_INIT_MAX ? n : SFS_KEEPER_INIT_MAX;
		memcpy(keeper->init, buf, len);
		keeper->init_len = (uint32_t)len;
		keeper->kernel_minor = __atomic_load_n(&kernel_minor, __ATOMIC_RELAXED);
		if (keeper->kernel_minor < SFS_FUSE_RESEND_MINOR)
			sfs_log(
			    SFS_LOG_WARN, "fuse",
			    "crash recovery unavailable: this kernel (FUSE 7.%u) cannot resend "
			    "unanswered requests (needs 7.40, Linux 6.9); a crash of the daemon "
			    "ends the mount",
			    keeper->kernel_minor);
	}
	__atomic_store_n(&init_unique, h->unique, __ATOMIC_RELEASE);
}

static ssize_t dev_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	ssize_t n = read(fd, buf, len);

	if (n >= (ssize_t)sizeof(struct fuse_in_header) &&
	    !__atomic_load_n(&init_done, __ATOMIC_RELAXED) &&
	    ((const struct fuse_in_header *)buf)->opcode == FUSE_INIT)
		init_seen(buf, (size_t)n);
	return n;
}

/* libfuse's INIT reply (iov), with FUSE_INIT_EXT and the wanted flags2
 * bits set, written in one write(). A reply that is not a whole
 * fuse_init_out, or an error, goes out as it came. */
static ssize_t init_reply(int fd, const struct iovec *iov, int count, uint32_t want)
{
	char msg[INIT_REPLY_MAX];
	size_t len = 0;

	for (int i = 0; i < count; i++) {
		if (iov[i].iov_len > sizeof(msg) - len)
			return writev(fd, iov, count);
		memcpy(msg + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	struct fuse_out_header *h = (void *)msg;
	struct fuse_init_out *out = (void *)(h + 1);
	if (len < sizeof(*h) + offsetof(struct fuse_init_out, flags2) + sizeof(out->flags2) ||
	    h->error != 0 || !want)
		return writev(fd, iov, count);
	out->flags |= FUSE_INIT_EXT;
	out->flags2 |= want;
	if (want & SFS_FUSE_PASSTHROUGH_FLAGS2)
		out->unused[0] = SFS_PASSTHROUGH_STACK_DEPTH; /* max_stack_depth (7.40) */
	ssize_t n = write(fd, msg, len);
	if (n == (ssize_t)len && (want & (uint32_t)(SFS_FUSE_DIRECT_IO_ALLOW_MMAP >> 32)))
		sfs_log(SFS_LOG_INFO, "fuse", "direct_io files can be mapped shared");
	/* The kernel took INIT in the write: the ring may register now. Its
	 * payloads must hold the largest request and reply (max_write, and
	 * max_pages pages). */
	if (n == (ssize_t)len && (want & SFS_FUSE_OVER_IO_URING_FLAGS2)) {
		size_t payload = out->max_write;
		if ((size_t)out->max_pages * 4096 > payload)
			payload = (size_t)out->max_pages * 4096;
		uring->start(session, fd, uring_depth, payload);
	}
	return n;
}

/* An OPEN reply (header and fuse_open_out) with FOPEN_PASSTHROUGH and the
 * backing id set, in one write. */
static ssize_t open_reply_passthrough(int fd, const struct iovec *iov, int count, int backing_id)
{
	struct {
		struct fuse_out_header h;
		struct fuse_open_out o;
	} msg;
	size_t len = 0;

	for (int i = 0; i < count; i++) {
		if (iov[i].iov_len > sizeof(msg) - len)
			return -EINVAL;
		memcpy((char *)&msg + len, iov[i].iov_base, iov[i].iov_len);
		len += iov[i].iov_len;
	}
	if (len != sizeof(msg) || msg.h.error != 0)
		return -EINVAL;
	msg.o.open_flags |= SFS_FOPEN_PASSTHROUGH;
	msg.o.open_flags &= ~(uint32_t)(FOPEN_DIRECT_IO | FOPEN_KEEP_CACHE);
	msg.o.padding = (uint32_t)backing_id; /* backing_id (7.40) */
	ssize_t n = write(fd, &msg, sizeof(msg));
	return n < 0 ? -errno : n;
}

static ssize_t dev_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (reply_backing_id) {
		int id = reply_backing_id;
		reply_backing_id = 0;
		ssize_t n = open_reply_passthrough(fd, iov, count, id);
		if (n != -EINVAL) {
			if (n < 0) {
				errno = (int)-n;
				return -1;
			}
			return n;
		}
	}
	if (!__atomic_load_n(&init_done, __ATOMIC_RELAXED)) {
		uint64_t unique = __atomic_load_n(&init_unique, __ATOMIC_ACQUIRE);
		const struct fuse_out_header *h = iov[0].iov_base;
		if (unique && count > 0 && iov[0].iov_len >= sizeof(*h) && h->unique == unique) {
			__atomic_store_n(&init_done, true, __ATOMIC_RELAXED);
			/* Resumed: the kernel had its answer from the first server. */
			ssize_t n =
			    swallow_init
				? (ssize_t)iov_length(iov, count)
				: init_reply(fd, iov, count,
					     __atomic_load_n(&flags2_wanted, __ATOMIC_RELAXED));
			if (n >= 0 && after_init)
				after_init(after_init_arg);
			return n;
		}
	}
	if (keeper && !__atomic_load_n(&served, __ATOMIC_RELAXED)) {
		__atomic_store_n(&served, true, __ATOMIC_RELAXED);
		__atomic_store_n(&keeper->served, 1, __ATOMIC_RELAXED); /* not a crash loop */
	}
	ssize_t n;
	if (uring && uring->reply(iov, count, &n))
		return n;
	return writev(fd, iov, count);
}

void sfs_fusedev_want_uring(const struct sfs_fusedev_uring *ring, unsigned depth)
{
	uring = depth > 0 ? ring : NULL;
	uring_depth = depth;
}

int sfs_fusedev_attach(struct fuse_session *se, bool direct_io)
{
	static const struct fuse_custom_io io = {.read = dev_read, .writev = dev_writev};

	mount_direct_io = direct_io;
	session = se;
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}

static size_t iov_length(const struct iovec *iov, int count)
{
	size_t n = 0;

	for (int i = 0; i < count; i++)
		n += iov[i].iov_len;
	return n;
}

void sfs_fusedev_keep_init(struct sfs_keeper_state *k) { keeper = k; }

int sfs_fusedev_resume(struct fuse_session *se, struct sfs_keeper_state *k)
{
	uint8_t req[SFS_KEEPER_INIT_MAX] __attribute__((aligned(8)));
	size_t len = k->init_len;

	if (len < sizeof(struct fuse_in_header) + offsetof(struct fuse_init_in, flags) ||
	    len > sizeof(req) ||
	    ((const struct fuse_in_header *)(const void *)k->init)->opcode != FUSE_INIT)
		return -EPROTO;
	keeper = k;
	swallow_init = true;
	memcpy(req, k->init, len);
	init_seen(req, len);
	/* libfuse answers everything before INIT with EIO: it gets the kernel's
	 * INIT again (its reply goes nowhere, the kernel has the first one). */
	fuse_session_process_buf(se, &(struct fuse_buf){.mem = req, .size = len});
	if (!__atomic_load_n(&init_done, __ATOMIC_RELAXED))
		return -EPROTO;
	if (__atomic_load_n(&kernel_minor, __ATOMIC_RELAXED) < SFS_FUSE_RESEND_MINOR)
		return -EOPNOTSUPP;
	/* Every request the dead server read and left unanswered comes again. */
	struct fuse_out_header h = {.len = sizeof(h), .error = SFS_FUSE_NOTIFY_RESEND};
	if (write(fuse_session_fd(se), &h, sizeof(h)) < 0)
		return -errno;
	return 0;
}

void sfs_fusedev_want_passthrough(bool want) { passthrough_wanted = want; }

void sfs_fusedev_after_init(void (*fn)(void *arg), void *arg)
{
	after_init = fn;
	after_init_arg = arg;
}

bool sfs_fusedev_passthrough(void) { return __atomic_load_n(&passthrough_on, __ATOMIC_RELAXED); }

int sfs_fusedev_backing_open(int fd)
{
	struct sfs_fuse_backing_map map = {.fd = fd};
	int id = ioctl(fuse_session_fd(session), SFS_FUSE_DEV_IOC_BACKING_OPEN, &map);

	return id > 0 ? id : id == 0 ? -EIO : -errno;
}

void sfs_fusedev_backing_close(int id)
{
	uint32_t v = (uint32_t)id;

	if (ioctl(fuse_session_fd(session), SFS_FUSE_DEV_IOC_BACKING_CLOSE, &v) != 0)
		sfs_log(SFS_LOG_WARN, "fuse", "closing passthrough backing file %d: %s", id,
			strerror(errno));
}

int sfs_fusedev_reply_open(fuse_req_t req, const struct fuse_file_info *fi, int backing_id)
{
	reply_backing_id = backing_id;
	int rc = fuse_reply_open(req, fi);
	reply_backing_id = 0;
	return rc;
}

bool sfs_fusedev_direct_io_mmap(void) { return __atomic_load_n(&direct_io_mmap, __ATOMIC_RELAXED); }

uint32_t sfs_fusedev_kernel_minor(void) { return __atomic_load_n(&kernel_minor, __ATOMIC_RELAXED); }

bool sfs_fusedev_can_prune(void) { return sfs_fusedev_kernel_minor() >= SFS_FUSE_PRUNE_MINOR; }

int sfs_fusedev_prune(struct fuse_session *se, const uint64_t *ids, size_t n)
{
	if (!sfs_fusedev_can_prune())
		return -EOPNOTSUPP;
	/* The kernel reads the ids in batches of 512 itself; a message of a
	 * few KiB keeps each write short. */
	for (size_t done = 0; done < n;) {
		size_t k = n - done < 512 ? n - done : 512;
		struct sfs_fuse_notify_prune_out arg = {.count = (uint32_t)k};
		struct fuse_out_header h = {
		    .len = (uint32_t)(sizeof(h) + sizeof(arg) + k * sizeof(*ids)),
		    .error = SFS_FUSE_NOTIFY_PRUNE};
		struct iovec iov[3] = {
		    {&h, sizeof(h)}, {&arg, sizeof(arg)}, {(void *)(ids + done), k * sizeof(*ids)}};
		ssize_t w = writev(fuse_session_fd(se), iov, 3);
		if (w < 0)
			return -errno;
		done += k;
	}
	return 0;
}
