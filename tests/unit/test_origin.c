// SPDX-License-Identifier: Apache-2.0
/*
 * test_origin — the origin pool (cache/nfs/origin.c, origin_conn.c,
 * origin_call.c) against the fake transport (fake_xport.c); no libnfs.
 *
 * The fault loop follows SQLite's do_ioerr_test: run one workload (READs of
 * several sizes, short READs, every metadata op) with the Nth transport call
 * failing, for N = 1, 2, ... until a run makes fewer than N calls; once with
 * only the Nth failing (every request must then succeed: the pool re-issues
 * and reconnects), once with every call from the Nth on failing (a soft
 * mount: every request succeeds or fails with -EIO in time). For every N: no
 * hang, no wrong byte, no connection left (and, under ASan, no leak).
 *
 * The hedge test checks that the send path reads nothing of a request that
 * another attempt completed (and its owner freed) meanwhile; the stall tests,
 * that READs sent to a silent node are hedged together once its silence
 * reaches the hedge delay, not each after its own, and that a node silent
 * that long takes no new READ while another node is up.
 */
#include "fake_xport.h"
#include "log.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_READS 6
#define N_REQS	(N_READS + 6)
#define HANG_S	20

/* The workload's completions, counted under a lock for the main thread. */
struct waiter {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t pending;
};

struct job {
	struct sfs_origin_req req;
	struct waiter *w;
	uint64_t size; /* READ: the file's size */
	unsigned dirents;
};

static void job_done(struct sfs_origin_req *req)
{
	struct job *j = req->arg;

	pthread_mutex_lock(&j->w->lock);
	if (--j->w->pending == 0)
		pthread_cond_signal(&j->w->cond);
	pthread_mutex_unlock(&j->w->lock);
}

static int job_dirent(struct sfs_origin_req *req, const char *name, uint64_t cookie,
		      const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct job *j = req->arg;

	(void)name;
	(void)cookie;
	(void)attr;
	(void)fh;
	j->dirents++;
	return 0;
}

static struct sfs_origin_conf make_conf(bool hard, unsigned timeo_ds)
{
	static char n0[] = "n0", n1[] = "n1";
	static char *addrs[] = {n0, n1};

	return (struct sfs_origin_conf){.addrs = addrs,
					.n_addrs = 2,
					.export_path = "/ifs",
					.nconnect = 1,
					.rsize_bytes = 1u << 20,
					.timeo_ds = timeo_ds,
					.retrans = 2,
					.hard = hard,
					.n_threads = 2};
}

/* READ sizes: empty, tiny, a short file read past its end, 1 MiB. */
static void jobs_fill(struct job *jobs, struct waiter *w)
{
	static const uint64_t sizes[N_READS] = {0, 1, 4096, 100000, 1u << 20, 700000};
	static const enum sfs_origin_op meta[N_REQS - N_READS] = {
	    SFS_ORIGIN_GETATTR,	    SFS_ORIGIN_LOOKUP,	 SFS_ORIGIN_LOOKUP,
	    SFS_ORIGIN_READDIRPLUS, SFS_ORIGIN_READLINK, SFS_ORIGIN_FSSTAT};

	for (int i = 0; i < N_REQS; i++) {
		struct job *j = &jobs[i];
		memset(j, 0, sizeof(*j));
		j->w = w;
		j->req.arg = j;
		j->req.done = job_done;
		if (i < N_READS) {
			j->size = sizes[i];
			j->req.op = SFS_ORIGIN_READ;
			j->req.fh = fake_xport_fh(100 + (uint64_t)i, j->size);
			j->req.count = j->size > 65536 ? (uint32_t)j->size : 65536;
			j->req.buf = malloc(j->req.count);
			continue;
		}
		j->req.op = meta[i - N_READS];
		j->req.fh = fake_xport_fh(1, 0);
		j->req.name = i == N_READS + 1 ? "some-file" : "missing";
		j->req.dir_max_bytes = 4096;
		j->req.dirent = job_dirent;
	}
}

/* One request's result: right, or (allowed when fail_ok) -EIO. Returns a
 * description of what is wrong, or NULL. */
static const char *job_check(const struct job *j, bool fail_ok)
{
	const struct sfs_origin_req *r = &j->req;

	if (fail_ok && r->result == -EIO)
		return NULL;
	switch (r->op) {
	case SFS_ORIGIN_READ:
		if (r->result != (int)j->size || !r->eof)
			return "READ: wrong length or no EOF";
		for (uint64_t k = 0; k < j->size; k++)
			if (((uint8_t *)r->buf)[k] != fake_xport_byte(&r->fh, k))
				return "READ: wrong byte";
		return NULL;
	case SFS_ORIGIN_LOOKUP:
		if (!strcmp(r->name, "missing"))
			return r->result == -ENOENT ? NULL : "LOOKUP of a missing name";
		return r->result == 0 && r->out_fh.len == 16 ? NULL : "LOOKUP";
	case SFS_ORIGIN_READDIRPLUS:
		return r->result == 0 && j->dirents == 3 ? NULL : "READDIRPLUS";
	case SFS_ORIGIN_READLINK:
		return r->result == 0 && r->link && !strcmp(r->link, "target") ? NULL : "READLINK";
	default:
		return r->result == 0 ? NULL : "metadata";
	}
}

