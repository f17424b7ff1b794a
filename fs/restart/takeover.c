// SPDX-License-Identifier: Apache-2.0
/* takeover — the request and its socket; see takeover.h. */
#include "takeover.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

/* How long the requester waits for the keeper's answer: its check of the
 * new binary, the old server's exit and the new one's start. */
#define REQUEST_TIMEOUT_MS 60000

/* "\0shardfs-keeper-<FNV-1a 64 of the mountpoint>": abstract, so no file
 * to clean up after a crash; hashed, so any path fits. */
static socklen_t socket_name(const char *mnt, struct sockaddr_un *a)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const unsigned char *p = (const unsigned char *)mnt; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "shardfs-keeper-%016llx",
			 (unsigned long long)h);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

int sfs_takeover_listen(const char *mnt)
{
	struct sockaddr_un a;
	socklen_t len = socket_name(mnt, &a);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, len) < 0 || listen(fd, 4) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int sfs_takeover_connect(const char *mnt)
{
	struct sockaddr_un a;
	socklen_t len = socket_name(mnt, &a);
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&a, len) < 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int sfs_takeover_recv(int cfd, struct sfs_takeover_req *r)
{
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct pollfd p = {.fd = cfd, .events = POLLIN};

	if (poll(&p, 1, 2000) != 1)
		return -ETIMEDOUT;
	ssize_t n = recv(cfd, r->buf, sizeof(r->buf) - 1, 0);
	if (n < 0)
		return -errno;
	if (getsockopt(cfd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0)
		return -errno;
	r->uid = cred.uid;
	r->buf[n] = '\0';
	/* MAGIC \0 EXE \0 SOURCE \0 ARG \0 ARG \0 ... */
	const char *s[3];
	size_t off = 0, k = 0;
	for (; k < 3 && off < (size_t)n; k++) {
		s[k] = r->buf + off;
		off += strlen(s[k]) + 1;
	}
	if (k < 3 || strcmp(s[0], SFS_TAKEOVER_MAGIC) != 0 || !s[1][0] || !s[2][0])
		return -EPROTO;
	r->exe = s[1];
	r->source = s[2];
	size_t a = 0;
	while (off < (size_t)n && a < sizeof(r->argv) / sizeof(r->argv[0]) - 1) {
		r->argv[a++] = r->buf + off;
		off += strlen(r->buf + off) + 1;
	}
	r->argv[a] = NULL;
	return a ? 0 : -EPROTO;
}

void sfs_takeover_reply(int cfd, const char *fmt, ...)
{
	char line[512];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n > 0 && send(cfd, line, strlen(line), MSG_NOSIGNAL) < 0) {
		/* the requester went away: nothing to tell */
	}
}

const char *sfs_takeover_source_of(char *const argv[])
{
	for (size_t i = 1; argv[i]; i++) {
		if (strcmp(argv[i], "-o") == 0) {
			if (argv[i + 1])
				i++;
			continue;
		}
		if (argv[i][0] == '-')
			continue;
		return argv[i];
	}
	return NULL;
}

int sfs_takeover_request(const char *mnt, const char *source, char *const argv[])
{
	char exe[PATH_MAX], msg[SFS_TAKEOVER_MSG_MAX], reply[512];
	size_t off = 0;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	if (n <= 0) {
		fprintf(stderr, "shardfs: takeover: cannot find this binary: %s\n",
			strerror(errno));
		return 1;
	}
	exe[n] = '\0';
	const char *parts[3] = {SFS_TAKEOVER_MAGIC, exe, source};
	for (int k = 0; k < 3; k++) {
		size_t l = strlen(parts[k]) + 1;
		if (off + l > sizeof(msg))
			goto too_long;
		memcpy(msg + off, parts[k], l);
		off += l;
	}
	for (size_t i = 0; argv[i]; i++) {
		size_t l = strlen(argv[i]) + 1;
		if (off + l > sizeof(msg))
			goto too_long;
		memcpy(msg + off, argv[i], l);
		off += l;
	}
	int fd = sfs_takeover_connect(mnt);
	if (fd < 0) {
		fprintf(stderr,
			"shardfs: takeover: no shardfs keeper holds '%s' (not a shardfs mount, one "
			"of another network namespace, or one without a keeper)\n",
			mnt);
		return 1;
	}
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (send(fd, msg, off, MSG_NOSIGNAL) < 0 || poll(&p, 1, REQUEST_TIMEOUT_MS) != 1 ||
	    (n = recv(fd, reply, sizeof(reply) - 1, 0)) <= 0) {
		fprintf(stderr, "shardfs: takeover of '%s': no answer from its keeper\n", mnt);
		close(fd);
		return 1;
	}
	close(fd);
	reply[n] = '\0';
	reply[strcspn(reply, "\n")] = '\0';
	if (strncmp(reply, "ok ", 3) == 0) {
		printf("shardfs: %s now served by %s (pid %s)\n", mnt, exe, reply + 3);
		return 0;
	}
	fprintf(stderr, "shardfs: takeover of '%s' %s\n", mnt, reply);
	return 1;
too_long:
	fprintf(stderr, "shardfs: takeover: command line too long\n");
	return 1;
}
