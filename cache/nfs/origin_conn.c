// SPDX-License-Identifier: Apache-2.0
/*
 * origin_conn — the connections of the origin pool and the I/O loop that
 * drives them: connecting with backoff, the mount answer, teardown, the
 * per-tick checks (timeouts through the pool, health probes of suspect
 * nodes), and the poll loop of each I/O thread. The mount of every connection
 * at open and its diagnosis are here too.
 * It owns no protocol (the transport, origin_xport.h) and no queue or node
 * policy (origin.c).
 *
 * Threading: a connection and its attempts belong to one I/O thread (at open,
 * to the opening thread). Node state and counters are atomics; the pool lock
 * is never held here while the transport is called. See origin_int.h.
 */
#include "origin_int.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* Context timeouts last this long: the pool's timers come first. */
static uint64_t connect_timeout_ms(const struct sfs_origin *pool)
{
	return pool->fail_ms > 2000 ? pool->fail_ms : 2000;
}

void origin_conn_connect(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_xport_target t = {.addr = conn->node->addr,
				     .export_path = pool->conf.export_path,
				     .uid = pool->conf.uid,
				     .gid = pool->conf.gid,
				     .timeout_ms = pool->fail_ms + TICK_MS};
	struct sfs_xport_conn *xc;
	int rc = pool->xp->connect(conn, &t, &xc, conn->err, sizeof(conn->err));

	if (!xc) {
		conn->retry_at_ms = now + conn->backoff_ms;
		return;
	}
	conn->xc = xc;
	conn->state = CONN_CONNECTING;
	conn->broken = rc < 0; /* a refused start: torn down at the next safe point */
	conn->connect_deadline_ms = now + connect_timeout_ms(pool);
}

void sfs_conn_mounted(struct sfs_conn *conn, struct sfs_xport_conn *xc, int err, const char *msg)
{
	struct sfs_origin *pool = conn->pool;

	if (conn->xc != xc || conn->state != CONN_CONNECTING)
		return; /* teardown of an abandoned attempt */
	if (err) {
		snprintf(conn->err, sizeof(conn->err), "%s", msg ? msg : strerror(-err));
		conn->broken = true;
		return;
	}
	if (pool->offline_open) {
		/* Started from a saved root: a node exporting another root is
		 * another cluster or export, and must not serve these handles. */
		struct sfs_fh root;
		pool->xp->root(xc, &root);
		if (root.len != pool->root.len || memcmp(root.data, pool->root.data, root.len)) {
			snprintf(conn->err, sizeof(conn->err),
				 "its export root differs from the one this mount started with");
			conn->broken = true;
			return;
		}
	}
	conn->state = CONN_UP;
	conn->backoff_ms = BACKOFF_MIN_MS;
	conn->err[0] = 0;
	uint32_t readmax = pool->xp->max_read(xc);
	uint32_t cur = __atomic_load_n(&pool->max_read, __ATOMIC_RELAXED);
	while (readmax && readmax < cur &&
	       !__atomic_compare_exchange_n(&pool->max_read, &cur, readmax, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED)) {
	}
	if (__atomic_fetch_add(&conn->node->conns_up, 1, __ATOMIC_RELAXED) == 0)
		origin_node_set_state(pool, conn->node, SFS_NODE_UP);
}

void origin_conn_teardown(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_node *node = conn->node;
	struct sfs_xport_conn *xc = conn->xc;
	bool was_up = conn->state == CONN_UP;

	conn->state = CONN_DOWN;
	conn->xc = NULL;
	if (xc)
		pool->xp->destroy(xc); /* CANCEL replies re-queue the attempts */
	assert(conn->n_busy == 0);
	conn->broken = false;
	conn->retry_at_ms = now + conn->backoff_ms;
	conn->backoff_ms =
	    conn->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : conn->backoff_ms * 2;
	if (was_up) {
		origin_count(&node->reconnects, 1);
		origin_count(&node->errors, 1);
		if (sfs_log_ratelimit(&node->warn_rl, 5000))
			sfs_log(SFS_LOG_WARN, "origin", "connection to %s lost: %s", node->addr,
				conn->err[0] ? conn->err : "closed");
		if (__atomic_sub_fetch(&node->conns_up, 1, __ATOMIC_RELAXED) == 0)
			origin_node_set_state(pool, node, SFS_NODE_DOWN);
	}
	origin_wake_threads(pool); /* re-queued work may now go to another thread's conns */
}

