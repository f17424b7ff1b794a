// SPDX-License-Identifier: Apache-2.0
/*
 * origin — NFSv3 connection pool over libnfs 4.0. See origin.h for the API.
 *
 * Data structures:
 *
 *   sfs_origin ──lock──> queue: req <-> req <-> req     (FIFO; re-issues go to the head)
 *     │
 *     ├─ nodes[n_nodes]      one per address: health state + atomic counters
 *     ├─ conns[n_nodes * nconnect]
 *     │     └─ slots[SFS_ORIGIN_CONN_DEPTH]: one sfs_attempt per RPC in flight
 *     └─ threads[n_threads]  each owns conns i where i % n_threads == thread index
 *
 * A request may have several attempts at once (the first one hung and was
 * re-issued elsewhere). Attempts of one request are chained through
 * attempt->req_next from req's private list head (kept in the pool's side
 * table `att_head` via req->q_* fields is not possible, so we store it in
 * the attempt chain rooted at a per-request pointer below). The first reply
 * claims the request (req->completed = true) and detaches every other attempt
 * (attempt->req = NULL), so a late reply never touches a request its owner
 * may already have freed.
 *
 * Locking: pool->lock protects the queue (whose length the I/O threads
 * also read without it, as a hint), every req's private fields, and every
 * attempt's req/req_next. It is a leaf lock: nothing is called out
 * (libnfs, completion callbacks) while it is held. Everything else in a conn
 * is owned by its thread. Node state and counters are atomics.
 *
 * libnfs notes (../shared/FACTS.md): auto-reconnect is off, we reconnect with
 * backoff; timeouts are only checked inside nfs_service(), called every tick;
 * READ data points into libnfs's buffer and is copied out in the callback.
 */
#include "origin.h"
#include "log.h"

#include <sys/time.h> /* before libnfs.h, which needs struct timeval */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* Exported by libnfs 4.0 but missing from its public headers; the struct
 * layout is libnfs-private.h's (stable since 1.x). */
struct nfs_fh {
	int len;
	char *val;
};
const struct nfs_fh *nfs_get_rootfh(struct nfs_context *nfs);

/* The tick checks timeouts and hedges: a hedge fires within one tick of
 * its deadline. */
#define TICK_MS 20
/* Hedging: a READ that has waited HEDGE_FACTOR x the pool's recent READ
 * latency (and at least HEDGE_MIN_MS) on a node that is still UP is sent
 * again to another node; the first reply wins (a GC pause, a drive rebuild
 * or a congested port costs only what it delays, not timeo). Hedges are
 * paid for by READ replies: each earns 1/HEDGE_EARN of a hedge, at most
 * HEDGE_BURST saved, so hedges stay below ~6% of the READs. */
#define HEDGE_FACTOR 4
#define HEDGE_MIN_MS 40
#define HEDGE_EARN   16
#define HEDGE_BURST  32
/* A node whose READ rate stays below SLOW_RATIO of the nodes' median gets
 * READ slots in proportion to its rate (at least one): a half-speed link
 * then holds half the chunks, each done in about the time the others take,
 * instead of a full share that the reader, in order, waits for. */
#define SLOW_RATIO     0.75
#define SLOW_TICKS     25 /* 0.5 s */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000

const double sfs_origin_lat_bounds_s[SFS_ORIGIN_LAT_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0};

struct sfs_conn;

/* One RPC in flight on one connection. */
struct sfs_attempt {
	struct sfs_conn *conn;	      /* set at init */
	struct sfs_origin_req *req;   /* protected by pool->lock; NULL: detached or probe */
	struct sfs_attempt *req_next; /* protected by pool->lock: next attempt of req */
	uint64_t offset;	      /* READ: what this attempt asked for */
	uint32_t count;
	uint64_t sent_ms;	      /* owner thread: for timeouts */
	uint64_t sent_ns;	      /* owner thread: for the latency histogram */
	bool in_use, probe, reissued; /* owner thread */
	bool is_read, hedged;	      /* owner thread */
	unsigned node_reads;	      /* owner thread: READs in flight on the node at send */
};

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct sfs_conn {
	struct sfs_origin *pool; /* set at init, then read-only */
	struct sfs_node *node;	 /* set at init, then read-only */
	/* everything below is owned by the connection's thread */
	struct nfs_context *nfs;
	enum conn_state state;
	bool broken; /* fail at the next safe point (not inside libnfs) */
	uint64_t retry_at_ms, backoff_ms, connect_deadline_ms, probe_at_ms;
	unsigned n_busy;
	struct sfs_attempt slots[SFS_ORIGIN_CONN_DEPTH];
	char err[200];
};

struct sfs_node {
	char *addr; /* set at init, then read-only */
	int index;
	int state;	   /* atomic: enum sfs_origin_node_state */
	unsigned conns_up; /* atomic */
	uint64_t read_bytes, read_requests, meta_requests, errors, reissued, hedged, hedge_wins,
	    reconnects;							     /* atomic */
	uint64_t meta_by_op[SFS_ORIGIN_N_OPS];				     /* atomic */
	uint64_t lat_count, lat_sum_ns, lat_buckets[SFS_ORIGIN_LAT_BUCKETS]; /* atomic */
	/* atomic: when the node last left UP (0: never), and its reissued +
	 * hedged then, for the line that says it is back */
	uint64_t out_since_ms, moved_at_out;
	struct sfs_log_ratelimit warn_rl;
	/* Slow nodes (see SLOW_RATIO): READs in flight (atomic), the READ rate
	 * it has been giving (atomic: bytes per ms, an EWMA of each reply's
	 * size x the READs in flight on the node when it was sent / its
	 * latency), and how many READs it may have in flight (atomic: set by
	 * the tick from the rates; nconnect x depth unless the node stayed
	 * below SLOW_RATIO of the median). */
	unsigned reads_inflight;
	uint64_t read_rate;
	unsigned read_slots;
	unsigned slow_ticks; /* the tick's thread only: ticks in a row below SLOW_RATIO */
};

struct sfs_iothread {
	struct sfs_origin *pool;
	pthread_t tid;
	int efd;       /* eventfd: new work or stop */
	bool sleeping; /* atomic: in poll(); submitters wake it */
	unsigned index;
	struct sfs_conn **conns; /* owned conns, set at start */
	size_t pull_start;	 /* rotates the first connection offered work */
	size_t n_conns;
	struct pollfd *pfds;
	struct sfs_conn **pfd_conn;
};

struct sfs_origin {
	struct sfs_origin_conf conf; /* copied at open; addrs/export owned */
	uint64_t timeo_ms, fail_ms;  /* timeo, and timeo * retrans */
	uint64_t read_lat_ewma_us;   /* atomic: recent READ latency (1/16 weight) */
	unsigned hedge_credit;	     /* atomic: in 1/HEDGE_EARN hedges */
	struct sfs_node *nodes;
	size_t n_nodes;
	struct sfs_conn *conns;
	size_t n_conns;
	struct sfs_iothread *threads;
	unsigned n_threads;
	bool started;
	bool offline_open;  /* set at open: started with no node, root from the caller */
	bool stopping;	    /* atomic */
	unsigned nodes_up;  /* atomic: nodes in state UP */
	struct sfs_fh root; /* set at open, then read-only */
	uint32_t max_read;  /* atomic: min over mounted connections */

	unsigned wake_next;   /* atomic: the thread a submit tries to wake first */
	unsigned wake_relays; /* atomic: hand-offs left to the last submit's wake-up */

	pthread_mutex_t lock;			/* leaf lock, see file comment */
	struct sfs_origin_req *q_head, *q_tail; /* protected by lock */
	/* Changed under lock; also read without it (atomic load) as a hint by
	 * the I/O threads, which take the lock before they act on it. */
	size_t q_len;
};

