/* SPDX-License-Identifier: Apache-2.0 */
/*
 * takeover — an upgrade without unmounting: `shardfs -o takeover SOURCE
 * MOUNTPOINT` (systemd: ExecReload) asks the keeper of the shardfs mount at
 * MOUNTPOINT (keeper.h) to serve it with the requester's binary from now on.
 *
 * The protocol: the keeper listens on an abstract unix socket named after
 * the mountpoint (SOCK_SEQPACKET, in the mount's network namespace); the
 * requester sends one message, "shardfs-takeover-1", its binary, its
 * SOURCE and its command line, NUL-separated; the keeper answers one line,
 * "ok PID" (the new serving process) or "refused: WHY", and closes.
 *
 * The keeper refuses, leaving the running daemon untouched: a requester
 * that is neither root nor the mount's user, another SOURCE, and a binary
 * that cannot take this mount over (`BINARY` run with SHARDFS_CHECK_RESUME:
 * it parses the command line and checks the inode region and state
 * layouts, and must exit 0). Then it stops the serving process without
 * unmounting (SIGUSR2: the server stops taking requests and exits 75), execs
 * the new binary as the keeper, which starts the new serving process on the
 * connection as after a crash (what was read and not answered is sent
 * again) and answers the requester.
 *
 * Owns: the socket's name, the message format and its checks. Does not own
 * the decision or the restart (the keeper, keeper.c).
 * Threading: the keeper's one thread listens and answers; the requester is
 * a short-lived process of its own.
 */
#ifndef SFS_TAKEOVER_H
#define SFS_TAKEOVER_H

#include <stddef.h>
#include <sys/types.h>

#define SFS_TAKEOVER_MAGIC   "shardfs-takeover-1"
#define SFS_TAKEOVER_MSG_MAX (64u << 10)
#define SFS_TAKEOVER_EXIT    75 /* a server's status after SIGUSR2 */
#define SFS_CHECK_RESUME_ENV "SHARDFS_CHECK_RESUME"

/* The keeper's listening socket for mountpoint mnt (non-blocking,
 * CLOEXEC). Returns the fd or -errno (-EADDRINUSE: another keeper). */
int sfs_takeover_listen(const char *mnt);

/* The requester's connection to the keeper of mountpoint mnt (blocking,
 * CLOEXEC). Returns the fd or -errno (-ECONNREFUSED: no keeper there). */
int sfs_takeover_connect(const char *mnt);

/* A request as the keeper received it: pointers into buf. */
struct sfs_takeover_req {
	char buf[SFS_TAKEOVER_MSG_MAX];
	const char *exe, *source;
	char *argv[256]; /* NULL-terminated */
	uid_t uid;	 /* SO_PEERCRED */
};

/* Receive and decode the request on an accepted connection cfd. Returns 0
 * or -EPROTO (a malformed request) or -errno. */
int sfs_takeover_recv(int cfd, struct sfs_takeover_req *r);

/* Answer the requester (one line) and keep cfd open. */
void sfs_takeover_reply(int cfd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The requester: ask the keeper of mnt to take over with this binary and
 * argv; print the outcome in one line (stdout on success, stderr else).
 * Returns the exit status: 0 when a new serving process serves. */
int sfs_takeover_request(const char *mnt, const char *source, char *const argv[]);

/* The SOURCE (HOST[,HOST]:/EXPORT) of a shardfs command line: its first
 * argument that is not an option, or NULL. */
const char *sfs_takeover_source_of(char *const argv[]);

#endif
