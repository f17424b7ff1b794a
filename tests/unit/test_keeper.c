// SPDX-License-Identifier: Apache-2.0
/*
 * test_keeper — fs/restart/keeper.c and takeover.c: the keeper's state
 * page, the fds a resumed server is handed, the takeover protocol over its
 * real abstract unix socket (a requester and a listener; malformed
 * messages), then a real keeper: this binary forks and execs itself as
 * `--keeper` (as the daemon does), and the servers it starts are this
 * binary too, in a fake-server mode that proves what it was handed.
 *
 * The FUSE connection is a SOCK_SEQPACKET socketpair: the keeper and its
 * servers hold one end, the test plays the kernel on the other (a server
 * says hello on it, naming its epoch and what it read from the inode
 * region it was handed; after a crash loop the keeper answers requests
 * with EIO on it; closing it is the unmount). Against the keeper: a crash
 * (restart, the same connection and inode region handed over), a wedge
 * (a heartbeat that began and stopped: killed and restarted), bad peers on
 * the takeover socket (the keeper refuses them and serves on), takeovers
 * refused (another source; a binary whose check fails) and one done (the
 * keeper execs the new binary, which starts the next server), and a crash
 * loop (three servers dead before serving: EIO to every request, none to
 * FORGET, until the connection closes).
 *
 * Linked with the restart wing (sfs_restart) and the log; nothing faked.
 * Every wait is for an event (a message, a state field, an exit), bounded
 * only so that a hang fails.
 */
#include "../../fs/restart/keeper.h"
#include "../../fs/restart/takeover.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SOURCE	    "10.9.9.9:/export"
#define INODE_MARK  "inode-region-1"
#define WAIT_MS	    60000 /* a bound that only turns a hang into a failure */
#define RESUME_ENV  "SHARDFS_RESUME"
#define NOTIFY_RSND 7 /* FUSE_NOTIFY_RESEND */

static char dir[64]; /* the test's folder; also the mountpoint's name */

/* --- the fake server and the check mode (this binary, exec'd) ------------------- */

static bool dir_has(const char *d, const char *what, unsigned epoch)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/%s-%u", d, what, epoch);
	return access(path, F_OK) == 0;
}

static void on_usr2(int sig)
{
	(void)sig;
	_exit(SFS_TAKEOVER_EXIT); /* what the daemon does at a takeover */
}

/* A server: say hello on the connection with the epoch and the inode
 * region's mark, then serve (pause) until killed. Files in d script it:
 * die-E (die before serving), wedge-E (start a heartbeat, then stop). */
__attribute__((noreturn)) static void fake_server(int fuse_fd, int state_fd, int inode_fd,
						  const char *d)
{
	struct sfs_keeper_state *k = sfs_keeper_state_map(state_fd);
	char mark[32] = "", msg[128];

	if (!k)
		_exit(3);
	unsigned epoch = k->epoch;
	if (pread(inode_fd, mark, sizeof(mark) - 1, 0) < 0)
		mark[0] = 0;
	if (dir_has(d, "die", epoch))
		_exit(1);
	signal(SIGUSR2, on_usr2);
	/* Served before the hello: once the test has it, a death is not one
	 * "before answering a request". */
	__atomic_store_n(&k->served, 1, __ATOMIC_SEQ_CST);
	snprintf(msg, sizeof(msg), "hello epoch=%u inode=%s", epoch, mark);
	if (write(fuse_fd, msg, strlen(msg)) < 0)
		_exit(4);
	if (dir_has(d, "wedge", epoch)) {
		__atomic_store_n(&k->wedge_ms, 1, __ATOMIC_RELEASE);
		__atomic_fetch_add(&k->heartbeat, 1, __ATOMIC_RELAXED); /* and never again */
	}
	for (;;)
		pause();
}

/* The modes this binary runs in besides the tests; returns only in none. */
static void other_modes(int argc, char **argv)
{
	int fuse_fd, state_fd, inode_fd;

	if (argc > 1 && !strcmp(argv[1], "--keeper"))
		exit(sfs_keeper_main(argc, argv));
	if (getenv(SFS_CHECK_RESUME_ENV)) { /* the keeper checks a takeover's binary */
		char path[PATH_MAX];
		snprintf(path, sizeof(path), "%s/refuse", argc > 2 ? argv[2] : "");
		if (access(path, F_OK) == 0) {
			printf("refused by the test\n");
			exit(1);
		}
		exit(0);
	}
	if (getenv(RESUME_ENV)) {
		if (!sfs_keeper_resume_fds(&fuse_fd, &state_fd, &inode_fd) || argc < 3)
			_exit(2);
		fake_server(fuse_fd, state_fd, inode_fd, argv[2]);
	}
}

