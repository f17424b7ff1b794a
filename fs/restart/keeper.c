// SPDX-License-Identifier: Apache-2.0
/*
 * keeper — see keeper.h. The keeper process uses no libfuse and starts no
 * thread: a waitpid loop, a poll of the FUSE fd, and, after a crash loop,
 * a read/write loop that answers EIO.
 */
#include "keeper.h"
#include "takeover.h"
#include "../../cache/common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATE_MAGIC	       0x6b65657065723031ull /* version 1 of this layout */
#define SFS_FUSE_NOTIFY_RESEND 7		     /* protocol 7.40 */
#define RESUME_ENV	       "SHARDFS_RESUME"

const char *const sfs_restart_reason_names[SFS_RESTART_N] = {"crash", "wedge", "takeover"};

int sfs_keeper_state_create(int *fd_out, struct sfs_keeper_state **state_out)
{
	int err, fd = memfd_create("shardfs-keeper", 0);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, sizeof(struct sfs_keeper_state)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	struct sfs_keeper_state *s = sfs_keeper_state_map(fd);
	if (!s) {
		close(fd);
		return -ENOMEM;
	}
	s->magic = STATE_MAGIC;
	s->epoch = 1;
	*fd_out = fd;
	*state_out = s;
	return 0;
}

struct sfs_keeper_state *sfs_keeper_state_map(int fd)
{
	void *p =
	    mmap(NULL, sizeof(struct sfs_keeper_state), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	return p == MAP_FAILED ? NULL : p;
}

/* Close every fd but stdin/out/err and the keep[] ones. */
static void close_others(const int *keep, int n_keep)
{
	DIR *d = opendir("/proc/self/fd");
	int dfd = d ? dirfd(d) : -1;
	int fds[1024], n = 0;

	if (!d)
		return;
	for (struct dirent *e; (e = readdir(d)) && n < 1024;) {
		int fd = atoi(e->d_name);
		bool kept = fd <= 2 || fd == dfd || e->d_name[0] == '.';
		for (int k = 0; k < n_keep; k++)
			kept = kept || fd == keep[k];
		if (!kept)
			fds[n++] = fd;
	}
	closedir(d);
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

static void no_cloexec(int fd) { fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC); }

int sfs_keeper_fork(int fuse_fd, int state_fd, int inode_fd, const char *mountpoint,
		    bool foreground, char *const argv[])
{
	pid_t server = fork();

	if (server < 0)
		return -errno;
	if (server == 0)
		return 0;
	/* The keeper: nothing of the server but the three fds. */
	int keep[3] = {fuse_fd, state_fd, inode_fd};
	close_others(keep, 3);
	for (int k = 0; k < 3; k++)
		no_cloexec(keep[k]);
	size_t n_args = 0;
	while (argv[n_args])
		n_args++;
	char **kargv = calloc(n_args + 11, sizeof(char *));
	char fds[4][24];
	snprintf(fds[0], sizeof(fds[0]), "%d", fuse_fd);
	snprintf(fds[1], sizeof(fds[1]), "%d", state_fd);
	snprintf(fds[2], sizeof(fds[2]), "%d", inode_fd);
	snprintf(fds[3], sizeof(fds[3]), "%d", (int)server);
	if (kargv) {
		size_t i = 0;
		kargv[i++] = argv[0];
		kargv[i++] = "--keeper";
		kargv[i++] = (char *)mountpoint;
		for (int k = 0; k < 4; k++)
			kargv[i++] = fds[k];
		kargv[i++] = foreground ? "fg" : "bg";
		kargv[i++] = "-1"; /* no takeover requester to answer */
		kargv[i++] = "--";
		for (size_t a = 0; a < n_args; a++)
			kargv[i++] = argv[a];
		execv("/proc/self/exe", kargv);
	}
	/* Cannot become the keeper: the mount stays the server's, and a crash
	 * behaves as without a keeper. This process (the one systemd or the
	 * shell started) waits for the server and ends with it, as the daemon
	 * would have, instead of leaving early. */
	sfs_log(SFS_LOG_ERR, "keeper", "cannot start the keeper: %s", strerror(errno));
	int st = 0;
	while (waitpid(server, &st, 0) < 0 && errno == EINTR)
		;
	_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}

bool sfs_keeper_resume_fds(int *fuse_fd, int *state_fd, int *inode_fd)
{
	const char *v = getenv(RESUME_ENV);

	if (!v || sscanf(v, "%d,%d,%d", fuse_fd, state_fd, inode_fd) != 3)
		return false;
	unsetenv(RESUME_ENV); /* not for the processes it may start */
	return *fuse_fd > 2 && *state_fd > 2 && *inode_fd > 2;
}

/* --- keeper mode ------------------------------------------------------------ */

static volatile sig_atomic_t stop_requested;

static void on_stop(int sig)
{
	(void)sig;
	stop_requested = 1;
}

struct keeper {
	const char *mountpoint;
	int fuse_fd, state_fd, inode_fd;
	struct sfs_keeper_state *state;
	char **server_argv;
	pid_t server;
	unsigned conn_minor; /* the FUSE connection's number, for its waiting count */
	bool foreground;     /* logs to stderr, not syslog */
	int listen_fd;	     /* takeover requests (takeover.h), or -1 */
};

static int takeover(struct keeper *k, int cfd);

#define KEEPER_POLL_MS 100

/* Whether the FUSE connection is gone (unmounted or aborted). */
static bool connection_gone(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

/* Start a server that resumes the connection. Returns its pid or -errno. */
static pid_t spawn(struct keeper *k)
{
	char env[64];
	pid_t pid = fork();

	if (pid != 0)
		return pid < 0 ? -errno : pid;
	snprintf(env, sizeof(env), "%d,%d,%d", k->fuse_fd, k->state_fd, k->inode_fd);
	setenv(RESUME_ENV, env, 1);
	signal(SIGTERM, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	execv("/proc/self/exe", k->server_argv);
	_exit(127);
}

/* Unmount what a resumed server could not (it knows no mountpoint). */
static void unmount(const char *mnt)
{
	if (umount2(mnt, MNT_DETACH) == 0 || errno == EINVAL)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		execlp("fusermount3", "fusermount3", "-u", "-z", mnt, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

/* After a crash loop: every request still unanswered, and every new one,
 * gets EIO until the mount goes. */
static void answer_eio(int fd)
{
	size_t cap = (1u << 20) + 8192;
	uint8_t *buf = malloc(cap);
	struct fuse_out_header resend = {.len = sizeof(resend), .error = SFS_FUSE_NOTIFY_RESEND};

	if (!buf)
		return;
	if (write(fd, &resend, sizeof(resend)) < 0)
		sfs_log(SFS_LOG_WARN, "keeper", "cannot resend the dead server's requests: %s",
			strerror(errno));
	for (;;) {
		ssize_t n = read(fd, buf, cap);
		if (n < 0 && (errno == EINTR || errno == ENOENT || errno == EAGAIN))
			continue;
		if (n < (ssize_t)sizeof(struct fuse_in_header))
			break; /* ENODEV: unmounted */
		const struct fuse_in_header *in = (const void *)buf;
		if (in->opcode == FUSE_FORGET || in->opcode == FUSE_BATCH_FORGET ||
		    in->opcode == FUSE_INTERRUPT)
			continue;
		struct fuse_out_header out = {
		    .len = sizeof(out), .error = -EIO, .unique = in->unique};
		if (write(fd, &out, sizeof(out)) < 0 && errno == ENODEV)
			break;
	}
	free(buf);
}

static const char *how_died(int st, char *buf, size_t len)
{
	if (WIFSIGNALED(st))
		snprintf(buf, len, "killed by signal %d (%s)", WTERMSIG(st),
			 strsignal(WTERMSIG(st)));
	else
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(st));
	return buf;
}

/* The FUSE connection's requests waiting for an answer
 * (/sys/fs/fuse/connections/N/waiting, N the mount's device minor), or -1. */
static long requests_waiting(const struct keeper *k)
{
	char path[96];
	long n = -1;

	if (!k->conn_minor)
		return -1;
	snprintf(path, sizeof(path), "/sys/fs/fuse/connections/%u/waiting", k->conn_minor);
	FILE *f = fopen(path, "r");
	if (f) {
		if (fscanf(f, "%ld", &n) != 1)
			n = -1;
		fclose(f);
	}
	return n;
}

/* The mount's device minor from /proc/self/mountinfo (never a stat of the
 * mount, which would wait for the server), or 0. */
static unsigned mount_minor(const char *mnt)
{
	FILE *f = fopen("/proc/self/mountinfo", "r");
	char line[4096], point[4096];
	unsigned major, minor, found = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &major, &minor, point) == 3 &&
		    strcmp(point, mnt) == 0)
			found = minor; /* the last: the one on top */
	fclose(f);
	return found;
}

/* Wait for the server to exit, or kill it when its heartbeat stopped for
 * its wedge_ms. Returns waitpid's status; *wedged says whether it was
 * killed for that. */
static int wait_server(struct keeper *k, bool *wedged)
{
	uint64_t beat = 0, beat_at = sfs_now_ms();
	int st;

	*wedged = false;
	for (;;) {
		pid_t w = waitpid(k->server, &st, WNOHANG);
		if (w == k->server || (w < 0 && errno != EINTR))
			return w < 0 ? 0 : st;
		if (stop_requested == 1 && !*wedged) {
			kill(k->server, SIGTERM);
			stop_requested = 2; /* asked once */
		}
		uint64_t now = sfs_now_ms(),
			 b = __atomic_load_n(&k->state->heartbeat, __ATOMIC_RELAXED);
		uint64_t wedge_ms = __atomic_load_n(&k->state->wedge_ms, __ATOMIC_ACQUIRE);
		if (b != beat) {
			beat = b;
			beat_at = now;
		} else if (b && wedge_ms && !*wedged && now - beat_at > wedge_ms) {
			/* A heartbeat began and stopped: a deadlock, a stopped process. */
			sfs_log(SFS_LOG_ERR, "keeper",
				"the serving process %d is wedged (no heartbeat for %llu ms; %ld "
				"requests waiting): killing it",
				(int)k->server, (unsigned long long)(now - beat_at),
				requests_waiting(k));
			kill(k->server, SIGKILL);
			*wedged = true;
		}
		int cfd = k->listen_fd >= 0 ? accept4(k->listen_fd, NULL, NULL, SOCK_CLOEXEC) : -1;
		if (cfd >= 0) {
			takeover(k, cfd); /* returns only when refused */
			close(cfd);
			continue;
		}
		struct timespec ts = {.tv_nsec = KEEPER_POLL_MS * 1000000L};
		nanosleep(&ts, NULL);
	}
}

/* Run `exe` on the request's command line in check mode (takeover.h): it
 * must parse it and accept this mount's state and inode layouts. Returns
 * true, or false with why (its one line, or how it ended) in why. */
static bool check_new_binary(struct keeper *k, const struct sfs_takeover_req *r, char *why,
			     size_t why_len)
{
	int pfd[2];
	char env[64];

	snprintf(why, why_len, "cannot run %s", r->exe);
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return false;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		no_cloexec(k->state_fd);
		no_cloexec(k->inode_fd);
		snprintf(env, sizeof(env), "%d,%d", k->state_fd, k->inode_fd);
		setenv(SFS_CHECK_RESUME_ENV, env, 1);
		execv(r->exe, r->argv);
		fprintf(stderr, "cannot run %s: %s\n", r->exe, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	if (pid < 0) {
		close(pfd[0]);
		return false;
	}
	char out[400] = "";
	size_t got = 0;
	struct pollfd p = {.fd = pfd[0], .events = POLLIN};
	while (got < sizeof(out) - 1 && poll(&p, 1, 10000) == 1) {
		ssize_t n = read(pfd[0], out + got, sizeof(out) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(pfd[0]);
	int st = 0;
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	out[strcspn(out, "\n")] = '\0';
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
		return true;
	snprintf(why, why_len, "%s cannot take this mount over: %s", r->exe,
		 out[0] ? out : "it failed its check");
	return false;
}

/* A takeover request on cfd: refuse it (answer, return), or stop the
 * server and exec the requester's binary as this mount's keeper, which
 * starts the new server and answers (never returns then). */
static int takeover(struct keeper *k, int cfd)
{
	static struct sfs_takeover_req r; /* 64 KiB: not on the stack */
	char why[480];
	int rc = sfs_takeover_recv(cfd, &r);

	if (rc < 0) {
		sfs_takeover_reply(cfd, "refused: a malformed request (%s)\n", strerror(-rc));
		return rc;
	}
	const char *source = sfs_takeover_source_of(k->server_argv);
	if (r.uid != 0 && r.uid != getuid()) {
		sfs_takeover_reply(cfd,
				   "refused: %s is mounted by uid %u; only it or root may "
				   "take it over\n",
				   k->mountpoint, (unsigned)getuid());
		return -EPERM;
	}
	if (!source || strcmp(source, r.source) != 0) {
		sfs_takeover_reply(cfd, "refused: %s serves %s, not %s\n", k->mountpoint,
				   source ? source : "?", r.source);
		return -EINVAL;
	}
	if (k->state->kernel_minor < SFS_FUSE_RESEND_MINOR) {
		/* The old process would have to drain what it has taken first:
		 * not built. */
		sfs_takeover_reply(cfd,
				   "refused: this kernel (FUSE 7.%u) cannot resend what the "
				   "old process took (needs 7.40, Linux 6.9): unmount and mount "
				   "again to upgrade\n",
				   k->state->kernel_minor);
		return -EOPNOTSUPP;
	}
	if (!check_new_binary(k, &r, why, sizeof(why))) {
		sfs_log(SFS_LOG_WARN, "keeper", "takeover refused: %s", why);
		sfs_takeover_reply(cfd, "refused: %s\n", why);
		return -EINVAL;
	}
	/* The old server stops taking requests and exits without unmounting;
	 * what it read and did not answer goes to the next one (RESEND). */
	sfs_log(SFS_LOG_INFO, "keeper", "takeover by %s: stopping serving process %d", r.exe,
		(int)k->server);
	kill(k->server, SIGUSR2);
	int st;
	for (int i = 0; i < 100 && waitpid(k->server, &st, WNOHANG) == 0; i++) {
		struct timespec ts = {.tv_nsec = 50 * 1000000L};
		nanosleep(&ts, NULL);
	}
	if (kill(k->server, 0) == 0) {
		kill(k->server, SIGKILL);
		waitpid(k->server, &st, 0);
	}
	/* Become the new binary's keeper; it starts the server (pid 0). */
	char fds[4][24];
	size_t n_args = 0;
	while (r.argv[n_args])
		n_args++;
	char **kargv = calloc(n_args + 12, sizeof(char *));
	snprintf(fds[0], sizeof(fds[0]), "%d", k->fuse_fd);
	snprintf(fds[1], sizeof(fds[1]), "%d", k->state_fd);
	snprintf(fds[2], sizeof(fds[2]), "%d", k->inode_fd);
	snprintf(fds[3], sizeof(fds[3]), "%d", cfd);
	if (kargv) {
		size_t i = 0;
		kargv[i++] = r.argv[0];
		kargv[i++] = "--keeper";
		kargv[i++] = (char *)k->mountpoint;
		for (int f = 0; f < 3; f++)
			kargv[i++] = fds[f];
		kargv[i++] = "0";
		kargv[i++] = k->foreground ? "fg" : "bg";
		kargv[i++] = fds[3];
		kargv[i++] = "--";
		for (size_t a = 0; a < n_args; a++)
			kargv[i++] = r.argv[a];
		no_cloexec(cfd);
		if (k->listen_fd >= 0)
			close(k->listen_fd); /* the new keeper binds it again */
		execv(r.exe, kargv);
	}
	/* Cannot become the new keeper: serve on with this binary. */
	sfs_log(SFS_LOG_ERR, "keeper", "takeover: cannot run %s: %s; serving on with this binary",
		r.exe, strerror(errno));
	sfs_takeover_reply(cfd, "refused: cannot run %s as the keeper: %s\n", r.exe,
			   strerror(errno));
	k->listen_fd = sfs_takeover_listen(k->mountpoint);
	__atomic_store_n(&k->state->served, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&k->state->heartbeat, 0, __ATOMIC_RELAXED);
	k->state->epoch++;
	k->server = spawn(k);
	k->state->serving_pid = (int32_t)k->server;
	free(kargv);
	return -ENOEXEC;
}

/* Wait for the server; restart it while that makes sense. Returns the
 * keeper's exit status. */
static int keep(struct keeper *k)
{
	unsigned deaths_unserved = 0;
	char why[96];

	for (;;) {
		bool wedged;
		int st = wait_server(k, &wedged);
		bool gone = connection_gone(k->fuse_fd);
		if ((stop_requested && !wedged) || gone) {
			if (!gone)
				unmount(k->mountpoint);
			return WIFEXITED(st) ? WEXITSTATUS(st) : 0;
		}
		uint64_t served = __atomic_load_n(&k->state->served, __ATOMIC_RELAXED);
		if (!wedged)
			sfs_log(SFS_LOG_ERR, "keeper", "the serving process %d %s (%s)",
				(int)k->server, how_died(st, why, sizeof(why)),
				served ? "it had answered requests" : "before answering a request");
		if (k->state->kernel_minor < SFS_FUSE_RESEND_MINOR) {
			sfs_log(SFS_LOG_ERR, "keeper",
				"cannot restart it: this kernel (FUSE 7.%u) cannot resend what it "
				"had read (needs 7.40, Linux 6.9); the mount answers ENOTCONN "
				"until unmounted",
				k->state->kernel_minor);
			return 1;
		}
		deaths_unserved = served ? 0 : deaths_unserved + 1;
		if (deaths_unserved >= SFS_KEEPER_LOOP_DEATHS) {
			sfs_log(SFS_LOG_ERR, "keeper",
				"%u serving processes in a row died before answering a request: "
				"no more restarts; every request fails with EIO until %s is "
				"unmounted",
				deaths_unserved, k->mountpoint);
			k->state->serving_pid = 0;
			answer_eio(k->fuse_fd);
			return 1;
		}
		enum sfs_restart_reason reason = wedged ? SFS_RESTART_WEDGE : SFS_RESTART_CRASH;
		__atomic_store_n(&k->state->served, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&k->state->heartbeat, 0, __ATOMIC_RELAXED);
		__atomic_fetch_add(&k->state->restarts[reason], 1, __ATOMIC_RELAXED);
		k->state->epoch++;
		pid_t pid = spawn(k);
		if (pid < 0) {
			sfs_log(SFS_LOG_ERR, "keeper", "cannot start a serving process: %s",
				strerror((int)-pid));
			answer_eio(k->fuse_fd);
			return 1;
		}
		k->server = pid;
		k->state->serving_pid = (int32_t)pid;
		sfs_log(SFS_LOG_WARN, "keeper", "started serving process %d (after a %s)", (int)pid,
			sfs_restart_reason_names[reason]);
	}
}

int sfs_keeper_main(int argc, char **argv)
{
	/* argv: PROG --keeper MOUNTPOINT FUSE_FD STATE_FD INODE_FD SERVER_PID fg|bg
	 * CLIENT_FD -- SERVER_ARGV...; SERVER_PID 0: start one now, for the
	 * takeover requester on CLIENT_FD (else -1). */
	if (argc < 11 || strcmp(argv[9], "--") != 0) {
		fprintf(stderr, "shardfs: --keeper is started by shardfs itself\n");
		return 2;
	}
	struct keeper k = {.mountpoint = argv[2],
			   .fuse_fd = atoi(argv[3]),
			   .state_fd = atoi(argv[4]),
			   .inode_fd = atoi(argv[5]),
			   .server = (pid_t)atoi(argv[6]),
			   .server_argv = argv + 10,
			   .foreground = strcmp(argv[7], "fg") == 0};
	int client = atoi(argv[8]);
	k.state = sfs_keeper_state_map(k.state_fd);
	if (!k.state || k.state->magic != STATE_MAGIC) {
		fprintf(stderr, "shardfs: --keeper: no keeper state on fd %s\n", argv[4]);
		return 2;
	}
	/* Log where the daemon logs: syslog once detached, stderr with -f. */
	if (k.foreground)
		sfs_log_use_timestamps();
	else
		sfs_log_use_syslog();
	k.conn_minor = mount_minor(k.mountpoint);
	k.listen_fd = sfs_takeover_listen(k.mountpoint);
	if (k.listen_fd < 0)
		sfs_log(SFS_LOG_WARN, "keeper", "no takeover socket for %s: %s", k.mountpoint,
			strerror(-k.listen_fd));
	if (k.server == 0) { /* a takeover: this binary serves from now on */
		__atomic_store_n(&k.state->served, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&k.state->heartbeat, 0, __ATOMIC_RELAXED);
		__atomic_fetch_add(&k.state->restarts[SFS_RESTART_TAKEOVER], 1, __ATOMIC_RELAXED);
		k.state->epoch++;
		k.server = spawn(&k);
		if (k.server < 0) {
			if (client >= 0)
				sfs_takeover_reply(client,
						   "refused: cannot start a serving process: %s\n",
						   strerror((int)-k.server));
			answer_eio(k.fuse_fd);
			return 1;
		}
		sfs_log(SFS_LOG_WARN, "keeper", "serving process %d of %s took over", (int)k.server,
			argv[0]);
	}
	if (client >= 0) {
		sfs_takeover_reply(client, "ok %d\n", (int)k.server);
		close(client);
	}
	k.state->serving_pid = (int32_t)k.server;
	struct sigaction sa = {.sa_handler = on_stop};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	return keep(&k);
}
