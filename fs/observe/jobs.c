// SPDX-License-Identifier: Apache-2.0
/*
 * jobs — per-job read accounting. See jobs.h for the contract.
 *
 *   pid cache (SFS_JOBS_PID_ENTRIES)              job table (SFS_JOBS_MAX)
 *   set = hash(key) % N_SETS, N_WAYS ways         slot 0: "other" (never freed)
 *   +------+------+------+------+                 +---------------------------+
 *   | key  | key  | key  | key  | --(slot,gen)--> | label, gen, counters      |
 *   +------+------+------+------+                 | (atomics), wait histogram |
 *   one of N_LOCKS striped mutexes per set        +---------------------------+
 *
 * The key is the caller's pid (a thread id), or 2^32 + uid for pid 0. A
 * pid entry points at a job by (slot, gen); a freed or reused slot bumps
 * gen, so stale entries and reads that began before the reuse are ignored.
 * Misses read /proc/PID/cgroup with no lock held, then take j->lock to find
 * or add the job, then the set's lock to insert the entry.
 */
#include "jobs.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_WAYS	   4
#define N_SETS	   (SFS_JOBS_PID_ENTRIES / N_WAYS)
#define N_LOCKS	   64
#define SLOT_OTHER 0

const double sfs_jobs_wait_bounds_s[SFS_JOBS_WAIT_BUCKETS] = {
    10e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3,
    10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 0.5,	1.0,	5.0};

struct pid_entry {
	uint64_t key;	     /* 0: empty */
	uint32_t slot, gen;  /* the job this key resolved to */
	uint64_t expires_ns; /* resolve again after this */
	uint64_t used_ns;    /* last hit: the least recently used way is replaced */
};

struct job {
	char label[SFS_JOBS_LABEL_MAX]; /* protected by jobs->lock; fixed while gen is */
	bool used;			/* protected by jobs->lock */
	uint32_t gen;			/* atomic; written under jobs->lock */
	uint64_t last_ns;		/* atomic: last read begin or end */
	uint64_t inflight;		/* atomic: reads between begin and end */
	uint64_t stamp_ns;		/* atomic: last busy-time update */
	uint64_t busy_ns;		/* atomic */
	uint64_t read_bytes, read_requests, cache_bytes, wait_ns; /* atomic */
	uint64_t wait_buckets[SFS_JOBS_WAIT_BUCKETS + 1];	  /* atomic; last: +Inf */
} __attribute__((aligned(64)));

struct sfs_jobs {
	char proc_root[128];	  /* set at open, then read-only */
	uint64_t ttl_ns, idle_ns; /* set at open, then read-only */
	uint64_t (*now_ns)(void); /* set at open, then read-only */
	/* Lock order: set_locks[i] and lock are never held together. */
	pthread_mutex_t set_locks[N_LOCKS];
	struct pid_entry pids[N_SETS][N_WAYS]; /* set s protected by set_locks[s % N_LOCKS] */
	pthread_mutex_t lock;		       /* the job table's labels and used flags */
	struct job jobs[SFS_JOBS_MAX];
	uint64_t pid_entries, cgroup_reads, evicted_jobs; /* atomic */
};

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#define LOAD(p)	    __atomic_load_n(p, __ATOMIC_RELAXED)
#define ADD(p, v)   __atomic_fetch_add(p, v, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

/* --- cgroup parsing -------------------------------------------------------- */

static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_uid_char(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-' ||
	       c == '_';
}

/* "job_<digits>" exactly. */
static bool slurm_component(const char *c, size_t n, char *label)
{
	if (n < 5 || n > 4 + 19 || memcmp(c, "job_", 4) != 0)
		return false;
	for (size_t i = 4; i < n; i++)
		if (!is_digit(c[i]))
			return false;
	snprintf(label, SFS_JOBS_LABEL_MAX, "slurm/%.*s", (int)(n - 4), c + 4);
	return true;
}

/* "pod<uid>", "pod_<uid>", "...-pod<uid>[.suffix]": "pod" at the start of
 * the component or after '-', then a uid of 8..48 hex digits, '-' or '_'
 * that runs to the component's end or a '.'. */
