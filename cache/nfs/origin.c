// SPDX-License-Identifier: Apache-2.0
/*
 * origin — the pool: the request queue, which connection takes which request
 * (work pulling, nodes to avoid, slow nodes' READ slots), re-issue after
 * timeo, hedging of slow READs, soft-mount deadlines, node health and
 * counters, and the public API of origin.h. See origin_int.h for the data
 * structures and the lock rules.
 * It owns no protocol (origin_xport.h; NFSv3 is origin_nfs3.c) and no
 * socket or poll loop (origin_conn.c).
 *
 * Threading: submit from any thread; everything that touches a connection
 * or its attempts runs on the connection's I/O thread. pool->lock is a leaf:
 * taken around queue and request-field changes only, never across a call
 * into the transport or a completion callback.
 */
#include "origin_int.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const double sfs_origin_lat_bounds_s[SFS_ORIGIN_LAT_BUCKETS] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0};

const char *const sfs_origin_op_names[SFS_ORIGIN_N_OPS] = {
    [SFS_ORIGIN_READ] = "read",		[SFS_ORIGIN_GETATTR] = "getattr",
    [SFS_ORIGIN_LOOKUP] = "lookup",	[SFS_ORIGIN_READDIRPLUS] = "readdir",
    [SFS_ORIGIN_READLINK] = "readlink", [SFS_ORIGIN_FSSTAT] = "fsstat",
};

/* --- nodes ---------------------------------------------------------------- */