/* libnfs keeps unlocked globals in context creation; serialise it. */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

/* --- helpers ------------------------------------------------------------ */

static void node_set_state(struct sfs_origin *pool, struct sfs_node *node, int state)
{
	int old = __atomic_exchange_n(&node->state, state, __ATOMIC_RELAXED);

	if (old == state)
		return;
	if (old == SFS_NODE_UP)
		__atomic_fetch_sub(&pool->nodes_up, 1, __ATOMIC_RELAXED);
	if (state == SFS_NODE_UP)
		__atomic_fetch_add(&pool->nodes_up, 1, __ATOMIC_RELAXED);
	static const char *const names[] = {"up", "suspect", "down"};
	uint64_t now = sfs_now_ms();
	uint64_t moved = __atomic_load_n(&node->reissued, __ATOMIC_RELAXED) +
			 __atomic_load_n(&node->hedged, __ATOMIC_RELAXED);
	uint64_t since = __atomic_load_n(&node->out_since_ms, __ATOMIC_RELAXED);
	if (old == SFS_NODE_UP) {
		__atomic_store_n(&node->out_since_ms, now, __ATOMIC_RELAXED);
		__atomic_store_n(&node->moved_at_out, moved, __ATOMIC_RELAXED);
	}
	/* At mount time only failures are news; later every change is. */
	if (state == SFS_NODE_UP && pool->started && since) {
		uint64_t moved0 = __atomic_load_n(&node->moved_at_out, __ATOMIC_RELAXED);
		sfs_log(SFS_LOG_INFO, "origin",
			"node %s is up again after %.1f s out (last %s); %llu requests went to "
			"other nodes meanwhile",
			node->addr, (double)(now - since) / 1000, names[old],
			(unsigned long long)(moved - moved0));
	} else if (pool->started || state != SFS_NODE_UP) {
		sfs_log(state == SFS_NODE_UP ? SFS_LOG_INFO : SFS_LOG_WARN, "origin",
			"node %s is %s", node->addr, names[state]);
	}
}

static void count(uint64_t *ctr, uint64_t n) { __atomic_fetch_add(ctr, n, __ATOMIC_RELAXED); }

const char *const sfs_origin_op_names[SFS_ORIGIN_N_OPS] = {
    [SFS_ORIGIN_READ] = "read",		[SFS_ORIGIN_GETATTR] = "getattr",
    [SFS_ORIGIN_LOOKUP] = "lookup",	[SFS_ORIGIN_READDIRPLUS] = "readdir",
    [SFS_ORIGIN_READLINK] = "readlink", [SFS_ORIGIN_FSSTAT] = "fsstat",
};

/* One metadata reply from node, of op. */
static void count_meta(struct sfs_node *node, enum sfs_origin_op op)
{
	count(&node->meta_requests, 1);
	count(&node->meta_by_op[op], 1);
}

static void node_record_latency(struct sfs_node *node, uint64_t ns)
{
	double s = (double)ns / 1e9;

	count(&node->lat_count, 1);
	count(&node->lat_sum_ns, ns);
	for (int i = 0; i < SFS_ORIGIN_LAT_BUCKETS; i++)
		if (s <= sfs_origin_lat_bounds_s[i])
			count(&node->lat_buckets[i], 1);
}

static int nfsstat_to_errno(int st)
{
	switch (st) {
	case NFS3_OK:
		return 0;
	case NFS3ERR_PERM:
		return -EPERM;
	case NFS3ERR_NOENT:
		return -ENOENT;
	case NFS3ERR_NXIO:
		return -ENXIO;
	case NFS3ERR_ACCES:
		return -EACCES;
	case NFS3ERR_EXIST:
		return -EEXIST;
	case NFS3ERR_NOTDIR:
		return -ENOTDIR;
	case NFS3ERR_ISDIR:
		return -EISDIR;
	case NFS3ERR_INVAL:
		return -EINVAL;
	case NFS3ERR_FBIG:
		return -EFBIG;
	case NFS3ERR_NOSPC:
		return -ENOSPC;
	case NFS3ERR_ROFS:
		return -EROFS;
	case NFS3ERR_NAMETOOLONG:
		return -ENAMETOOLONG;
	case NFS3ERR_NOTEMPTY:
		return -ENOTEMPTY;
	case NFS3ERR_STALE:
	case NFS3ERR_BADHANDLE:
		return -ESTALE;
	case NFS3ERR_NOTSUPP:
		return -EOPNOTSUPP;
	case NFS3ERR_JUKEBOX:
		return -EAGAIN;
	default:
		return -EIO;
	}
}

static void fattr_to_attr(const fattr3 *f, struct sfs_attr *a)
{
	static const uint32_t types[] = {0,	  S_IFREG, S_IFDIR,  S_IFBLK,
					 S_IFCHR, S_IFLNK, S_IFSOCK, S_IFIFO};
	a->type = (f->type >= 1 && f->type <= 7) ? types[f->type] : S_IFREG;
	a->mode = f->mode & 07777;
	a->nlink = f->nlink;
	a->uid = f->uid;
	a->gid = f->gid;
	a->size = f->size;
	a->used = f->used;
	a->fsid = f->fsid;
	a->fileid = f->fileid;
	a->rdev_major = f->rdev.specdata1;
	a->rdev_minor = f->rdev.specdata2;
	a->atime = (struct timespec){f->atime.seconds, f->atime.nseconds};
	a->mtime = (struct timespec){f->mtime.seconds, f->mtime.nseconds};
	a->ctime = (struct timespec){f->ctime.seconds, f->ctime.nseconds};
}

static void fh_from_nfs(struct sfs_fh *out, const char *val, unsigned len)
{
	out->len = len > SFS_FH_MAX ? SFS_FH_MAX : len;
	memcpy(out->data, val, out->len);
}

/* --- the queue (caller holds pool->lock) ---------------------------------- */

static void q_unlink(struct sfs_origin *pool, struct sfs_origin_req *req)
{
	if (!req->queued)
		return;
	if (req->q_prev)
		req->q_prev->q_next = req->q_next;
	else
		pool->q_head = req->q_next;
	if (req->q_next)
		req->q_next->q_prev = req->q_prev;
	else
		pool->q_tail = req->q_prev;
	req->q_next = req->q_prev = NULL;
	req->queued = false;
	__atomic_store_n(&pool->q_len, pool->q_len - 1, __ATOMIC_RELAXED);
}

static void q_push(struct sfs_origin *pool, struct sfs_origin_req *req, bool at_head)
{
	assert(!req->queued && !req->completed);
	req->queued = true;
	if (at_head) {
		req->q_prev = NULL;
		req->q_next = pool->q_head;
		if (pool->q_head)
			pool->q_head->q_prev = req;
		else
			pool->q_tail = req;
		pool->q_head = req;
	} else {
		req->q_next = NULL;
		req->q_prev = pool->q_tail;
		if (pool->q_tail)
			pool->q_tail->q_next = req;
		else
			pool->q_head = req;
		pool->q_tail = req;
	}
	__atomic_store_n(&pool->q_len, pool->q_len + 1, __ATOMIC_RELAXED);
}

/* Claim a request for completion: detach every attempt and dequeue it.
 * Caller holds pool->lock; returns false if someone claimed it first. */
static bool req_claim(struct sfs_origin *pool, struct sfs_origin_req *req)
{
	if (req->completed)
		return false;
	req->completed = true;
	q_unlink(pool, req);
	for (struct sfs_attempt *a = req->attempts, *next; a; a = next) {
		next = a->req_next;
		a->req = NULL;
		a->req_next = NULL;
	}
	req->attempts = NULL;
	return true;
}