static bool k8s_component(const char *c, size_t n, char *label)
{
	for (size_t p = 0; p + 3 < n; p++) {
		if (memcmp(c + p, "pod", 3) != 0 || (p > 0 && c[p - 1] != '-'))
			continue;
		size_t u = p + 3 + (c[p + 3] == '_'), e = u;
		while (e < n && is_uid_char(c[e]))
			e++;
		if (e - u < 8 || e - u > 48 || (e < n && c[e] != '.'))
			continue;
		int len = snprintf(label, SFS_JOBS_LABEL_MAX, "k8s/%.*s", (int)(e - u), c + u);
		for (int i = 4; i < len; i++)
			if (label[i] == '_')
				label[i] = '-';
		return true;
	}
	return false;
}

/* The first path component of [path, path + n) that names a job. */
static bool parse_path(const char *path, size_t n, char *label)
{
	size_t i = 0;

	while (i < n) {
		while (i < n && path[i] == '/')
			i++;
		size_t s = i;
		while (i < n && path[i] != '/')
			i++;
		if (i > s && (slurm_component(path + s, i - s, label) ||
			      k8s_component(path + s, i - s, label)))
			return true;
	}
	return false;
}

/* Lines "ID:controllers:path"; v2 (ID 0, no controllers) first, then v1. */
bool sfs_jobs_parse_cgroup(const char *text, char *label)
{
	for (int pass = 0; pass < 2; pass++) {
		for (const char *l = text; *l;) {
			const char *end = strchr(l, '\n');
			size_t n = end ? (size_t)(end - l) : strlen(l);
			const char *c1 = memchr(l, ':', n);
			const char *c2 = c1 ? memchr(c1 + 1, ':', n - (size_t)(c1 + 1 - l)) : NULL;
			bool v2 = c1 && c2 && c2 == c1 + 1 && c1 - l == 1 && l[0] == '0';
			if (c2 && v2 == (pass == 0) &&
			    parse_path(c2 + 1, n - (size_t)(c2 + 1 - l), label))
				return true;
			l += n + (end != NULL);
		}
	}
	return false;
}

/* --- the job table ---------------------------------------------------------- */

/* Give slot s to label. Caller holds j->lock. */
static void job_assign(sfs_jobs *j, uint32_t s, const char *label, uint64_t now)
{
	struct job *b = &j->jobs[s];
	uint32_t gen = LOAD(&b->gen) + 1;

	memset((char *)b + offsetof(struct job, last_ns), 0,
	       sizeof(*b) - offsetof(struct job, last_ns));
	snprintf(b->label, sizeof(b->label), "%s", label);
	b->used = true;
	STORE(&b->last_ns, now);
	__atomic_store_n(&b->gen, gen ? gen : 1, __ATOMIC_RELEASE);
}

/* Remove jobs idle for longer than idle_ns (never "other", never one with a
 * read in flight). Returns the idlest removable slot's index or 0 if none is
 * free, without removing it when `all` is false. Caller holds j->lock. */
static uint32_t job_age_out(sfs_jobs *j, uint64_t now)
{
	uint32_t free_slot = 0;

	for (uint32_t s = 1; s < SFS_JOBS_MAX; s++) {
		struct job *b = &j->jobs[s];
		if (b->used && !LOAD(&b->inflight) && now - LOAD(&b->last_ns) > j->idle_ns) {
			b->used = false;
			__atomic_store_n(&b->gen, b->gen + 1, __ATOMIC_RELEASE);
			ADD(&j->evicted_jobs, 1);
		}
		if (!b->used && !free_slot)
			free_slot = s;
	}
	return free_slot;
}

/* The slot and generation of label's job, added if new; "other" when the
 * table is full of active jobs. Takes j->lock. */
static void job_find(sfs_jobs *j, const char *label, uint64_t now, uint32_t *slot, uint32_t *gen)
{
	uint32_t s, free_slot = 0;

	pthread_mutex_lock(&j->lock);
	for (s = 1; s < SFS_JOBS_MAX; s++) {
		if (j->jobs[s].used && !strcmp(j->jobs[s].label, label))
			break;
		if (!j->jobs[s].used && !free_slot)
			free_slot = s;
	}
	if (s == SFS_JOBS_MAX) {
		if (!free_slot)
			free_slot = job_age_out(j, now);
		s = free_slot; /* 0: "other" */
		if (s)
			job_assign(j, s, label, now);
	}
	*slot = s;
	*gen = j->jobs[s].gen;
	pthread_mutex_unlock(&j->lock);
}

/* --- the pid cache ----------------------------------------------------------- */

