/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keeper — the mount outlives the process that serves it.
 *
 * The daemon that mounted forks once, right after the mount: the child
 * serves (the daemon as before), the parent becomes the keeper (it execs
 * this binary again in keeper mode, so that it holds none of the serving
 * process's memory, sockets or locks). The keeper holds three fds: the FUSE
 * connection (/dev/fuse: while any process holds it, the mount stays
 * connected), the inode table's region (fs/inode/inode_slab.h) and the state
 * page below. It does next to nothing, so that it does not crash: it waits
 * for its serving child and, when that dies while the mount is still there
 * (any signal, an OOM kill, an abort), starts the same binary again as a
 * *resumed* server: that one adopts the inode table, feeds libfuse the
 * kernel's saved INIT request (libfuse 3.14 answers EIO to everything
 * before INIT, and the kernel sends INIT only once), and asks the kernel
 * to send again every request the dead process had read and not answered
 * (FUSE_NOTIFY_RESEND, protocol 7.40, Linux 6.9+). Readers see a pause,
 * not an error.
 *
 * A wedged server (its watchdog's heartbeat stopped for the server's
 * wedge_ms: a deadlock, a SIGSTOP) is killed and replaced the same way.
 *
 * A crash loop (SFS_KEEPER_LOOP_DEATHS servers in a row that died before
 * answering a request) stops the restarts: the keeper logs why once and
 * answers EIO to every request until the mount is unmounted. A kernel
 * without NOTIFY_RESEND gets no restarts (logged at mount; a crash behaves
 * as without a keeper: the mount answers ENOTCONN until unmounted).
 *
 * The state page is shared by the keeper and its server (a memfd, MAP_SHARED);
 * every field says who writes it. The keeper owns the three fds and the
 * serving child; it owns nothing of what the server serves (the inode
 * table's contents, the caches, the origin).
 *
 * Threading: the keeper process runs one thread and no libfuse. In the
 * server, these functions run on the main thread at startup, before any
 * other thread starts.
 */
#ifndef SFS_KEEPER_H
#define SFS_KEEPER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define SFS_KEEPER_LOOP_DEATHS 3
#define SFS_KEEPER_INIT_MAX    256 /* the INIT request: a header and fuse_init_in (104 B today) */
#define SFS_FUSE_RESEND_MINOR  40

enum sfs_restart_reason {
	SFS_RESTART_CRASH,
	SFS_RESTART_WEDGE,
	SFS_RESTART_TAKEOVER,
	SFS_RESTART_N
};
extern const char *const sfs_restart_reason_names[SFS_RESTART_N];

struct sfs_keeper_state {
	uint64_t magic;			   /* set at create */
	uint32_t init_len;		   /* the first server: the kernel's INIT request */
	uint8_t init[SFS_KEEPER_INIT_MAX]; /* its bytes; then read-only */
	uint32_t kernel_minor;		   /* the first server, at INIT */
	uint32_t epoch;			   /* the keeper: servers started, 1 for the first */
	int32_t serving_pid;		   /* the keeper: the server now */
	uint64_t served;		   /* atomic, the server: 1 once it answered a request */
	uint64_t restarts[SFS_RESTART_N];  /* atomic, the keeper */
	uint64_t heartbeat;		   /* atomic, the server's watchdog (watchdog.h) */
	uint64_t wedge_ms;		   /* atomic, the server: 0, or when to replace it */
	uint64_t carry_len;    /* atomic, the server: stats saved at a takeover (carry.h) */
	char mountpoint[4096]; /* the first server: the absolute mountpoint */
};

/* A new state page in a memfd: *fd_out its fd (inherited by the children,
 * not CLOEXEC), *state_out its mapping. Returns 0 or -errno. */
int sfs_keeper_state_create(int *fd_out, struct sfs_keeper_state **state_out);

/* The state page of fd (a resumed server, the keeper). NULL on error. */
struct sfs_keeper_state *sfs_keeper_state_map(int fd);

/*
 * Called by the daemon right after its mount is up and before it starts a
 * thread: fork. In the child (the server) returns 0; the parent execs this
 * binary in keeper mode (below) and never returns, or, when the fork fails,
 * returns -errno (the daemon then serves without a keeper). fuse_fd,
 * state_fd and inode_fd stay open in both.
 */
int sfs_keeper_fork(int fuse_fd, int state_fd, int inode_fd, const char *mountpoint,
		    bool foreground, char *const argv[]);

/* Keeper mode: `shardfs --keeper ...` as sfs_keeper_fork execs it. Returns
 * the exit status. */
int sfs_keeper_main(int argc, char **argv);

/* A resumed server: the fds its keeper passed in the environment
 * (SHARDFS_RESUME), or false for a daemon started by a user. */
bool sfs_keeper_resume_fds(int *fuse_fd, int *state_fd, int *inode_fd);

#endif