/* Wait until w has nothing pending, at most HANG_S seconds. Returns 0, or
 * -ETIMEDOUT (a hang). */
static int wait_pending(struct waiter *w)
{
	struct timespec until;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += HANG_S;
	pthread_mutex_lock(&w->lock);
	while (w->pending && rc == 0)
		rc = pthread_cond_timedwait(&w->cond, &w->lock, &until);
	pthread_mutex_unlock(&w->lock);
	return w->pending ? -ETIMEDOUT : 0;
}

/* Submit the workload and wait for it (wait_pending). */
static int run_jobs(sfs_origin *pool, struct job *jobs, struct waiter *w)
{
	struct sfs_origin_req *reqs[N_REQS];

	for (int i = 0; i < N_REQS; i++)
		reqs[i] = &jobs[i].req;
	w->pending = N_REQS;
	sfs_origin_submit_batch(pool, reqs, N_REQS);
	return wait_pending(w);
}

struct ioerr_result {
	unsigned runs, open_failed, hangs, wrong, leaks, failed_reqs;
	char first_wrong[160];
};

/* One run with the Nth call failing. Returns the calls the run made. */
static unsigned ioerr_run(unsigned n, bool persist, uint32_t short_read, struct ioerr_result *res)
{
	struct fake_xport_conf fc = {
	    .fail_at = n, .fail_persist = persist, .short_read = short_read};
	struct sfs_origin_conf conf = make_conf(false, persist ? 1 : 10);
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct job jobs[N_REQS];
	sfs_origin *pool;
	char msg[256];

	fake_xport_setup(&fc);
	res->runs++;
	if (sfs_origin_open_xport(&conf, &fake_xport_ops, &pool, msg, sizeof(msg)) < 0) {
		res->open_failed++;
		goto out;
	}
	if (sfs_origin_start(pool) < 0) {
		sfs_origin_close(pool);
		goto out;
	}
	jobs_fill(jobs, &w);
	if (run_jobs(pool, jobs, &w) < 0)
		res->hangs++;
	sfs_origin_close(pool); /* completes what a hang left with -ESHUTDOWN */
	for (int i = 0; i < N_REQS; i++) {
		const char *why = job_check(&jobs[i], persist);
		if (jobs[i].req.result < 0 && jobs[i].req.result != -ENOENT)
			res->failed_reqs++;
		if (why && !res->wrong++)
			snprintf(res->first_wrong, sizeof(res->first_wrong),
				 "N=%u%s: request %d: %s (result %d)", n, persist ? " persist" : "",
				 i, why, jobs[i].req.result);
		if (jobs[i].req.op == SFS_ORIGIN_READ)
			free(jobs[i].req.buf);
		free(jobs[i].req.link);
	}
out:
	if (fake_xport_live() != 0)
		res->leaks++;
	return fake_xport_calls();
}

static void test_ioerr(bool persist, uint32_t short_read)
{
	struct ioerr_result res = {0};
	unsigned n;

	for (n = 1; n < 10000; n++)
		if (ioerr_run(n, persist, short_read, &res) < n)
			break; /* the Nth call was never made: every call has failed once */
	diag("%u runs, %u opens failed, %u requests failed", res.runs, res.open_failed,
	     res.failed_reqs);
	if (res.wrong)
		diag("%s", res.first_wrong);
	ok(n > 20 && n < 10000, "fault loop%s%s ran to the end (%u calls)",
	   persist ? ", persistent" : "", short_read ? ", short READs" : "", n - 1);
	ok(res.hangs == 0, "no hang (%u)", res.hangs);
	ok(res.wrong == 0, "no wrong result or byte (%u)", res.wrong);
	ok(res.leaks == 0, "no transport connection left (%u)", res.leaks);
	if (!persist)
		ok(res.open_failed == 0 && res.failed_reqs == 0,
		   "one failed call fails nothing: %u opens, %u requests", res.open_failed,
		   res.failed_reqs);
}

/* --- a hedge whose request completes and is freed while it is sent ------- */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool freed;
	int hook_calls;
	bool args_ok;
	struct sfs_fh fh;
} hedge = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static void hedge_done(struct sfs_origin_req *req)
{
	int result = req->result;

	memset(req, 0xa5, sizeof(*req)); /* what a reuse would do */
	free(req);
	pthread_mutex_lock(&hedge.lock);
	hedge.freed = result == 65536;
	pthread_cond_broadcast(&hedge.cond);
	pthread_mutex_unlock(&hedge.lock);
}

