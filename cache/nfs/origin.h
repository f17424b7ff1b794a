/* SPDX-License-Identifier: Apache-2.0 */
/*
 * origin — the pool of NFSv3 connections to every node of the cluster.
 *
 * Owns: one transport connection per connection slot (nconnect per node
 * address), the I/O threads that drive them, the shared request queue, node health
 * (up / suspect / down), re-issue of requests away from failed or hung nodes,
 * reconnection with backoff, and the per-node counters.
 * Does not own: what the bytes mean (prefetch/store), FUSE, caching of
 * attributes (fs/inode).
 *
 * Threading: sfs_origin_submit() and sfs_origin_call() may be called from any
 * thread. Completion callbacks run on an origin I/O thread and must not block
 * (no waiting on other origin requests). Every connection is owned by
 * exactly one I/O thread.
 *
 * Files: origin.c (the pool: queue, node selection, hedging, re-issue),
 * origin_conn.c (connections, the I/O loop), origin_call.c (waiting),
 * origin_nfs3.c (the NFSv3 transport, the only file that includes libnfs)
 * behind origin_xport.h; origin_int.h is the private header.
 *
 * Work pulling: submitted requests wait in one FIFO; each connection with a
 * free slot (SFS_ORIGIN_CONN_DEPTH per connection) pulls the next one. A
 * fast node empties its slots sooner and so carries more of the load.
 *
 * Background requests (req->background: warm-ups, which no reader waits
 * for) wait in a second FIFO, pulled only when the first has nothing a
 * connection may take, by at most background_pct of the pool's connection
 * slots at once and, with background_rate, at most that many READ bytes
 * per second. The daemons of a fleet share one cluster without talking to
 * each other: this is one node's restraint. A reader that comes to wait for
 * a background request promotes it (sfs_origin_promote).
 */
#ifndef SFS_ORIGIN_H
#define SFS_ORIGIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The largest handle a transport gives: NFSv3's (RFC 1813). An NFSv4 transport
 * (128 bytes) raises it, at 64 bytes more per inode. */
#define SFS_FH_MAX	      64
#define SFS_DIR_VERF_BYTES    8 /* a directory listing's verifier, opaque to the caller */
#define SFS_ORIGIN_CONN_DEPTH 4

/* A file handle, opaque to the caller; valid on every node of the cluster. */
struct sfs_fh {
	uint32_t len;
	uint8_t data[SFS_FH_MAX];
};

/* Attributes of a file as the server reported them (fattr3). */
struct sfs_attr {
	uint32_t type; /* S_IFREG, S_IFDIR, S_IFLNK, ... */
	uint32_t mode; /* permission bits only */
	uint32_t nlink, uid, gid;
	uint64_t size, used;
	uint64_t fsid, fileid;
	uint32_t rdev_major, rdev_minor;
	struct timespec atime, mtime, ctime;
};

enum sfs_origin_op {
	SFS_ORIGIN_READ,
	SFS_ORIGIN_GETATTR,
	SFS_ORIGIN_LOOKUP,
	SFS_ORIGIN_READDIRPLUS,
	SFS_ORIGIN_READLINK,
	SFS_ORIGIN_FSSTAT,
};
#define SFS_ORIGIN_N_OPS 6 /* the ops above, for per-op counters */
extern const char *const sfs_origin_op_names[SFS_ORIGIN_N_OPS]; /* "read", "lookup", ... */

struct sfs_origin_req;
struct sfs_attempt;

/*
 * Called once per READDIRPLUS reply entry, on the I/O thread, before the
 * request completes. attr/fh are NULL when the server sent none. Returning
 * non-zero stops delivery of further entries of this reply (the caller's
 * buffer is full); the request still completes normally.
 */
typedef int (*sfs_origin_dirent_fn)(struct sfs_origin_req *req, const char *name, uint64_t cookie,
				    const struct sfs_attr *attr, const struct sfs_fh *fh);

struct sfs_fsstat {
	uint64_t total_bytes, free_bytes, avail_bytes;
	uint64_t total_files, free_files, avail_files;
};

/*
 * One request. The caller owns the memory and fills the "in" fields; the
 * pool owns it from sfs_origin_submit() until done() is called; after done()
 * the caller may free or reuse it.
 */