static uint32_t set_of(uint64_t key) { return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 54); }
_Static_assert(N_SETS == 1024, "set_of() takes the top 10 bits");

/* A fresh entry for key: true and its job. */
static bool pid_lookup(sfs_jobs *j, uint64_t key, uint64_t now, uint32_t *slot, uint32_t *gen)
{
	uint32_t set = set_of(key);
	bool hit = false;

	pthread_mutex_lock(&j->set_locks[set % N_LOCKS]);
	for (int w = 0; w < N_WAYS; w++) {
		struct pid_entry *e = &j->pids[set][w];
		if (e->key == key && e->expires_ns > now) {
			e->used_ns = now;
			*slot = e->slot;
			*gen = e->gen;
			hit = true;
			break;
		}
	}
	pthread_mutex_unlock(&j->set_locks[set % N_LOCKS]);
	return hit && __atomic_load_n(&j->jobs[*slot].gen, __ATOMIC_ACQUIRE) == *gen;
}

/* Insert or refresh key: its own way, else an empty one, else the LRU one. */
static void pid_insert(sfs_jobs *j, uint64_t key, uint64_t now, uint32_t slot, uint32_t gen)
{
	uint32_t set = set_of(key);
	struct pid_entry *victim = NULL;

	pthread_mutex_lock(&j->set_locks[set % N_LOCKS]);
	for (int w = 0; w < N_WAYS; w++) {
		struct pid_entry *e = &j->pids[set][w];
		if (e->key == key) {
			victim = e;
			break;
		}
		if (!victim || (victim->key && (!e->key || e->used_ns < victim->used_ns)))
			victim = e;
	}
	if (!victim->key)
		ADD(&j->pid_entries, 1);
	*victim = (struct pid_entry){
	    .key = key, .slot = slot, .gen = gen, .expires_ns = now + j->ttl_ns, .used_ns = now};
	pthread_mutex_unlock(&j->set_locks[set % N_LOCKS]);
}

/* The label of pid's job from PROC/pid/cgroup, else "uid/<uid>". */
static void resolve(sfs_jobs *j, pid_t pid, uid_t uid, char *label)
{
	char path[160], buf[4096];
	ssize_t n = -1;

	if (pid > 0) {
		snprintf(path, sizeof(path), "%s/%d/cgroup", j->proc_root, (int)pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			n = read(fd, buf, sizeof(buf) - 1);
			close(fd);
		}
		ADD(&j->cgroup_reads, 1);
	}
	if (n > 0) {
		buf[n] = 0;
		if (sfs_jobs_parse_cgroup(buf, label))
			return;
	}
	snprintf(label, SFS_JOBS_LABEL_MAX, "uid/%u", (unsigned)uid);
}

void sfs_jobs_label(sfs_jobs *j, pid_t pid, uid_t uid, char *label)
{
	if (j)
		resolve(j, pid, uid, label);
	else
		snprintf(label, SFS_JOBS_LABEL_MAX, "uid/%u", (unsigned)uid);
}

/* --- the read path ------------------------------------------------------------ */

/* Busy time as in /proc/diskstats' io_ticks: at every begin and end the time
 * since the last stamp counts as busy if a read was waiting in it. */
static void busy_tick(struct job *b, uint64_t now, bool busy)
{
	uint64_t stamp = LOAD(&b->stamp_ns);

	while (stamp < now)
		if (__atomic_compare_exchange_n(&b->stamp_ns, &stamp, now, false, __ATOMIC_RELAXED,
						__ATOMIC_RELAXED)) {
			if (busy)
				ADD(&b->busy_ns, now - stamp);
			return;
		}
}

struct sfs_job_read sfs_jobs_read_begin(sfs_jobs *j, pid_t pid, uid_t uid)
{
	struct sfs_job_read r = {0};

	if (!j)
		return r;
	uint64_t now = j->now_ns();
	uint64_t key = pid > 0 ? (uint64_t)pid : (1ull << 32) | uid;
	if (!pid_lookup(j, key, now, &r.slot, &r.gen)) {
		char label[SFS_JOBS_LABEL_MAX];
		resolve(j, pid, uid, label);
		job_find(j, label, now, &r.slot, &r.gen);
		pid_insert(j, key, now, r.slot, r.gen);
	}
	struct job *b = &j->jobs[r.slot];
	busy_tick(b, now, LOAD(&b->inflight) > 0);
	ADD(&b->inflight, 1);
	STORE(&b->last_ns, now);
	r.start_ns = now;
	return r;
}