/* The second send of the READ (the hedge) waits until the first attempt's
 * reply completed and freed the request, then fails: the failure path must
 * not touch the request either. */
static int hedge_hook(const struct sfs_xport_args *args, int node)
{
	struct timespec until;

	(void)node;
	if (args->op != SFS_ORIGIN_READ)
		return 0;
	pthread_mutex_lock(&hedge.lock);
	if (++hedge.hook_calls != 2) {
		pthread_mutex_unlock(&hedge.lock);
		return 0;
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	while (!hedge.freed && pthread_cond_timedwait(&hedge.cond, &hedge.lock, &until) == 0)
		;
	hedge.args_ok = args->fh.len == hedge.fh.len &&
			!memcmp(args->fh.data, hedge.fh.data, hedge.fh.len) && args->offset == 0 &&
			args->count == 65536;
	pthread_mutex_unlock(&hedge.lock);
	return -1;
}

static void test_hedge_freed(void)
{
	struct fake_xport_conf fc = {.reply_delay_ms = 150, .send_hook = hedge_hook};
	struct sfs_origin_conf conf = make_conf(true, 20);
	struct sfs_origin_req *req = calloc(1, sizeof(*req));
	void *buf = malloc(65536);
	sfs_origin *pool;
	char msg[256];

	fake_xport_setup(&fc);
	ok(sfs_origin_open_xport(&conf, &fake_xport_ops, &pool, msg, sizeof(msg)) == 0 &&
	       sfs_origin_start(pool) == 0,
	   "open with two nodes");
	hedge.fh = fake_xport_fh(7, 1 << 20);
	*req = (struct sfs_origin_req){
	    .op = SFS_ORIGIN_READ, .fh = hedge.fh, .count = 65536, .buf = buf, .done = hedge_done};
	sfs_origin_submit(pool, req);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += HANG_S;
	pthread_mutex_lock(&hedge.lock);
	while ((!hedge.freed || hedge.hook_calls < 2) &&
	       pthread_cond_timedwait(&hedge.cond, &hedge.lock, &until) == 0)
		;
	pthread_mutex_unlock(&hedge.lock);
	sfs_origin_close(pool); /* joins the thread still in the hook */
	ok(hedge.freed, "the first attempt completed the READ");
	ok(hedge.hook_calls == 2, "the READ was hedged to the other node (%d sends)",
	   hedge.hook_calls);
	ok(hedge.args_ok, "the hedge's arguments were intact after the request was freed");
	bool right = true;
	for (uint32_t k = 0; k < 65536; k++)
		right = right && ((uint8_t *)buf)[k] == fake_xport_byte(&hedge.fh, k);
	ok(right, "the READ's bytes are right");
	free(buf);
}

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool n0_read;
} slow = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* n1 sends no READ before n0 sent one: otherwise a busy machine may let
 * n1's thread take every READ before n0's wakes, and n0 is never tried. */