static void attempt_unlink(struct sfs_attempt *a)
{
	struct sfs_origin_req *req = a->req;

	if (!req)
		return;
	for (struct sfs_attempt **p = &req->attempts; *p; p = &(*p)->req_next)
		if (*p == a) {
			*p = a->req_next;
			break;
		}
	a->req = NULL;
	a->req_next = NULL;
}

/* Wake up to `most` sleeping I/O threads other than `self` (NULL: none is
 * the caller), from a rotating start. Returns how many were woken. */
static unsigned wake_some(struct sfs_origin *pool, unsigned most, const struct sfs_iothread *self)
{
	uint64_t one = 1;
	unsigned woken = 0;

	if (!pool->started || !most)
		return 0;
	unsigned start = __atomic_fetch_add(&pool->wake_next, 1, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < pool->n_threads && woken < most; k++) {
		struct sfs_iothread *t = &pool->threads[(start + k) % pool->n_threads];
		if (t == self || !__atomic_load_n(&t->sleeping, __ATOMIC_ACQUIRE))
			continue;
		if (write(t->efd, &one, sizeof(one)) < 0) {
			/* eventfd counter saturated: already awake */
		}
		woken++;
	}
	return woken;
}

/* Every sleeping thread: for re-queued work that the thread which had it
 * cannot send (its node went down, a hedge), and for stopping. */
static void wake_threads(struct sfs_origin *pool) { wake_some(pool, pool->n_threads, NULL); }

/* Complete a claimed request: call the owner's callback. No lock held. */
static void req_finish(struct sfs_origin_req *req, int result)
{
	req->result = result;
	req->done(req);
}

/* Put a request back at the head of the queue after a failed attempt.
 * Caller holds pool->lock. */
static void req_requeue(struct sfs_origin *pool, struct sfs_origin_req *req, int avoid_node)
{
	if (req->completed || req->queued)
		return;
	req->avoid_node = (int16_t)avoid_node;
	q_push(pool, req, true);
}

/* --- sending -------------------------------------------------------------- */

static void slot_cb(struct rpc_context *rpc, int status, void *data, void *private_data);

/* Send req on conn using a free slot. Called by conn's thread, no lock held.
 * Returns 0, or -1 if libnfs refused (the request has been re-queued). */
static int conn_send(struct sfs_conn *conn, struct sfs_attempt *a, struct sfs_origin_req *req)
{
	struct sfs_origin *pool = conn->pool;
	struct rpc_context *rpc = nfs_get_rpc_context(conn->nfs);
	struct nfs_fh3 fh = {.data = {.data_len = req->fh.len, .data_val = (char *)req->fh.data}};
	int rc;

	a->in_use = true;
	a->probe = false;
	a->reissued = false;
	a->hedged = false;
	a->is_read = req->op == SFS_ORIGIN_READ;
	if (a->is_read)
		a->node_reads =
		    __atomic_add_fetch(&conn->node->reads_inflight, 1, __ATOMIC_RELAXED);
	a->sent_ns = sfs_now_ns();
	a->sent_ms = a->sent_ns / 1000000u;
	conn->n_busy++;
	switch (req->op) {
	case SFS_ORIGIN_READ: {
		READ3args args = {.file = fh, .offset = a->offset, .count = a->count};
		rc = rpc_nfs3_read_async(rpc, slot_cb, &args, a);
		break;
	}
	case SFS_ORIGIN_GETATTR: {
		GETATTR3args args = {.object = fh};
		rc = rpc_nfs3_getattr_async(rpc, slot_cb, &args, a);
		break;
	}
	case SFS_ORIGIN_LOOKUP: {
		LOOKUP3args args = {.what = {.dir = fh, .name = (char *)req->name}};
		rc = rpc_nfs3_lookup_async(rpc, slot_cb, &args, a);
		break;
	}
	case SFS_ORIGIN_READDIRPLUS: {
		READDIRPLUS3args args = {.dir = fh,
					 .cookie = req->cookie,
					 .dircount = req->dir_max_bytes / 2,
					 .maxcount = req->dir_max_bytes};
		memcpy(args.cookieverf, req->cookieverf, sizeof(args.cookieverf));
		rc = rpc_nfs3_readdirplus_async(rpc, slot_cb, &args, a);
		break;
	}
	case SFS_ORIGIN_READLINK: {
		READLINK3args args = {.symlink = fh};
		rc = rpc_nfs3_readlink_async(rpc, slot_cb, &args, a);
		break;
	}
	case SFS_ORIGIN_FSSTAT: {
		FSSTAT3args args = {.fsroot = fh};
		rc = rpc_nfs3_fsstat_async(rpc, slot_cb, &args, a);
		break;
	}
	default:
		rc = -1;
	}
	if (rc == 0)
		return 0;
	/* Not sent: give the slot back, requeue, and drop the connection. */
	a->in_use = false;
	conn->n_busy--;
	if (a->is_read)
		__atomic_sub_fetch(&conn->node->reads_inflight, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pool->lock);
	attempt_unlink(a);
	req_requeue(pool, req, -1);
	pthread_mutex_unlock(&pool->lock);
	snprintf(conn->err, sizeof(conn->err), "send failed: %s", nfs_get_error(conn->nfs) ?: "?");
	conn->broken = true;
	return -1;
}

/* Pick the next request this connection may take. Caller holds pool->lock.
 * A request that timed out on this node goes elsewhere while any other node
 * is up; a slow node with its READ slots full takes no READ (SLOW_RATIO). */
static struct sfs_origin_req *q_pick(struct sfs_origin *pool, struct sfs_node *node)
{
	bool others_up = __atomic_load_n(&pool->nodes_up, __ATOMIC_RELAXED) >
			 (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP ? 1u : 0u);
	bool reads_ok = __atomic_load_n(&node->reads_inflight, __ATOMIC_RELAXED) <
			__atomic_load_n(&node->read_slots, __ATOMIC_RELAXED);
	int scanned = 0;

	for (struct sfs_origin_req *r = pool->q_head; r && scanned < 64; r = r->q_next, scanned++)
		if ((r->avoid_node != node->index || !others_up) &&
		    (reads_ok || r->op != SFS_ORIGIN_READ))
			return r;
	return NULL;
}

/* Give one queued request to a connection with a free slot. Returns true if
 * it sent one (and may take more). */
static bool conn_pull_one(struct sfs_conn *conn)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_attempt *a = NULL;

	if (conn->state != CONN_UP || conn->broken || conn->n_busy >= SFS_ORIGIN_CONN_DEPTH ||
	    __atomic_load_n(&conn->node->state, __ATOMIC_RELAXED) != SFS_NODE_UP)
		return false;
	for (unsigned i = 0; i < SFS_ORIGIN_CONN_DEPTH; i++)
		if (!conn->slots[i].in_use) {
			a = &conn->slots[i];
			break;
		}
	assert(a);
	pthread_mutex_lock(&pool->lock);
	struct sfs_origin_req *req = q_pick(pool, conn->node);
	if (!req) {
		pthread_mutex_unlock(&pool->lock);
		return false;
	}
	q_unlink(pool, req);
	a->req = req;
	a->req_next = req->attempts;
	req->attempts = a;
	if (req->op == SFS_ORIGIN_READ) {
		a->offset = req->offset + req->done_bytes;
		a->count = req->count - req->done_bytes;
	}
	pthread_mutex_unlock(&pool->lock);
	return conn_send(conn, a, req) == 0;
}

/* --- completions ---------------------------------------------------------- */

/* reply_decode's answer for a READ that came back short and must continue
 * (not a byte count: a 1-byte file's READ returns 1, which this once was). */
#define READ_CONTINUES (-EINPROGRESS)

/* Decode a successful RPC reply for a claimed request. Runs on the I/O
 * thread without the lock. Returns the result, or READ_CONTINUES if a READ
 * came back short and must continue (the caller re-queues it). */
