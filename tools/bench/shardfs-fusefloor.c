// SPDX-License-Identifier: Apache-2.0
/*
 * shardfs-fusefloor: the floor under the small-file benchmark. A read-only
 * FUSE filesystem with the tree of a list of files, answered from memory
 * (every file reads as one pattern: byte o is ((o % 4093) * 7 + 3) & 255,
 * whose period no request offset shares, so a reply of the wrong bytes
 * shows), run by the daemon's worker pool
 * (fs/kernel/workers.c) as shardfs runs it with active_threads=8 (64 workers at
 * most; 1 MiB requests, the same init flags and timeouts). What it costs
 * per file (lookup, open, read, release) is what the daemon pays on this
 * kernel before it does any work of its own: tools/bench/shardfs-bench
 * --small-files prints it beside the mount's rows, and --random-records
 * per record of one large file (opened direct_io, as shardfs opens a file
 * over one chunk in its first epoch).
 *
 *   shardfs-fusefloor [--uring] LIST MOUNTPOINT
 *
 * --uring: over FUSE over io_uring where the kernel offers it
 * (fs/kernel/fuse_uring.h; the fuse module's enable_uring), else /dev/fuse with a
 * warning; it prints the requests that went through the ring at the end.
 *
 * LIST has one "RELPATH SIZE" line per file (folders are made from the
 * paths). Runs in the foreground until unmounted or signalled. Exit
 * status: 0, 1 on a failure, 2 for bad usage.
 *
 * Owns: the tree and its replies. Does not own: the worker pool or the
 * device hooks (the daemon's own fs/kernel code, linked as it is), and it
 * fetches and caches nothing.
 * Threading: the tree is built before the loop starts and only read after.
 */
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include "../fs/kernel/fusedev.h"
#include "../fs/kernel/fuse_uring.h"
#include "../fs/kernel/workers.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define TIMEOUT_S	  60.0	     /* shardfs's default actimeo */
#define FLOOR_CHUNK_BYTES (1u << 20) /* SFS_CHUNK_BYTES */

struct node {
	uint64_t parent; /* inode number; the root's is 0 */
	const char *name;
	uint64_t size;
	bool dir;
};

static struct node *nodes; /* nodes[ino - 1]; ino 1 is the root */
static size_t n_nodes, cap_nodes;
static uint64_t *slots; /* hash of (parent, name) -> ino; 0 = empty */
static size_t n_slots;
#define PATTERN_PERIOD 4093
/* The pattern from byte 0 on, for one request's worth past any phase. */
static uint8_t pattern[(1 << 20) + PATTERN_PERIOD];

static uint64_t name_hash(uint64_t parent, const char *name)
{
	uint64_t h = 1469598103934665603ull ^ parent;
	for (const char *p = name; *p; p++)
		h = (h ^ (unsigned char)*p) * 1099511628211ull;
	return h;
}

static uint64_t find(uint64_t parent, const char *name)
{
	for (size_t i = name_hash(parent, name) & (n_slots - 1);; i = (i + 1) & (n_slots - 1)) {
		uint64_t ino = slots[i];
		if (!ino || (nodes[ino - 1].parent == parent && !strcmp(nodes[ino - 1].name, name)))
			return ino;
	}
}

/* The child `name` of parent (made if new). Returns its ino, or 0. */
static uint64_t add(uint64_t parent, const char *name, bool dir, uint64_t size)
{
	uint64_t ino = find(parent, name);
	if (ino)
		return ino;
	if ((n_nodes + 1) * 2 > n_slots || n_nodes == cap_nodes)
		return 0; /* sized from the list up front */
	nodes[n_nodes] = (struct node){parent, strdup(name), size, dir};
	ino = ++n_nodes;
	size_t i = name_hash(parent, name) & (n_slots - 1);
	while (slots[i])
		i = (i + 1) & (n_slots - 1);
	slots[i] = ino;
	return ino;
}

