// SPDX-License-Identifier: Apache-2.0
/*
 * origin_nfs3 — the NFSv3 transport of the origin pool, over libnfs 4.0: one
 * libnfs context per connection, and one table of operations that says, for
 * each enum sfs_origin_op, how its call is encoded and its reply decoded.
 * It owns nothing of the pool (queue, health, timeouts: origin.c; the poll
 * loop: origin_conn.c). This is the only file that includes libnfs.
 *
 * Threading: see origin_xport.h. A context is used by its connection's
 * thread only; context creation is serialised (libnfs 4.0 keeps unlocked
 * globals there).
 *
 * What this file relies on in libnfs 4.0: its auto-reconnect is off (broken
 * there), the pool reconnects with backoff; timeouts are only checked inside
 * nfs_service(), which the pool calls every tick; READ data points into
 * libnfs's buffer and is copied out in decode, inside the callback.
 */
#include "origin_xport.h"

#include <sys/time.h> /* before libnfs.h, which needs struct timeval */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

/* Exported by libnfs 4.0 but missing from its public headers; the struct
 * layout is libnfs-private.h's (stable since 1.x). */
struct nfs_fh {
	int len;
	char *val;
};
const struct nfs_fh *nfs_get_rootfh(struct nfs_context *nfs);

_Static_assert(sizeof(cookieverf3) == SFS_DIR_VERF_BYTES, "the verifier is NFSv3's cookieverf3");

struct sfs_xport_conn {
	struct nfs_context *nfs; /* the connection's thread only */
	struct sfs_conn *conn;	 /* the pool's, for the mount answer */
};

/* libnfs keeps unlocked globals in context creation; serialise it. */
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

/* --- decoding helpers ----------------------------------------------------- */

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

/* --- the operations: one encoder and one decoder each ---------------------- */

static void slot_cb(struct rpc_context *rpc, int status, void *data, void *private_data);

/* Encode and send one call; fh is args->fh as libnfs wants it. Returns
 * libnfs's answer: 0 sent, else not sent. */
typedef int (*nfs3_send_fn)(struct rpc_context *rpc, struct nfs_fh3 fh,
			    const struct sfs_xport_args *args, struct sfs_attempt *a);
/* Decode a reply whose status is NFS3_OK into the claimed request. Returns
 * as sfs_xport_ops.decode. */
typedef int (*nfs3_decode_fn)(void *res, const struct sfs_xport_args *args,
			      struct sfs_origin_req *req);

static int read_send(struct rpc_context *rpc, struct nfs_fh3 fh, const struct sfs_xport_args *args,
		     struct sfs_attempt *a)
{
	READ3args r = {.file = fh, .offset = args->offset, .count = args->count};
	return rpc_nfs3_read_async(rpc, slot_cb, &r, a);
}

static int read_decode(void *res, const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	READ3resok *ok = &((READ3res *)res)->READ3res_u.resok;
	uint32_t n = ok->data.data_len < args->count ? ok->data.data_len : args->count;
	uint32_t at = (uint32_t)(args->offset - req->offset);

	/* A whole reply is lent where the caller allows it: libnfs decoded it
	 * in place, and the PDU lives until this callback returns. */
	if (req->lend && at == 0 && (n >= req->count || ok->eof || n == 0))
		req->data = ok->data.data_val;
	else if (req->place)
		req->place(req, (char *)req->buf + at, ok->data.data_val, n);
	else
		memcpy((char *)req->buf + at, ok->data.data_val, n);
	if (ok->file_attributes.attributes_follow) {
		fattr_to_attr(&ok->file_attributes.post_op_attr_u.attributes, &req->attr);
		req->have_attr = true;
	}
	req->done_bytes = (uint32_t)(args->offset - req->offset) + n;
	if (ok->eof || n == 0 || req->done_bytes >= req->count) {
		req->eof = ok->eof || (n == 0);
		return (int)req->done_bytes;
	}
	return SFS_XPORT_CONTINUES; /* short, not at EOF: continue from done_bytes */
}

