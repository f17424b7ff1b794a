// SPDX-License-Identifier: Apache-2.0
/*
 * test_jobs — fs/observe/jobs.c: the cgroup line parser (v1, v2, Slurm, Kubernetes
 * with the cgroupfs and systemd drivers), the bounded pid cache (expiry,
 * replacement, 10,000 pids), the bounded job table (overflow to "other",
 * idle jobs aging out), the wait histogram and busy time.
 *
 * Linked with fs/observe/jobs.c only. /proc is a fake tree under /tmp (one
 * PID/cgroup file per test pid); the clock is a fake one the test moves.
 */
#include "../../fs/observe/jobs.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char proc_dir[64];
static uint64_t fake_now = 1000000000ull; /* ns; moved by the test only */
static uint64_t fake_clock(void) { return __atomic_load_n(&fake_now, __ATOMIC_RELAXED); }
static void advance_us(uint64_t us)
{
	__atomic_fetch_add(&fake_now, us * 1000ull, __ATOMIC_RELAXED);
}
static void advance_ms(uint64_t ms) { advance_us(ms * 1000); }

/* --- the parser -------------------------------------------------------------- */

static void expect(const char *text, const char *want, const char *what)
{
	char label[SFS_JOBS_LABEL_MAX] = "";
	bool found = sfs_jobs_parse_cgroup(text, label);

	if (want)
		ok(found && !strcmp(label, want), "%s -> %s (got %s)", what, want,
		   found ? label : "nothing");
	else
		ok(!found, "%s -> no job (got %s)", what, found ? label : "nothing");
}

#define UID_DASH "1a2b3c4d-5e6f-7a8b-9c0d-e1f2a3b4c5d6"
#define UID_US	 "1a2b3c4d_5e6f_7a8b_9c0d_e1f2a3b4c5d6"

static void test_parser(void)
{
	expect("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n", "slurm/4242",
	       "v2 Slurm (slurmstepd.scope)");
	expect("12:pids:/\n4:memory:/slurm/uid_1000/job_4242/step_0/task_0\n"
	       "3:cpuset:/slurm/uid_1000/job_4242/step_0\n0::/user.slice\n",
	       "slurm/4242", "v1 Slurm in a hybrid file");
	expect("0::/slurm_node7/uid_0/job_17/step_batch", "slurm/17",
	       "multiple-slurmd prefix, no final newline");
	expect("0::/kubepods/burstable/pod" UID_DASH
	       "/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n",
	       "k8s/" UID_DASH, "v2 Kubernetes, cgroupfs driver");
	expect("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" UID_US
	       ".slice/cri-containerd-0123456789abcdef.scope\n",
	       "k8s/" UID_DASH, "v2 Kubernetes, systemd driver (underscores)");
	expect("0::/kubepods.slice/kubepods-pod" UID_US ".slice/crio-abc.scope\n", "k8s/" UID_DASH,
	       "guaranteed QoS pod (no QoS slice)");
	expect("5:memory:/kubepods/besteffort/pod_" UID_DASH "/abc\n0::/\n", "k8s/" UID_DASH,
	       "v1 Kubernetes pod_<uid>");
	expect("0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/"
	       "kubelet-kubepods-besteffort-pod" UID_US ".slice\n",
	       "k8s/" UID_DASH, "kind-style nested kubelet slice");
	expect("1:cpu:/slurm/uid_5/job_1/step_0\n0::/slurm/uid_5/job_2/step_0\n", "slurm/2",
	       "the v2 line wins over v1 lines");
	expect("0::/\n", NULL, "root cgroup");
	expect("0::/user.slice/user-1000.slice/session-3.scope\n", NULL, "a login session");
	expect("0::/system.slice/podman-1234.scope\n", NULL, "podman is not a pod");
	expect("0::/machine.slice/libpod-0123456789abcdef0123456789abcdef.scope\n", NULL,
	       "libpod-<id> is not a pod");
	expect("0::/kubepods.slice/kubepods-besteffort.slice\n", NULL, "a QoS slice alone");
	expect("0::/a/job_/b\n0::/a/job_12a/b\n0::/a/myjob_12/b\n", NULL,
	       "job_ without digits, with letters, with a prefix");
	expect("0::/kubepods/pod1234\n", NULL, "a pod uid shorter than 8");
	expect("", NULL, "empty text");
	expect("garbage without colons\n:\n::\n", NULL, "malformed lines");
	expect("0::/job_99999999999999999999999\n", NULL, "a job id longer than 19 digits");
	expect("3:name=systemd:/a:b/job_5/step_0\n", "slurm/5", "a path with a colon in it");
}