static int load(const char *list)
{
	FILE *f = fopen(list, "r");
	char line[4096];
	size_t lines = 0;

	if (!f) {
		fprintf(stderr, "shardfs-fusefloor: %s: %s\n", list, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f))
		lines++;
	cap_nodes = 2 * lines + 2; /* files and at most as many folders, the root */
	for (n_slots = 1024; n_slots < 2 * cap_nodes; n_slots *= 2)
		;
	nodes = calloc(cap_nodes, sizeof(*nodes));
	slots = calloc(n_slots, sizeof(*slots));
	if (!nodes || !slots) {
		fprintf(stderr, "shardfs-fusefloor: out of memory\n");
		return -1;
	}
	nodes[n_nodes++] = (struct node){0, "", 0, true};
	rewind(f);
	for (size_t no = 1; fgets(line, sizeof(line), f); no++) {
		char *sp = strrchr(line, ' ');
		char *end;
		unsigned long long size = sp ? strtoull(sp + 1, &end, 10) : 0;
		if (!sp || end == sp + 1 || (*end && *end != '\n')) {
			fprintf(stderr, "shardfs-fusefloor: %s:%zu: want RELPATH SIZE\n", list, no);
			fclose(f);
			return -1;
		}
		*sp = '\0';
		uint64_t at = 1;
		for (char *tok = strtok(line, "/"), *next; tok && at; tok = next) {
			next = strtok(NULL, "/");
			at = add(at, tok, next != NULL, next ? 0 : size);
		}
		if (!at) {
			fprintf(stderr, "shardfs-fusefloor: %s:%zu: too many names\n", list, no);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

static void attr_of(uint64_t ino, struct stat *st)
{
	const struct node *n = &nodes[ino - 1];

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = n->dir ? S_IFDIR | 0555 : S_IFREG | 0444;
	st->st_nlink = n->dir ? 2 : 1;
	st->st_size = (off_t)n->size;
}

static bool valid(fuse_ino_t ino) { return ino >= 1 && ino <= n_nodes; }

static void ll_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr_timeout = e.entry_timeout = TIMEOUT_S;
	if (valid(parent) && (e.ino = find(parent, name)) != 0)
		attr_of(e.ino, &e.attr);
	fuse_reply_entry(req, &e); /* ino 0: a negative entry */
}

static void ll_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;

	(void)fi;
	if (!valid(ino)) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	attr_of(ino, &st);
	fuse_reply_attr(req, &st, TIMEOUT_S);
}

static void ll_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (!valid(ino) || nodes[ino - 1].dir) {
		fuse_reply_err(req, valid(ino) ? EISDIR : ENOENT);
		return;
	}
	fi->keep_cache = 0; /* as shardfs's first open of a file */
	/* As shardfs's first epoch of a file over one chunk (fs/kernel/pagecache.c):
	 * the reader's requests come straight to the daemon, not through the
	 * kernel's page cache and readahead. */
	fi->direct_io = nodes[ino - 1].size > FLOOR_CHUNK_BYTES;
	fuse_reply_open(req, fi);
}

static void ll_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	uint64_t fsize = nodes[ino - 1].size;

	(void)fi;
	if ((uint64_t)off >= fsize) {
		fuse_reply_buf(req, NULL, 0);
		return;
	}
	size_t n = fsize - (uint64_t)off < size ? (size_t)(fsize - (uint64_t)off) : size;
	n = n < (1u << 20) ? n : (1u << 20);
	fuse_reply_buf(req, (const char *)pattern + (uint64_t)off % PATTERN_PERIOD, n);
}

static void ll_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* shardfs's op_init, less what a read-only in-memory tree has no use for. */
static void ll_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	conn->max_readahead = 8u << 20;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
}

static const struct fuse_lowlevel_ops ops = {.init = ll_init,
					     .lookup = ll_lookup,
					     .getattr = ll_getattr,
					     .open = ll_open,
					     .read = ll_read,
					     .release = ll_release};

int main(int argc, char **argv)
{
	/* --uring: FUSE over io_uring where the kernel offers it (EXPERIMENTAL,
	 * fs/kernel/fuse_uring.h), to measure what the transport saves. */
	bool uring = argc == 4 && strcmp(argv[1], "--uring") == 0;
	if (uring) {
		argv[1] = argv[0];
		argv++, argc--;
	}
	if (argc != 3) {
		fprintf(stderr, "usage: %s [--uring] LIST MOUNTPOINT\n", argv[0]);
		return 2;
	}
	if (load(argv[1]) != 0)
		return 1;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)((i % PATTERN_PERIOD) * 7 + 3);
	char *fuse_argv[] = {argv[0], "-o", "ro,fsname=shardfs-fusefloor,subtype=fusefloor", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
	struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, argv[2]) != 0) {
		fprintf(stderr, "shardfs-fusefloor: cannot mount on '%s'\n", argv[2]);
		return 1;
	}
	if (uring) {
		static const struct sfs_fusedev_uring ring = {.start = sfs_fuse_uring_start,
							      .reply = sfs_fuse_uring_reply};
		sfs_fusedev_want_uring(&ring, 16);
		if (sfs_fusedev_attach(se, false) != 0)
			fprintf(stderr, "shardfs-fusefloor: no custom I/O: no io_uring\n");
	}
	int rc = sfs_workers_run(se, 64, 8);
	if (uring)
		fprintf(stderr, "shardfs-fusefloor: %llu requests over io_uring\n",
			sfs_fuse_uring_requests());
	fuse_session_unmount(se);
	fuse_remove_signal_handlers(se);
	fuse_session_destroy(se);
	return rc == 0 ? 0 : 1;
}