/* --- helpers ---------------------------------------------------------------------- */

static void sleep_ms(unsigned ms)
{
	nanosleep(&(struct timespec){.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}, NULL);
}

static void touch(const char *what, unsigned epoch)
{
	char path[PATH_MAX];
	if (epoch)
		snprintf(path, sizeof(path), "%s/%s-%u", dir, what, epoch);
	else
		snprintf(path, sizeof(path), "%s/%s", dir, what);
	int fd = open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd >= 0)
		close(fd);
}

/* One message from fd, NUL-terminated (cap: its buffer's size); -1 after
 * WAIT_MS. */
static ssize_t recv_msg(int fd, void *buf, size_t cap)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	if (poll(&p, 1, WAIT_MS) != 1)
		return -1;
	ssize_t n = recv(fd, buf, cap - 1, 0);
	if (n >= 0)
		((char *)buf)[n] = 0;
	return n;
}

/* One FUSE reply header from the "kernel" end: its length, or -1. */
static ssize_t recv_out(int fd, struct fuse_out_header *o)
{
	char buf[64];
	ssize_t n = recv_msg(fd, buf, sizeof(buf));

	if (n >= 0)
		memcpy(o, buf, (size_t)n < sizeof(*o) ? (size_t)n : sizeof(*o));
	return n;
}

static bool wait_u64(const uint64_t *v, uint64_t want)
{
	for (int i = 0; i < WAIT_MS; i++) {
		if (__atomic_load_n(v, __ATOMIC_SEQ_CST) == want)
			return true;
		sleep_ms(1);
	}
	return false;
}

static bool wait_pid_change(struct sfs_keeper_state *k, int32_t old)
{
	for (int i = 0; i < WAIT_MS; i++) {
		int32_t p = __atomic_load_n(&k->serving_pid, __ATOMIC_SEQ_CST);
		if (p != old && p != 0)
			return true;
		sleep_ms(1);
	}
	return false;
}

/* A takeover request from a child process (it waits for the answer): its
 * exit status, with its stdout and stderr in out. */
