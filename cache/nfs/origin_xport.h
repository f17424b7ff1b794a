/* SPDX-License-Identifier: Apache-2.0 */
/*
 * origin_xport — what the origin pool asks of a transport (NFSv3 over libnfs
 * today: origin_nfs3.c; the unit tests' fake: tests/unit/fake_xport.c).
 *
 * A transport owns: the protocol (encoding the arguments of each
 * enum sfs_origin_op, decoding its reply into the request), one protocol
 * connection per struct sfs_conn (its socket, its in-flight calls), and the
 * words it uses for a failed mount. It does not own: the queue, node health,
 * timeouts, re-issue or hedging (origin.c), the poll loop and reconnects
 * (origin_conn.c).
 *
 * Threading: every function of a connection (connect, service, send, probe,
 * destroy, ...) runs on the one thread that owns the connection, never with
 * the pool lock held. The transport calls back sfs_conn_mounted() and
 * sfs_origin_reply() only from inside service() or destroy() on that thread,
 * never from inside connect(), send() or probe().
 */
#ifndef SFS_ORIGIN_XPORT_H
#define SFS_ORIGIN_XPORT_H

#include "origin.h"

#include <errno.h>

#define SFS_XPORT_NAME_MAX 1024 /* LOOKUP names: FUSE_NAME_MAX, the most FUSE sends */

struct sfs_conn;       /* the pool's connection (origin_int.h) */
struct sfs_attempt;    /* the pool's call in flight: the transport's cookie */
struct sfs_xport_conn; /* the transport's connection, its own type */

/*
 * One call's arguments, copied from the request under the pool lock when the
 * call is pulled from the queue: the send path never reads the request, which
 * another attempt's reply may complete (and its owner free) meanwhile.
 */
struct sfs_xport_args {
	enum sfs_origin_op op;
	struct sfs_fh fh;
	uint64_t offset; /* READ: this attempt's range (a re-sent short READ
			    continues where the last reply ended) */
	uint32_t count;
	uint64_t cookie;		      /* READDIRPLUS */
	uint8_t dir_verf[SFS_DIR_VERF_BYTES]; /* READDIRPLUS */
	uint32_t dir_max_bytes;		      /* READDIRPLUS */
	char name[SFS_XPORT_NAME_MAX + 1];    /* LOOKUP */
};

/* Where and as whom a connection connects; the pool's, read-only. */
struct sfs_xport_target {
	const char *addr;
	const char *export_path;
	uint32_t uid, gid;
	uint64_t timeout_ms; /* the transport's own backstop timeout */
};

enum sfs_xport_status {
	SFS_XPORT_OK,	   /* a reply: decode() turns it into a result */
	SFS_XPORT_ERROR,   /* the RPC failed (msg says why): the connection is broken */
	SFS_XPORT_TIMEOUT, /* the transport's own timeout expired */
	SFS_XPORT_CANCEL,  /* destroy() cancelled it */
};

/* decode()'s answer for a READ that came back short and must continue from
 * req->done_bytes (not a byte count: a 1-byte file's READ returns 1). */
#define SFS_XPORT_CONTINUES (-EINPROGRESS)

struct sfs_xport_ops {
	const char *name; /* "nfs3" */
	/* Start connecting; the outcome comes later through sfs_conn_mounted()
	 * from service(). Returns 0 and *out, or -errno with msg filled
	 * (*out is then set when there is a connection to destroy, else NULL). */
	int (*connect)(struct sfs_conn *conn, const struct sfs_xport_target *t,
		       struct sfs_xport_conn **out, char *msg, size_t msg_len);
	/* Close: every call in flight completes with SFS_XPORT_CANCEL before it
	 * returns; a pending mount may answer with an error (ignored). */
	void (*destroy)(struct sfs_xport_conn *xc);
	int (*fd)(struct sfs_xport_conn *xc);
	short (*events)(struct sfs_xport_conn *xc);
	/* Read and write what the socket allows, run the transport's timers
	 * (revents 0: timers only). Returns < 0 when the connection failed. */
	int (*service)(struct sfs_xport_conn *xc, short revents);
	/* The last error in words, or NULL. */
	const char *(*error)(struct sfs_xport_conn *xc);
	/* Send one call; its reply comes through sfs_origin_reply(a, ...).
	 * Returns 0, or < 0 when nothing was sent (no reply will come). */
	int (*send)(struct sfs_xport_conn *xc, const struct sfs_xport_args *args,
		    struct sfs_attempt *a);
	/* Send a no-op call (a health probe), answered like send(). */
	int (*probe)(struct sfs_xport_conn *xc, struct sfs_attempt *a);
	/* Decode a reply of args->op into the claimed request (whose owner is
	 * the calling thread until done()). Returns the result (READ: bytes
	 * in req->buf so far), SFS_XPORT_CONTINUES, or -errno (-EAGAIN: ask
	 * again later). */
	int (*decode)(const struct sfs_xport_args *args, struct sfs_origin_req *req, void *reply);
	/* A mounted connection's root handle and largest READ. */
	void (*root)(struct sfs_xport_conn *xc, struct sfs_fh *out);
	uint32_t (*max_read)(struct sfs_xport_conn *xc);
	/* Mount diagnosis: rewrite a failed mount's message in our words
	 * (in place, keeping the transport's in brackets), and classify it:
	 * -ENOENT (no such export), -EACCES, or -EHOSTUNREACH. */
	void (*explain)(char *msg, size_t len);
	int (*classify)(const char *msg);
};

extern const struct sfs_xport_ops sfs_xport_nfs3;

/* The answer to connect(): err 0 (mounted) or -errno with msg (NULL: from
 * err). xc is the connection that answers: an answer for one already
 * replaced or being destroyed is ignored. */
void sfs_conn_mounted(struct sfs_conn *conn, struct sfs_xport_conn *xc, int err, const char *msg);

/* One call's outcome. reply is the transport's decoded-wire reply, handed to
 * its decode() if this reply completes the request; msg (may be NULL) says
 * why for SFS_XPORT_ERROR. */
void sfs_origin_reply(struct sfs_attempt *a, enum sfs_xport_status st, const char *msg,
		      void *reply);

/* sfs_origin_open() with another transport (the unit tests' fake). */
int sfs_origin_open_xport(const struct sfs_origin_conf *conf, const struct sfs_xport_ops *ops,
			  sfs_origin **out, char *err_msg, size_t err_len);

#endif