static int reply_decode(struct sfs_conn *conn, struct sfs_attempt *a, struct sfs_origin_req *req,
			void *data)
{
	struct sfs_node *node = conn->node;
	int err;

	switch (req->op) {
	case SFS_ORIGIN_READ: {
		READ3res *res = data;
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		READ3resok *ok = &res->READ3res_u.resok;
		uint32_t n = ok->data.data_len < a->count ? ok->data.data_len : a->count;
		memcpy((char *)req->buf + (a->offset - req->offset), ok->data.data_val, n);
		count(&node->read_bytes, n);
		count(&node->read_requests, 1);
		if (ok->file_attributes.attributes_follow) {
			fattr_to_attr(&ok->file_attributes.post_op_attr_u.attributes, &req->attr);
			req->have_attr = true;
		}
		req->done_bytes = (uint32_t)(a->offset - req->offset) + n;
		if (ok->eof || n == 0 || req->done_bytes >= req->count) {
			req->eof = ok->eof || (n == 0);
			return (int)req->done_bytes;
		}
		return READ_CONTINUES; /* short, not at EOF: continue from done_bytes */
	}
	case SFS_ORIGIN_GETATTR: {
		GETATTR3res *res = data;
		count_meta(node, req->op);
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		fattr_to_attr(&res->GETATTR3res_u.resok.obj_attributes, &req->attr);
		req->have_attr = true;
		return 0;
	}
	case SFS_ORIGIN_LOOKUP: {
		LOOKUP3res *res = data;
		count_meta(node, req->op);
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		LOOKUP3resok *ok = &res->LOOKUP3res_u.resok;
		fh_from_nfs(&req->out_fh, ok->object.data.data_val, ok->object.data.data_len);
		req->have_attr = ok->obj_attributes.attributes_follow;
		if (req->have_attr)
			fattr_to_attr(&ok->obj_attributes.post_op_attr_u.attributes, &req->attr);
		return 0;
	}
	case SFS_ORIGIN_READDIRPLUS: {
		READDIRPLUS3res *res = data;
		count_meta(node, req->op);
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		READDIRPLUS3resok *ok = &res->READDIRPLUS3res_u.resok;
		memcpy(req->cookieverf, ok->cookieverf, sizeof(req->cookieverf));
		req->eof = ok->reply.eof;
		for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
			struct sfs_attr attr, *ap = NULL;
			struct sfs_fh fh, *fp = NULL;
			if (e->name_attributes.attributes_follow) {
				fattr_to_attr(&e->name_attributes.post_op_attr_u.attributes, &attr);
				ap = &attr;
			}
			if (e->name_handle.handle_follows) {
				fh_from_nfs(&fh, e->name_handle.post_op_fh3_u.handle.data.data_val,
					    e->name_handle.post_op_fh3_u.handle.data.data_len);
				fp = &fh;
			}
			if (req->dirent(req, e->name, e->cookie, ap, fp)) {
				req->eof = false;
				break;
			}
		}
		return 0;
	}
	case SFS_ORIGIN_READLINK: {
		READLINK3res *res = data;
		count_meta(node, req->op);
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		req->link = strdup(res->READLINK3res_u.resok.data);
		return req->link ? 0 : -ENOMEM;
	}
	case SFS_ORIGIN_FSSTAT: {
		FSSTAT3res *res = data;
		count_meta(node, req->op);
		if ((err = nfsstat_to_errno(res->status)))
			return err;
		FSSTAT3resok *ok = &res->FSSTAT3res_u.resok;
		req->fsstat = (struct sfs_fsstat){ok->tbytes, ok->fbytes, ok->abytes,
						  ok->tfiles, ok->ffiles, ok->afiles};
		return 0;
	}
	}
	return -EINVAL;
}

/* A READ reply after us_taken: update the recent latency and earn hedge
 * credit. Relaxed and racy on purpose: an estimate, never a correctness
 * input. */