/* --- helpers: a fake /proc ------------------------------------------------------ */

static void write_cgroup(int pid, const char *text)
{
	char path[128];

	snprintf(path, sizeof(path), "%s/%d", proc_dir, pid);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/%d/cgroup", proc_dir, pid);
	FILE *f = fopen(path, "w");
	if (!f) {
		printf("Bail out! %s: %s\n", path, strerror(errno));
		exit(1);
	}
	fputs(text, f);
	fclose(f);
}

static void slurm_pid(int pid, int job)
{
	char text[128];

	snprintf(text, sizeof(text), "0::/system.slice/slurmstepd.scope/job_%d/step_0\n", job);
	write_cgroup(pid, text);
}

/* One read by pid of `bytes` bytes that waits wait_ms on the fake clock. */
static void one_read(sfs_jobs *j, pid_t pid, uid_t uid, ssize_t bytes, uint64_t cache,
		     uint64_t wait_ms)
{
	struct sfs_job_read r = sfs_jobs_read_begin(j, pid, uid);
	advance_ms(wait_ms);
	sfs_jobs_read_end(j, &r, bytes, cache);
}

static struct sfs_job_stats *find(struct sfs_job_stats *s, size_t n, const char *label)
{
	for (size_t i = 0; i < n; i++)
		if (!strcmp(s[i].label, label))
			return &s[i];
	return NULL;
}

static struct sfs_job_stats snap[SFS_JOBS_MAX];

/* --- the pid cache ---------------------------------------------------------------- */

