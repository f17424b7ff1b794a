/* SPDX-License-Identifier: Apache-2.0 */
/*
 * origin_int — the origin pool's private header, shared by origin.c (the
 * pool: queue, node selection, hedging, slow-node slots, re-issue),
 * origin_conn.c (connections and the I/O loop) and nothing outside cache/.
 * Transports see only origin_xport.h. What the pool owns and does not:
 * origin.h.
 *
 * Data structures:
 *
 *   sfs_origin ──lock──> queue: req <-> req <-> req     (FIFO; re-issues go to the head)
 *               └─lock──> bg queue: req <-> req          (background, origin.h)
 *     │
 *     ├─ xp                  the transport's operations (origin_xport.h)
 *     ├─ nodes[n_nodes]      one per address: health state + atomic counters
 *     ├─ conns[n_nodes * nconnect]
 *     │     ├─ xc            the transport's connection
 *     │     └─ slots[SFS_ORIGIN_CONN_DEPTH]: one sfs_attempt per call in flight
 *     └─ threads[n_threads]  each owns conns i where i % n_threads == thread index
 *
 * A request may have several attempts at once (the first one hung or was
 * slow, and was re-issued or hedged elsewhere). Its attempts are chained
 * from req->attempts through attempt->req_next. The first reply claims the
 * request (req->completed = true) and detaches every other attempt
 * (attempt->req = NULL), so a late reply never touches a request its owner
 * may already have freed. For the same reason an attempt's arguments are
 * copied into attempt->args under the lock when it is pulled: nothing reads
 * the request after the lock is dropped unless it holds the claim.
 *
 * Locking: pool->lock protects the queue, every req's private fields, and
 * every attempt's req/req_next. It is a leaf lock: nothing is called out
 * (the transport, completion callbacks, logging) while it is held.
 * Everything else in a conn and its attempts is owned by the conn's thread.
 * Node state and counters are atomics.
 */
#ifndef SFS_ORIGIN_INT_H
#define SFS_ORIGIN_INT_H

#include "../common/log.h"
#include "origin.h"
#include "origin_xport.h"

#include <poll.h>
#include <pthread.h>

/* The tick checks timeouts and hedges: a hedge fires within one tick of
 * its deadline. */
#define TICK_MS 20
/* Hedging: a READ that has waited HEDGE_FACTOR x the pool's recent READ
 * latency (and at least HEDGE_MIN_MS) on a node that is still UP is sent
 * again to another node; the first reply wins (a GC pause, a drive rebuild
 * or a congested port costs only what it delays, not timeo). Hedges are
 * paid for by READ replies: each earns 1/HEDGE_EARN of a hedge, at most
 * HEDGE_BURST saved, so hedges stay below 1/HEDGE_EARN of the READs. A
 * node that answers nothing for that delay has stalled (last_heard_ms):
 * every READ on it is hedged once a tick old, not each after its own delay
 * (those sent just before the stall would wait it out in turn, the reader
 * behind them in order). */
#define HEDGE_FACTOR 4
#define HEDGE_MIN_MS 40
#define HEDGE_EARN   16
#define HEDGE_BURST  32
/* Background rate (origin.h): bytes saved up while idle, at most this long's
 * worth, so a warm-up that pauses does not burst far above its rate. */
#define BG_BURST_MS 100
/* A node whose READ rate stays below SLOW_RATIO of the nodes' median gets
 * READ slots in proportion to its rate (at least one) of what the other
 * nodes have in flight: its READs then take about as long as theirs (a READ
 * takes in-flight / rate), instead of a full share that the reader, in
 * order, waits for. Proportional to the full depth, the slots did not bind
 * where the readahead window keeps fewer READs in flight per node than the
 * depth (many nodes). */
#define SLOW_RATIO     0.75
#define SLOW_TICKS     25 /* 0.5 s */
#define BACKOFF_MIN_MS 200
#define BACKOFF_MAX_MS 5000

/* One call in flight on one connection. */
struct sfs_attempt {
	struct sfs_conn *conn;	      /* set at init */
	struct sfs_origin_req *req;   /* protected by pool->lock; NULL: detached or probe */
	struct sfs_attempt *req_next; /* protected by pool->lock: next attempt of req */
	struct sfs_xport_args args;   /* owner thread: copied from req under pool->lock */
	uint64_t sent_ms;	      /* owner thread: for timeouts */
	uint64_t sent_ns;	      /* owner thread: for the latency histogram */
	bool in_use, probe, reissued; /* owner thread */
	bool is_read, hedged;	      /* owner thread */
	bool background;	      /* set under pool->lock at pull (cleared for a probe):
					 counted in bg_inflight until the reply */
	unsigned node_reads;	      /* owner thread: READs in flight on the node at send */
};

enum conn_state { CONN_DOWN, CONN_CONNECTING, CONN_UP };

struct sfs_conn {
	struct sfs_origin *pool; /* set at init, then read-only */
	struct sfs_node *node;	 /* set at init, then read-only */
	/* everything below is owned by the connection's thread */
	struct sfs_xport_conn *xc; /* NULL: no transport connection */
	enum conn_state state;
	bool broken; /* fail at the next safe point (not inside the transport) */
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
	uint64_t last_heard_ms; /* atomic: last reply or UP (a stall, see HEDGE_FACTOR) */
	unsigned read_slots;
	unsigned slow_ticks; /* the tick's thread only: ticks in a row below SLOW_RATIO */
};