/* Mark conn broken with the transport's last error (or dflt). */
static void conn_break(struct sfs_conn *conn, const char *dflt)
{
	const char *e = conn->xc ? conn->pool->xp->error(conn->xc) : NULL;

	if (conn->broken)
		return;
	snprintf(conn->err, sizeof(conn->err), "%s", e ? e : dflt);
	conn->broken = true;
}

/* A suspect node gets no new work; an idle connection probes it. */
static void conn_probe(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;
	struct sfs_attempt *a = &conn->slots[0];

	a->in_use = true;
	a->probe = true;
	a->background = false;
	a->reissued = true;
	a->is_read = false;
	a->req = NULL;
	a->sent_ms = now;
	a->sent_ns = now * 1000000u;
	conn->n_busy++;
	conn->probe_at_ms = now + pool->timeo_ms;
	if (pool->xp->probe(conn->xc, a) != 0) {
		a->in_use = false;
		conn->n_busy--;
		conn->broken = true;
	}
}

/* Per tick: reconnects, connect deadlines, the transport's timers, this
 * connection's attempts (origin_attempts_check), probes. Conn's thread. */
static void conn_tick(struct sfs_conn *conn, uint64_t now)
{
	struct sfs_origin *pool = conn->pool;

	if (conn->state == CONN_DOWN) {
		if (now >= conn->retry_at_ms && !__atomic_load_n(&pool->stopping, __ATOMIC_RELAXED))
			origin_conn_connect(conn, now);
		return;
	}
	if (conn->state == CONN_CONNECTING) {
		if (now >= conn->connect_deadline_ms && !conn->broken) {
			snprintf(conn->err, sizeof(conn->err),
				 "no answer within %llu ms (timeo x retrans)",
				 (unsigned long long)connect_timeout_ms(pool));
			conn->broken = true;
		}
		return;
	}
	if (pool->xp->service(conn->xc, 0) < 0) /* the transport's own timeouts */
		conn_break(conn, "error");
	origin_attempts_check(conn, now);
	if (__atomic_load_n(&conn->node->state, __ATOMIC_RELAXED) == SFS_NODE_SUSPECT &&
	    conn->n_busy == 0 && now >= conn->probe_at_ms && !conn->broken)
		conn_probe(conn, now);
}

/* --- the I/O loop --------------------------------------------------------- */

/* Poll the thread's eventfd and live connections for at most wait_ms;
 * service the ready ones. */
static void io_poll(struct sfs_iothread *t, int wait_ms)
{
	struct sfs_origin *pool = t->pool;
	nfds_t n = 0;

	if (t->efd >= 0)
		t->pfds[n++] = (struct pollfd){.fd = t->efd, .events = POLLIN};
	for (size_t i = 0; i < t->n_conns; i++) {
		struct sfs_conn *c = t->conns[i];
		if (!c->xc || c->broken || c->state == CONN_DOWN)
			continue;
		t->pfds[n] =
		    (struct pollfd){.fd = pool->xp->fd(c->xc), .events = pool->xp->events(c->xc)};
		t->pfd_conn[n++] = c;
	}
	__atomic_store_n(&t->sleeping, true, __ATOMIC_SEQ_CST);
	/* Re-check for work after announcing sleep, so no wake-up is lost: a
	 * push since this thread last pulled (q_push bumps q_gen, then the
	 * pusher wakes sleeping threads; sequentially consistent on both sides,
	 * so one of the two sees the other). Requests queued before then are
	 * ones its connections could not take: sleeping on them until a reply,
	 * a wake-up or the tick, not polling without a wait, is what keeps a
	 * thread from spinning while a stalled or slow node refuses work and
	 * the others are full. */
	if (__atomic_load_n(&pool->q_len, __ATOMIC_RELAXED) &&
	    __atomic_load_n(&pool->q_gen, __ATOMIC_SEQ_CST) != t->q_gen_seen && wait_ms > 0)
		wait_ms = 0;
	int rc = poll(t->pfds, n, wait_ms);
	__atomic_store_n(&t->sleeping, false, __ATOMIC_RELAXED);
	for (nfds_t i = 0; rc > 0 && i < n; i++) {
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
		if (c->broken || !c->xc)
			continue;
		if (pool->xp->service(c->xc, t->pfds[i].revents) < 0)
			conn_break(c, "connection failed");
	}
}