/* One READ reply's evidence of the node's rate (1/16 weight). */
static void node_learn_rate(struct sfs_node *node, const struct sfs_attempt *a, uint64_t ns)
{
	uint64_t sample = (uint64_t)a->count * a->node_reads * 1000000u / (ns ? ns : 1);
	uint64_t old = __atomic_load_n(&node->read_rate, __ATOMIC_RELAXED);

	__atomic_store_n(&node->read_rate,
			 old ? (uint64_t)((int64_t)old + ((int64_t)sample - (int64_t)old) / 16)
			     : sample,
			 __ATOMIC_RELAXED);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Per tick (one thread): READ slots per node from the rates, see SLOW_RATIO.
 * The reference is the median rate of the UP nodes (one lucky reply must
 * not make every other node slow), and a node counts as slow only after
 * SLOW_TICKS ticks in a row below it: rates are noisy where the servers
 * share the client's CPUs. Nodes not UP or with no rate yet keep every
 * slot. */
static void nodes_set_read_slots(struct sfs_origin *pool)
{
	unsigned full = pool->conf.nconnect * SFS_ORIGIN_CONN_DEPTH;
	uint64_t rates[64];
	size_t n = 0;

	for (size_t i = 0; i < pool->n_nodes && n < 64; i++)
		if (__atomic_load_n(&pool->nodes[i].state, __ATOMIC_RELAXED) == SFS_NODE_UP &&
		    (rates[n] = __atomic_load_n(&pool->nodes[i].read_rate, __ATOMIC_RELAXED)))
			n++;
	qsort(rates, n, sizeof(rates[0]), cmp_u64);
	uint64_t median = n ? rates[n / 2] : 0;
	for (size_t i = 0; i < pool->n_nodes; i++) {
		struct sfs_node *nd = &pool->nodes[i];
		uint64_t r = __atomic_load_n(&nd->read_rate, __ATOMIC_RELAXED);
		unsigned slots = full;
		bool below = median && r && (double)r < SLOW_RATIO * (double)median;
		nd->slow_ticks = below ? nd->slow_ticks + 1 : 0;
		if (below && nd->slow_ticks >= SLOW_TICKS) {
			slots = (unsigned)((double)full * (double)r / (double)median + 0.5);
			slots = slots ? slots : 1;
		}
		__atomic_store_n(&nd->read_slots, slots, __ATOMIC_RELAXED);
	}
}

static void hedge_learn(struct sfs_origin *pool, uint64_t us_taken)
{
	uint64_t old = __atomic_load_n(&pool->read_lat_ewma_us, __ATOMIC_RELAXED);
	int64_t step = ((int64_t)us_taken - (int64_t)old) / 16;

	__atomic_store_n(&pool->read_lat_ewma_us, old ? (uint64_t)((int64_t)old + step) : us_taken,
			 __ATOMIC_RELAXED);
	if (__atomic_load_n(&pool->hedge_credit, __ATOMIC_RELAXED) < HEDGE_EARN * HEDGE_BURST)
		__atomic_fetch_add(&pool->hedge_credit, 1, __ATOMIC_RELAXED);
}

/* How long a READ waits on an UP node before it is hedged. */
static uint64_t hedge_after_ms(const struct sfs_origin *pool)
{
	uint64_t ms =
	    HEDGE_FACTOR * __atomic_load_n(&pool->read_lat_ewma_us, __ATOMIC_RELAXED) / 1000;

	return ms > HEDGE_MIN_MS ? ms : HEDGE_MIN_MS;
}

/* Take one hedge's credit, if there is one. */
static bool hedge_take(struct sfs_origin *pool)
{
	unsigned c = __atomic_load_n(&pool->hedge_credit, __ATOMIC_RELAXED);

	while (c >= HEDGE_EARN)
		if (__atomic_compare_exchange_n(&pool->hedge_credit, &c, c - HEDGE_EARN, false,
						__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			return true;
	return false;
}

static void slot_cb(struct rpc_context *rpc, int status, void *data, void *private_data)
{
	struct sfs_attempt *a = private_data;
	struct sfs_conn *conn = a->conn;
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	struct sfs_origin_req *req;
	bool probe = a->probe;

	(void)rpc;
	a->in_use = false;
	conn->n_busy--;
	if (a->is_read && !probe)
		__atomic_sub_fetch(&node->reads_inflight, 1, __ATOMIC_RELAXED);
	if (status == RPC_STATUS_SUCCESS) {
		uint64_t ns = sfs_now_ns() - a->sent_ns;
		node_record_latency(node, ns);
		if (a->is_read && !probe) {
			hedge_learn(pool, ns / 1000u);
			node_learn_rate(node, a, ns);
		}
	}

	pthread_mutex_lock(&pool->lock);
	req = a->req;
	attempt_unlink(a);
	if (status != RPC_STATUS_SUCCESS) {
		if (status != RPC_STATUS_CANCEL)
			count(&node->errors, 1);
		if (req && !req->completed && !req->queued) {
			req_requeue(pool, req, node->index);
			count(&node->reissued, 1);
		}
		pthread_mutex_unlock(&pool->lock);
		if (status != RPC_STATUS_CANCEL && !conn->broken) {
			snprintf(conn->err, sizeof(conn->err), "%s",
				 status == RPC_STATUS_TIMEOUT
				     ? "RPC timed out"
				     : (data ? (char *)data : "RPC error"));
			conn->broken = true;
		}
		return;
	}
	/* A reply from a suspect node proves it is alive again. */
	if (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_SUSPECT)
		node_set_state(pool, node, SFS_NODE_UP);
	if (probe || !req || !req_claim(pool, req)) {
		pthread_mutex_unlock(&pool->lock);
		return; /* probe, or a late duplicate of a request served elsewhere */
	}
	int hedged_node = req->hedged_node;
	pthread_mutex_unlock(&pool->lock);
	if (hedged_node >= 0 && hedged_node != node->index)
		count(&pool->nodes[hedged_node].hedge_wins, 1);

	int result = reply_decode(conn, a, req, data);
	if (result == -EAGAIN || result == READ_CONTINUES) {
		/* JUKEBOX or a short read: back in the queue (claimed requests
		 * have no attempts left, so this is the only owner). */
		pthread_mutex_lock(&pool->lock);
		req->completed = false;
		req_requeue(pool, req, -1);
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	if (result < 0 && result != -ENOENT)
		count(&node->errors, 1);
	req_finish(req, result);
}

/* --- connections ---------------------------------------------------------- */

static void conn_set_socket_options(struct sfs_conn *conn)
{
	int fd = nfs_get_fd(conn->nfs), one = 1, idle = 10, intvl = 5, cnt = 3;

	/* libnfs 4.0 sets neither (FACTS.md). NODELAY: small metadata RPCs must not
	 * wait behind Nagle; keepalive: find silently dead peers on idle links. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void mount_cb(int err, struct nfs_context *nfs, void *data, void *private_data)
{
	struct sfs_conn *conn = private_data;
	struct sfs_origin *pool = conn->pool;

	if (conn->nfs != nfs || conn->state != CONN_CONNECTING)
		return; /* teardown of an abandoned attempt */
	if (err) {
		snprintf(conn->err, sizeof(conn->err), "%s", data ? (char *)data : strerror(-err));
		conn->broken = true;
		return;
	}
	if (pool->offline_open) {
		/* Started from a saved root: a node exporting another root is
		 * another cluster or export, and must not serve these handles. */
		const struct nfs_fh *rfh = nfs_get_rootfh(nfs);
		if (!rfh || (uint32_t)rfh->len != pool->root.len ||
		    memcmp(rfh->val, pool->root.data, pool->root.len)) {
			snprintf(conn->err, sizeof(conn->err),
				 "its export root differs from the one this mount started with");
			conn->broken = true;
			return;
		}
	}
	conn->state = CONN_UP;
	conn->backoff_ms = BACKOFF_MIN_MS;
	conn->err[0] = 0;
	conn_set_socket_options(conn);
	uint64_t readmax = nfs_get_readmax(nfs);
	uint32_t cur = __atomic_load_n(&pool->max_read, __ATOMIC_RELAXED);
	while (readmax && readmax < cur &&
	       !__atomic_compare_exchange_n(&pool->max_read, &cur, (uint32_t)readmax, false,
					    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
	}
	if (__atomic_fetch_add(&conn->node->conns_up, 1, __ATOMIC_RELAXED) == 0)
		node_set_state(pool, conn->node, SFS_NODE_UP);
}

static void conn_connect(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct nfs_context *nfs;

	pthread_mutex_lock(&create_lock);
	nfs = nfs_init_context();
	pthread_mutex_unlock(&create_lock);
	if (!nfs) {
		snprintf(conn->err, sizeof(conn->err), "cannot create an NFS context");
		conn->retry_at_ms = now + conn->backoff_ms;
		return;
	}
	nfs_set_autoreconnect(nfs, 0); /* broken in 4.0: we reconnect ourselves */
	nfs_set_version(nfs, NFS_V3);
	nfs_set_uid(nfs, (int)pool->conf.uid);
	nfs_set_gid(nfs, (int)pool->conf.gid);
	/* A backstop: our own timers re-issue after timeo and drop the
	 * connection after timeo * retrans; libnfs's timer frees the PDUs. */
	nfs_set_timeout(nfs, (int)(pool->fail_ms + TICK_MS));
	nfs_set_tcp_syncnt(nfs, 2);
	conn->nfs = nfs;
	conn->state = CONN_CONNECTING;
	conn->broken = false;
	conn->connect_deadline_ms = now + (pool->fail_ms > 2000 ? pool->fail_ms : 2000);
	if (nfs_mount_async(nfs, conn->node->addr, pool->conf.export_path, mount_cb, conn) != 0) {
		snprintf(conn->err, sizeof(conn->err), "%s", nfs_get_error(nfs) ?: "mount failed");
		conn->broken = true;
	}
}

/* Tear a connection down (never from inside a libnfs callback): in-flight
 * requests are re-queued by their CANCEL callbacks, a reconnect is scheduled. */
static void conn_teardown(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	struct nfs_context *nfs = conn->nfs;
	bool was_up = conn->state == CONN_UP;

	conn->state = CONN_DOWN;
	conn->nfs = NULL;
	if (nfs)
		nfs_destroy_context(nfs); /* CANCEL callbacks re-queue the attempts */
	assert(conn->n_busy == 0);
	conn->broken = false;
	conn->retry_at_ms = now + conn->backoff_ms;
	conn->backoff_ms =
	    conn->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : conn->backoff_ms * 2;
	if (was_up) {
		count(&node->reconnects, 1);
		count(&node->errors, 1);
		if (sfs_log_ratelimit(&node->warn_rl, 5000))
			sfs_log(SFS_LOG_WARN, "origin", "connection to %s lost: %s", node->addr,
				conn->err[0] ? conn->err : "closed");
		if (__atomic_sub_fetch(&node->conns_up, 1, __ATOMIC_RELAXED) == 0)
			node_set_state(pool, node, SFS_NODE_DOWN);
	}
	wake_threads(pool); /* re-queued work may now go to another thread's conns */
}

/* Send a slow READ again, to another node while one is up; this attempt
 * stays in flight and whichever reply comes first completes the request
 * (the other is a late duplicate). The node stays UP: slow is not dead. */
static void attempt_hedge(struct sfs_conn *conn, struct sfs_attempt *a)
{
	struct sfs_origin *pool = conn->pool;
	bool requeued = false;

	a->hedged = true;
	pthread_mutex_lock(&pool->lock);
	if (a->req && !a->req->completed && !a->req->queued) {
		req_requeue(pool, a->req, conn->node->index);
		a->req->hedged_node = (int16_t)conn->node->index;
		requeued = true;
	}
	pthread_mutex_unlock(&pool->lock);
	if (requeued) {
		count(&conn->node->hedged, 1);
		wake_threads(pool);
	} else {
		__atomic_fetch_add(&pool->hedge_credit, HEDGE_EARN, __ATOMIC_RELAXED); /* unused */
	}
}

/* Per tick: timeouts of this connection's attempts, health probes, reconnects. */
static void conn_tick(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;

	if (conn->state == CONN_DOWN) {
		if (now >= conn->retry_at_ms && !__atomic_load_n(&pool->stopping, __ATOMIC_RELAXED))
			conn_connect(conn, now);
		return;
	}
	if (conn->state == CONN_CONNECTING) {
		if (now >= conn->connect_deadline_ms && !conn->broken) {
			snprintf(conn->err, sizeof(conn->err),
				 "no answer within %llu ms (timeo x retrans)",
				 (unsigned long long)(pool->fail_ms > 2000 ? pool->fail_ms : 2000));
			conn->broken = true;
		}
		return;
	}
	if (nfs_service(conn->nfs, 0) < 0 && !conn->broken) { /* libnfs's own timeouts */
		snprintf(conn->err, sizeof(conn->err), "%s", nfs_get_error(conn->nfs) ?: "error");
		conn->broken = true;
	}
	uint64_t hedge_ms = hedge_after_ms(pool);
	for (unsigned i = 0; i < SFS_ORIGIN_CONN_DEPTH; i++) {
		struct sfs_attempt *a = &conn->slots[i];
		if (!a->in_use)
			continue;
		uint64_t age = now - a->sent_ms;
		if (a->is_read && !a->hedged && !a->reissued && age >= hedge_ms &&
		    age < pool->timeo_ms && pool->n_nodes > 1 &&
		    __atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP &&
		    hedge_take(pool))
			attempt_hedge(conn, a);
		if (age >= pool->fail_ms) {
			snprintf(conn->err, sizeof(conn->err), "no reply for %llu ms",
				 (unsigned long long)age);
			conn->broken = true; /* a hung node: drop it, reconnect later */
		} else if (age >= pool->timeo_ms && !a->reissued) {
			a->reissued = true;
			if (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP)
				node_set_state(pool, node, SFS_NODE_SUSPECT);
			pthread_mutex_lock(&pool->lock);
			if (a->req && !a->req->completed && !a->req->queued) {
				req_requeue(pool, a->req, node->index);
				count(&node->reissued, 1);
			}
			pthread_mutex_unlock(&pool->lock);
			wake_threads(pool);
		}
	}
	/* A suspect node gets no new work; an idle connection probes it. */
	if (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_SUSPECT &&
	    conn->n_busy == 0 && now >= conn->probe_at_ms && !conn->broken) {
		struct sfs_attempt *a = &conn->slots[0];
		a->in_use = true;
		a->probe = true;
		a->reissued = true;
		a->req = NULL;
		a->sent_ms = now;
		a->sent_ns = now * 1000000u;
		conn->n_busy++;
		conn->probe_at_ms = now + pool->timeo_ms;
		if (rpc_nfs3_null_async(nfs_get_rpc_context(conn->nfs), slot_cb, a) != 0) {
			a->in_use = false;
			conn->n_busy--;
			conn->broken = true;
		}
	}
}

/* --- the I/O loop --------------------------------------------------------- */

/* Fail queued requests whose soft deadline passed. One thread does this. */
static void queue_expire(struct sfs_origin *pool, uint64_t now)
{
	struct sfs_origin_req *expired = NULL;

	if (pool->conf.hard)
		return;
	pthread_mutex_lock(&pool->lock);
	for (struct sfs_origin_req *r = pool->q_head, *next; r; r = next) {
		next = r->q_next;
		if (now >= r->deadline_ms && req_claim(pool, r)) {
			r->q_next = expired; /* reuse the link for a private list */
			expired = r;
		}
	}
	pthread_mutex_unlock(&pool->lock);
	while (expired) {
		struct sfs_origin_req *r = expired;
		expired = r->q_next;
		r->q_next = NULL;
		req_finish(r, -EIO);
	}
}

/* One iteration over a set of connections: poll, service, tick, pull.
 * Returns after at most timeout_ms. */
static void io_iterate(struct sfs_iothread *t, uint64_t *next_tick, int timeout_ms)
{
	struct sfs_origin *pool = t->pool;
	nfds_t n = 0;

	if (t->efd >= 0)
		t->pfds[n++] = (struct pollfd){.fd = t->efd, .events = POLLIN};
	for (size_t i = 0; i < t->n_conns; i++) {
		struct sfs_conn *c = t->conns[i];
		if (!c->nfs || c->broken || c->state == CONN_DOWN)
			continue;
		t->pfds[n] = (struct pollfd){.fd = nfs_get_fd(c->nfs),
					     .events = (short)nfs_which_events(c->nfs)};
		t->pfd_conn[n++] = c;
	}
	uint64_t now = sfs_now_ms();
	int wait = *next_tick > now ? (int)(*next_tick - now) : 0;
	if (wait > timeout_ms)
		wait = timeout_ms;
	__atomic_store_n(&t->sleeping, true, __ATOMIC_RELEASE);
	/* Re-check for work after announcing sleep, so no wake-up is lost. */
	if (__atomic_load_n(&pool->q_len, __ATOMIC_RELAXED) && wait > 0)
		wait = 0;
	int rc = poll(t->pfds, n, wait);
	__atomic_store_n(&t->sleeping, false, __ATOMIC_RELAXED);
	if (rc > 0) {
		for (nfds_t i = 0; i < n; i++) {
			if (!t->pfds[i].revents)
				continue;
			if (t->pfds[i].fd == t->efd && i == 0) {
				uint64_t v;
				if (read(t->efd, &v, sizeof(v)) < 0) {
					/* EAGAIN: nothing pending */
				}
				continue;
			}
			struct sfs_conn *c = t->pfd_conn[i];
			if (c->broken || !c->nfs)
				continue;
			if (nfs_service(c->nfs, t->pfds[i].revents) < 0 && !c->broken) {
				snprintf(c->err, sizeof(c->err), "%s",
					 nfs_get_error(c->nfs) ?: "connection failed");
				c->broken = true;
			}
		}
	}
	now = sfs_now_ms();
	if (now >= *next_tick) {
		*next_tick = now + TICK_MS;
		for (size_t i = 0; i < t->n_conns; i++)
			conn_tick(t->conns[i], now);
		if (t->index == 0) {
			queue_expire(pool, now);
			nodes_set_read_slots(pool);
		}
	}
	for (size_t i = 0; i < t->n_conns; i++) {
		struct sfs_conn *c = t->conns[i];
		if (c->broken)
			conn_teardown(c, now);
	}
	/* Breadth first, from a rotating start: one request per connection per
	 * pass, so a shallow queue is spread over every node instead of
	 * filling the first connection's slots. */
	for (bool more = true; more && __atomic_load_n(&pool->q_len, __ATOMIC_RELAXED);) {
		more = false;
		for (size_t k = 0; k < t->n_conns; k++) {
			struct sfs_conn *c = t->conns[(t->pull_start + k) % t->n_conns];
			if (conn_pull_one(c))
				more = true;
		}
		t->pull_start++;
	}
	/* Work this thread could not place (its connections full, or on nodes
	 * that are down or to be avoided): hand it to a sleeping thread, at most
	 * n_threads times per submit, so that threads that cannot place it
	 * either do not wake each other in a loop. */
	if (__atomic_load_n(&pool->q_len, __ATOMIC_RELAXED)) {
		unsigned r = __atomic_load_n(&pool->wake_relays, __ATOMIC_RELAXED);
		while (r && !__atomic_compare_exchange_n(&pool->wake_relays, &r, r - 1, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		if (r)
			wake_some(pool, 1, t);
	}
}

static void *io_thread_main(void *arg)
{
	struct sfs_iothread *t = arg;
	pthread_setname_np(pthread_self(), "sfs-io"); /* top -H, perf --sort comm */
	uint64_t next_tick = sfs_now_ms() + TICK_MS;

	while (!__atomic_load_n(&t->pool->stopping, __ATOMIC_ACQUIRE))
		io_iterate(t, &next_tick, TICK_MS);
	return NULL;
}

/* --- public API ----------------------------------------------------------- */

static int iothread_init(struct sfs_origin *pool, struct sfs_iothread *t, unsigned index,
			 size_t max_conns, bool with_eventfd)
{
	t->pool = pool;
	t->index = index;
	t->efd = -1;
	t->conns = calloc(max_conns ? max_conns : 1, sizeof(*t->conns));
	t->pfds = calloc(max_conns + 1, sizeof(*t->pfds));
	t->pfd_conn = calloc(max_conns + 1, sizeof(*t->pfd_conn));
	if (!t->conns || !t->pfds || !t->pfd_conn)
		return -ENOMEM;
	if (with_eventfd) {
		t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (t->efd < 0)
			return -errno;
	}
	return 0;
}

static void iothread_free(struct sfs_iothread *t)
{
	if (t->efd >= 0)
		close(t->efd);
	free(t->conns);
	free(t->pfds);
	free(t->pfd_conn);
}

static int classify_mount_error(const char *msg)
{
	if (strstr(msg, "NOENT") || strstr(msg, "No such file"))
		return -ENOENT;
	if (strstr(msg, "ACCES") || strstr(msg, "PERM") || strstr(msg, "ermission"))
		return -EACCES;
	return -EHOSTUNREACH;
}

/* libnfs's words for a failed mount, and ours for what they mean. */
static void explain_mount_error(struct sfs_conn *c)
{
	char raw[sizeof(c->err) - 64];
	const char *why = NULL;

	snprintf(raw, sizeof(raw), "%.*s", (int)sizeof(raw) - 1, c->err);
	if (strstr(raw, "POLLHUP") || strstr(raw, "refused"))
		why = "connection refused (no NFS server at this address?)";
	else if (strstr(raw, "MNT3ERR_ACCES") || strstr(raw, "MNT3ERR_NOENT"))
		why = "the server does not export this path to us";
	if (why)
		snprintf(c->err, sizeof(c->err), "%s [%s]", why, raw);
}

int sfs_origin_open(const struct sfs_origin_conf *conf, sfs_origin **out, char *err_msg,
		    size_t err_len)
{
	struct sfs_origin *pool;
	struct sfs_iothread boot = {0};
	int err = -ENOMEM;

	if (conf->n_addrs == 0 || conf->nconnect == 0)
		return -EINVAL;
	pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pthread_mutex_init(&pool->lock, NULL);
	pool->conf = *conf;
	pool->conf.addrs = NULL;
	pool->conf.export_path = strdup(conf->export_path);
	pool->timeo_ms = (uint64_t)conf->timeo_ds * 100u;
	pool->fail_ms = pool->timeo_ms * (conf->retrans ? conf->retrans : 1);
	pool->hedge_credit = HEDGE_EARN * HEDGE_BURST; /* a full burst from the start */
	pool->max_read = conf->rsize_bytes;
	pool->n_nodes = conf->n_addrs;
	pool->nodes = calloc(pool->n_nodes, sizeof(*pool->nodes));
	pool->n_conns = pool->n_nodes * conf->nconnect;
	pool->conns = calloc(pool->n_conns, sizeof(*pool->conns));
	if (!pool->conf.export_path || !pool->nodes || !pool->conns)
		goto err_free;
	for (size_t i = 0; i < pool->n_nodes; i++) {
		pool->nodes[i].addr = strdup(conf->addrs[i]);
		pool->nodes[i].index = (int)i;
		pool->nodes[i].state = SFS_NODE_DOWN;
		pool->nodes[i].read_slots = conf->nconnect * SFS_ORIGIN_CONN_DEPTH;
		if (!pool->nodes[i].addr)
			goto err_free;
	}
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_conn *c = &pool->conns[i];
		c->pool = pool;
		c->node = &pool->nodes[i / conf->nconnect];
		c->backoff_ms = BACKOFF_MIN_MS;
		for (unsigned s = 0; s < SFS_ORIGIN_CONN_DEPTH; s++)
			c->slots[s].conn = c;
	}

	/* Mount every connection concurrently from this thread, then judge. */
	err = iothread_init(pool, &boot, 0, pool->n_conns, false);
	if (err)
		goto err_boot;
	uint64_t now = sfs_now_ms(), next_tick = now + TICK_MS;
	for (size_t i = 0; i < pool->n_conns; i++) {
		boot.conns[boot.n_conns++] = &pool->conns[i];
		conn_connect(&pool->conns[i], now);
	}
	for (;;) {
		bool pending = false;
		for (size_t i = 0; i < pool->n_conns; i++)
			if (pool->conns[i].state == CONN_CONNECTING && !pool->conns[i].broken)
				pending = true;
		if (!pending)
			break;
		io_iterate(&boot, &next_tick, TICK_MS);
		/* io_iterate tears broken conns down and schedules a retry; at
		 * open time one failed try per connection is the answer. */
		for (size_t i = 0; i < pool->n_conns; i++)
			pool->conns[i].retry_at_ms = UINT64_MAX;
	}
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_conn *c = &pool->conns[i];
		if (c->broken)
			conn_teardown(c, sfs_now_ms());
		c->retry_at_ms = sfs_now_ms() + c->backoff_ms;
	}
	struct sfs_conn *first_up = NULL, *first_err = NULL;
	for (size_t i = 0; i < pool->n_conns; i++) {
		if (pool->conns[i].state != CONN_UP)
			explain_mount_error(&pool->conns[i]);
		if (pool->conns[i].state == CONN_UP && !first_up)
			first_up = &pool->conns[i];
		if (pool->conns[i].state != CONN_UP && !first_err)
			first_err = &pool->conns[i];
	}
	if (!first_up) {
		/* Prefer a reason from the server (missing export) over a
		 * transport error from an unreachable address. */
		for (size_t i = 0; i < pool->n_conns; i++)
			if (classify_mount_error(pool->conns[i].err) != -EHOSTUNREACH) {
				first_err = &pool->conns[i];
				break;
			}
		err = classify_mount_error(first_err->err);
		if (err == -EHOSTUNREACH && conf->offline_root) {
			/* No node: the caller serves what it saved and we
			 * connect when the nodes answer. */
			pool->root = *conf->offline_root;
			pool->offline_open = true;
			sfs_log(SFS_LOG_WARN, "origin",
				"no node answers (e.g. %s: %s); starting without one, will retry",
				first_err->node->addr, first_err->err);
			goto opened;
		}
		if (pool->n_nodes > 1 && err == -EHOSTUNREACH)
			snprintf(err_msg, err_len, "no node could mount %s (e.g. %s: %s)",
				 conf->export_path, first_err->node->addr, first_err->err);
		else
			snprintf(err_msg, err_len, "cannot mount %s:%s: %s", first_err->node->addr,
				 conf->export_path, first_err->err);
		goto err_conns;
	}
	const struct nfs_fh *rfh = nfs_get_rootfh(first_up->nfs);
	fh_from_nfs(&pool->root, rfh->val, (unsigned)rfh->len);
	for (size_t i = 0; i < pool->n_nodes; i++)
		if (__atomic_load_n(&pool->nodes[i].conns_up, __ATOMIC_RELAXED) == 0) {
			for (size_t k = 0; k < pool->n_conns; k++)
				if (pool->conns[k].node == &pool->nodes[i]) {
					sfs_log(SFS_LOG_WARN, "origin",
						"node %s is down at mount time (%s); will retry",
						pool->nodes[i].addr, pool->conns[k].err);
					break;
				}
		}
opened:
	iothread_free(&boot);
	*out = pool;
	return 0;

err_conns:
	for (size_t i = 0; i < pool->n_conns; i++)
		if (pool->conns[i].nfs)
			nfs_destroy_context(pool->conns[i].nfs);
err_boot:
	iothread_free(&boot);
err_free:
	for (size_t i = 0; pool->nodes && i < pool->n_nodes; i++)
		free(pool->nodes[i].addr);
	free(pool->nodes);
	free(pool->conns);
	free((char *)pool->conf.export_path);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
	return err;
}

/* Wake the first n I/O threads (pool->stopping is set) and wait for them
 * to exit. */
static void join_threads(sfs_origin *pool, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		uint64_t one = 1;
		if (write(pool->threads[i].efd, &one, sizeof(one)) < 0) {
			/* eventfd counter saturated: already awake */
		}
		pthread_join(pool->threads[i].tid, NULL);
	}
}

int sfs_origin_start(sfs_origin *pool)
{
	unsigned n = pool->conf.n_threads;
	int err;

	if (n == 0) {
		long cpus = sysconf(_SC_NPROCESSORS_ONLN);
		n = cpus > 0 ? (unsigned)cpus : 1;
	}
	if (n > pool->n_conns)
		n = (unsigned)pool->n_conns;
	pool->threads = calloc(n, sizeof(*pool->threads));
	if (!pool->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		err = iothread_init(pool, &pool->threads[i], i, pool->n_conns / n + 1, true);
		if (err) {
			/* Nothing started: free what was set up (efd -1 where none),
			 * so that close neither joins nor closes anything of it. */
			for (unsigned k = 0; k <= i; k++)
				iothread_free(&pool->threads[k]);
			free(pool->threads);
			pool->threads = NULL;
			return err;
		}
	}
	pool->n_threads = n;
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_iothread *t = &pool->threads[i % n];
		t->conns[t->n_conns++] = &pool->conns[i];
	}
	pool->started = true;
	for (unsigned i = 0; i < n; i++) {
		err =
		    -pthread_create(&pool->threads[i].tid, NULL, io_thread_main, &pool->threads[i]);
		if (err) {
			/* Stop and join the threads that started, free every
			 * thread's state; close then sees no threads. */
			__atomic_store_n(&pool->stopping, true, __ATOMIC_RELEASE);
			join_threads(pool, i);
			for (unsigned k = 0; k < n; k++)
				iothread_free(&pool->threads[k]);
			free(pool->threads);
			pool->threads = NULL;
			pool->n_threads = 0;
			return err;
		}
	}
	return 0;
}

void sfs_origin_close(sfs_origin *pool)
{
	if (!pool)
		return;
	__atomic_store_n(&pool->stopping, true, __ATOMIC_RELEASE);
	wake_threads(pool);
	join_threads(pool, pool->n_threads);
	/* Threads are gone: destroying contexts re-queues their attempts. */
	for (size_t i = 0; i < pool->n_conns; i++)
		if (pool->conns[i].nfs) {
			struct nfs_context *nfs = pool->conns[i].nfs;
			pool->conns[i].nfs = NULL;
			pool->conns[i].state = CONN_DOWN;
			nfs_destroy_context(nfs);
		}
	for (;;) {
		pthread_mutex_lock(&pool->lock);
		struct sfs_origin_req *r = pool->q_head;
		if (r)
			req_claim(pool, r);
		pthread_mutex_unlock(&pool->lock);
		if (!r)
			break;
		req_finish(r, -ESHUTDOWN);
	}
	for (unsigned i = 0; i < pool->n_threads; i++)
		iothread_free(&pool->threads[i]);
	free(pool->threads);
	for (size_t i = 0; i < pool->n_nodes; i++)
		free(pool->nodes[i].addr);
	free(pool->nodes);
	free(pool->conns);
	free((char *)pool->conf.export_path);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

const struct sfs_fh *sfs_origin_root(const sfs_origin *pool) { return &pool->root; }

uint32_t sfs_origin_max_read(const sfs_origin *pool)
{
	return __atomic_load_n(&pool->max_read, __ATOMIC_RELAXED);
}

static void req_reset(sfs_origin *pool, struct sfs_origin_req *req, uint64_t now)
{
	req->result = 0;
	req->eof = false;
	req->have_attr = false;
	req->link = NULL;
	req->queued = req->completed = false;
	req->avoid_node = -1;
	req->hedged_node = -1;
	req->done_bytes = 0;
	req->attempts = NULL;
	req->deadline_ms = now + pool->fail_ms;
}

void sfs_origin_submit_batch(sfs_origin *pool, struct sfs_origin_req **reqs, size_t n)
{
	uint64_t now = sfs_now_ms();

	for (size_t i = 0; i < n; i++)
		req_reset(pool, reqs[i], now);
	if (__atomic_load_n(&pool->stopping, __ATOMIC_ACQUIRE)) {
		for (size_t i = 0; i < n; i++)
			req_finish(reqs[i], -ESHUTDOWN);
		return;
	}
	pthread_mutex_lock(&pool->lock);
	for (size_t i = 0; i < n; i++)
		q_push(pool, reqs[i], false);
	pthread_mutex_unlock(&pool->lock);
	/* One sleeping thread per request, not all of them: every thread has
	 * connections to every node when nconnect >= threads (the default), and
	 * a woken thread that leaves work queued wakes another (io_iterate). A
	 * wake-all made each small-file LOOKUP and READ wake both threads of a
	 * 2-CPU node, one of them for nothing (4.0 -> 2.3 I/O thread switches
	 * per cold small file). */
	__atomic_store_n(&pool->wake_relays, pool->n_threads, __ATOMIC_RELAXED);
	wake_some(pool, (unsigned)(n < pool->n_threads ? n : pool->n_threads), NULL);
}

void sfs_origin_submit(sfs_origin *pool, struct sfs_origin_req *req)
{
	sfs_origin_submit_batch(pool, &req, 1);
}

size_t sfs_origin_node_count(const sfs_origin *pool) { return pool->n_nodes; }

void sfs_origin_node_stats(const sfs_origin *pool, size_t i, struct sfs_origin_node_stats *out)
{
	const struct sfs_node *n = &pool->nodes[i];
#define LOAD(x) __atomic_load_n(&n->x, __ATOMIC_RELAXED)
	out->addr = n->addr;
	out->state = (enum sfs_origin_node_state)LOAD(state);
	out->conns_up = LOAD(conns_up);
	out->read_bytes = LOAD(read_bytes);
	out->read_requests = LOAD(read_requests);
	out->meta_requests = LOAD(meta_requests);
	out->errors = LOAD(errors);
	out->reissued = LOAD(reissued);
	out->hedged = LOAD(hedged);
	out->hedge_wins = LOAD(hedge_wins);
	out->reconnects = LOAD(reconnects);
	out->read_slots = LOAD(read_slots);
	out->read_rate = LOAD(read_rate) * 1000u;
	for (int k = 0; k < SFS_ORIGIN_N_OPS; k++)
		out->meta_by_op[k] = LOAD(meta_by_op[k]);
	out->lat_count = LOAD(lat_count);
	out->lat_sum_ns = LOAD(lat_sum_ns);
	for (int b = 0; b < SFS_ORIGIN_LAT_BUCKETS; b++)
		out->lat_buckets[b] = LOAD(lat_buckets[b]);
#undef LOAD
}

size_t sfs_origin_queue_depth(sfs_origin *pool)
{
	return __atomic_load_n(&pool->q_len, __ATOMIC_RELAXED);
}