void sfs_jobs_read_end(sfs_jobs *j, const struct sfs_job_read *r, ssize_t bytes,
		       uint64_t cache_bytes)
{
	if (!j || !r->gen)
		return;
	struct job *b = &j->jobs[r->slot];
	if (__atomic_load_n(&b->gen, __ATOMIC_ACQUIRE) != r->gen)
		return; /* the slot went to another job meanwhile */
	uint64_t now = j->now_ns(), wait = now > r->start_ns ? now - r->start_ns : 0;
	int k = 0;
	while (k < SFS_JOBS_WAIT_BUCKETS && (double)wait > sfs_jobs_wait_bounds_s[k] * 1e9)
		k++;
	ADD(&b->wait_buckets[k], 1);
	ADD(&b->wait_ns, wait);
	ADD(&b->read_requests, 1);
	if (bytes > 0) {
		ADD(&b->read_bytes, (uint64_t)bytes);
		ADD(&b->cache_bytes, cache_bytes);
	}
	busy_tick(b, now, true);
	__atomic_fetch_sub(&b->inflight, 1, __ATOMIC_RELAXED);
	STORE(&b->last_ns, now);
}

/* --- open, close, snapshot ------------------------------------------------------ */

int sfs_jobs_open(const struct sfs_jobs_conf *conf, sfs_jobs **out)
{
	sfs_jobs *j = calloc(1, sizeof(*j));

	if (!j)
		return -ENOMEM;
	snprintf(j->proc_root, sizeof(j->proc_root), "%s",
		 conf && conf->proc_root ? conf->proc_root : "/proc");
	j->ttl_ns =
	    (conf && conf->pid_ttl_ms ? conf->pid_ttl_ms : SFS_JOBS_DEFAULT_TTL_MS) * 1000000ull;
	j->idle_ns =
	    (conf && conf->idle_ms ? conf->idle_ms : SFS_JOBS_DEFAULT_IDLE_MS) * 1000000ull;
	j->now_ns = conf && conf->now_ns ? conf->now_ns : mono_ns;
	for (int i = 0; i < N_LOCKS; i++)
		pthread_mutex_init(&j->set_locks[i], NULL);
	pthread_mutex_init(&j->lock, NULL);
	job_assign(j, SLOT_OTHER, "other", j->now_ns());
	*out = j;
	return 0;
}

void sfs_jobs_close(sfs_jobs *j)
{
	if (!j)
		return;
	for (int i = 0; i < N_LOCKS; i++)
		pthread_mutex_destroy(&j->set_locks[i]);
	pthread_mutex_destroy(&j->lock);
	free(j);
}

static void job_copy(const struct job *b, struct sfs_job_stats *o)
{
	memcpy(o->label, b->label, sizeof(o->label));
	o->read_bytes = LOAD(&b->read_bytes);
	o->read_requests = LOAD(&b->read_requests);
	o->cache_bytes = LOAD(&b->cache_bytes);
	o->wait_ns = LOAD(&b->wait_ns);
	o->busy_ns = LOAD(&b->busy_ns);
	o->wait_count = 0;
	for (int k = 0; k <= SFS_JOBS_WAIT_BUCKETS; k++) {
		uint64_t v = LOAD(&b->wait_buckets[k]);
		if (k < SFS_JOBS_WAIT_BUCKETS)
			o->wait_buckets[k] = v;
		o->wait_count += v;
	}
}

size_t sfs_jobs_snapshot(sfs_jobs *j, struct sfs_job_stats *out, size_t max,
			 struct sfs_jobs_totals *totals)
{
	size_t n = 0, used = 0;

	pthread_mutex_lock(&j->lock);
	job_age_out(j, j->now_ns());
	for (uint32_t s = 0; s < SFS_JOBS_MAX; s++) {
		const struct job *b = &j->jobs[s];
		if (!b->used || (s == SLOT_OTHER && !LOAD(&b->read_requests)))
			continue; /* "other" only once something was counted there */
		used++;
		if (n < max)
			job_copy(b, &out[n++]);
	}
	pthread_mutex_unlock(&j->lock);
	if (totals) {
		totals->pid_entries = LOAD(&j->pid_entries);
		totals->cgroup_reads = LOAD(&j->cgroup_reads);
		totals->jobs = used;
		totals->evicted_jobs = LOAD(&j->evicted_jobs);
	}
	return n;
}