/* Give queued work to this thread's connections, breadth first from a
 * rotating start: one request per connection per pass, so a shallow queue is
 * spread over every node instead of filling the first connection's slots.
 * Work it could not place (its connections full, or on nodes that are down
 * or to be avoided) goes to a sleeping thread, at most n_threads times per
 * submit, so that threads that cannot place it do not wake each other in a
 * loop. */
static void io_pull(struct sfs_iothread *t)
{
	struct sfs_origin *pool = t->pool;

	t->q_gen_seen = __atomic_load_n(&pool->q_gen, __ATOMIC_SEQ_CST);

	for (bool more = true; more && __atomic_load_n(&pool->q_len, __ATOMIC_RELAXED);) {
		more = false;
		for (size_t k = 0; k < t->n_conns; k++) {
			struct sfs_conn *c = t->conns[(t->pull_start + k) % t->n_conns];
			if (origin_pull_one(c))
				more = true;
		}
		t->pull_start++;
	}
	if (__atomic_load_n(&pool->q_len, __ATOMIC_RELAXED)) {
		unsigned r = __atomic_load_n(&pool->wake_relays, __ATOMIC_RELAXED);
		while (r && !__atomic_compare_exchange_n(&pool->wake_relays, &r, r - 1, false,
							 __ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		if (r)
			origin_wake_some(pool, 1, t);
	}
}

/* One iteration over a set of connections: poll, service, tick, tear down
 * the broken, pull. Returns after at most timeout_ms. */
static void io_iterate(struct sfs_iothread *t, uint64_t *next_tick, int timeout_ms)
{
	uint64_t now = sfs_now_ms();
	int wait = *next_tick > now ? (int)(*next_tick - now) : 0;

	io_poll(t, wait > timeout_ms ? timeout_ms : wait);
	now = sfs_now_ms();
	__atomic_store_n(&t->loop_ms, now, __ATOMIC_RELAXED); /* sfs_origin_stuck_ms */
	if (now >= *next_tick) {
		*next_tick = now + TICK_MS;
		for (size_t i = 0; i < t->n_conns; i++)
			conn_tick(t->conns[i], now);
		if (t->index == 0)
			origin_pool_tick(t->pool, now);
	}
	for (size_t i = 0; i < t->n_conns; i++)
		if (t->conns[i]->broken)
			origin_conn_teardown(t->conns[i], now);
	io_pull(t);
}

void *origin_io_thread_main(void *arg)
{
	struct sfs_iothread *t = arg;
	pthread_setname_np(pthread_self(), "sfs-io"); /* top -H, perf --sort comm */
	uint64_t next_tick = sfs_now_ms() + TICK_MS;

	__atomic_store_n(&t->loop_ms, sfs_now_ms(), __ATOMIC_RELAXED);
	while (!__atomic_load_n(&t->pool->stopping, __ATOMIC_ACQUIRE))
		io_iterate(t, &next_tick, TICK_MS);
	return NULL;
}

int origin_iothread_init(struct sfs_origin *pool, struct sfs_iothread *t, unsigned index,
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

void origin_iothread_free(struct sfs_iothread *t)
{
	if (t->efd >= 0)
		close(t->efd);
	free(t->conns);
	free(t->pfds);
	free(t->pfd_conn);
}

/* --- mounting at open, and its diagnosis ---------------------------------- */

/* Drive every connection's first connect to an answer, from this thread. */
static void conns_connect_once(struct sfs_origin *pool, struct sfs_iothread *boot)
{
	uint64_t now = sfs_now_ms(), next_tick = now + TICK_MS;

	for (size_t i = 0; i < pool->n_conns; i++) {
		boot->conns[boot->n_conns++] = &pool->conns[i];
		origin_conn_connect(&pool->conns[i], now);
	}
	for (;;) {
		bool pending = false;
		for (size_t i = 0; i < pool->n_conns; i++)
			if (pool->conns[i].state == CONN_CONNECTING && !pool->conns[i].broken)
				pending = true;
		if (!pending)
			break;
		io_iterate(boot, &next_tick, TICK_MS);
		/* io_iterate tears broken conns down and schedules a retry; at
		 * open time one failed try per connection is the answer. */
		for (size_t i = 0; i < pool->n_conns; i++)
			pool->conns[i].retry_at_ms = UINT64_MAX;
	}
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_conn *c = &pool->conns[i];
		if (c->broken)
			origin_conn_teardown(c, sfs_now_ms());
		c->retry_at_ms = sfs_now_ms() + c->backoff_ms;
	}
}

/* No connection mounted: say why (a reason from the server, such as a
 * missing export, before a transport error from an unreachable address), or
 * start offline. Returns 0 (offline) or -errno. */
static int conns_judge_none_up(struct sfs_origin *pool, struct sfs_conn *first_err, char *err_msg,
			       size_t err_len)
{
	const struct sfs_xport_ops *xp = pool->xp;
	int err;

	for (size_t i = 0; i < pool->n_conns; i++)
		if (xp->classify(pool->conns[i].err) != -EHOSTUNREACH) {
			first_err = &pool->conns[i];
			break;
		}
	err = xp->classify(first_err->err);
	if (err == -EHOSTUNREACH && pool->conf.offline_root) {
		/* No node: the caller serves what it saved and we
		 * connect when the nodes answer. */
		pool->root = *pool->conf.offline_root;
		pool->offline_open = true;
		sfs_log(SFS_LOG_WARN, "origin",
			"no node answers (e.g. %s: %s); starting without one, will retry",
			first_err->node->addr, first_err->err);
		return 0;
	}
	if (pool->n_nodes > 1 && err == -EHOSTUNREACH)
		snprintf(err_msg, err_len, "no node could mount %s (e.g. %s: %s)",
			 pool->conf.export_path, first_err->node->addr, first_err->err);
	else
		snprintf(err_msg, err_len, "cannot mount %s:%s: %s", first_err->node->addr,
			 pool->conf.export_path, first_err->err);
	return err;
}

int origin_conns_mount_all(struct sfs_origin *pool, char *err_msg, size_t err_len)
{
	struct sfs_iothread boot = {0};
	struct sfs_conn *first_up = NULL, *first_err = NULL;
	int err = origin_iothread_init(pool, &boot, 0, pool->n_conns, false);

	if (err)
		goto out;
	conns_connect_once(pool, &boot);
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_conn *c = &pool->conns[i];
		if (c->state != CONN_UP)
			pool->xp->explain(c->err, sizeof(c->err));
		if (c->state == CONN_UP && !first_up)
			first_up = c;
		if (c->state != CONN_UP && !first_err)
			first_err = c;
	}
	if (!first_up) {
		err = conns_judge_none_up(pool, first_err, err_msg, err_len);
		goto out;
	}
	pool->xp->root(first_up->xc, &pool->root);
	for (size_t i = 0; i < pool->n_nodes; i++) {
		if (__atomic_load_n(&pool->nodes[i].conns_up, __ATOMIC_RELAXED))
			continue;
		for (size_t k = 0; k < pool->n_conns; k++)
			if (pool->conns[k].node == &pool->nodes[i]) {
				sfs_log(SFS_LOG_WARN, "origin",
					"node %s is down at mount time (%s); will retry",
					pool->nodes[i].addr, pool->conns[k].err);
				break;
			}
	}
out:
	origin_iothread_free(&boot);
	return err;
}

void origin_conns_destroy(struct sfs_origin *pool)
{
	for (size_t i = 0; i < pool->n_conns; i++) {
		struct sfs_conn *c = &pool->conns[i];
		if (c->xc) {
			struct sfs_xport_conn *xc = c->xc;
			c->xc = NULL;
			c->state = CONN_DOWN;
			pool->xp->destroy(xc);
		}
	}
}