void origin_node_set_state(struct sfs_origin *pool, struct sfs_node *node, int state)
{
	int old = __atomic_exchange_n(&node->state, state, __ATOMIC_RELAXED);

	if (old == state)
		return;
	if (old == SFS_NODE_UP)
		__atomic_fetch_sub(&pool->nodes_up, 1, __ATOMIC_RELAXED);
	if (state == SFS_NODE_UP) {
		__atomic_fetch_add(&pool->nodes_up, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&node->last_heard_ms, sfs_now_ms(), __ATOMIC_RELAXED);
	}
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

static void node_record_latency(struct sfs_node *node, uint64_t ns)
{
	double s = (double)ns / 1e9;

	origin_count(&node->lat_count, 1);
	origin_count(&node->lat_sum_ns, ns);
	for (int i = 0; i < SFS_ORIGIN_LAT_BUCKETS; i++)
		if (s <= sfs_origin_lat_bounds_s[i])
			origin_count(&node->lat_buckets[i], 1);
}

/* --- the queue (caller holds pool->lock) ---------------------------------- */

/* The queue req belongs in (or is in): its class's. */
static struct sfs_origin_req **q_head_of(struct sfs_origin *pool, const struct sfs_origin_req *req,
					 struct sfs_origin_req ***tail)
{
	*tail = req->background ? &pool->bg_tail : &pool->q_tail;
	return req->background ? &pool->bg_head : &pool->q_head;
}

static void q_unlink(struct sfs_origin *pool, struct sfs_origin_req *req)
{
	struct sfs_origin_req **tail, **head = q_head_of(pool, req, &tail);

	if (!req->queued)
		return;
	if (req->q_prev)
		req->q_prev->q_next = req->q_next;
	else
		*head = req->q_next;
	if (req->q_next)
		req->q_next->q_prev = req->q_prev;
	else
		*tail = req->q_prev;
	req->q_next = req->q_prev = NULL;
	req->queued = false;
	if (req->background)
		pool->bg_len--;
	__atomic_store_n(&pool->q_len, pool->q_len - 1, __ATOMIC_RELAXED);
}

static void q_push(struct sfs_origin *pool, struct sfs_origin_req *req, bool at_head)
{
	struct sfs_origin_req **tail, **head = q_head_of(pool, req, &tail);

	assert(!req->queued && !req->completed);
	req->queued = true;
	if (at_head) {
		req->q_prev = NULL;
		req->q_next = *head;
		if (*head)
			(*head)->q_prev = req;
		else
			*tail = req;
		*head = req;
	} else {
		req->q_next = NULL;
		req->q_prev = *tail;
		if (*tail)
			(*tail)->q_next = req;
		else
			*head = req;
		*tail = req;
	}
	if (req->background)
		pool->bg_len++;
	__atomic_store_n(&pool->q_len, pool->q_len + 1, __ATOMIC_RELAXED);
	__atomic_fetch_add(&pool->q_gen, 1, __ATOMIC_SEQ_CST); /* see io_poll */
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

/* Detach a from its request, if any. Caller holds pool->lock. */
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

/* Complete a claimed request: call the owner's callback. No lock held. */
static void req_finish(struct sfs_origin_req *req, int result)
{
	req->result = result;
	req->done(req);
}

/* Put a request back at the head of the queue after a failed attempt, unless
 * it is completed or queued already. Caller holds pool->lock. Returns true
 * if it was put back. */
static bool req_requeue(struct sfs_origin *pool, struct sfs_origin_req *req, int avoid_node)
{
	if (req->completed || req->queued)
		return false;
	req->avoid_node = (int16_t)avoid_node;
	q_push(pool, req, true);
	return true;
}

unsigned origin_wake_some(struct sfs_origin *pool, unsigned most, const struct sfs_iothread *self)
{
	uint64_t one = 1;
	unsigned woken = 0;

	if (!pool->started || !most)
		return 0;
	unsigned start = __atomic_fetch_add(&pool->wake_next, 1, __ATOMIC_RELAXED);
	for (unsigned k = 0; k < pool->n_threads && woken < most; k++) {
		struct sfs_iothread *t = &pool->threads[(start + k) % pool->n_threads];
		if (t == self || !__atomic_load_n(&t->sleeping, __ATOMIC_SEQ_CST))
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
void origin_wake_threads(struct sfs_origin *pool) { origin_wake_some(pool, pool->n_threads, NULL); }

/* --- sending -------------------------------------------------------------- */

/* Send a's call (a->args) on conn. Conn's thread, no lock held; reads
 * nothing of the request, which may complete elsewhere meanwhile. Returns 0,
 * or -1 if the transport refused (the request, if still this attempt's, has
 * been re-queued, and the connection is broken). */
static int conn_send(struct sfs_conn *conn, struct sfs_attempt *a)
{
	struct sfs_origin *pool = conn->pool;

	a->in_use = true;
	a->probe = false;
	a->reissued = false;
	a->hedged = false;
	a->is_read = a->args.op == SFS_ORIGIN_READ;
	if (a->is_read)
		a->node_reads =
		    __atomic_add_fetch(&conn->node->reads_inflight, 1, __ATOMIC_RELAXED);
	a->sent_ns = sfs_now_ns();
	a->sent_ms = a->sent_ns / 1000000u;
	/* An idle node has been quiet for lack of work, not stalled: its
	 * silence counts from its first READ. */
	if (a->is_read && a->node_reads == 1)
		__atomic_store_n(&conn->node->last_heard_ms, a->sent_ms, __ATOMIC_RELAXED);
	conn->n_busy++;
	if (pool->xp->send(conn->xc, &a->args, a) == 0)
		return 0;
	/* Not sent: give the slot back, requeue, and drop the connection. */
	a->in_use = false;
	conn->n_busy--;
	if (a->is_read)
		__atomic_sub_fetch(&conn->node->reads_inflight, 1, __ATOMIC_RELAXED);
	pthread_mutex_lock(&pool->lock);
	struct sfs_origin_req *req = a->req; /* NULL: completed by another attempt */
	attempt_unlink(a);
	if (req)
		req_requeue(pool, req, -1);
	pthread_mutex_unlock(&pool->lock);
	const char *e = pool->xp->error(conn->xc);
	snprintf(conn->err, sizeof(conn->err), "send failed: %s", e ? e : "?");
	conn->broken = true;
	return -1;
}

/* How long a READ waits on an UP node before it is hedged. */
static uint64_t hedge_after_ms(const struct sfs_origin *pool)
{
	uint64_t ms =
	    HEDGE_FACTOR * __atomic_load_n(&pool->read_lat_ewma_us, __ATOMIC_RELAXED) / 1000;

	return ms > HEDGE_MIN_MS ? ms : HEDGE_MIN_MS;
}

/* Whether the node has answered nothing for the hedge delay while it had
 * READs in flight (its silence counts from its first READ after idling, see
 * conn_send): a GC pause, a drive rebuild, a congested port. Its READs are
 * then hedged together (origin_attempts_check), and it takes no new request
 * while another node is up (origin_pull_one). */
static bool node_stalled(const struct sfs_origin *pool, const struct sfs_node *node, uint64_t now)
{
	uint64_t heard = __atomic_load_n(&node->last_heard_ms, __ATOMIC_RELAXED);

	return now > heard && now - heard >= hedge_after_ms(pool);
}

/* Whether a node other than this one is up. */
static bool others_up(const struct sfs_origin *pool, const struct sfs_node *node)
{
	return __atomic_load_n(&pool->nodes_up, __ATOMIC_RELAXED) >
	       (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP ? 1u : 0u);
}

/* The first request of the queue from head this connection may take, among
 * its first 64. Caller holds pool->lock. */
static struct sfs_origin_req *q_scan(struct sfs_origin_req *head, const struct sfs_node *node,
				     bool others, bool reads_ok)
{
	int scanned = 0;

	for (struct sfs_origin_req *r = head; r && scanned < 64; r = r->q_next, scanned++)
		if ((r->avoid_node != node->index || !others) &&
		    (reads_ok || r->op != SFS_ORIGIN_READ))
			return r;
	return NULL;
}

/* Whether a background request may be sent now: a slot of its share and,
 * under a rate, bytes left. Caller holds pool->lock. */
static bool bg_may_send(struct sfs_origin *pool)
{
	if (__atomic_load_n(&pool->bg_inflight, __ATOMIC_RELAXED) >= pool->bg_slots)
		return false;
	return !pool->conf.background_rate || pool->bg_tokens > 0;
}

/* Pick the next request this connection may take: an ordinary one first,
 * else a background one within its share (origin.h). Caller holds
 * pool->lock. A request that timed out on this node goes elsewhere while
 * any other node is up; a slow node with its READ slots full takes no READ
 * (SLOW_RATIO). */
static struct sfs_origin_req *q_pick(struct sfs_origin *pool, struct sfs_node *node)
{
	bool others = others_up(pool, node);
	bool reads_ok = __atomic_load_n(&node->reads_inflight, __ATOMIC_RELAXED) <
			__atomic_load_n(&node->read_slots, __ATOMIC_RELAXED);
	struct sfs_origin_req *r = q_scan(pool->q_head, node, others, reads_ok);

	if (!r && pool->bg_head && bg_may_send(pool))
		r = q_scan(pool->bg_head, node, others, reads_ok);
	return r;
}

/* The call's arguments, from the request. Caller holds pool->lock. A READ
 * continues where the last short reply ended. Returns false for a request
 * no transport can carry (a LOOKUP name longer than FUSE sends). */
static bool args_from_req(struct sfs_xport_args *args, const struct sfs_origin_req *req)
{
	size_t len;

	args->op = req->op;
	args->fh = req->fh;
	switch (req->op) {
	case SFS_ORIGIN_READ:
		args->offset = req->offset + req->done_bytes;
		args->count = req->count - req->done_bytes;
		break;
	case SFS_ORIGIN_LOOKUP:
		len = strlen(req->name);
		if (len > SFS_XPORT_NAME_MAX)
			return false;
		memcpy(args->name, req->name, len + 1);
		break;
	case SFS_ORIGIN_READDIRPLUS:
		args->cookie = req->cookie;
		memcpy(args->dir_verf, req->dir_verf, sizeof(args->dir_verf));
		args->dir_max_bytes = req->dir_max_bytes;
		break;
	default:
		break;
	}
	return true;
}

bool origin_pull_one(struct sfs_conn *conn)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_attempt *a = NULL;

	if (conn->state != CONN_UP || conn->broken || conn->n_busy >= SFS_ORIGIN_CONN_DEPTH ||
	    __atomic_load_n(&conn->node->state, __ATOMIC_RELAXED) != SFS_NODE_UP)
		return false;
	/* A stalled node takes nothing while another is up: a request sent to
	 * it would wait out the stall, or the hedge delay and then a hedge, a
	 * round after the READs it already held were hedged. Atomics only:
	 * checked before the lock. */
	if (__atomic_load_n(&conn->node->reads_inflight, __ATOMIC_RELAXED) &&
	    others_up(pool, conn->node) && node_stalled(pool, conn->node, sfs_now_ms()))
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
	if (!args_from_req(&a->args, req)) {
		req_claim(pool, req);
		pthread_mutex_unlock(&pool->lock);
		req_finish(req, -ENAMETOOLONG);
		return true;
	}
	q_unlink(pool, req);
	a->req = req;
	a->req_next = req->attempts;
	req->attempts = a;
	a->background = req->background;
	if (a->background) {
		__atomic_fetch_add(&pool->bg_inflight, 1, __ATOMIC_RELAXED);
		if (pool->conf.background_rate && req->op == SFS_ORIGIN_READ)
			pool->bg_tokens -= (int64_t)a->args.count;
	}
	pthread_mutex_unlock(&pool->lock);
	return conn_send(conn, a) == 0;
}

/* --- replies -------------------------------------------------------------- */

/* One READ reply's evidence of the node's rate (1/16 weight). */
static void node_learn_rate(struct sfs_node *node, const struct sfs_attempt *a, uint64_t ns)
{
	uint64_t sample = (uint64_t)a->args.count * a->node_reads * 1000000u / (ns ? ns : 1);
	uint64_t old = __atomic_load_n(&node->read_rate, __ATOMIC_RELAXED);

	__atomic_store_n(&node->read_rate,
			 old ? (uint64_t)((int64_t)old + ((int64_t)sample - (int64_t)old) / 16)
			     : sample,
			 __ATOMIC_RELAXED);
}

/* A READ reply after us_taken: update the recent latency and earn hedge
 * credit. Relaxed and racy on purpose: an estimate, never a correctness
 * input. */
static void hedge_learn(struct sfs_origin *pool, uint64_t us_taken)
{
	uint64_t old = __atomic_load_n(&pool->read_lat_ewma_us, __ATOMIC_RELAXED);
	int64_t step = ((int64_t)us_taken - (int64_t)old) / 16;

	__atomic_store_n(&pool->read_lat_ewma_us, old ? (uint64_t)((int64_t)old + step) : us_taken,
			 __ATOMIC_RELAXED);
	if (__atomic_load_n(&pool->hedge_credit, __ATOMIC_RELAXED) < HEDGE_EARN * HEDGE_BURST)
		__atomic_fetch_add(&pool->hedge_credit, 1, __ATOMIC_RELAXED);
}

/* A failed call: re-issue its request away from this node, and break the
 * connection (a cancel is a teardown already under way). Conn's thread. */
static void reply_failed(struct sfs_attempt *a, enum sfs_xport_status st, const char *msg)
{
	struct sfs_conn *conn = a->conn;
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;

	if (st != SFS_XPORT_CANCEL)
		origin_count(&node->errors, 1);
	pthread_mutex_lock(&pool->lock);
	struct sfs_origin_req *req = a->req;
	attempt_unlink(a);
	if (req && req_requeue(pool, req, node->index))
		origin_count(&node->reissued, 1);
	pthread_mutex_unlock(&pool->lock);
	if (st != SFS_XPORT_CANCEL && !conn->broken) {
		snprintf(conn->err, sizeof(conn->err), "%s",
			 st == SFS_XPORT_TIMEOUT ? "RPC timed out" : (msg ? msg : "RPC error"));
		conn->broken = true;
	}
}

/* The request a won: decode, count, then complete it or queue it again
 * (JUKEBOX, a short READ). Conn's thread, no lock held; the claim makes it
 * the request's only owner. */
static void reply_complete(struct sfs_attempt *a, struct sfs_origin_req *req, void *reply)
{
	struct sfs_conn *conn = a->conn;
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	bool is_read = a->args.op == SFS_ORIGIN_READ;
	uint32_t before = is_read ? (uint32_t)(a->args.offset - req->offset) : 0;
	if (is_read)
		req->data = req->buf; /* unless the transport lends its own */
	int result = pool->xp->decode(&a->args, req, reply);

	if (!is_read) {
		origin_count(&node->meta_requests, 1);
		origin_count(&node->meta_by_op[a->args.op], 1);
	} else if (result >= 0 || result == SFS_XPORT_CONTINUES) {
		origin_count(&node->read_bytes, req->done_bytes - before);
		origin_count(&node->read_requests, 1);
		if (a->background) {
			origin_count(&pool->bg_read_bytes, req->done_bytes - before);
			origin_count(&pool->bg_read_requests, 1);
		}
	}
	if (result == -EAGAIN || result == SFS_XPORT_CONTINUES) {
		/* Claimed requests have no attempts left: this is the only owner. */
		pthread_mutex_lock(&pool->lock);
		req->completed = false;
		req_requeue(pool, req, -1);
		pthread_mutex_unlock(&pool->lock);
		return;
	}
	if (result < 0 && result != -ENOENT)
		origin_count(&node->errors, 1);
	req_finish(req, result);
}

void sfs_origin_reply(struct sfs_attempt *a, enum sfs_xport_status st, const char *msg, void *reply)
{
	struct sfs_conn *conn = a->conn;
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	bool probe = a->probe;

	a->in_use = false;
	conn->n_busy--;
	if (a->background) /* the flag stays for reply_complete's counters */
		__atomic_fetch_sub(&pool->bg_inflight, 1, __ATOMIC_RELAXED);
	if (a->is_read && !probe)
		__atomic_sub_fetch(&node->reads_inflight, 1, __ATOMIC_RELAXED);
	if (st != SFS_XPORT_OK) {
		reply_failed(a, st, msg);
		return;
	}
	uint64_t now_ns = sfs_now_ns(), ns = now_ns - a->sent_ns;
	__atomic_store_n(&node->last_heard_ms, now_ns / 1000000u, __ATOMIC_RELAXED);
	node_record_latency(node, ns);
	if (a->is_read && !probe) {
		hedge_learn(pool, ns / 1000u);
		node_learn_rate(node, a, ns);
	}
	/* A reply from a suspect node proves it is alive again. */
	if (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_SUSPECT)
		origin_node_set_state(pool, node, SFS_NODE_UP);
	pthread_mutex_lock(&pool->lock);
	struct sfs_origin_req *req = a->req;
	attempt_unlink(a);
	if (probe || !req || !req_claim(pool, req)) {
		pthread_mutex_unlock(&pool->lock);
		return; /* probe, or a late duplicate of a request served elsewhere */
	}
	int hedged_node = req->hedged_node;
	pthread_mutex_unlock(&pool->lock);
	if (hedged_node >= 0 && hedged_node != node->index)
		origin_count(&pool->nodes[hedged_node].hedge_wins, 1);
	reply_complete(a, req, reply);
}

/* --- per tick: slow nodes, hedges, timeouts, deadlines --------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* Whether a node's READ rate r is below SLOW_RATIO of the median (0: no
 * rate yet, never below). */
static bool rate_below(uint64_t r, uint64_t median)
{
	return median && r && (double)r < SLOW_RATIO * (double)median;
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
	/* READs in flight on the UP nodes that are not slow, per node. */
	unsigned busy = 0, fast = 0;
	for (size_t i = 0; i < pool->n_nodes; i++) {
		struct sfs_node *nd = &pool->nodes[i];
		uint64_t r = __atomic_load_n(&nd->read_rate, __ATOMIC_RELAXED);
		if (__atomic_load_n(&nd->state, __ATOMIC_RELAXED) == SFS_NODE_UP &&
		    !rate_below(r, median)) {
			busy += __atomic_load_n(&nd->reads_inflight, __ATOMIC_RELAXED);
			fast++;
		}
	}
	if (fast) { /* moving mean, 1/8 per tick */
		int cur = (int)pool->fast_inflight_x256, now = (int)(busy * 256 / fast);
		pool->fast_inflight_x256 = (unsigned)(cur + (now - cur) / 8);
	}
	for (size_t i = 0; i < pool->n_nodes; i++) {
		struct sfs_node *nd = &pool->nodes[i];
		uint64_t r = __atomic_load_n(&nd->read_rate, __ATOMIC_RELAXED);
		unsigned slots = full;
		bool below = rate_below(r, median);
		nd->slow_ticks = below ? nd->slow_ticks + 1 : 0;
		if (below && nd->slow_ticks >= SLOW_TICKS) {
			double share = (double)r / (double)median;
			slots = (unsigned)((double)pool->fast_inflight_x256 / 256.0 * share + 0.5);
			slots = slots < 1 ? 1 : slots > full ? full : slots;
		}
		__atomic_store_n(&nd->read_slots, slots, __ATOMIC_RELAXED);
	}
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

/* Send a slow READ again, to another node while one is up; this attempt
 * stays in flight and whichever reply comes first completes the request
 * (the other is a late duplicate). The node stays UP: slow is not dead. */
static void attempt_hedge(struct sfs_conn *conn, struct sfs_attempt *a)
{
	struct sfs_origin *pool = conn->pool;
	bool requeued = false;

	a->hedged = true;
	pthread_mutex_lock(&pool->lock);
	if (a->req && req_requeue(pool, a->req, conn->node->index)) {
		a->req->hedged_node = (int16_t)conn->node->index;
		requeued = true;
	}
	pthread_mutex_unlock(&pool->lock);
	if (requeued) {
		origin_count(&conn->node->hedged, 1);
		origin_wake_threads(pool);
	} else {
		__atomic_fetch_add(&pool->hedge_credit, HEDGE_EARN, __ATOMIC_RELAXED); /* unused */
	}
}

/* An attempt older than timeo: the node becomes SUSPECT and the request
 * goes to another node (this attempt stays in flight). */
static void attempt_reissue(struct sfs_conn *conn, struct sfs_attempt *a)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;

	a->reissued = true;
	if (__atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP)
		origin_node_set_state(pool, node, SFS_NODE_SUSPECT);
	pthread_mutex_lock(&pool->lock);
	if (a->req && req_requeue(pool, a->req, node->index))
		origin_count(&node->reissued, 1);
	pthread_mutex_unlock(&pool->lock);
	origin_wake_threads(pool);
}

void origin_attempts_check(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	uint64_t hedge_ms = hedge_after_ms(pool);
	bool stalled = node_stalled(pool, node, now);

	for (unsigned i = 0; i < SFS_ORIGIN_CONN_DEPTH; i++) {
		struct sfs_attempt *a = &conn->slots[i];
		if (!a->in_use)
			continue;
		uint64_t age = now - a->sent_ms;
		bool late = age >= hedge_ms || (stalled && age >= TICK_MS);
		if (a->is_read && !a->hedged && !a->reissued && late && age < pool->timeo_ms &&
		    pool->n_nodes > 1 &&
		    __atomic_load_n(&node->state, __ATOMIC_RELAXED) == SFS_NODE_UP &&
		    hedge_take(pool))
			attempt_hedge(conn, a);
		if (age >= pool->fail_ms) {
			snprintf(conn->err, sizeof(conn->err), "no reply for %llu ms",
				 (unsigned long long)age);
			conn->broken = true; /* a hung node: drop it, reconnect later */
		} else if (age >= pool->timeo_ms && !a->reissued) {
			attempt_reissue(conn, a);
		}
	}
}

/* Fail queued requests whose soft deadline passed. One thread does this. */
static void queue_expire(struct sfs_origin *pool, uint64_t now)
{
	struct sfs_origin_req *expired = NULL;
	uint64_t heard = 0;

	if (pool->conf.hard)
		return;
	/* soft fails a request when no node answers, not when it waited its
	 * turn behind others while the nodes answer: a fleet sharing a capped
	 * cluster queues more than timeo x retrans worth, and counting that
	 * wait failed every client with EIO. So a queued request expires once
	 * its deadline passed and no node has answered for as long. */
	for (size_t i = 0; i < pool->n_nodes; i++) {
		uint64_t h = __atomic_load_n(&pool->nodes[i].last_heard_ms, __ATOMIC_RELAXED);
		heard = h > heard ? h : heard;
	}
	if (now < heard + pool->fail_ms)
		return;
	pthread_mutex_lock(&pool->lock);
	for (int bg = 0; bg < 2; bg++)
		for (struct sfs_origin_req *r = bg ? pool->bg_head : pool->q_head, *next; r;
		     r = next) {
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

/* Refill the background rate's bytes for the time since the last tick, at
 * most BG_BURST_MS worth (and at least one READ's), and wake a thread when
 * background work waits for them. One thread does this. */
static void bg_refill(struct sfs_origin *pool, uint64_t now)
{
	uint64_t rate = pool->conf.background_rate;

	if (!rate)
		return;
	uint64_t ms = pool->bg_refill_ms ? now - pool->bg_refill_ms : 0;
	int64_t cap = (int64_t)(rate * BG_BURST_MS / 1000);
	int64_t one_read = (int64_t)sfs_origin_max_read(pool);
	if (cap < one_read)
		cap = one_read;
	pool->bg_refill_ms = now;
	pthread_mutex_lock(&pool->lock);
	if (pool->bg_len && pool->bg_tokens <= 0)
		origin_count(&pool->bg_rate_limited_ms, ms);
	int64_t t = pool->bg_tokens + (int64_t)(rate * ms / 1000);
	pool->bg_tokens = t > cap ? cap : t;
	bool wake = pool->bg_len && pool->bg_tokens > 0;
	pthread_mutex_unlock(&pool->lock);
	if (wake)
		origin_wake_some(pool, 1, NULL);
}

void origin_pool_tick(struct sfs_origin *pool, uint64_t now)
{
	queue_expire(pool, now);
	nodes_set_read_slots(pool);
	bg_refill(pool, now);
}

/* --- public API ----------------------------------------------------------- */

/* Free what open allocated (conns hold no transport connection). */
static void pool_free(struct sfs_origin *pool)
{
	for (size_t i = 0; pool->nodes && i < pool->n_nodes; i++)
		free(pool->nodes[i].addr);
	free(pool->nodes);
	free(pool->conns);
	free((char *)pool->conf.export_path);
	pthread_mutex_destroy(&pool->lock);
	free(pool);
}

/* Allocate the pool, its nodes and connections from conf. Returns the pool
 * or NULL (out of memory). */
static struct sfs_origin *pool_alloc(const struct sfs_origin_conf *conf,
				     const struct sfs_xport_ops *xp)
{
	struct sfs_origin *pool = calloc(1, sizeof(*pool));

	if (!pool)
		return NULL;
	pthread_mutex_init(&pool->lock, NULL);
	pool->xp = xp;
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
	pool->bg_slots = UINT32_MAX;
	if (conf->background_pct && conf->background_pct < 100) {
		size_t share = pool->n_conns * SFS_ORIGIN_CONN_DEPTH * conf->background_pct / 100;
		pool->bg_slots = share ? (unsigned)share : 1;
	}
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
	return pool;

err_free:
	pool_free(pool);
	return NULL;
}

int sfs_origin_open_xport(const struct sfs_origin_conf *conf, const struct sfs_xport_ops *xp,
			  sfs_origin **out, char *err_msg, size_t err_len)
{
	struct sfs_origin *pool;
	int err;

	if (conf->n_addrs == 0 || conf->nconnect == 0)
		return -EINVAL;
	pool = pool_alloc(conf, xp);
	if (!pool)
		return -ENOMEM;
	/* Mount every connection concurrently from this thread, then judge. */
	err = origin_conns_mount_all(pool, err_msg, err_len);
	if (err)
		goto err_conns;
	*out = pool;
	return 0;

err_conns:
	origin_conns_destroy(pool);
	pool_free(pool);
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

/* Free every thread's state and the array; close then sees no threads. */
static void threads_free(sfs_origin *pool, unsigned n)
{
	for (unsigned k = 0; k < n; k++)
		origin_iothread_free(&pool->threads[k]);
	free(pool->threads);
	pool->threads = NULL;
	pool->n_threads = 0;
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
		err = origin_iothread_init(pool, &pool->threads[i], i, pool->n_conns / n + 1, true);
		if (err) {
			/* Nothing started: free what was set up (efd -1 where none). */
			threads_free(pool, i + 1);
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
		err = -pthread_create(&pool->threads[i].tid, NULL, origin_io_thread_main,
				      &pool->threads[i]);
		if (err) {
			/* Stop and join the threads that started. */
			__atomic_store_n(&pool->stopping, true, __ATOMIC_RELEASE);
			join_threads(pool, i);
			threads_free(pool, n);
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
	origin_wake_threads(pool);
	join_threads(pool, pool->n_threads);
	/* Threads are gone: destroying connections re-queues their attempts. */
	origin_conns_destroy(pool);
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
	threads_free(pool, pool->n_threads);
	pool_free(pool);
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

	if (__atomic_load_n(&pool->stopping, __ATOMIC_ACQUIRE)) {
		for (size_t i = 0; i < n; i++) {
			req_reset(pool, reqs[i], now);
			req_finish(reqs[i], -ESHUTDOWN);
		}
		return;
	}
	/* Reset under the lock: sfs_origin_promote may look at a request
	 * whose owner is submitting it. */
	pthread_mutex_lock(&pool->lock);
	for (size_t i = 0; i < n; i++) {
		req_reset(pool, reqs[i], now);
		q_push(pool, reqs[i], false);
	}
	pthread_mutex_unlock(&pool->lock);
	/* One sleeping thread per request, not all of them: every thread has
	 * connections to every node when nconnect >= threads (the default), and
	 * a woken thread that leaves work queued wakes another (io_iterate). A
	 * wake-all made each small-file LOOKUP and READ wake both threads of a
	 * 2-CPU node, one of them for nothing. */
	__atomic_store_n(&pool->wake_relays, pool->n_threads, __ATOMIC_RELAXED);
	origin_wake_some(pool, (unsigned)(n < pool->n_threads ? n : pool->n_threads), NULL);
}

void sfs_origin_submit(sfs_origin *pool, struct sfs_origin_req *req)
{
	sfs_origin_submit_batch(pool, &req, 1);
}

uint64_t sfs_origin_stuck_ms(const sfs_origin *pool, uint64_t now_ms)
{
	uint64_t worst = 0;

	for (unsigned i = 0; i < pool->n_threads; i++) {
		uint64_t at = __atomic_load_n(&pool->threads[i].loop_ms, __ATOMIC_RELAXED);
		if (at && now_ms > at && now_ms - at > worst)
			worst = now_ms - at;
	}
	return worst;
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

void sfs_origin_promote(sfs_origin *pool, struct sfs_origin_req *req)
{
	bool moved = false;

	pthread_mutex_lock(&pool->lock);
	if (req->background && !req->completed) {
		bool queued = req->queued;
		q_unlink(pool, req);
		req->background = false;
		if (queued)
			q_push(pool, req, false);
		moved = queued;
		origin_count(&pool->bg_promoted, 1);
	}
	pthread_mutex_unlock(&pool->lock);
	if (moved)
		origin_wake_some(pool, 1, NULL);
}

void sfs_origin_demote(sfs_origin *pool, struct sfs_origin_req *req)
{
	pthread_mutex_lock(&pool->lock);
	if (!req->background && !req->completed) {
		bool queued = req->queued;
		q_unlink(pool, req);
		req->background = true;
		if (queued)
			q_push(pool, req, false);
	}
	pthread_mutex_unlock(&pool->lock);
}

void sfs_origin_background_stats(sfs_origin *pool, struct sfs_origin_background_stats *out)
{
	pthread_mutex_lock(&pool->lock);
	out->queued = pool->bg_len;
	pthread_mutex_unlock(&pool->lock);
	out->slots = pool->bg_slots;
	out->inflight = __atomic_load_n(&pool->bg_inflight, __ATOMIC_RELAXED);
	out->rate_limit = pool->conf.background_rate;
	out->read_bytes = __atomic_load_n(&pool->bg_read_bytes, __ATOMIC_RELAXED);
	out->read_requests = __atomic_load_n(&pool->bg_read_requests, __ATOMIC_RELAXED);
	out->promoted = __atomic_load_n(&pool->bg_promoted, __ATOMIC_RELAXED);
	out->rate_limited_ms = __atomic_load_n(&pool->bg_rate_limited_ms, __ATOMIC_RELAXED);
}
