// SPDX-License-Identifier: Apache-2.0
/* fuse_uring — see fuse_uring.h. */
#define FUSE_USE_VERSION 312
#include "fuse_uring.h"
#include "../../cache/common/log.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <liburing.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The protocol 7.42 structures (Debian 12's uapi headers are 7.38). */
#define URING_IN_OUT_HEADER_SZ 128
#define URING_OP_IN_OUT_SZ     128
struct uring_ent_in_out {
	uint64_t flags;
	uint64_t commit_id; /* the request's unique */
	uint32_t payload_sz;
	uint32_t padding;
	uint64_t reserved;
};
struct uring_req_header {
	char in_out[URING_IN_OUT_HEADER_SZ]; /* fuse_in_header / fuse_out_header */
	char op_in[URING_OP_IN_OUT_SZ];	     /* the op's own header (in_args[0]) */
	struct uring_ent_in_out ring_ent_in_out;
};
enum { URING_CMD_REGISTER = 1, URING_CMD_COMMIT_AND_FETCH = 2 };
struct uring_cmd_req { /* the SQE's command area */
	uint64_t flags;
	uint64_t commit_id;
	uint16_t qid;
	uint8_t padding[6];
};

struct queue;

struct ent {
	struct queue *q;
	struct uring_req_header *hdr;
	char *payload;
	char *req;	     /* the request laid out as /dev/fuse gives it */
	uint64_t unique;     /* atomic: the request it holds, 0 when none */
	struct iovec iov[2]; /* header, payload: what REGISTER hands the kernel */
};

struct queue {
	unsigned qid;
	pthread_mutex_t lock; /* the ring's submission side */
	struct io_uring ring;
	pthread_t thread;
	struct ent *ents;
};

static struct fuse_session *g_se;
static int g_fd;
static unsigned g_depth, g_nq;
static size_t g_payload;
static struct queue *g_queues;
static bool g_active;		      /* atomic */
static unsigned long long g_requests; /* atomic */
static __thread struct ent *cur_ent;  /* the entry a queue thread is handling */

static void sqe_cmd(struct io_uring_sqe *sqe, struct ent *e, uint32_t op, uint64_t commit)
{
	memset(sqe, 0, 128);
	sqe->opcode = IORING_OP_URING_CMD;
	sqe->fd = g_fd;
	sqe->cmd_op = op;
	io_uring_sqe_set_data(sqe, e);
	struct uring_cmd_req *c = (void *)sqe->cmd;
	c->qid = (uint16_t)e->q->qid;
	c->commit_id = commit;
	if (op == URING_CMD_REGISTER) {
		sqe->addr = (uint64_t)(uintptr_t)e->iov;
		sqe->len = 2;
	}
}

/* Queue e's next command (REGISTER, or COMMIT_AND_FETCH of commit) and
 * submit it. Any thread. */
static int submit(struct ent *e, uint32_t op, uint64_t commit)
{
	struct queue *q = e->q;
	pthread_mutex_lock(&q->lock);
	struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
	int rc = -EBUSY;
	if (sqe) {
		sqe_cmd(sqe, e, op, commit);
		rc = io_uring_submit(&q->ring);
	}
	pthread_mutex_unlock(&q->lock);
	return rc < 0 ? rc : 0;
}

/* A request arrived in e: lay it out as one read of /dev/fuse (the
 * in-header, the op's header, the payload) and let libfuse dispatch it. */
static void handle(struct ent *e)
{
	const struct fuse_in_header *in = (const void *)e->hdr->in_out;
	uint32_t psz = e->hdr->ring_ent_in_out.payload_sz;
	size_t op = 0;

	/* in->len is the whole request as /dev/fuse would give it. */
	if (in->len >= sizeof(*in) + psz)
		op = in->len - sizeof(*in) - psz;
	if (op > URING_OP_IN_OUT_SZ || psz > g_payload) {
		/* Not a request this layout can hold: answer EIO, never a
		 * truncated request to libfuse. */
		sfs_log(SFS_LOG_ERR, "fuse_uring", "bad request: len %u, payload %u", in->len, psz);
		uint64_t unique = in->unique; /* in is overwritten by the reply */
		struct fuse_out_header out = {.len = sizeof(out), .error = -EIO, .unique = unique};
		memcpy(e->hdr->in_out, &out, sizeof(out));
		e->hdr->ring_ent_in_out.payload_sz = 0;
		submit(e, URING_CMD_COMMIT_AND_FETCH, unique);
		return;
	}
	memcpy(e->req, in, sizeof(*in));
	memcpy(e->req + sizeof(*in), e->hdr->op_in, op);
	memcpy(e->req + sizeof(*in) + op, e->payload, psz);
	struct fuse_in_header *h = (void *)e->req;
	h->len = (uint32_t)(sizeof(*in) + op + psz);
	__atomic_store_n(&e->unique, in->unique, __ATOMIC_RELEASE);
	__atomic_add_fetch(&g_requests, 1, __ATOMIC_RELAXED);
	struct fuse_buf buf = {.mem = e->req, .size = h->len};
	cur_ent = e;
	fuse_session_process_buf(g_se, &buf);
	cur_ent = NULL;
}

static struct ent *find(uint64_t unique)
{
	struct ent *e = cur_ent;
	if (e && __atomic_load_n(&e->unique, __ATOMIC_ACQUIRE) == unique)
		return e;
	for (unsigned i = 0; i < g_nq * g_depth; i++) {
		e = &g_queues[i / g_depth].ents[i % g_depth];
		if (__atomic_load_n(&e->unique, __ATOMIC_ACQUIRE) == unique)
			return e;
	}
	return NULL;
}

