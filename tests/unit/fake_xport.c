// SPDX-License-Identifier: Apache-2.0
/*
 * fake_xport — see fake_xport.h. A connection is an eventfd (readable while
 * an answer is due) and a small table of calls in flight; service() answers
 * the due ones in the order they were sent.
 */
#include "fake_xport.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAKE_INFLIGHT (SFS_ORIGIN_CONN_DEPTH + 1)

static struct fake_xport_conf conf;
static unsigned n_calls; /* atomic */
static int n_live;	 /* atomic */

struct fake_call {
	bool used, probe;
	struct sfs_attempt *a;
	struct sfs_xport_args args;
	uint64_t due_ms;
};

struct sfs_xport_conn {
	struct sfs_conn *conn;
	int node, efd;
	bool mount_pending;
	struct fake_call calls[FAKE_INFLIGHT]; /* the connection's thread only */
	uint64_t seq;
	char err[64];
};

/* What decode() gets: the call as sent. */
struct fake_reply {
	const struct sfs_xport_args *args;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Count one call; true if it is to fail. */
static bool call_fails(void)
{
	unsigned n = __atomic_add_fetch(&n_calls, 1, __ATOMIC_RELAXED);

	return conf.fail_at && (n == conf.fail_at || (conf.fail_persist && n > conf.fail_at));
}

void fake_xport_setup(const struct fake_xport_conf *c)
{
	conf = *c;
	__atomic_store_n(&n_calls, 0, __ATOMIC_RELAXED);
}

unsigned fake_xport_calls(void) { return __atomic_load_n(&n_calls, __ATOMIC_RELAXED); }

int fake_xport_live(void) { return __atomic_load_n(&n_live, __ATOMIC_RELAXED); }

struct sfs_fh fake_xport_fh(uint64_t seed, uint64_t size)
{
	struct sfs_fh fh = {.len = 16};

	memcpy(fh.data, &seed, 8);
	memcpy(fh.data + 8, &size, 8);
	return fh;
}

static uint64_t fh_seed(const struct sfs_fh *fh)
{
	uint64_t v;
	memcpy(&v, fh->data, 8);
	return v;
}

static uint64_t fh_size(const struct sfs_fh *fh)
{
	uint64_t v;
	memcpy(&v, fh->data + 8, 8);
	return v;
}

uint8_t fake_xport_byte(const struct sfs_fh *fh, uint64_t off)
{
	uint64_t x = fh_seed(fh) ^ (off * 0x9E3779B97F4A7C15ull);

	x ^= x >> 29;
	x *= 0xBF58476D1CE4E5B9ull;
	return (uint8_t)(x >> 32);
}

static void kick(struct sfs_xport_conn *xc)
{
	uint64_t one = 1;

	if (write(xc->efd, &one, sizeof(one)) < 0) {
		/* saturated: readable anyway */
	}
}

static int fake_connect(struct sfs_conn *conn, const struct sfs_xport_target *t,
			struct sfs_xport_conn **out, char *msg, size_t msg_len)
{
	struct sfs_xport_conn *xc = calloc(1, sizeof(*xc));