static int slow_hook(const struct sfs_xport_args *args, int node)
{
	struct timespec until;

	if (args->op != SFS_ORIGIN_READ)
		return 0;
	pthread_mutex_lock(&slow.lock);
	if (node == 0) {
		slow.n0_read = true;
		pthread_cond_broadcast(&slow.cond);
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 5;
	while (!slow.n0_read && pthread_cond_timedwait(&slow.cond, &slow.lock, &until) == 0)
		;
	pthread_mutex_unlock(&slow.lock);
	return 0;
}

/* A node whose READs take far longer than timeo: its READs are hedged and
 * re-issued to the other node, which serves them; the node turns SUSPECT,
 * its late replies are dropped, and a probe brings it back UP. */
static void test_slow_node(void)
{
	struct fake_xport_conf fc = {.slow_nodes = 1, .slow_ms = 600, .send_hook = slow_hook};
	struct sfs_origin_conf conf = make_conf(true, 2);
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct job jobs[N_REQS];
	struct sfs_origin_node_stats st0, st1;
	sfs_origin *pool;
	char msg[256];

	conf.retrans = 10;
	fake_xport_setup(&fc);
	if (sfs_origin_open_xport(&conf, &fake_xport_ops, &pool, msg, sizeof(msg)) < 0 ||
	    sfs_origin_start(pool) < 0) {
		ok(0, "open: %s", msg);
		return;
	}
	jobs_fill(jobs, &w);
	ok(run_jobs(pool, jobs, &w) == 0, "every request completes with node n0 slow");
	const char *why = NULL;
	for (int i = 0; i < N_REQS && !why; i++)
		why = job_check(&jobs[i], false);
	ok(!why, "every result right (%s)", why ? why : "yes");
	sfs_origin_node_stats(pool, 0, &st0);
	sfs_origin_node_stats(pool, 1, &st1);
	ok(st0.hedged + st0.reissued > 0 && st0.hedge_wins + st0.reissued > 0,
	   "n0's READs went to n1 (hedged %llu, won there %llu, re-issued %llu)",
	   (unsigned long long)st0.hedged, (unsigned long long)st0.hedge_wins,
	   (unsigned long long)st0.reissued);
	/* Its READs outlive timeo (SUSPECT: no new work), then answer late
	 * (dropped: served already), then a probe finds it alive. */
	bool suspect = false;
	for (int k = 0; k < 300 && !(suspect && st0.state == SFS_NODE_UP); k++) {
		struct timespec ts = {0, 10 * 1000000};
		nanosleep(&ts, NULL);
		sfs_origin_node_stats(pool, 0, &st0);
		suspect = suspect || st0.state == SFS_NODE_SUSPECT;
	}
	ok(suspect, "n0 turned SUSPECT when its READs outlived timeo");
	ok(st0.state == SFS_NODE_UP, "n0 is UP again once a probe is answered (state %d)",
	   st0.state);
	sfs_origin_close(pool);
	for (int i = 0; i < N_REQS; i++) {
		if (jobs[i].req.op == SFS_ORIGIN_READ)
			free(jobs[i].req.buf);
		free(jobs[i].req.link);
	}
}

/* A LOOKUP name longer than any transport carries is answered without a call. */
static void test_long_name(void)
{
	struct fake_xport_conf fc = {0};
	struct sfs_origin_conf conf = make_conf(true, 10);
	char name[SFS_XPORT_NAME_MAX + 2];
	struct sfs_origin_req req = {.op = SFS_ORIGIN_LOOKUP, .name = name};
	sfs_origin *pool;
	char msg[256];

	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = 0;
	fake_xport_setup(&fc);
	if (sfs_origin_open_xport(&conf, &fake_xport_ops, &pool, msg, sizeof(msg)) < 0 ||
	    sfs_origin_start(pool) < 0) {
		ok(0, "open: %s", msg);
		return;
	}
	req.fh = fake_xport_fh(1, 0);
	ok(sfs_origin_call(pool, &req) == -ENAMETOOLONG, "a %zu-byte LOOKUP name: -ENAMETOOLONG",
	   strlen(name));
	name[SFS_XPORT_NAME_MAX] = 0;
	ok(sfs_origin_call(pool, &req) == 0, "a %zu-byte one is sent", strlen(name));
	sfs_origin_close(pool);
}

/* --- a stalled node: hedged together, then avoided --------------------------- */

/* READs go to whichever node's connection pulls first: the one-at-a-time
 * phase sends up to STALL_FIRST until one lands on n0 (about one in 60
 * does), a burst then fills n1's READ slots and n0 may take the rest. */
#define STALL_FIRST    320
#define STALL_BURST    (2 * SFS_ORIGIN_CONN_DEPTH - 1) /* n1's slots + n0's free ones */
#define STALL_READS    (STALL_FIRST + STALL_BURST)
#define STALL_DELAY_MS 100 /* every READ reply: the hedge delay is then 4 x 100 ms */

static struct {
	pthread_mutex_t lock;
	int first_node[STALL_READS]; /* -1: not sent yet */
	uint64_t first_ms[STALL_READS], second_ms[STALL_READS];
	/* n0's first READ, a hedge included: its silence starts there (while
	 * the pool has no READ latency yet, the first READ is hedged after
	 * the 40 ms floor, possibly to n0). */
	uint64_t n0_first_ms;
} stall = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Notes each READ's first send (and its node) and its second (the hedge). */
static int stall_hook(const struct sfs_xport_args *args, int node)
{
	if (args->op != SFS_ORIGIN_READ)
		return 0;
	size_t k = (size_t)(args->offset >> 12);
	uint64_t now = sfs_now_ms();
	pthread_mutex_lock(&stall.lock);
	if (node == 0 && !stall.n0_first_ms)
		stall.n0_first_ms = now;
	if (k < STALL_READS) {
		if (stall.first_node[k] < 0) {
			stall.first_node[k] = node;
			stall.first_ms[k] = now;
		} else if (!stall.second_ms[k]) {
			stall.second_ms[k] = now;
		}
	}
	pthread_mutex_unlock(&stall.lock);
	return 0;
}

/* READ k of the stall tests: 4 KiB at k x 4 KiB. */
static void stall_job(struct job *j, struct waiter *w, const struct sfs_fh *fh, int k)
{
	*j = (struct job){.w = w, .size = fh->len};
	j->req = (struct sfs_origin_req){.op = SFS_ORIGIN_READ,
					 .fh = *fh,
					 .offset = (uint64_t)k << 12,
					 .count = 4096,
					 .buf = malloc(4096),
					 .done = job_done,
					 .arg = j};
}

/* Wrong bytes or results among READs [from, to). */
static int stall_wrong(const struct job *jobs, const struct sfs_fh *fh, int from, int to)
{
	int wrong = 0;

	for (int k = from; k < to; k++) {
		if (jobs[k].req.result != 4096) {
			wrong++;
			continue;
		}
		for (uint32_t b = 0; b < 4096; b++)
			wrong += ((uint8_t *)jobs[k].req.buf)[b] !=
				 fake_xport_byte(fh, ((uint64_t)k << 12) + b);
	}
	return wrong;
}

static void sleep_until_ms(uint64_t at)
{
	uint64_t now = sfs_now_ms();

	if (now < at) {
		struct timespec ts = {(time_t)((at - now) / 1000),
				      (long)((at - now) % 1000) * 1000000};
		nanosleep(&ts, NULL);
	}
}

/* A pool of two nodes where n0 never answers a READ (a stall far under
 * timeo: 30 s) and n1 answers each in STALL_DELAY_MS. */
struct stall_run {
	sfs_origin *pool;
	struct waiter w;
	struct job jobs[STALL_READS];
	struct sfs_fh fh;
	int used;
	uint64_t n0_silent_since; /* n0's first READ was sent (0: no READ of its own went there) */
	bool hung;
};

/* Open the pool, then send READs one at a time until one lands on n0; n0's
 * silence began at its first READ (this one, or an earlier one's hedge).
 * That READ is not waited for (it waits for its hedge).
 * Returns false, the pool closed, where none did (or one hung). */
static bool stall_start(struct stall_run *r)
{
	struct fake_xport_conf fc = {.reply_delay_ms = STALL_DELAY_MS,
				     .slow_nodes = 1,
				     .slow_ms = 60000,
				     .send_hook = stall_hook};
	struct sfs_origin_conf conf = make_conf(false, 300); /* timeo 30 s */
	char msg[256];

	*r = (struct stall_run){.w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0},
				.fh = fake_xport_fh(11, STALL_READS * 4096)};
	pthread_mutex_lock(&stall.lock);
	for (int k = 0; k < STALL_READS; k++) {
		stall.first_node[k] = -1;
		stall.second_ms[k] = 0;
	}
	stall.n0_first_ms = 0;
	pthread_mutex_unlock(&stall.lock);
	fake_xport_setup(&fc);
	if (sfs_origin_open_xport(&conf, &fake_xport_ops, &r->pool, msg, sizeof(msg)) < 0 ||
	    sfs_origin_start(r->pool) < 0) {
		ok(0, "open: %s", msg);
		return false;
	}
	while (r->used < STALL_FIRST && !r->n0_silent_since && !r->hung) {
		int k = r->used++;
		stall_job(&r->jobs[k], &r->w, &r->fh, k);
		pthread_mutex_lock(&r->w.lock);
		r->w.pending++;
		pthread_mutex_unlock(&r->w.lock);
		sfs_origin_submit(r->pool, &r->jobs[k].req);
		/* Sent to n0, or served by n1 (in STALL_DELAY_MS). */
		for (uint64_t until = sfs_now_ms() + 5000;;) {
			pthread_mutex_lock(&stall.lock);
			int node = stall.first_node[k];
			uint64_t at = stall.n0_first_ms;
			pthread_mutex_unlock(&stall.lock);
			pthread_mutex_lock(&r->w.lock);
			bool done = r->w.pending == 0;
			pthread_mutex_unlock(&r->w.lock);
			if (node == 0) {
				r->n0_silent_since = at;
				break;
			}
			if (done)
				break;
			if (sfs_now_ms() > until) {
				r->hung = true;
				break;
			}
			struct timespec ts = {0, 2000000};
			nanosleep(&ts, NULL);
		}
	}
	ok(r->n0_silent_since && !r->hung, "one READ at a time: one went to n0 (after %d READs%s)",
	   r->used, r->hung ? ", hung" : "");
	if (r->n0_silent_since && !r->hung)
		return true;
	sfs_origin_close(r->pool);
	return false;
}