static int getattr_send(struct rpc_context *rpc, struct nfs_fh3 fh,
			const struct sfs_xport_args *args, struct sfs_attempt *a)
{
	GETATTR3args r = {.object = fh};
	(void)args;
	return rpc_nfs3_getattr_async(rpc, slot_cb, &r, a);
}

static int getattr_decode(void *res, const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	(void)args;
	fattr_to_attr(&((GETATTR3res *)res)->GETATTR3res_u.resok.obj_attributes, &req->attr);
	req->have_attr = true;
	return 0;
}

static int lookup_send(struct rpc_context *rpc, struct nfs_fh3 fh,
		       const struct sfs_xport_args *args, struct sfs_attempt *a)
{
	LOOKUP3args r = {.what = {.dir = fh, .name = (char *)args->name}};
	return rpc_nfs3_lookup_async(rpc, slot_cb, &r, a);
}

static int lookup_decode(void *res, const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	LOOKUP3resok *ok = &((LOOKUP3res *)res)->LOOKUP3res_u.resok;

	(void)args;
	if (ok->object.data.data_len == 0)
		return -EIO; /* no file has an empty handle (the daemon's virtual files do) */
	fh_from_nfs(&req->out_fh, ok->object.data.data_val, ok->object.data.data_len);
	req->have_attr = ok->obj_attributes.attributes_follow;
	if (req->have_attr)
		fattr_to_attr(&ok->obj_attributes.post_op_attr_u.attributes, &req->attr);
	return 0;
}

static int readdirplus_send(struct rpc_context *rpc, struct nfs_fh3 fh,
			    const struct sfs_xport_args *args, struct sfs_attempt *a)
{
	READDIRPLUS3args r = {.dir = fh,
			      .cookie = args->cookie,
			      .dircount = args->dir_max_bytes / 2,
			      .maxcount = args->dir_max_bytes};
	memcpy(r.cookieverf, args->dir_verf, sizeof(r.cookieverf)); /* the cookieverf3 */
	return rpc_nfs3_readdirplus_async(rpc, slot_cb, &r, a);
}

/* Each entry goes to req->dirent until it says stop. */
static int readdirplus_decode(void *res, const struct sfs_xport_args *args,
			      struct sfs_origin_req *req)
{
	READDIRPLUS3resok *ok = &((READDIRPLUS3res *)res)->READDIRPLUS3res_u.resok;