static int request(const char *source, char *out, size_t cap)
{
	int pfd[2];
	char self[PATH_MAX];
	ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);

	if (sn <= 0 || pipe(pfd) < 0)
		return -1;
	self[sn] = 0;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		char *argv[] = {self, (char *)SOURCE, dir, NULL};
		int rc = sfs_takeover_request(dir, source, argv);
		fflush(NULL); /* its outcome line, before _exit */
		_exit(rc);
	}
	close(pfd[1]);
	size_t got = 0;
	ssize_t n;
	while (got < cap - 1 && (n = read(pfd[0], out + got, cap - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = 0;
	close(pfd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* --- the state page and the fds a resumed server gets --------------------------- */

static void test_state_and_fds(void)
{
	int fd;
	struct sfs_keeper_state *k = NULL, *again;
	int a, b, c;

	ok(sfs_keeper_state_create(&fd, &k) == 0 && k && k->epoch == 1, "a state page, epoch 1");
	again = sfs_keeper_state_map(fd);
	k->heartbeat = 5;
	ok(again && again != k && again->heartbeat == 5,
	   "mapped again (as the keeper and a resumed server map it): one page");
	ok(!(fcntl(fd, F_GETFD) & FD_CLOEXEC), "its fd is inherited by the children");
	ok(sfs_keeper_state_map(-1) == NULL, "no state on a bad fd");
	munmap(again, sizeof(*again));
	munmap(k, sizeof(*k));
	close(fd);

	setenv(RESUME_ENV, "5,6,7", 1);
	ok(sfs_keeper_resume_fds(&a, &b, &c) && a == 5 && b == 6 && c == 7,
	   "a resumed server reads its three fds");
	ok(!getenv(RESUME_ENV), "and takes them out of the environment (not for its children)");
	ok(!sfs_keeper_resume_fds(&a, &b, &c), "a daemon a user started is not resumed");
	setenv(RESUME_ENV, "1,6,7", 1);
	ok(!sfs_keeper_resume_fds(&a, &b, &c), "stdin..stderr are never the fds");
	setenv(RESUME_ENV, "x", 1);
	ok(!sfs_keeper_resume_fds(&a, &b, &c), "garbage is no resume");
	unsetenv(RESUME_ENV);
}

/* --- the protocol: requester and listener ---------------------------------------- */

static void test_protocol(void)
{
	char mnt[96], out[1024], self[PATH_MAX];
	ssize_t sn = readlink("/proc/self/exe", self, sizeof(self) - 1);
	static struct sfs_takeover_req r;

	self[sn > 0 ? sn : 0] = 0;
	snprintf(mnt, sizeof(mnt), "%s-protocol", dir);
	int l = sfs_takeover_listen(mnt);
	ok(l >= 0, "listening on the mount's socket");
	ok(sfs_takeover_listen(mnt) == -EADDRINUSE, "a second keeper of the mount: EADDRINUSE");
	ok(sfs_takeover_connect("/no/keeper/here") == -ECONNREFUSED, "no keeper: ECONNREFUSED");

	/* A requester in a child; this process answers as the keeper. */
	int pfd[2];
	if (pipe(pfd) < 0)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		char *argv[] = {self, (char *)"-o", (char *)"ro", (char *)SOURCE, mnt, NULL};
		int rc = sfs_takeover_request(mnt, SOURCE, argv);
		fflush(NULL);
		_exit(rc);
	}
	close(pfd[1]);
	struct pollfd p = {.fd = l, .events = POLLIN};
	int cfd = poll(&p, 1, WAIT_MS) == 1 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
	ok(cfd >= 0 && sfs_takeover_recv(cfd, &r) == 0, "a request received");
	ok(r.exe && !strcmp(r.exe, self), "it names the requester's binary");
	ok(r.source && !strcmp(r.source, SOURCE), "and its source");
	ok(r.argv[0] && !strcmp(r.argv[0], self) && r.argv[3] && !strcmp(r.argv[3], SOURCE) &&
	       r.argv[4] && !strcmp(r.argv[4], mnt) && !r.argv[5],
	   "and its command line, whole");
	ok(r.uid == getuid(), "the requester's uid from the socket (SO_PEERCRED)");
	ok(!strcmp(sfs_takeover_source_of(r.argv), SOURCE),
	   "the source of a command line: its first argument that is no option");
	sfs_takeover_reply(cfd, "ok %d\n", 4321);
	close(cfd);
	size_t got = 0;
	ssize_t n;
	while (got < sizeof(out) - 1 && (n = read(pfd[0], out + got, sizeof(out) - 1 - got)) > 0)
		got += (size_t)n;
	out[got] = 0;
	close(pfd[0]);
	int st = 0;
	waitpid(pid, &st, 0);
	ok(WIFEXITED(st) && WEXITSTATUS(st) == 0 && strstr(out, "pid 4321"),
	   "\"ok PID\": the requester says who serves now and exits 0");

	/* Malformed messages, sent raw: their NUL-separated parts. */
	static const struct {
		const char *parts[4];
		int n;
		const char *what;
	} bad[] = {
	    {{"hello"}, 1, "not the protocol"},
	    {{SFS_TAKEOVER_MAGIC, "/bin/x"}, 2, "no source"},
	    {{SFS_TAKEOVER_MAGIC, "/bin/x", SOURCE}, 3, "no command line"},
	    {{"shardfs-takeover-0", "/bin/x", SOURCE, "x"}, 4, "another version"},
	    {{SFS_TAKEOVER_MAGIC, "", SOURCE, "x"}, 4, "an empty binary"},
	    {{0}, 0, "an empty message"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char msg[256];
		size_t len = 0;
		for (int k = 0; k < bad[i].n; k++) {
			size_t pl = strlen(bad[i].parts[k]) + 1;
			memcpy(msg + len, bad[i].parts[k], pl);
			len += pl;
		}
		int c = sfs_takeover_connect(mnt);
		if (c < 0 || send(c, msg, len, 0) < 0) {
			ok(0, "sent %s", bad[i].what);
			continue;
		}
		cfd = poll(&p, 1, WAIT_MS) == 1 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
		ok(cfd >= 0 && sfs_takeover_recv(cfd, &r) == -EPROTO, "%s: EPROTO", bad[i].what);
		close(cfd);
		close(c);
	}
	int c = sfs_takeover_connect(mnt);
	cfd = poll(&p, 1, WAIT_MS) == 1 ? accept4(l, NULL, NULL, SOCK_CLOEXEC) : -1;
	close(c);
	ok(cfd >= 0 && sfs_takeover_recv(cfd, &r) == -EPROTO, "a peer gone before a word: EPROTO");
	close(cfd);
	close(l);
	ok(request(SOURCE, out, sizeof(out)) == 1 && strstr(out, "no shardfs keeper holds"),
	   "a request with no keeper listening: exit 1, said why");
}

/* --- a real keeper ---------------------------------------------------------------- */

struct keeper_run {
	pid_t keeper;
	int kernel; /* the test's end of the "FUSE connection" */
	int state_fd;
	struct sfs_keeper_state *k;
};

/* Fork; the child calls sfs_keeper_fork as the daemon does right after its
 * mount: it becomes the keeper (exec of this binary in keeper mode), its
 * child the first server. */
static bool start_keeper(struct keeper_run *run)
{
	int sv[2], inode_fd = memfd_create("inodes", 0);

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0 || inode_fd < 0 ||
	    pwrite(inode_fd, INODE_MARK, sizeof(INODE_MARK), 0) < 0 ||
	    sfs_keeper_state_create(&run->state_fd, &run->k) < 0)
		return false;
	run->k->kernel_minor = SFS_FUSE_RESEND_MINOR; /* as the first server's INIT sets */
	run->kernel = sv[0];
	run->keeper = fork();
	if (run->keeper == 0) {
		close(sv[0]);
		char *argv[] = {(char *)"test_keeper", (char *)SOURCE, dir, NULL};
		if (sfs_keeper_fork(sv[1], run->state_fd, inode_fd, dir, true, argv) < 0)
			_exit(99);
		fake_server(sv[1], run->state_fd, inode_fd, dir); /* the first server */
	}
	close(sv[1]);
	close(inode_fd);
	return run->keeper > 0;
}

static bool hello(struct keeper_run *run, unsigned epoch)
{
	char msg[256], want[128];

	snprintf(want, sizeof(want), "hello epoch=%u inode=%s", epoch, INODE_MARK);
	ssize_t n = recv_msg(run->kernel, msg, sizeof(msg));
	if (n < 0 || strcmp(msg, want)) {
		diag("got '%s', wanted '%s'", n < 0 ? "nothing" : msg, want);
		return false;
	}
	return true;
}

static void test_keeper(void)
{
	struct keeper_run run = {0};
	char out[2048];

	if (!start_keeper(&run)) {
		ok(0, "a keeper started");
		return;
	}
	struct sfs_keeper_state *k = run.k;
	ok(hello(&run, 1), "the first server serves on the connection");
	ok(wait_pid_change(k, 0), "the keeper records who serves");

	/* A crash: the next server gets the same connection and inode region. */
	int32_t first = k->serving_pid;
	kill(first, SIGKILL);
	ok(hello(&run, 2), "killed: the keeper starts a server on the same connection, handed "
			   "the inode region");
	ok(k->restarts[SFS_RESTART_CRASH] == 1 && wait_pid_change(k, first),
	   "counted as a crash; a new serving pid");

	/* A wedge: epoch 3 starts a heartbeat and stops it. */
	touch("wedge", 3);
	kill(k->serving_pid, SIGKILL);
	ok(hello(&run, 3), "the third server starts");
	ok(hello(&run, 4) && wait_u64(&k->restarts[SFS_RESTART_WEDGE], 1),
	   "its heartbeat stopped: killed as wedged and replaced");
	ok(k->restarts[SFS_RESTART_CRASH] == 2, "two crashes, one wedge");
	int32_t serving = 0;
	for (int i = 0; i < WAIT_MS && (serving = __atomic_load_n(&k->serving_pid, 0)) == 0; i++)
		sleep_ms(1);

	/* Bad peers on the takeover socket: refused, the server untouched. */
	int c = sfs_takeover_connect(dir);
	bool answered = c >= 0 && send(c, "hello", 5, 0) == 5 && recv_msg(c, out, sizeof(out)) > 0;
	ok(answered && !strncmp(out, "refused: a malformed request", 28),
	   "a malformed request is refused: '%.*s'", answered ? (int)strcspn(out, "\n") : 0,
	   answered ? out : "");
	if (c >= 0)
		close(c);
	c = sfs_takeover_connect(dir);
	if (c >= 0)
		close(c); /* gone before a word */
	ok(request("10.1.1.1:/other", out, sizeof(out)) == 1 && strstr(out, "refused: ") &&
	       strstr(out, "serves " SOURCE ", not 10.1.1.1:/other"),
	   "a takeover for another source is refused (exit 1): said why");
	touch("refuse", 0);
	ok(request(SOURCE, out, sizeof(out)) == 1 &&
	       strstr(out, "cannot take this mount over: refused by the test"),
	   "a binary whose check fails is refused, with its own line");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/refuse", dir);
	unlink(path);
	ok(k->serving_pid == serving && k->epoch == 4 && k->restarts[SFS_RESTART_TAKEOVER] == 0,
	   "after every refusal the same server serves");

	/* A takeover: the old server stops (SIGUSR2), the keeper execs the
	 * requester's binary, which starts the next server on the connection. */
	int rc = request(SOURCE, out, sizeof(out));
	ok(rc == 0 && strstr(out, "now served by"), "a takeover done: exit 0 (%.80s)", out);
	ok(hello(&run, 5), "the new binary's server serves on the same connection");
	ok(wait_pid_change(k, serving), "the new keeper records its server");
	char pid_s[32];
	snprintf(pid_s, sizeof(pid_s), "(pid %d)", (int)k->serving_pid);
	ok(k->restarts[SFS_RESTART_TAKEOVER] == 1 && strstr(out, pid_s),
	   "counted as a takeover; the requester was told the new server's pid");

	/* A crash loop: three servers dead before serving. */
	for (unsigned e = 6; e <= 8; e++)
		touch("die", e);
	kill(k->serving_pid, SIGKILL);
	struct fuse_out_header o;
	ssize_t n = recv_out(run.kernel, &o);
	ok(n == sizeof(o) && o.error == NOTIFY_RSND && o.unique == 0,
	   "after three deaths unserved: the keeper asks the kernel to resend");
	ok(k->epoch == 8 && k->serving_pid == 0 && k->restarts[SFS_RESTART_CRASH] == 5,
	   "and stops restarting (epoch %u, serving %d, %llu crashes)", k->epoch,
	   (int)k->serving_pid, (unsigned long long)k->restarts[SFS_RESTART_CRASH]);
	struct fuse_in_header in = {.len = sizeof(in), .opcode = FUSE_GETATTR, .unique = 77};
	ok(send(run.kernel, &in, sizeof(in), 0) == sizeof(in) &&
	       recv_out(run.kernel, &o) == sizeof(o) && o.error == -EIO && o.unique == 77,
	   "a request gets EIO");
	in.opcode = FUSE_FORGET;
	in.unique = 78;
	ok(send(run.kernel, &in, sizeof(in), 0) == sizeof(in), "a FORGET sent");
	in.opcode = FUSE_LOOKUP;
	in.unique = 79;
	ok(send(run.kernel, &in, sizeof(in), 0) == sizeof(in) &&
	       recv_out(run.kernel, &o) == sizeof(o) && o.unique == 79 && o.error == -EIO,
	   "the FORGET got no answer, the next request its EIO");

	/* The unmount: the connection closes, the keeper ends. */
	close(run.kernel);
	int st = 0;
	pid_t w = 0;
	for (int i = 0; i < WAIT_MS && (w = waitpid(run.keeper, &st, WNOHANG)) == 0; i++)
		sleep_ms(1);
	ok(w == run.keeper && WIFEXITED(st) && WEXITSTATUS(st) == 1,
	   "the connection gone: the keeper exits (status 1 after a crash loop)");
	if (w != run.keeper) { /* a failure above: leave nothing running */
		if (k->serving_pid > 0)
			kill(k->serving_pid, SIGKILL);
		kill(run.keeper, SIGKILL);
		waitpid(run.keeper, &st, 0);
	}
	munmap(k, sizeof(*k));
	close(run.state_fd);
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {{"state_and_fds", test_state_and_fds},
						{"protocol", test_protocol},
						{"keeper", test_keeper}};

	other_modes(argc, argv);
	snprintf(dir, sizeof(dir), "/tmp/test_keeper-%d", (int)getpid());
	if (mkdir(dir, 0700) < 0)
		tap_skip_all("cannot make a folder under /tmp");
	int rc = tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		diag("could not remove %s", dir);
	return rc;
}