bool sfs_fuse_uring_reply(const struct iovec *iov, int count, ssize_t *res)
{
	if (!__atomic_load_n(&g_active, __ATOMIC_ACQUIRE) || count < 1 ||
	    iov[0].iov_len < sizeof(struct fuse_out_header))
		return false;
	const struct fuse_out_header *oh = iov[0].iov_base;
	if (oh->unique == 0) /* a notification: /dev/fuse */
		return false;
	struct ent *e = find(oh->unique);
	if (!e)
		return false;
	size_t n = 0;
	for (int i = 1; i < count; i++) {
		if (iov[i].iov_len > g_payload - n) {
			*res = -EINVAL;
			return true;
		}
		memcpy(e->payload + n, iov[i].iov_base, iov[i].iov_len);
		n += iov[i].iov_len;
	}
	struct fuse_out_header out = *oh;
	out.len = (uint32_t)(sizeof(out) + n);
	memcpy(e->hdr->in_out, &out, sizeof(out));
	e->hdr->ring_ent_in_out.payload_sz = (uint32_t)n;
	__atomic_store_n(&e->unique, 0, __ATOMIC_RELEASE);
	int rc = submit(e, URING_CMD_COMMIT_AND_FETCH, oh->unique);
	*res = rc < 0 ? rc : (ssize_t)(sizeof(out) + n);
	return true;
}

static void *queue_main(void *arg)
{
	struct queue *q = arg;
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(q->qid, &set);
	pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
	for (;;) {
		struct io_uring_cqe *cqe;
		int rc = io_uring_wait_cqe(&q->ring, &cqe);
		if (rc == -EINTR)
			continue;
		if (rc < 0)
			break;
		struct ent *e = io_uring_cqe_get_data(cqe);
		int res = cqe->res;
		io_uring_cqe_seen(&q->ring, cqe);
		if (res == -EINTR || res == -EAGAIN) {
			submit(e, URING_CMD_REGISTER, 0);
			continue;
		}
		if (res < 0) { /* -ENOTCONN: unmounted */
			if (res != -ENOTCONN)
				sfs_log(SFS_LOG_WARN, "fuse_uring", "queue %u: %s", q->qid,
					strerror(-res));
			break;
		}
		handle(e);
	}
	return NULL;
}

static int queue_init(struct queue *q, unsigned qid)
{
	struct io_uring_params p = {.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQSIZE,
				    .cq_entries = 2 * g_depth};
	q->qid = qid;
	pthread_mutex_init(&q->lock, NULL);
	int rc = io_uring_queue_init_params(g_depth, &q->ring, &p);
	if (rc < 0)
		return rc;
	q->ents = calloc(g_depth, sizeof(*q->ents));
	if (!q->ents)
		return -ENOMEM;
	size_t req_bytes = sizeof(struct fuse_in_header) + URING_OP_IN_OUT_SZ + g_payload;
	for (unsigned i = 0; i < g_depth; i++) {
		struct ent *e = &q->ents[i];
		e->q = q;
		/* Untouched pages cost nothing: only what requests use is
		 * resident. */
		e->hdr = mmap(NULL, sizeof(*e->hdr), PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		e->payload = mmap(NULL, g_payload, PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		e->req = mmap(NULL, req_bytes, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (e->hdr == MAP_FAILED || e->payload == MAP_FAILED || e->req == MAP_FAILED)
			return -ENOMEM;
		e->iov[0] = (struct iovec){e->hdr, sizeof(*e->hdr)};
		e->iov[1] = (struct iovec){e->payload, g_payload};
		struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
		if (!sqe)
			return -EBUSY;
		sqe_cmd(sqe, e, URING_CMD_REGISTER, 0);
	}
	rc = io_uring_submit(&q->ring);
	return rc < 0 ? rc : 0;
}

int sfs_fuse_uring_start(struct fuse_session *se, int devfd, unsigned depth, size_t payload_bytes)
{
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	if (ncpu < 1 || depth < 1)
		return -EINVAL;
	g_se = se, g_fd = devfd, g_depth = depth, g_nq = (unsigned)ncpu;
	g_payload = payload_bytes;
	g_queues = calloc(g_nq, sizeof(*g_queues));
	if (!g_queues)
		return -ENOMEM;
	/* Replies may be routed here as soon as an entry holds a request. */
	__atomic_store_n(&g_active, true, __ATOMIC_RELEASE);
	for (unsigned i = 0; i < g_nq; i++) {
		int rc = queue_init(&g_queues[i], i);
		if (rc == 0)
			rc = -pthread_create(&g_queues[i].thread, NULL, queue_main, &g_queues[i]);
		if (rc < 0) {
			sfs_log(SFS_LOG_WARN, "fuse_uring",
				"queue %u: %s; requests stay on /dev/fuse", i, strerror(-rc));
			return rc;
		}
		pthread_detach(g_queues[i].thread);
	}
	sfs_log(SFS_LOG_INFO, "fuse_uring", "%u queues of %u entries", g_nq, g_depth);
	return 0;
}

unsigned long long sfs_fuse_uring_requests(void)
{
	return __atomic_load_n(&g_requests, __ATOMIC_RELAXED);
}

bool sfs_fuse_uring_built(void) { return true; }