/* Send a burst of STALL_BURST READs (more than n1's slots) and wait for
 * every READ sent so far. Returns the burst's first index. */
static int stall_burst(struct stall_run *r)
{
	struct sfs_origin_req *burst[STALL_BURST];
	int from = r->used;

	for (int i = 0; i < STALL_BURST; i++) {
		stall_job(&r->jobs[r->used], &r->w, &r->fh, r->used);
		burst[i] = &r->jobs[r->used++].req;
	}
	pthread_mutex_lock(&r->w.lock);
	r->w.pending += STALL_BURST;
	pthread_mutex_unlock(&r->w.lock);
	sfs_origin_submit_batch(r->pool, burst, STALL_BURST);
	r->hung = wait_pending(&r->w) != 0;
	return from;
}

static void stall_end(struct stall_run *r)
{
	sfs_origin_close(r->pool);
	int wrong = stall_wrong(r->jobs, &r->fh, 0, r->used);
	ok(!wrong && !r->hung, "every READ served right while n0 stalls (%d wrong%s)", wrong,
	   r->hung ? ", hung" : "");
	for (int k = 0; k < r->used; k++)
		free(r->jobs[k].req.buf);
}

/* READs sent to n0 during its silence, before it reached the hedge delay
 * (4 x the recent READ latency, here 400 ms), are hedged together once it
 * does, a tick or two later, not each after its own 400 ms: the READs a
 * reader waits on in order are not hedged in turn. The burst goes 250 ms
 * into the silence: n1's slots take 4 READs, n0's free ones the rest. Its
 * READs on n0 wait ~150 ms plus a tick or two for their hedge, plus up to
 * one n1 READ (100 ms) for a free n1 slot; with the stall rule disabled,
 * 400 ms. */