	*out = NULL;
	if (!xc) {
		snprintf(msg, msg_len, "fake: out of memory");
		return -ENOMEM;
	}
	xc->conn = conn;
	xc->node = atoi(t->addr + 1);
	xc->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (xc->efd < 0) {
		free(xc);
		snprintf(msg, msg_len, "fake: no eventfd");
		return -EMFILE;
	}
	__atomic_add_fetch(&n_live, 1, __ATOMIC_RELAXED);
	*out = xc;
	if (call_fails()) {
		snprintf(msg, msg_len, "fake: connect failed");
		return -EIO;
	}
	xc->mount_pending = true;
	kick(xc);
	return 0;
}

static void fake_destroy(struct sfs_xport_conn *xc)
{
	for (int i = 0; i < FAKE_INFLIGHT; i++)
		if (xc->calls[i].used) {
			xc->calls[i].used = false;
			sfs_origin_reply(xc->calls[i].a, SFS_XPORT_CANCEL, NULL, NULL);
		}
	if (xc->mount_pending)
		sfs_conn_mounted(xc->conn, xc, -ECANCELED, "fake: cancelled");
	close(xc->efd);
	free(xc);
	__atomic_sub_fetch(&n_live, 1, __ATOMIC_RELAXED);
}

static int fake_fd(struct sfs_xport_conn *xc) { return xc->efd; }

static short fake_events(struct sfs_xport_conn *xc)
{
	(void)xc;
	return POLLIN;
}

/* The oldest due call, or NULL. */
static struct fake_call *next_due(struct sfs_xport_conn *xc, uint64_t now)
{
	for (int i = 0; i < FAKE_INFLIGHT; i++)
		if (xc->calls[i].used && xc->calls[i].due_ms <= now)
			return &xc->calls[i];
	return NULL;
}

static int fake_service(struct sfs_xport_conn *xc, short revents)
{
	uint64_t v, now = now_ms();
	struct fake_call *c;

	if (revents && read(xc->efd, &v, sizeof(v)) < 0) {
		/* nothing pending */
	}
	if (xc->mount_pending) {
		xc->mount_pending = false;
		if (call_fails())
			sfs_conn_mounted(xc->conn, xc, -ECONNREFUSED, "fake: connection refused");
		else
			sfs_conn_mounted(xc->conn, xc, 0, NULL);
		return 0; /* the answer may have broken it: the pool looks first */
	}
	while ((c = next_due(xc, now))) {
		struct fake_call call = *c;
		struct fake_reply reply = {.args = &call.args};
		c->used = false;
		if (call_fails()) {
			sfs_origin_reply(call.a, SFS_XPORT_ERROR, "fake: RPC error", NULL);
			snprintf(xc->err, sizeof(xc->err), "fake: RPC error");
			return -EIO; /* the rest are cancelled by destroy */
		}
		sfs_origin_reply(call.a, SFS_XPORT_OK, NULL, &reply);
	}
	return 0;
}

static const char *fake_error(struct sfs_xport_conn *xc) { return xc->err[0] ? xc->err : NULL; }

static int add_call(struct sfs_xport_conn *xc, const struct sfs_xport_args *args,
		    struct sfs_attempt *a, bool probe)
{
	for (int i = 0; i < FAKE_INFLIGHT; i++) {
		struct fake_call *c = &xc->calls[i];
		if (c->used)
			continue;
		*c = (struct fake_call){.used = true, .probe = probe, .a = a, .due_ms = now_ms()};
		if (args) {
			c->args = *args;
			if (args->op == SFS_ORIGIN_READ)
				c->due_ms += conf.reply_delay_ms +
					     ((conf.slow_nodes >> xc->node) & 1 ? conf.slow_ms : 0);
		}
		kick(xc);
		return 0;
	}
	snprintf(xc->err, sizeof(xc->err), "fake: too many calls in flight");
	return -EBUSY;
}

static int fake_send(struct sfs_xport_conn *xc, const struct sfs_xport_args *args,
		     struct sfs_attempt *a)
{
	if (conf.send_hook && conf.send_hook(args, xc->node)) {
		snprintf(xc->err, sizeof(xc->err), "fake: send refused by the test");
		return -EIO;
	}
	if (call_fails()) {
		snprintf(xc->err, sizeof(xc->err), "fake: send failed");
		return -EIO;
	}
	return add_call(xc, args, a, false);
}

static int fake_probe(struct sfs_xport_conn *xc, struct sfs_attempt *a)
{
	if (call_fails())
		return -EIO;
	return add_call(xc, NULL, a, true);
}

static int decode_read(const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	uint64_t size = fh_size(&args->fh);
	uint32_t n = args->count;

	if (conf.short_read && n > conf.short_read)
		n = conf.short_read;
	if (args->offset >= size)
		n = 0;
	else if (args->offset + n > size)
		n = (uint32_t)(size - args->offset);
	uint8_t *dst = (uint8_t *)req->buf + (args->offset - req->offset);
	for (uint32_t i = 0; i < n; i++)
		dst[i] = fake_xport_byte(&args->fh, args->offset + i);
	req->attr = (struct sfs_attr){.type = S_IFREG, .size = size};
	req->have_attr = true;
	req->done_bytes = (uint32_t)(args->offset - req->offset) + n;
	bool eof = args->offset + n >= size;
	if (eof || n == 0 || req->done_bytes >= req->count) {
		req->eof = eof || n == 0;
		return (int)req->done_bytes;
	}
	return SFS_XPORT_CONTINUES;
}

/* Three entries after the cookie, then the end (cookie 6). */
static int decode_readdir(const struct sfs_xport_args *args, struct sfs_origin_req *req)
{
	memset(req->dir_verf, 0x5a, sizeof(req->dir_verf));
	req->eof = args->cookie + 3 >= 6;
	for (uint64_t c = args->cookie + 1; c <= args->cookie + 3 && c <= 6; c++) {
		char name[16];
		struct sfs_fh fh = fake_xport_fh(c, c * 100);
		struct sfs_attr attr = {.type = S_IFREG, .size = c * 100};
		snprintf(name, sizeof(name), "f%llu", (unsigned long long)c);
		if (req->dirent(req, name, c, &attr, &fh)) {
			req->eof = false;
			break;
		}
	}
	return 0;
}

static int fake_decode(const struct sfs_xport_args *args, struct sfs_origin_req *req, void *reply)
{
	(void)reply;
	if (call_fails())
		return -EAGAIN; /* the server's JUKEBOX */
	switch (args->op) {
	case SFS_ORIGIN_READ:
		return decode_read(args, req);
	case SFS_ORIGIN_GETATTR:
		req->attr = (struct sfs_attr){.type = S_IFREG, .size = fh_size(&args->fh)};
		req->have_attr = true;
		return 0;
	case SFS_ORIGIN_LOOKUP:
		if (!strcmp(args->name, "missing"))
			return -ENOENT;
		req->out_fh = fake_xport_fh(strlen(args->name), 1000 * strlen(args->name));
		req->attr = (struct sfs_attr){.type = S_IFREG, .size = 1000 * strlen(args->name)};
		req->have_attr = true;
		return 0;
	case SFS_ORIGIN_READDIRPLUS:
		return decode_readdir(args, req);
	case SFS_ORIGIN_READLINK:
		req->link = strdup("target");
		return req->link ? 0 : -ENOMEM;
	case SFS_ORIGIN_FSSTAT:
		req->fsstat = (struct sfs_fsstat){.total_bytes = 1 << 30, .free_bytes = 1 << 20};
		return 0;
	}
	return -EINVAL;
}

static void fake_root(struct sfs_xport_conn *xc, struct sfs_fh *out)
{
	(void)xc;
	*out = fake_xport_fh(1, 0);
}

static uint32_t fake_max_read(struct sfs_xport_conn *xc)
{
	(void)xc;
	return 1u << 20;
}

static void fake_explain(char *msg, size_t len)
{
	(void)msg;
	(void)len;
}

static int fake_classify(const char *msg)
{
	(void)msg;
	return -EHOSTUNREACH;
}

const struct sfs_xport_ops fake_xport_ops = {
    .name = "fake",
    .connect = fake_connect,
    .destroy = fake_destroy,
    .fd = fake_fd,
    .events = fake_events,
    .service = fake_service,
    .error = fake_error,
    .send = fake_send,
    .probe = fake_probe,
    .decode = fake_decode,
    .root = fake_root,
    .max_read = fake_max_read,
    .explain = fake_explain,
    .classify = fake_classify,
};