static void test_pid_cache(void)
{
	struct sfs_jobs_conf c = {.proc_root = proc_dir, .pid_ttl_ms = 5000, .now_ns = fake_clock};
	struct sfs_jobs_totals t;
	sfs_jobs *j;

	ok(sfs_jobs_open(&c, &j) == 0, "open");
	slurm_pid(100, 4242);
	write_cgroup(101, "0::/kubepods/burstable/pod" UID_DASH "/ctr\n");
	write_cgroup(102, "0::/user.slice\n");
	for (int i = 0; i < 1000; i++)
		one_read(j, 100, 1000, 4096, i % 4 ? 4096 : 0, 0);
	one_read(j, 101, 0, 100, 0, 0);
	one_read(j, 102, 1234, 7, 0, 0);
	one_read(j, 103, 1235, 8, 0, 0); /* no /proc entry: exited, or hidden */
	one_read(j, 0, 1236, 9, 0, 0);	 /* another pid namespace */
	one_read(j, 0, 1236, 9, 0, 0);
	one_read(j, 100, 1000, -5, 0, 0); /* an error: a request, no bytes */
	size_t n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	struct sfs_job_stats *s = find(snap, n, "slurm/4242");
	ok(s && s->read_bytes == 1000 * 4096 && s->read_requests == 1001 &&
	       s->cache_bytes == 750 * 4096,
	   "1000 reads + 1 error of a Slurm job: bytes, requests, cache bytes");
	ok(t.cgroup_reads == 4, "one /proc read per pid (4), none for pid 0 (got %llu)",
	   (unsigned long long)t.cgroup_reads);
	ok((s = find(snap, n, "k8s/" UID_DASH)) && s->read_bytes == 100, "the pod's bytes");
	ok((s = find(snap, n, "uid/1234")) && s->read_bytes == 7, "no job in the cgroup: uid/1234");
	ok((s = find(snap, n, "uid/1235")) && s->read_bytes == 8, "no /proc entry: uid/1235");
	ok((s = find(snap, n, "uid/1236")) && s->read_bytes == 18 && s->read_requests == 2,
	   "pid 0: uid/1236, twice");
	ok(!find(snap, n, "other"), "\"other\" is not shown while empty");
	ok(t.jobs == n && n == 5 && t.pid_entries == 5, "5 jobs, 5 pid entries");

	/* The pid is reused by another job after the entry expired. */
	slurm_pid(100, 4343);
	one_read(j, 100, 1000, 1, 0, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok(!find(snap, n, "slurm/4343"), "within the TTL the cached job is used");
	advance_ms(5001);
	one_read(j, 100, 1000, 1, 0, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok((s = find(snap, n, "slurm/4343")) && s->read_bytes == 1,
	   "after the TTL a reused pid resolves again");
	ok(t.pid_entries == 5, "refreshing an entry does not add one");

	/* 10,000 short-lived readers: the cache stays at its bound. */
	for (int p = 1000; p < 11000; p++)
		one_read(j, p, 2000, 1, 0, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok(t.pid_entries <= SFS_JOBS_PID_ENTRIES && t.pid_entries > SFS_JOBS_PID_ENTRIES / 2,
	   "10,000 pids: %llu entries (bound %d)", (unsigned long long)t.pid_entries,
	   SFS_JOBS_PID_ENTRIES);
	s = find(snap, n, "uid/2000");
	ok(s && s->read_bytes == 10000, "every one of them counted (uid/2000: %llu)",
	   s ? (unsigned long long)s->read_bytes : 0);
	/* A hot pid survives in its set: the least recently used way goes. */
	uint64_t before = t.cgroup_reads;
	for (int p = 20000; p < 30000; p++) {
		advance_us(100);
		one_read(j, 100, 1000, 1, 0, 0);
		one_read(j, p, 2000, 1, 0, 0);
	}
	sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok(t.cgroup_reads - before == 10000 || t.cgroup_reads - before == 10001,
	   "a pid read between 10,000 new ones stays cached (%llu /proc reads)",
	   (unsigned long long)(t.cgroup_reads - before));
	sfs_jobs_close(j);
}

/* --- the job table ------------------------------------------------------------------ */

static void test_job_table(void)
{
	struct sfs_jobs_conf c = {.proc_root = proc_dir, .idle_ms = 60000, .now_ns = fake_clock};
	struct sfs_jobs_totals t;
	sfs_jobs *j;

	ok(sfs_jobs_open(&c, &j) == 0, "open");
	for (int k = 0; k < SFS_JOBS_MAX + 44; k++) {
		slurm_pid(50000 + k, 1 + k);
		one_read(j, 50000 + k, 0, 10, 0, 0);
	}
	size_t n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	struct sfs_job_stats *s = find(snap, n, "other");
	ok(n == SFS_JOBS_MAX && t.jobs == SFS_JOBS_MAX, "%d jobs at most (got %zu)", SFS_JOBS_MAX,
	   n);
	ok(s && s->read_bytes == 45 * 10, "the 45 jobs that did not fit count under \"other\"");
	ok(find(snap, n, "slurm/255") && !find(snap, n, "slurm/256"), "the first 255 got slots");

	/* 30 s later jobs 1..100 read again; 61 s after that the rest are idle. */
	advance_ms(30000);
	for (int k = 0; k < 100; k++)
		one_read(j, 50000 + k, 0, 10, 0, 0);
	advance_ms(31000);
	slurm_pid(60000, 9999);
	one_read(j, 60000, 0, 5, 0, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok(find(snap, n, "slurm/9999") && find(snap, n, "slurm/9999")->read_bytes == 5,
	   "a new job gets the slot of one idle longer than idle_ms");
	ok(t.evicted_jobs == 155 && find(snap, n, "slurm/100") && !find(snap, n, "slurm/101"),
	   "idle jobs aged out (155), active ones kept (evicted %llu)",
	   (unsigned long long)t.evicted_jobs);
	/* A pid whose job aged out resolves again into a fresh job. */
	one_read(j, 50000 + 200, 0, 3, 0, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok((s = find(snap, n, "slurm/201")) && s->read_bytes == 3 && s->read_requests == 1,
	   "a pid of an aged-out job starts a fresh job");
	/* A read in flight keeps its job. */
	struct sfs_job_read r = sfs_jobs_read_begin(j, 50000 + 200, 0);
	advance_ms(120000);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok(find(snap, n, "slurm/201") && !find(snap, n, "slurm/1"),
	   "a job with a read in flight does not age out; idle ones do");
	sfs_jobs_read_end(j, &r, 1, 0);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	ok((s = find(snap, n, "slurm/201")) && s->read_bytes == 4, "its read is counted");
	sfs_jobs_close(j);
	sfs_jobs_read_end(NULL, &r, 1, 0); /* accounting off: no-ops */
	r = sfs_jobs_read_begin(NULL, 1, 1);
	ok(r.gen == 0, "NULL table: begin and end do nothing");
}

/* --- waits ----------------------------------------------------------------------------- */

static void test_wait(void)
{
	struct sfs_jobs_conf c = {.proc_root = proc_dir, .now_ns = fake_clock};
	struct sfs_jobs_totals t;
	sfs_jobs *j;

	ok(sfs_jobs_open(&c, &j) == 0, "open");
	slurm_pid(70000, 7);
	slurm_pid(70001, 7);
	/* A: 0..2 ms, B: 1..4 ms, then C: 10..13 ms. Busy 4 + 3 ms, waits 2 + 3 + 3 ms. */
	struct sfs_job_read a = sfs_jobs_read_begin(j, 70000, 0);
	advance_ms(1);
	struct sfs_job_read b = sfs_jobs_read_begin(j, 70001, 0);
	advance_ms(1);
	sfs_jobs_read_end(j, &a, 10, 0);
	advance_ms(2);
	sfs_jobs_read_end(j, &b, 10, 0);
	advance_ms(6);
	one_read(j, 70000, 0, 10, 10, 3);
	size_t n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	struct sfs_job_stats *s = find(snap, n, "slurm/7");
	ok(s && s->wait_ns == 8000000 && s->wait_count == 3, "wait sum 8 ms over 3 reads");
	ok(s && s->busy_ns == 7000000, "busy 7 ms: overlapping waits count once (got %llu ns)",
	   s ? (unsigned long long)s->busy_ns : 0);
	int b25 = 6; /* le 2.5 ms */
	ok(sfs_jobs_wait_bounds_s[b25] == 2.5e-3 && s && s->wait_buckets[b25] == 1 &&
	       s->wait_buckets[b25 + 1] == 2,
	   "histogram: 2 ms in le=0.0025, 3 ms twice in le=0.005");
	one_read(j, 70000, 0, 1, 0, 10000);
	n = sfs_jobs_snapshot(j, snap, SFS_JOBS_MAX, &t);
	s = find(snap, n, "slurm/7");
	uint64_t finite = 0;
	for (int k = 0; s && k < SFS_JOBS_WAIT_BUCKETS; k++)
		finite += s->wait_buckets[k];
	ok(s && s->wait_count == 4 && finite == 3, "a 10 s wait lands above the last bound");
	sfs_jobs_close(j);
}

/* --- threads ----------------------------------------------------------------------------- */

#define N_THREADS 8
#define N_READS	  20000
static sfs_jobs *shared;

static void *reader(void *arg)
{
	int id = (int)(intptr_t)arg;
	for (int i = 0; i < N_READS; i++) {
		struct sfs_job_read r = sfs_jobs_read_begin(shared, 80000 + id * 100 + i % 50, 0);
		sfs_jobs_read_end(shared, &r, 3, 1);
	}
	return NULL;
}

static void test_threads(void)
{
	struct sfs_jobs_conf c = {.proc_root = proc_dir}; /* the real clock */
	struct sfs_jobs_totals t;
	pthread_t th[N_THREADS];

	for (int id = 0; id < N_THREADS; id++)
		for (int i = 0; i < 50; i++)
			slurm_pid(80000 + id * 100 + i, 1 + id % 2);
	ok(sfs_jobs_open(&c, &shared) == 0, "open");
	for (int i = 0; i < N_THREADS; i++)
		pthread_create(&th[i], NULL, reader, (void *)(intptr_t)i);
	for (int i = 0; i < N_THREADS; i++)
		pthread_join(th[i], NULL);
	size_t n = sfs_jobs_snapshot(shared, snap, SFS_JOBS_MAX, &t);
	struct sfs_job_stats *s1 = find(snap, n, "slurm/1"), *s2 = find(snap, n, "slurm/2");
	uint64_t want = (uint64_t)N_THREADS / 2 * N_READS;
	ok(s1 && s2 && s1->read_requests == want && s2->read_requests == want &&
	       s1->read_bytes == 3 * want && s2->cache_bytes == want,
	   "%d threads x %d reads: every read counted in its job", N_THREADS, N_READS);
	ok(t.cgroup_reads == N_THREADS * 50, "one /proc read per pid (%llu)",
	   (unsigned long long)t.cgroup_reads);
	sfs_jobs_close(shared);
}

int main(void)
{
	snprintf(proc_dir, sizeof(proc_dir), "/tmp/test_jobs.XXXXXX");
	if (!mkdtemp(proc_dir))
		tap_skip_all("cannot create a directory under /tmp");
	test_parser();
	test_pid_cache();
	test_job_table();
	test_wait();
	test_threads();
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", proc_dir);
	if (system(cmd) != 0)
		diag("could not remove %s", proc_dir);
	return tap_done();
}