static void test_stall_hedged_together(void)
{
	static struct stall_run r;

	if (!stall_start(&r))
		return;
	sleep_until_ms(r.n0_silent_since + 250);
	int from = stall_burst(&r);
	int late_on_n0 = 0, hedged_soon = 0;
	uint64_t worst = 0;
	pthread_mutex_lock(&stall.lock);
	for (int k = from; k < r.used; k++) {
		if (stall.first_node[k] != 0)
			continue;
		uint64_t wait = stall.second_ms[k] - stall.first_ms[k];
		late_on_n0++;
		hedged_soon += stall.second_ms[k] && wait < 3 * STALL_DELAY_MS;
		worst = wait > worst ? wait : worst;
	}
	pthread_mutex_unlock(&stall.lock);
	diag("%d READs sent, %d of the burst of %d first to n0", r.used, late_on_n0, STALL_BURST);
	stall_end(&r);
	ok(late_on_n0 > 0, "READs of the burst went to n0 during its silence (%d)", late_on_n0);
	ok(late_on_n0 > 0 && hedged_soon == late_on_n0,
	   "each was hedged within %d ms, not after its own %d ms (slowest %llu ms)",
	   3 * STALL_DELAY_MS, 4 * STALL_DELAY_MS, (unsigned long long)worst);
}

/* Once n0's silence passed the hedge delay, it takes no new READ while n1
 * is up, though it has free slots (one READ in flight of its 4): a READ
 * sent there would wait for its hedge. Before this rule the same burst put
 * the READs n1's slots could not take on n0. */
static void test_stall_avoided(void)
{
	static struct stall_run r;

	if (!stall_start(&r))
		return;
	sleep_until_ms(r.n0_silent_since + 4 * STALL_DELAY_MS + 150);
	int from = stall_burst(&r), on_n0 = 0;
	pthread_mutex_lock(&stall.lock);
	for (int k = from; k < r.used; k++)
		on_n0 += stall.first_node[k] == 0;
	pthread_mutex_unlock(&stall.lock);
	stall_end(&r);
	ok(on_n0 == 0,
	   "no READ of the burst went to n0 after its silence passed the delay (%d of %d)", on_n0,
	   STALL_BURST);
}

static void test_ioerr_all(void)
{
	test_ioerr(false, 0);
	test_ioerr(false, 40000);
	test_ioerr(true, 0);
}

/* --- background requests: their share, their rate, promotion ---------------- */

#define BG_READS 16
#define FG_READS 6
#define BG_SEED	 500 /* background READs' handles: seeds 500.., ordinary 600.. */
#define FG_SEED	 600
#define BG_DELAY 150 /* ms per READ reply: the order of sends is the evidence */
#define BG_RSIZE 65536

static struct {
	pthread_mutex_t lock;
	uint64_t order[4 * (BG_READS + FG_READS)]; /* seeds in the order sent (hedges too) */
	unsigned n;
} bg_sends = {.lock = PTHREAD_MUTEX_INITIALIZER};

static int bg_hook(const struct sfs_xport_args *args, int node)
{
	(void)node;
	if (args->op != SFS_ORIGIN_READ)
		return 0;
	uint64_t seed;
	memcpy(&seed, args->fh.data, sizeof(seed)); /* fake_xport_fh: the seed first */
	pthread_mutex_lock(&bg_sends.lock);
	if (bg_sends.n < sizeof(bg_sends.order) / sizeof(bg_sends.order[0]))
		bg_sends.order[bg_sends.n++] = seed;
	pthread_mutex_unlock(&bg_sends.lock);
	return 0;
}