struct sfs_iothread {
	struct sfs_origin *pool;
	pthread_t tid;
	int efd;	     /* eventfd: new work or stop */
	bool sleeping;	     /* atomic: in poll(); submitters wake it */
	unsigned q_gen_seen; /* pool->q_gen when this thread last pulled */
	unsigned index;
	uint64_t loop_ms;	 /* atomic: when this thread last went round its loop */
	struct sfs_conn **conns; /* owned conns, set at start */
	size_t pull_start;	 /* rotates the first connection offered work */
	size_t n_conns;
	struct pollfd *pfds;
	struct sfs_conn **pfd_conn;
};

struct sfs_origin {
	struct sfs_origin_conf conf;	/* copied at open; addrs/export owned */
	const struct sfs_xport_ops *xp; /* set at open, then read-only */
	uint64_t timeo_ms, fail_ms;	/* timeo, and timeo * retrans */
	uint64_t read_lat_ewma_us;	/* atomic: recent READ latency (1/16 weight) */
	unsigned hedge_credit;		/* atomic: in 1/HEDGE_EARN hedges */
	unsigned fast_inflight_x256;	/* the tick's thread only: READs in flight on a node
					   that is not slow, moving mean, x256 */
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
	/* Bumped by every push, under lock (atomic, read without it): a thread
	 * about to sleep with requests queued polls without waiting only if one
	 * was pushed since it last pulled. Requests it could not place (its
	 * connections full, a slow or stalled node) wait for a reply, a wake-up
	 * or the next tick instead of spinning in poll(0). */
	unsigned q_gen;

	/* Background requests (origin.h): their own FIFO, linked through the
	 * same q_next/q_prev (a request is in one queue at most; which one is
	 * req->background, changed only under lock by promotion). */
	struct sfs_origin_req *bg_head, *bg_tail; /* protected by lock */
	size_t bg_len;				  /* protected by lock */
	unsigned bg_slots;			  /* set at open */
	unsigned bg_inflight;			  /* atomic; raised under lock at pull */
	/* Rate: READ bytes background requests may still send; refilled per
	 * tick, at most BG_BURST_MS worth; a READ goes while it is positive
	 * and takes its count (it may go below zero: the debt is repaid). */
	int64_t bg_tokens;	     /* protected by lock */
	uint64_t bg_refill_ms;	     /* the tick's thread only */
	uint64_t bg_read_bytes;	     /* atomic */
	uint64_t bg_read_requests;   /* atomic */
	uint64_t bg_promoted;	     /* atomic */
	uint64_t bg_rate_limited_ms; /* atomic: the tick's time with work waiting for the rate */
};

static inline void origin_count(uint64_t *ctr, uint64_t n)
{
	__atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* --- origin.c: the pool; called by the connection loop ------------------- */

/* Move node to state (atomic), keep nodes_up, log the change. Any thread,
 * no lock held. */
void origin_node_set_state(struct sfs_origin *pool, struct sfs_node *node, int state);
/* Give one queued request to conn if it has a free slot and the queue one it
 * may take; send it. Conn's thread, no lock held. Returns true if it sent
 * one (and may take more). */
bool origin_pull_one(struct sfs_conn *conn);
/* Per tick, for each in-flight attempt of conn: hedge a slow READ, re-issue
 * a request older than timeo (the node becomes SUSPECT), break the
 * connection after timeo x retrans. Conn's thread, no lock held. */
void origin_attempts_check(struct sfs_conn *conn, uint64_t now);
/* Per tick, on one thread: fail expired requests (soft), set read slots. */
void origin_pool_tick(struct sfs_origin *pool, uint64_t now);
/* Wake up to `most` sleeping I/O threads other than self (NULL: the caller
 * is none). Returns how many were woken. Any thread, no lock held. */
unsigned origin_wake_some(struct sfs_origin *pool, unsigned most, const struct sfs_iothread *self);
void origin_wake_threads(struct sfs_origin *pool);

/* --- origin_conn.c: connections and the I/O loop; called by the pool ----- */

/* Start connecting conn (state CONNECTING), or schedule a retry. */
void origin_conn_connect(struct sfs_conn *conn, uint64_t now);
/* Tear a connection down (never from inside the transport): in-flight
 * attempts are re-queued by their CANCEL replies; a reconnect is scheduled. */
void origin_conn_teardown(struct sfs_conn *conn, uint64_t now);
/* Connect every connection concurrently from the calling thread and judge:
 * 0 with pool->root set (or pool->offline_open), or -errno with a one-line
 * reason in err_msg. Connections that failed retry later with backoff. */
int origin_conns_mount_all(struct sfs_origin *pool, char *err_msg, size_t err_len);
/* Destroy every transport connection (threads are gone). */
void origin_conns_destroy(struct sfs_origin *pool);
int origin_iothread_init(struct sfs_origin *pool, struct sfs_iothread *t, unsigned index,
			 size_t max_conns, bool with_eventfd);
void origin_iothread_free(struct sfs_iothread *t);
/* An I/O thread: io_iterate until pool->stopping. */
void *origin_io_thread_main(void *arg);

#endif