struct sfs_origin_req {
	/* in */
	enum sfs_origin_op op;
	struct sfs_fh fh;		      /* file or directory */
	uint64_t offset;		      /* READ: byte offset */
	uint32_t count;			      /* READ: bytes wanted (<= sfs_origin_max_read) */
	void *buf;			      /* READ: destination of count bytes */
	bool lend;			      /* READ: may lend the reply's bytes (data) */
	bool background;		      /* READ: no reader waits (see the file comment) */
	const char *name;		      /* LOOKUP: entry name (caller keeps it alive) */
	uint64_t cookie;		      /* READDIRPLUS: resume cookie, 0 to start */
	uint8_t dir_verf[SFS_DIR_VERF_BYTES]; /* READDIRPLUS: as the previous reply left it */
	uint32_t dir_max_bytes;		      /* READDIRPLUS: maxcount hint */
	sfs_origin_dirent_fn dirent;	      /* READDIRPLUS */
	void (*done)(struct sfs_origin_req *req);
	void *arg; /* for the caller */
	/* READ, optional: places each piece of the reply that lands at dst
	 * inside buf (n bytes from src), in place of a memcpy; runs on an I/O
	 * thread, once per piece, pieces of one request never at once. */
	void (*place)(struct sfs_origin_req *req, void *dst, const void *src, uint32_t n);

	/* out, valid in done() */
	int result; /* READ: bytes read; others: 0; or -errno */
	bool eof;   /* READ: end of file reached; READDIRPLUS: last entry sent */
	/* READ: where the bytes are: buf, or with lend, when the reply held
	 * them all in one piece, the transport's receive buffer, lent for the
	 * duration of done() only (no copy). */
	const char *data;
	bool have_attr;	      /* attr is valid */
	struct sfs_attr attr; /* GETATTR/LOOKUP: the object; READ: post-op attributes */
	struct sfs_fh out_fh; /* LOOKUP */
	char *link;	      /* READLINK: malloc'd target, caller frees */
	struct sfs_fsstat fsstat;

	/* private to the pool (origin_int.h); protected by the pool lock */
	struct sfs_origin_req *q_next, *q_prev;
	struct sfs_attempt *attempts; /* sends in flight, chained */
	void *call_wait;	      /* sfs_origin_call[_batch]()'s waiter */
	bool queued, completed;
	int16_t avoid_node;   /* node that timed out on it last, or -1 */
	int16_t hedged_node;  /* node whose slow attempt was hedged, or -1 */
	uint32_t done_bytes;  /* READ: bytes already placed (short replies) */
	uint64_t deadline_ms; /* soft mounts: fail with -EIO after this */
};

struct sfs_origin_conf {
	char **addrs; /* node addresses (numeric), n_addrs of them */
	size_t n_addrs;
	const char *export_path; /* e.g. "/ifs" */
	unsigned nconnect;	 /* connections per node, 1..16 */
	uint32_t rsize_bytes;	 /* largest READ to send; capped by the server */
	unsigned timeo_ds;	 /* deciseconds before a request is re-issued elsewhere */
	unsigned retrans;	 /* timeouts before a node is declared down / soft fail */
	bool hard;		 /* hard: wait for the cluster forever; soft: -EIO */
	uint32_t uid, gid;	 /* AUTH_SYS identity */
	unsigned n_threads;	 /* I/O threads; 0 = one per online CPU */
	/* Non-NULL: when no node answers at open, start anyway with this root
	 * handle (saved by an earlier mount) and connect in the background. */
	const struct sfs_fh *offline_root;
	/* Background requests: percent of the connection slots they may hold
	 * at once (at least one slot; 0 or 100: no limit), and READ bytes per
	 * second (0: no limit). */
	unsigned background_pct;
	uint64_t background_rate;
};

typedef struct sfs_origin sfs_origin;

/*
 * Connect every connection of every node (concurrently, in the calling
 * thread) and check the export. Succeeds when at least one node mounted the
 * export, or when none answered and conf->offline_root is set; nodes that
 * failed are retried later with backoff. On failure
 * writes a one-line reason (naming the node and cause) into err_msg and
 * returns -errno (-EHOSTUNREACH, -ENOENT for a missing export, -EACCES, ...).
 * No thread is started: call sfs_origin_start() (after any fork).
 */
int sfs_origin_open(const struct sfs_origin_conf *conf, sfs_origin **out, char *err_msg,
		    size_t err_len);

/* Start the I/O threads. Returns 0 or -errno. */
int sfs_origin_start(sfs_origin *pool);

/* Stop threads, fail queued requests with -ESHUTDOWN, free everything. */
void sfs_origin_close(sfs_origin *pool);