/* n READs of 64 KiB (files seed.., one each) into jobs, background or not. */
static void bg_jobs(struct job *jobs, unsigned n, uint64_t seed, bool background, struct waiter *w)
{
	for (unsigned i = 0; i < n; i++) {
		struct job *j = &jobs[i];
		memset(j, 0, sizeof(*j));
		j->w = w;
		j->size = BG_RSIZE;
		j->req = (struct sfs_origin_req){.op = SFS_ORIGIN_READ,
						 .fh = fake_xport_fh(seed + i, BG_RSIZE),
						 .count = BG_RSIZE,
						 .buf = malloc(BG_RSIZE),
						 .background = background,
						 .done = job_done,
						 .arg = j};
	}
}

static void bg_submit(sfs_origin *pool, struct job *jobs, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		sfs_origin_submit(pool, &jobs[i].req);
}

static const char *bg_check_free(struct job *jobs, unsigned n)
{
	const char *why = NULL;
	for (unsigned i = 0; i < n; i++) {
		why = why ? why : job_check(&jobs[i], false);
		free(jobs[i].req.buf);
	}
	return why;
}

static size_t waiter_pending(struct waiter *w)
{
	pthread_mutex_lock(&w->lock);
	size_t n = w->pending;
	pthread_mutex_unlock(&w->lock);
	return n;
}

/* Every byte of both sets right (one TAP line); frees their buffers. */
static void bg_check_both(struct job *bg, struct job *fg)
{
	const char *why = bg_check_free(bg, BG_READS);
	const char *why_fg = bg_check_free(fg, FG_READS);
	why = why ? why : why_fg;
	ok(!why, "every byte right (%s)", why ? why : "yes");
}