	(void)args;
	memcpy(req->dir_verf, ok->cookieverf, sizeof(req->dir_verf));
	req->eof = ok->reply.eof;
	for (entryplus3 *e = ok->reply.entries; e; e = e->nextentry) {
		struct sfs_attr attr, *ap = NULL;
		struct sfs_fh fh, *fp = NULL;
		if (e->name_attributes.attributes_follow) {
			fattr_to_attr(&e->name_attributes.post_op_attr_u.attributes, &attr);
			ap = &attr;
		}
		if (e->name_handle.handle_follows &&
		    e->name_handle.post_op_fh3_u.handle.data.data_len > 0) {
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

static int readlink_send(struct rpc_context *rpc, struct nfs_fh3 fh,
			 const struct sfs_xport_args *args, struct sfs_attempt *a)
{
	READLINK3args r = {.symlink = fh};
	(void)args;
	return rpc_nfs3_readlink_async(rpc, slot_cb, &r, a);
}

static int readlink_decode(void *res, const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	(void)args;
	req->link = strdup(((READLINK3res *)res)->READLINK3res_u.resok.data);
	return req->link ? 0 : -ENOMEM;
}

static int fsstat_send(struct rpc_context *rpc, struct nfs_fh3 fh,
		       const struct sfs_xport_args *args, struct sfs_attempt *a)
{
	FSSTAT3args r = {.fsroot = fh};
	(void)args;
	return rpc_nfs3_fsstat_async(rpc, slot_cb, &r, a);
}

static int fsstat_decode(void *res, const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	FSSTAT3resok *ok = &((FSSTAT3res *)res)->FSSTAT3res_u.resok;

	(void)args;
	req->fsstat = (struct sfs_fsstat){ok->tbytes, ok->fbytes, ok->abytes,
					  ok->tfiles, ok->ffiles, ok->afiles};
	return 0;
}

/* The one table: a new operation is one row (and its two functions). */
static const struct nfs3_op {
	nfs3_send_fn send;
	nfs3_decode_fn decode;
} nfs3_ops[SFS_ORIGIN_N_OPS] = {
    [SFS_ORIGIN_READ] = {read_send, read_decode},
    [SFS_ORIGIN_GETATTR] = {getattr_send, getattr_decode},
    [SFS_ORIGIN_LOOKUP] = {lookup_send, lookup_decode},
    [SFS_ORIGIN_READDIRPLUS] = {readdirplus_send, readdirplus_decode},
    [SFS_ORIGIN_READLINK] = {readlink_send, readlink_decode},
    [SFS_ORIGIN_FSSTAT] = {fsstat_send, fsstat_decode},
};

static int nfs3_send(struct sfs_xport_conn *xc, const struct sfs_xport_args *args,
		     struct sfs_attempt *a)
{
	struct nfs_fh3 fh = {.data = {.data_len = args->fh.len, .data_val = (char *)args->fh.data}};

	if ((unsigned)args->op >= SFS_ORIGIN_N_OPS)
		return -EINVAL;
	return nfs3_ops[args->op].send(nfs_get_rpc_context(xc->nfs), fh, args, a) ? -EIO : 0;
}

/* Every NFSv3 result starts with its nfsstat3: the status is checked here,
 * once, and the operation decodes only a success. */
static int nfs3_decode(const struct sfs_xport_args *args, struct sfs_origin_req *req, void *reply)
{
	int err;

	if ((unsigned)args->op >= SFS_ORIGIN_N_OPS)
		return -EINVAL;
	if ((err = nfsstat_to_errno(*(const nfsstat3 *)reply)))
		return err;
	return nfs3_ops[args->op].decode(reply, args, req);
}

static void slot_cb(struct rpc_context *rpc, int status, void *data, void *private_data)
{
	enum sfs_xport_status st = status == RPC_STATUS_SUCCESS	  ? SFS_XPORT_OK
				   : status == RPC_STATUS_CANCEL  ? SFS_XPORT_CANCEL
				   : status == RPC_STATUS_TIMEOUT ? SFS_XPORT_TIMEOUT
								  : SFS_XPORT_ERROR;

	(void)rpc;
	sfs_origin_reply(private_data, st, st == SFS_XPORT_ERROR ? data : NULL, data);
}

static int nfs3_probe(struct sfs_xport_conn *xc, struct sfs_attempt *a)
{
	return rpc_nfs3_null_async(nfs_get_rpc_context(xc->nfs), slot_cb, a) ? -EIO : 0;
}

/* --- connections ---------------------------------------------------------- */

static void set_socket_options(struct nfs_context *nfs)
{
	int fd = nfs_get_fd(nfs), one = 1, idle = 10, intvl = 5, cnt = 3;

	/* libnfs 4.0 sets neither on its sockets. NODELAY: small metadata RPCs must
	 * not wait behind Nagle; keepalive: find silently dead peers on idle links. */
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static void mount_cb(int err, struct nfs_context *nfs, void *data, void *private_data)
{
	struct sfs_xport_conn *xc = private_data;

	if (!err)
		set_socket_options(nfs);
	sfs_conn_mounted(xc->conn, xc, err, err ? data : NULL);
}

static int nfs3_connect(struct sfs_conn *conn, const struct sfs_xport_target *t,
			struct sfs_xport_conn **out, char *msg, size_t msg_len)
{
	struct sfs_xport_conn *xc = calloc(1, sizeof(*xc));

	*out = NULL;
	if (!xc)
		goto err_nomem;
	pthread_mutex_lock(&create_lock);
	xc->nfs = nfs_init_context();
	pthread_mutex_unlock(&create_lock);
	if (!xc->nfs)
		goto err_free;
	xc->conn = conn;
	nfs_set_autoreconnect(xc->nfs, 0); /* broken in 4.0: we reconnect ourselves */
	nfs_set_version(xc->nfs, NFS_V3);
	nfs_set_uid(xc->nfs, (int)t->uid);
	nfs_set_gid(xc->nfs, (int)t->gid);
	/* A backstop: the pool's own timers re-issue after timeo and drop the
	 * connection after timeo * retrans; libnfs's timer frees the PDUs. */
	nfs_set_timeout(xc->nfs, (int)t->timeout_ms);
	nfs_set_tcp_syncnt(xc->nfs, 2);
	*out = xc;
	if (nfs_mount_async(xc->nfs, t->addr, t->export_path, mount_cb, xc) != 0) {
		snprintf(msg, msg_len, "%s", nfs_get_error(xc->nfs) ?: "mount failed");
		return -EIO;
	}
	return 0;

err_free:
	free(xc);
err_nomem:
	snprintf(msg, msg_len, "cannot create an NFS context");
	return -ENOMEM;
}

static void nfs3_destroy(struct sfs_xport_conn *xc)
{
	nfs_destroy_context(xc->nfs); /* CANCEL callbacks re-queue the attempts */
	free(xc);
}

static int nfs3_fd(struct sfs_xport_conn *xc) { return nfs_get_fd(xc->nfs); }

static short nfs3_events(struct sfs_xport_conn *xc) { return (short)nfs_which_events(xc->nfs); }

static int nfs3_service(struct sfs_xport_conn *xc, short revents)
{
	return nfs_service(xc->nfs, revents) < 0 ? -EIO : 0;
}

static const char *nfs3_error(struct sfs_xport_conn *xc) { return nfs_get_error(xc->nfs); }

static void nfs3_root(struct sfs_xport_conn *xc, struct sfs_fh *out)
{
	const struct nfs_fh *rfh = nfs_get_rootfh(xc->nfs);

	out->len = 0;
	if (rfh)
		fh_from_nfs(out, rfh->val, (unsigned)rfh->len);
}

static uint32_t nfs3_max_read(struct sfs_xport_conn *xc)
{
	uint64_t readmax = nfs_get_readmax(xc->nfs);

	return readmax > UINT32_MAX ? UINT32_MAX : (uint32_t)readmax;
}

/* --- mount diagnosis ------------------------------------------------------ */

static int nfs3_classify(const char *msg)
{
	if (strstr(msg, "NOENT") || strstr(msg, "No such file"))
		return -ENOENT;
	if (strstr(msg, "ACCES") || strstr(msg, "PERM") || strstr(msg, "ermission"))
		return -EACCES;
	return -EHOSTUNREACH;
}

/* libnfs's words for a failed mount, and ours for what they mean. */
static void nfs3_explain(char *msg, size_t len)
{
	char raw[256];
	size_t keep = len > 64 ? len - 64 : 1;
	const char *why = NULL;

	if (keep > sizeof(raw))
		keep = sizeof(raw);
	snprintf(raw, keep, "%.*s", (int)keep - 1, msg);
	if (strstr(raw, "POLLHUP") || strstr(raw, "refused"))
		why = "connection refused (no NFS server at this address?)";
	else if (strstr(raw, "MNT3ERR_ACCES") || strstr(raw, "MNT3ERR_NOENT"))
		why = "the server does not export this path to us";
	if (why)
		snprintf(msg, len, "%s [%s]", why, raw);
}

const struct sfs_xport_ops sfs_xport_nfs3 = {
    .name = "nfs3",
    .connect = nfs3_connect,
    .destroy = nfs3_destroy,
    .fd = nfs3_fd,
    .events = nfs3_events,
    .service = nfs3_service,
    .error = nfs3_error,
    .send = nfs3_send,
    .probe = nfs3_probe,
    .decode = nfs3_decode,
    .root = nfs3_root,
    .max_read = nfs3_max_read,
    .explain = nfs3_explain,
    .classify = nfs3_classify,
};

int sfs_origin_open(const struct sfs_origin_conf *conf, sfs_origin **out, char *err_msg,
		    size_t err_len)
{
	return sfs_origin_open_xport(conf, &sfs_xport_nfs3, out, err_msg, err_len);
}