/* The export's root file handle. Read-only after open. */
const struct sfs_fh *sfs_origin_root(const sfs_origin *pool);

/* Largest READ count the pool sends (min of rsize and every server's rtmax). */
uint32_t sfs_origin_max_read(const sfs_origin *pool);

/* Queue a request; req->done runs on an I/O thread. Never fails. */
void sfs_origin_submit(sfs_origin *pool, struct sfs_origin_req *req);

/* Queue n requests in order with one lock round and one wake-up. */
void sfs_origin_submit_batch(sfs_origin *pool, struct sfs_origin_req **reqs, size_t n);

/* Submit and wait for completion (sets req->done; leaves req->arg to the
 * caller, e.g. for the dirent callback). Returns req->result. */
int sfs_origin_call(sfs_origin *pool, struct sfs_origin_req *req);

/* Submit n requests in order and wait until every one completed (sets each
 * done; leaves arg to the caller). Results are in reqs[i]->result. */
void sfs_origin_call_batch(sfs_origin *pool, struct sfs_origin_req **reqs, size_t n);

enum sfs_origin_node_state {
	SFS_NODE_UP,
	SFS_NODE_SUSPECT, /* a request timed out on it; gets no new work */
	SFS_NODE_DOWN,	  /* no connection; being probed */
};

#define SFS_ORIGIN_LAT_BUCKETS 12
extern const double sfs_origin_lat_bounds_s[SFS_ORIGIN_LAT_BUCKETS];

/* A consistent-enough copy of one node's counters (each field atomic). */
struct sfs_origin_node_stats {
	const char *addr; /* owned by the pool */
	enum sfs_origin_node_state state;
	unsigned conns_up;
	uint64_t read_bytes, read_requests, meta_requests, errors, reissued, reconnects;
	uint64_t hedged;     /* slow READs on the node sent again to another node */
	uint64_t hedge_wins; /* of those, served first by the other node */
	unsigned read_slots; /* READs it may have in flight: fewer for a slow node */
	uint64_t read_rate;  /* bytes per second its READs have been giving */
	uint64_t meta_by_op[SFS_ORIGIN_N_OPS]; /* metadata requests answered, by op */
	uint64_t lat_count, lat_sum_ns;
	uint64_t lat_buckets[SFS_ORIGIN_LAT_BUCKETS]; /* cumulative counts <= bound */
};

size_t sfs_origin_node_count(const sfs_origin *pool);

/* How long the I/O thread that has gone longest without a turn of its
 * loop has gone (each turns at least every 20 ms, whatever its sockets
 * do): a thread stuck (a deadlock, a stopped process) shows here. 0 before
 * the threads start. Any thread. */
uint64_t sfs_origin_stuck_ms(const sfs_origin *pool, uint64_t now_ms);
void sfs_origin_node_stats(const sfs_origin *pool, size_t node, struct sfs_origin_node_stats *out);

/* Requests waiting for a connection slot right now (both classes). */
size_t sfs_origin_queue_depth(sfs_origin *pool);

/*
 * A reader now waits for req (submitted as background): from here on it
 * is an ordinary request; if it is still queued it moves to the end of the
 * ordinary queue. Nothing happens to a request that is not background, or
 * completed. The caller keeps req alive (as for any submitted request) and
 * may call this before it submits it. Any thread; takes the pool's leaf lock.
 */
void sfs_origin_promote(sfs_origin *pool, struct sfs_origin_req *req);
/* The reverse, for a request nobody waits for after all (a warm-up asked
 * for bytes an open's prefetch had queued): if still queued it moves to the
 * end of the background queue; in flight or not yet submitted, it counts as
 * background from its next send. Same rules as sfs_origin_promote. */
void sfs_origin_demote(sfs_origin *pool, struct sfs_origin_req *req);

struct sfs_origin_background_stats {
	unsigned slots;		  /* background attempts allowed in flight at once */
	unsigned inflight;	  /* background attempts in flight now */
	size_t queued;		  /* background requests waiting */
	uint64_t rate_limit;	  /* bytes per second, 0: none */
	uint64_t read_bytes;	  /* bytes background READs brought in */
	uint64_t read_requests;	  /* background READs answered */
	uint64_t promoted;	  /* background requests a reader came to wait for */
	uint64_t rate_limited_ms; /* time background READs waited for the rate */
};
void sfs_origin_background_stats(sfs_origin *pool, struct sfs_origin_background_stats *out);

#endif