static void msleep(unsigned ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* Position of seed in the send order, or -1. */
static int bg_sent_at(uint64_t seed)
{
	int at = -1;
	pthread_mutex_lock(&bg_sends.lock);
	for (unsigned k = 0; k < bg_sends.n && at < 0; k++)
		if (bg_sends.order[k] == seed)
			at = (int)k;
	pthread_mutex_unlock(&bg_sends.lock);
	return at;
}

/* A started pool on the fake transport set up as fc says, or NULL (after
 * a failed TAP line). */
static sfs_origin *pool_up(const struct fake_xport_conf *fc, const struct sfs_origin_conf *conf)
{
	sfs_origin *pool;
	char msg[256];

	fake_xport_setup(fc);
	if (sfs_origin_open_xport(conf, &fake_xport_ops, &pool, msg, sizeof(msg)) < 0) {
		ok(0, "open: %s", msg);
		return NULL;
	}
	if (sfs_origin_start(pool) < 0) {
		ok(0, "start");
		sfs_origin_close(pool);
		return NULL;
	}
	return pool;
}

static double secs_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* 2 nodes x 1 connection x SFS_ORIGIN_CONN_DEPTH slots, a quarter of them
 * for background READs: they never hold more, ordinary READs submitted
 * behind them go first, and a promoted one leaves the background queue. */
static void test_background_share(void)
{
	struct fake_xport_conf fc = {.reply_delay_ms = BG_DELAY, .send_hook = bg_hook};
	struct sfs_origin_conf conf = make_conf(true, 100);
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct job bg[BG_READS], fg[FG_READS];
	struct sfs_origin_background_stats st;
	unsigned max_inflight = 0;
	sfs_origin *pool;

	conf.rsize_bytes = BG_RSIZE;
	conf.background_pct = 25;
	bg_sends.n = 0;
	if (!(pool = pool_up(&fc, &conf)))
		return;
	bg_jobs(bg, BG_READS, BG_SEED, true, &w);
	bg_jobs(fg, FG_READS, FG_SEED, false, &w);
	w.pending = BG_READS + FG_READS;
	bg_submit(pool, bg, BG_READS);
	msleep(BG_DELAY / 5);
	sfs_origin_background_stats(pool, &st);
	unsigned slots = st.slots;
	ok(slots == 2 && st.inflight == 2 && st.queued == BG_READS - 2,
	   "a quarter of 8 slots: %u background READs in flight, %zu queued (slots %u)",
	   st.inflight, st.queued, slots);
	/* The last queued background READ is promoted: it goes next, ahead of
	 * the 13 queued before it; then ordinary READs, sent at once. */
	sfs_origin_promote(pool, &bg[BG_READS - 1].req);
	bg_submit(pool, fg, FG_READS);
	for (int k = 0; k < 4000 && waiter_pending(&w); k++) {
		sfs_origin_background_stats(pool, &st);
		max_inflight = st.inflight > max_inflight ? st.inflight : max_inflight;
		msleep(1);
	}
	ok(wait_pending(&w) == 0, "every READ completes");
	ok(max_inflight <= slots, "background READs in flight never above their share (%u)",
	   max_inflight);
	int promoted_at = bg_sent_at(BG_SEED + BG_READS - 1), third_bg = -1;
	for (unsigned i = 2; i < BG_READS - 1 && third_bg < 0; i++)
		third_bg = bg_sent_at(BG_SEED + i);
	int last_fg = -1;
	for (unsigned i = 0; i < FG_READS; i++) {
		int at = bg_sent_at(FG_SEED + i);
		last_fg = at > last_fg ? at : last_fg;
	}
	ok(promoted_at == 2, "the promoted READ was sent right after the first two (at %d)",
	   promoted_at);
	ok(last_fg >= 0 && last_fg < third_bg,
	   "ordinary READs submitted behind 13 queued background ones were all sent first "
	   "(last at %d, next background at %d)",
	   last_fg, third_bg);
	sfs_origin_background_stats(pool, &st);
	ok(st.promoted == 1 && st.read_requests == BG_READS - 1 &&
	       st.read_bytes == (uint64_t)(BG_READS - 1) * BG_RSIZE,
	   "stats: %llu promoted, %llu background READs, %llu bytes",
	   (unsigned long long)st.promoted, (unsigned long long)st.read_requests,
	   (unsigned long long)st.read_bytes);
	bg_check_both(bg, fg);
	sfs_origin_close(pool);
}

/* background_rate: 16 x 64 KiB at 1 MiB/s (no share limit) take about a
 * second, not one reply delay; ordinary READs are not held by it. */
static void test_background_rate(void)
{
	struct fake_xport_conf fc = {.reply_delay_ms = 5};
	struct sfs_origin_conf conf = make_conf(true, 100);
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct waiter wf = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	struct job bg[BG_READS], fg[FG_READS];
	struct sfs_origin_background_stats st;
	struct timespec t0;
	sfs_origin *pool;

	conf.rsize_bytes = BG_RSIZE;
	conf.background_rate = 1u << 20;
	if (!(pool = pool_up(&fc, &conf)))
		return;
	bg_jobs(bg, BG_READS, BG_SEED, true, &w);
	bg_jobs(fg, FG_READS, FG_SEED, false, &wf);
	w.pending = BG_READS;
	wf.pending = FG_READS;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	bg_submit(pool, bg, BG_READS);
	msleep(50);
	bg_submit(pool, fg, FG_READS);
	ok(wait_pending(&wf) == 0, "ordinary READs complete while the background waits");
	double sf = secs_since(&t0);
	ok(wait_pending(&w) == 0, "every background READ completes");
	double s = secs_since(&t0);
	sfs_origin_background_stats(pool, &st);
	/* A lower bound only: at most 100 ms worth goes at once, the rest at
	 * the rate (a slow machine only makes it longer). */
	ok(s >= 0.75, "1 MiB of background READs at 1 MiB/s took %.2f s (>= 0.75)", s);
	ok(sf < s, "the ordinary READs were done first (%.2f s)", sf);
	ok(st.rate_limited_ms > 0 && st.rate_limit == 1u << 20, "stats: %.2f s waited for the rate",
	   (double)st.rate_limited_ms / 1000);
	bg_check_both(bg, fg);
	sfs_origin_close(pool);
}

/* soft: a request that waits its turn in the queue longer than timeo x
 * retrans while the nodes answer is served, not failed (64 READs through 8
 * slots at 100 ms each: 0.8 s of queue against a 0.5 s deadline). */
static void test_soft_queue(void)
{
	struct fake_xport_conf fc = {.reply_delay_ms = 100};
	struct sfs_origin_conf conf = make_conf(false, 5);
	struct waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
	enum { N = 64 };
	struct job *jobs = calloc(N, sizeof(*jobs));
	sfs_origin *pool;

	conf.retrans = 1;
	conf.rsize_bytes = BG_RSIZE;
	if (!jobs || !(pool = pool_up(&fc, &conf))) {
		free(jobs);
		return;
	}
	bg_jobs(jobs, N, FG_SEED, false, &w);
	w.pending = N;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	bg_submit(pool, jobs, N);
	ok(wait_pending(&w) == 0, "soft queue: every READ completes");
	double s = secs_since(&t0);
	unsigned failed = 0;
	for (unsigned i = 0; i < N; i++)
		failed += jobs[i].req.result < 0;
	ok(failed == 0,
	   "soft queue: none failed after waiting in the queue (%u of %d failed, "
	   "%.2f s in all, deadline 0.5 s)",
	   failed, N, s);
	const char *why = bg_check_free(jobs, N);
	ok(!why, "soft queue: every byte right (%s)", why ? why : "yes");
	sfs_origin_close(pool);
	free(jobs);
}

static const struct tap_test tests[] = {
    {"hedge_freed", test_hedge_freed},
    {"long_name", test_long_name},
    {"slow_node", test_slow_node},
    {"stall", test_stall_hedged_together},
    {"stall_avoided", test_stall_avoided},
    {"ioerr", test_ioerr_all},
    {"background_share", test_background_share},
    {"background_rate", test_background_rate},
    {"soft_queue", test_soft_queue},
};

/* With no arguments, runs every test; otherwise only the named ones. */
int main(int argc, char **argv)
{
	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
