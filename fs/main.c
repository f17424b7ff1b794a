// SPDX-License-Identifier: Apache-2.0
/*
 * main — startup and shutdown of the shardfs daemon.
 *
 * Order matters: every check that can fail (options, mountpoint, names,
 * every node's mount of the export) runs before the FUSE mount, so a refusal
 * leaves nothing mounted. The origin's threads start only after
 * fuse_daemonize() has forked (threads do not survive fork; its sockets do).
 *
 * Owns: the order of startup and shutdown and the struct sfs_fs it fills
 * (fs.h); no module's state. Threading: the main thread, which also runs
 * the FUSE loop (fs/kernel/workers.h) until unmounted or signalled; the
 * signal handlers only set flags.
 */
#include "fs.h"
#include "observe/stats.h"
#include "hints/hints.h"
#include "kernel/fusedev.h"
#include "kernel/handles.h"
#include "kernel/passthrough.h"
#include "restart/carry.h"
#include "restart/keeper.h"
#include "restart/takeover.h"
#include "restart/watchdog.h"
#include "../cache/common/hash.h"
#include "memtrim.h"
#include "kernel/workers.h"
#include "../cache/common/log.h"

/* Kernel readahead for the mount: deep enough for 1 MiB requests to reach
 * every node at once. */
#define SFS_READ_AHEAD_KB 8192

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static int die(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "shardfs: ");
	fprintf(stderr, fmt, a, b);
	fputc('\n', stderr);
	return 1;
}

static int check_mountpoint(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return die("mountpoint '%s': %s", path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return die("mountpoint '%s': %s", path, "not a directory");
	if (access(path, R_OK | X_OK) != 0)
		return die("mountpoint '%s': %s", path, strerror(errno));
	return 0;
}

/*
 * The type of the top-most mount whose mount point is path (absolute, no
 * symlinks), from /proc/self/mountinfo, into type, and its device into
 * *dev unless dev is NULL; false if none is. A
 * second daemon started on a live mount (a re-run prolog, a restarted unit)
 * would otherwise stack on top of it.
 */
static bool mounted_at(const char *path, char *type, size_t type_len, dev_t *dev)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL, mnt[4096], fstype[256];
	unsigned maj, min;
	size_t cap = 0;
	bool found = false;

	if (!f)
		return false;
	while (getline(&line, &cap, f) > 0) {
		/* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - TYPE SRC SUPER */
		char *sep = strstr(line, " - ");
		if (!sep || sscanf(line, "%*s %*s %u:%u %*s %4095s", &maj, &min, mnt) != 3 ||
		    sscanf(sep + 3, "%255s", fstype) != 1)
			continue;
		/* Octal escapes (\040 for a space) as the kernel writes them. */
		char *w = mnt;
		for (const char *r = mnt; *r; r++)
			if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] && r[3]) {
				*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
				r += 3;
			} else {
				*w++ = *r;
			}
		*w = 0;
		if (strcmp(mnt, path) == 0) {
			snprintf(type, type_len, "%s", fstype);
			if (dev)
				*dev = makedev(maj, min);
			found = true; /* later lines are mounted on top of earlier ones */
		}
	}
	free(line);
	fclose(f);
	return found;
}

/* FUSE's own arguments, built from ours: always read-only; fsname is the
 * source (escaped: it contains commas) so mount(8) and df show it. */
static int build_fuse_args(const struct sfs_options *o, struct fuse_args *args, const char *argv0)
{
	char *opts = NULL, *fsname = NULL;
	int rc = -ENOMEM;

	if (asprintf(&fsname, "fsname=%s", o->source) < 0)
		return -ENOMEM;
	if (!fuse_opt_add_opt(&opts, "ro") && !fuse_opt_add_opt(&opts, "subtype=shardfs") &&
	    !fuse_opt_add_opt_escaped(&opts, fsname) &&
	    !(o->allow_other && fuse_opt_add_opt(&opts, "allow_other")) &&
	    !(o->default_permissions && fuse_opt_add_opt(&opts, "default_permissions")) &&
	    !fuse_opt_add_arg(args, argv0) && !fuse_opt_add_arg(args, "-o") &&
	    !fuse_opt_add_arg(args, opts))
		rc = 0;
	free(fsname);
	free(opts);
	return rc;
}

/*
 * The kernel caps a FUSE mount's readahead at its bdi's read_ahead_kb
 * (128 KiB by default), whatever max_readahead we ask for in init, and then
 * sends 128 KiB reads. Raise it right after mounting. Needs root; without
 * it reads still work, in smaller requests. The mount's device comes from
 * /proc/self/mountinfo, not from a stat of the mountpoint: a stat would be
 * a FUSE request to ourselves, and while it is in flight the mount is busy
 * (an umount right after the mount command returned failed with EBUSY).
 */
static void tune_readahead(const char *mnt)
{
	char fstype[256], path[64];
	dev_t dev;

	if (!mounted_at(mnt, fstype, sizeof(fstype), &dev) || strncmp(fstype, "fuse", 4) != 0)
		return;
	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/read_ahead_kb", major(dev), minor(dev));
	FILE *f = fopen(path, "we");
	if (!f || fprintf(f, "%u\n", SFS_READ_AHEAD_KB) < 0 || fclose(f) != 0)
		sfs_log(SFS_LOG_DEBUG, "main", "cannot raise %s: %s", path, strerror(errno));
	else
		sfs_log(SFS_LOG_DEBUG, "main", "readahead of %s set to %u KiB", mnt,
			SFS_READ_AHEAD_KB);
}

/*
 * Immutable mounts: open the namespace saved in cache_dir/namespace (memory
 * only without a cache_dir, or when that folder cannot be used). Returns 0
 * and *out, or -EBUSY (another daemon owns it: the mount must be refused).
 */
static int open_namespace(const struct sfs_options *o, sfs_ns **out)
{
	char err[512] = "", *dir = NULL;
	struct sfs_ns_conf c = {
	    .export_path = o->export_path, .hosts = o->hosts, .max_entries = o->namespace_max};
	int rc;

	if (o->cache_dir && (mkdir(o->cache_dir, 0700) == 0 || errno == EEXIST) &&
	    asprintf(&dir, "%s/namespace", o->cache_dir) < 0)
		dir = NULL;
	c.dir = dir;
	rc = sfs_ns_open(&c, out, err, sizeof(err));
	free(dir);
	if (rc == -EBUSY) {
		fprintf(stderr, "shardfs: %s\n", err);
		return rc;
	}
	if (rc < 0 && c.dir) {
		sfs_log(SFS_LOG_WARN, "main", "%s; the namespace is kept in memory only", err);
		c.dir = NULL;
		rc = sfs_ns_open(&c, out, err, sizeof(err));
	}
	if (rc < 0)
		fprintf(stderr, "shardfs: %s\n", err);
	return rc;
}

/* True when no node is up (a mount that started from its saved namespace). */
static bool no_node_up(sfs_origin *origin)
{
	struct sfs_origin_node_stats ns;

	for (size_t i = 0; i < sfs_origin_node_count(origin); i++) {
		sfs_origin_node_stats(origin, i, &ns);
		if (ns.state == SFS_NODE_UP)
			return false;
	}
	return true;
}

/* Inodes handed back per pass at most, 512 KiB of ids. What is left goes
 * at the next pass (a second later, or a kick), once the FORGETs of this
 * one have shrunk the table (picking twice before them would hand back
 * twice the excess). */
#define PRUNE_MAX 65536
/* The files closed that the picker remembers, oldest dropped first: about
 * what closes between two passes, 16 bytes each (1 MiB at most); queued
 * only from half of inode_max on. */
#define PRUNE_RING(max) ((max) < PRUNE_MAX ? (size_t)(max) : (size_t)PRUNE_MAX)

/* Past inode_max, ask the kernel to forget files closed longest ago, then
 * inodes looked up least recently, down to 90% of it (inode.h:
 * sfs_inode_prune_pick); the kernel's FORGETs free them (and memtrim gives
 * the memory back). */
static void prune_inodes(struct sfs_fs *fs)
{
	uint64_t max = fs->opts->inode_max;
	static bool warned;

	if (!max)
		return;
	uint64_t n_inodes = sfs_inode_count(fs->inodes);
	if (n_inodes <= max || !sfs_fusedev_kernel_minor())
		return; /* within the limit, or before INIT */
	if (!sfs_fusedev_can_prune()) {
		if (!warned)
			sfs_log(SFS_LOG_WARN, "main",
				"the kernel holds %llu inodes, over inode_max=%llu, and cannot be "
				"asked to forget some (FUSE 7.%u; that needs 7.45): memory grows "
				"with the files it holds",
				(unsigned long long)n_inodes, (unsigned long long)max,
				sfs_fusedev_kernel_minor());
		warned = true;
		return;
	}
	uint64_t target = max - max / 10;
	size_t want = n_inodes - target < PRUNE_MAX ? (size_t)(n_inodes - target) : PRUNE_MAX;
	uint64_t *ids = malloc(want * sizeof(*ids));
	if (!ids)
		return;
	size_t n = sfs_inode_prune_pick(fs->inodes, target, ids, want);
	int rc = n ? sfs_fusedev_prune(fs->se, ids, n) : 0;
	free(ids);
	if (rc < 0) {
		if (!warned)
			sfs_log(SFS_LOG_WARN, "main", "cannot hand inodes back to the kernel: %s",
				strerror(-rc));
		warned = true;
		return;
	}
	__atomic_fetch_add(&fs->inodes_pruned, n, __ATOMIC_RELAXED);
}

/* The inode table's help for prune_inodes: the queue of closed files from
 * half of inode_max on, and a pass at once when a burst of lookups (a
 * listing) goes 1/16 past it, instead of up to a second later. */
static int prune_setup(struct sfs_fs *fs, uint64_t max)
{
	struct sfs_inode_prune_conf c = {.ring = PRUNE_RING(max),
					 .from = max / 2,
					 .kick_at = max + max / 16,
					 .kick = sfs_memtrim_kick};

	return max ? sfs_inode_prune_enable(fs->inodes, &c) : 0;
}

/* memtrim's hook, once a second (or at once when the inode table kicks):
 * inodes past inode_max are handed back to the kernel; directory listings
 * older than actimeo are dropped; chunk buffers pooled
 * for reuse go back to the system after 5 s without a fetch or a load (a
 * busy reader never pays for it). */
static uint64_t release_idle(void *arg)
{
	struct sfs_fs *fs = arg;
	prune_inodes(fs);
	if (fs->listings)
		sfs_memtrim_freed(sfs_ns_expire(fs->listings));
	return sfs_prefetch_release_idle(fs->prefetch, 5000);
}

/* Stop prefetch's threads (they use the origin and the store), then the
 * origin: completions still queued run now, with -ESHUTDOWN where NFS did
 * not answer. Before prefetch's close: completions touch its files. Once. */
static void close_origin(struct sfs_fs *fs)
{
	sfs_stats_close(fs->stats); /* it reads the modules closed below */
	fs->stats = NULL;
	sfs_hints_close(fs->hints); /* its fetchers call the origin and prefetch */
	fs->hints = NULL;
	sfs_prefetch_stop(fs->prefetch);
	sfs_origin_close(fs->origin);
	fs->origin = NULL;
}

/* The mountpoint: usable, made absolute (daemonizing moves to "/"), and
 * not already a mount unless -o overmount or an autofs trigger (a systemd
 * .automount is meant to be mounted over). Returns 0, or -1 after saying
 * why. */
static int check_target(struct sfs_options *o, bool resume)
{
	if (resume) /* our own live mount: no stat of it (it would wait for us) */
		return 0;
	if (check_mountpoint(o->mountpoint))
		return -1;
	char *abs_mnt = realpath(o->mountpoint, NULL);
	if (!abs_mnt) {
		die("mountpoint '%s': %s", o->mountpoint, strerror(errno));
		return -1;
	}
	free(o->mountpoint);
	o->mountpoint = abs_mnt;
	char fstype[256];
	if (!o->overmount && mounted_at(o->mountpoint, fstype, sizeof(fstype), NULL) &&
	    strcmp(fstype, "autofs") != 0) {
		die("mountpoint '%s': already a %s mount (unmount it first, or -o overmount)",
		    o->mountpoint, fstype);
		return -1;
	}
	return 0;
}

/* Not immutable: the directory listings that answer lookups for actimeo
 * (listing_max; none with actimeo=0, where nothing may be kept). A failure
 * (out of memory) leaves fs->listings NULL: lookups go to NFS. */
static void open_listings(struct sfs_fs *fs, const struct sfs_options *o)
{
	char err[128];

	if (o->immutable || !o->listing_max || !o->actimeo_s)
		return;
	if (sfs_ns_open(&(struct sfs_ns_conf){.max_entries = o->listing_max,
					      .ttl_ms = o->actimeo_s * 1000ull},
			&fs->listings, err, sizeof(err)) < 0)
		fs->listings = NULL;
}

/* The file passthrough is probed with (sfs_pt_probe): an unnamed regular
 * file on cache_dir's filesystem, so that the probe meets the same rules as
 * the cache's data files (a stacked filesystem refuses both). -1 where none
 * can be made: the probe then passes on the kernel's offer alone. */
static int passthrough_probe_file(const char *cache_dir)
{
	if (mkdir(cache_dir, 0700) < 0 && errno != EEXIST)
		return -1;
	return open(cache_dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

/* sfs_inode_each_adopted_passthrough's: hold what the kernel still reads. */
static void adopt_passthrough(struct sfs_inode *i, void *arg)
{
	struct sfs_fs *fs = arg;

	sfs_pt_adopted(fs->pt, i);
}

/* fusedev's after-init hook: passthrough on or off for this mount. */
static void probe_passthrough(void *arg)
{
	struct sfs_fs *fs = arg;

	sfs_pt_probe(fs->pt);
}

/* fs->stats_render (fs.h): the stats file's text into a malloc'd *out.
 * Returns its length, or -ENOMEM. */
static ssize_t render_stats(struct sfs_fs *fs, char **out)
{
	return sfs_stats_read(fs->stats, out);
}

/* Open into fs (nothing started: no thread before the fork) the namespace
 * (immutable), the origin, the inode table, the job table and the store.
 * Returns 0, or -1 after saying why; what was opened stays in fs for
 * main's teardown. */
static int open_modules(struct sfs_fs *fs, struct sfs_options *o, char **addrs, int n_addrs,
			int resume_inode_fd)
{
	char err[512] = "";
	int rc;
	struct sfs_origin_conf oc = {
	    .addrs = addrs,
	    .n_addrs = (size_t)n_addrs,
	    .export_path = o->export_path,
	    .nconnect = o->nconnect,
	    .rsize_bytes = o->rsize,
	    .timeo_ds = o->timeo_ds,
	    .retrans = o->retrans,
	    .hard = o->hard,
	    .uid = o->uid,
	    .gid = o->gid,
	    .n_threads = o->io_threads,
	    .background_pct = o->warm_share,
	    .background_rate = o->warm_rate,
	};
	struct sfs_fh saved_root;
	if (o->immutable) {
		if (open_namespace(o, &fs->ns) < 0)
			return -1;
		if (sfs_ns_saved_root(fs->ns, &saved_root))
			oc.offline_root = &saved_root; /* may start with no node up */
	}
	rc = sfs_origin_open(&oc, &fs->origin, err, sizeof(err));
	if (rc < 0) {
		fprintf(stderr, "shardfs: %s\n", err[0] ? err : strerror(-rc));
		return -1;
	}
	open_listings(fs, o);
	if (fs->ns) {
		/* A namespace saved for another root (cluster) is dropped here. */
		sfs_ns_bind(fs->ns, sfs_origin_root(fs->origin));
		if (no_node_up(fs->origin)) {
			struct sfs_ns_stats st;
			sfs_ns_get_stats(fs->ns, &st);
			sfs_log(SFS_LOG_WARN, "main",
				"no node answers: serving %s from the namespace saved in %s "
				"(%llu names) and the data cache until a node answers",
				o->export_path, o->cache_dir, (unsigned long long)st.entries);
		}
	}
	pthread_mutex_init(&fs->statfs_lock, NULL);
	fs->opts = o;
	fs->stats_render = render_stats;
	fs->page_cache.mode = o->page_cache;
	fs->pt->wanted = o->passthrough && o->cache_dir;
	fs->pt->probe_fd = fs->pt->wanted ? passthrough_probe_file(o->cache_dir) : -1;
	fs->pt->willneed_max = o->prefetch == SFS_PREFETCH_SHARD ? o->prefetch_max : 0;
	fs->attr_timeout_s = o->immutable ? SFS_IMMUTABLE_TIMEOUT_S : o->actimeo_s;
	fs->start_ns = sfs_now_ns();
	fs->ctl_dir = sfs_inode_virtual(SFS_INODE_CTL_DIR);
	fs->stats_file = sfs_inode_virtual(SFS_INODE_STATS);
	if (!fs->ctl_dir || !fs->stats_file)
		rc = -ENOMEM;
	if (rc >= 0)
		rc = resume_inode_fd >= 0
			 ? sfs_inode_table_adopt(resume_inode_fd, sfs_origin_root(fs->origin),
						 &fs->inodes)
			 : sfs_inode_table_open(sfs_origin_root(fs->origin), &fs->inodes);
	if (rc < 0 || (rc = prune_setup(fs, o->inode_max)) < 0 ||
	    (rc = sfs_jobs_open(NULL, &fs->jobs)) < 0) {
		fprintf(stderr, "shardfs: %s\n", strerror(-rc));
		return -1;
	}
	if (o->cache_dir) {
		struct sfs_store_conf sc = {.dir = o->cache_dir,
					    .capacity_bytes = o->cache_size,
					    .policy = o->cache_policy,
					    .idle_ms = o->cache_idle_s * 1000ull,
					    .chunk_bytes = SFS_CHUNK_BYTES,
					    /* the scrubber checks what was verified;
					       without one every read is checked */
					    .trust_verified = o->scrub_interval_s > 0};
		rc = sfs_store_open(&sc, &fs->store, err, sizeof(err));
		if (rc < 0) { /* another daemon owns it, or a bad path: refuse */
			fprintf(stderr, "shardfs: %s\n", err[0] ? err : strerror(-rc));
			return -1;
		}
		/* The files at the export's root form its own dataset; each
		 * top-level directory one more (fs/ops/ops.c, sfs_ops_child_dataset). */
		char name[1100];
		sfs_export_join(o, "", 0, name, sizeof(name));
		fs->root_dataset = sfs_store_dataset(fs->store, name);
		sfs_inode_root(fs->inodes)->dataset = fs->root_dataset;
	}
	return 0;
}

/* Epoch hints (hints.h), handed the modules they resolve and fetch with.
 * They hold at most half of the fetch memory unread: readers' own chunks
 * and readahead keep the rest. Returns 0 or -errno. */
static int open_hints(struct sfs_fs *fs, const struct sfs_options *o)
{
	struct sfs_hints_handles hh = {.prefetch = fs->prefetch,
				       .origin = fs->origin,
				       .ns = fs->ns,
				       .listings = fs->listings,
				       .inodes = fs->inodes,
				       .attr_timeout_s = fs->attr_timeout_s,
				       .store = fs->store,
				       .root_dataset = fs->root_dataset,
				       .opts = o};
	struct sfs_hints_conf c = {.window = o->hint_window,
				   .fetchers = o->hint_fetchers,
				   .mem_bytes = o->prefetch_mem / 2,
				   .list_mem_max = o->mem_max / 8,
				   .check_perms = o->default_permissions};

	return sfs_hints_open(&hh, &c, &fs->hints);
}

/* The stats' amend hook (stats.h): the counters carried from the process
 * that handed over go on (carry.h). */
static int amend_carried(void *arg, char **text, size_t *len)
{
	return sfs_carry_apply(arg, text, len);
}

/* The label values of the staging counters, from fs/ops's tables. */
static const char *stage_targets[SFS_STAGE_KIND_COUNT];
static const char *stage_reasons[SFS_STAGE_E_COUNT];

/* The stats file (stats.h), handed every module it reports on and where
 * fs/ops keeps its counters. After the modules opened, the keeper's state
 * mapped and the carried counters loaded. Returns 0 or -errno. */
static int open_stats(struct sfs_fs *fs, const struct sfs_options *o)
{
	for (int t = 0; t < SFS_STAGE_KIND_COUNT; t++)
		stage_targets[t] = sfs_stage_target_name((enum sfs_stage_kind)t);
	for (int r = 0; r < SFS_STAGE_E_COUNT; r++)
		stage_reasons[r] = sfs_stage_reason_name((enum sfs_stage_reason)r);
	struct sfs_stats_sources src = {.origin = fs->origin,
					.prefetch = fs->prefetch,
					.store = fs->store,
					.ns = fs->ns,
					.listings = fs->listings,
					.staging = fs->staging,
					.inodes = fs->inodes,
					.jobs = fs->jobs,
					.hints = fs->hints,
					.keeper = fs->keeper,
					.pt = fs->pt,
					.page_cache = &fs->page_cache,
					.start_ns = fs->start_ns,
					.mem_max = o->mem_max,
					.fuse = {.ops = fs->op_count,
						 .op_names = sfs_fuse_op_names,
						 .n_ops = SFS_OP_COUNT,
						 .read_bytes = &fs->read_bytes,
						 .read_errors = &fs->read_errors,
						 .invalidations = &fs->invalidations,
						 .direct_opens = &fs->direct_opens,
						 .inodes_pruned = &fs->inodes_pruned,
						 .stage_bytes = fs->stage_bytes,
						 .stage_requests = fs->stage_requests,
						 .stage_targets = stage_targets,
						 .n_stage_targets = SFS_STAGE_KIND_COUNT,
						 .stage_errors = fs->stage_errors,
						 .stage_reasons = stage_reasons,
						 .n_stage_reasons = SFS_STAGE_E_COUNT},
					.amend = fs->carry ? amend_carried : NULL,
					.amend_arg = fs->carry};

	return sfs_stats_open(&src, &fs->stats);
}

/* After the fork: start every module's threads (the CUDA runtime, if any,
 * must live in the daemon too), then the readahead tuner and the memory
 * trimmer. Returns 0, or -1 after logging why. */
static int start_daemon(struct sfs_fs *fs, struct sfs_options *o, int n_addrs)
{
	int rc;

	if ((rc = sfs_origin_start(fs->origin)) < 0 ||
	    (fs->ns && (rc = sfs_ns_start(fs->ns)) < 0) ||
	    (fs->store && (rc = sfs_store_start(fs->store)) < 0) ||
	    (rc = sfs_prefetch_open(
		 &(struct sfs_prefetch_conf){
		     .mem_bytes = o->prefetch_mem,
		     /* Two chunks per connection, and what the kernel's readahead
		      * keeps in flight for a buffered reader: a direct_io reader
		      * (page_cache=auto's first epochs) sends one read at a time,
		      * and without that second term a slow node holds it back
		      * further (shardfs-bench --slow-node). */
		     .window_chunks = (unsigned)(2 * (size_t)n_addrs * o->nconnect +
						 SFS_FUSE_MAX_READAHEAD / SFS_CHUNK_BYTES),
		     .mode = o->prefetch,
		     .shard_max_bytes = o->prefetch_max,
		     .store = fs->store},
		 fs->origin, &fs->prefetch)) < 0) {
		sfs_log(SFS_LOG_ERR, "main", "cannot start: %s", strerror(-rc));
		return -1;
	}
	/* The versions passthrough opens read are held in the store, also
	 * those a dead server's opens still read. */
	sfs_pt_start(fs->pt, fs->store);
	sfs_inode_each_adopted_passthrough(fs->inodes, adopt_passthrough, fs);
	/* Passthrough reads are not checked as they are read: the scrubber
	 * re-reads the cache (and verifies what a restart left unverified). */
	if (fs->store && (o->scrub_interval_s || fs->pt->wanted) &&
	    (rc = sfs_store_scrub_start(fs->store, &(struct sfs_store_scrub_conf){
						       .interval_ms = o->scrub_interval_s * 1000ull,
						       .rate_bytes = o->scrub_rate})) < 0) {
		sfs_log(SFS_LOG_ERR, "main", "cannot start the scrubber: %s", strerror(-rc));
		return -1;
	}
	if ((rc = open_hints(fs, o)) < 0) {
		sfs_log(SFS_LOG_ERR, "main", "cannot start: %s", strerror(-rc));
		return -1;
	}
	if ((rc = sfs_staging_open(&fs->staging)) < 0) {
		sfs_log(SFS_LOG_ERR, "main", "cannot set up staging: %s", strerror(-rc));
		return -1;
	}
	if ((rc = open_stats(fs, o)) < 0) {
		sfs_log(SFS_LOG_ERR, "main", "cannot start: %s", strerror(-rc));
		return -1;
	}
	sfs_log(SFS_LOG_INFO, "main", "mounted %s on %s (%d node addresses, %u connections each%s)",
		o->source, o->mountpoint, n_addrs, o->nconnect, o->immutable ? ", immutable" : "");
	if (o->cache_dir)
		sfs_log(SFS_LOG_INFO, "main", "cache checksums: XXH3-64, %s code", sfs_xxh3_impl());
	tune_readahead(o->mountpoint);
	if ((rc = sfs_memtrim_start(release_idle, fs)) < 0) /* not fatal: freed memory stays */
		sfs_log(SFS_LOG_WARN, "main", "cannot start the memory trimmer: %s", strerror(-rc));
	return 0;
}

/* With a keeper, a heartbeat (watchdog.h): a wedged process is replaced.
 * After start_daemon (it watches the origin's threads). NULL without a
 * keeper, with wedge_timeout=0, or when it cannot start (logged). */
static sfs_watchdog *start_watchdog(struct sfs_fs *fs, const struct sfs_options *o)
{
	sfs_watchdog *w = NULL;
	int rc;

	if (!fs->keeper || !o->wedge_timeout_s)
		return NULL;
	struct sfs_watchdog_conf c = {
	    .origin = fs->origin, .keeper = fs->keeper, .wedge_ms = o->wedge_timeout_s * 1000ull};
	if ((rc = sfs_watchdog_open(&c, &w)) < 0 || (rc = sfs_watchdog_start(w)) < 0) {
		sfs_log(SFS_LOG_WARN, "main", "no watchdog (%s): a wedged process is not replaced",
			strerror(-rc));
		sfs_watchdog_close(w);
		return NULL;
	}
	return w;
}

/* The FUSE workers until unmounted or signalled. Returns the exit status. */
static int run_loop(struct fuse_session *se, const struct sfs_options *o, bool kept)
{
	int rc;
	if (o->active_threads) {
		/* Our pool (see workers.h); 0 keeps libfuse's loop. */
		unsigned active =
		    o->active_threads < o->max_threads ? o->active_threads : o->max_threads;
		rc = sfs_workers_run(se, o->max_threads, active);
		if (rc < 0)
			sfs_log(SFS_LOG_ERR, "main", "FUSE workers: %s", strerror(-rc));
	} else {
		struct fuse_loop_config *lc = fuse_loop_cfg_create();
		if (!lc)
			return 1;
		fuse_loop_cfg_set_max_threads(lc, o->max_threads);
		/* Workers never exit once started: with fewer idle threads kept
		 * than readers in flight, libfuse creates and destroys a thread
		 * every few requests. */
		fuse_loop_cfg_set_idle_threads(lc, o->max_threads);
		/* A cloned fd's unanswered requests fail when it closes: with a
		 * keeper, every request must come through the fd the keeper holds. */
		fuse_loop_cfg_set_clone_fd(lc, kept ? 0 : 1);
		rc = fuse_session_loop_mt(se, lc);
		fuse_loop_cfg_destroy(lc);
	}
	sfs_log(SFS_LOG_INFO, "main", "unmounting %s", o->mountpoint);
	return rc == 0 ? 0 : 1;
}

/* SIGUSR2 from the keeper (takeover.h): stop taking requests and exit
 * without unmounting, for the next binary. */
static volatile sig_atomic_t handing_over;
static struct fuse_session *signalled_session;

static void on_handover(int sig)
{
	(void)sig;
	handing_over = 1;
	if (signalled_session)
		fuse_session_exit(signalled_session); /* a flag: as libfuse's own handlers */
}

/* How this process came to serve: mounted by itself, or resumed by its
 * keeper on the connection a dead server left (keeper.h). */
struct serve_mode {
	bool resume;
	int fuse_fd, state_fd; /* resume: the keeper's; else state_fd -1 until created */
	char **argv;	       /* the command line, for the keeper's restarts */
};

/* Right after the mount, before any thread: the keeper state, then the
 * fork into keeper and server (keeper.h). Without it (no memfd, no fork)
 * the daemon serves as before: a crash takes the mount down. */
static void start_keeper(struct sfs_fs *fs, struct sfs_options *o, struct fuse_session *se,
			 struct serve_mode *m)
{
	int rc = sfs_keeper_state_create(&m->state_fd, &fs->keeper);

	if (rc == 0)
		rc = sfs_keeper_fork(fuse_session_fd(se), m->state_fd,
				     sfs_inode_table_region_fd(fs->inodes), o->mountpoint,
				     o->foreground, m->argv);
	if (rc < 0) {
		sfs_log(SFS_LOG_WARN, "main",
			"no keeper (%s): a crash of this process ends the mount", strerror(-rc));
		fs->keeper = NULL;
		return;
	}
	fs->keeper->serving_pid = (int32_t)getpid();
	snprintf(fs->keeper->mountpoint, sizeof(fs->keeper->mountpoint), "%s", o->mountpoint);
	sfs_fusedev_keep_init(fs->keeper);
}

/* At a takeover: the stats file as rendered now, saved for the next
 * process (carry.h), which adds its counters to its own. Returns 0 or
 * -errno. */
static int carry_counters(struct sfs_fs *fs, int state_fd)
{
	char *text = NULL;
	ssize_t n = fs->stats ? render_stats(fs, &text) : -ENODATA;

	if (n < 0)
		return (int)n;
	int rc = sfs_carry_save(text, (size_t)n, state_fd, fs->keeper);
	free(text);
	return rc;
}

/* Mount (or, resumed, take the keeper's connection), detach, serve until
 * unmounted or signalled, and take the session down. Returns the exit
 * status. */
static int serve(struct sfs_fs *fs, struct sfs_options *o, struct fuse_args *args, int n_addrs,
		 struct serve_mode *m)
{
	int status = 1;
	sfs_watchdog *watchdog = NULL;
	struct fuse_session *se = fuse_session_new(args, &sfs_fuse_ops, sizeof(sfs_fuse_ops), fs);
	char devfd[32];

	if (!se) {
		fprintf(stderr, "shardfs: cannot create the FUSE session\n");
		return 1;
	}
	if (fuse_set_signal_handlers(se) != 0) {
		fprintf(stderr, "shardfs: cannot install signal handlers\n");
		goto out_session;
	}
	/* Resumed: libfuse takes "/dev/fd/N" as an open connection, no mount. */
	snprintf(devfd, sizeof(devfd), "/dev/fd/%d", m->fuse_fd);
	if (fuse_session_mount(se, m->resume ? devfd : o->mountpoint) != 0) {
		fprintf(stderr, "shardfs: cannot mount on '%s' (see the fuse: message above)\n",
			o->mountpoint);
		goto out_signals;
	}
	sfs_fusedev_want_passthrough(fs->pt->wanted);
	sfs_fusedev_after_init(probe_passthrough, fs);
	int rc = sfs_fusedev_attach(se, o->page_cache == SFS_PAGE_CACHE_NEVER);
	if (rc < 0) /* not fatal: libfuse keeps its own device I/O */
		sfs_log(SFS_LOG_WARN, "main", "cannot hook the FUSE device: %s", strerror(-rc));
	if (!m->resume && fuse_daemonize(o->foreground) != 0) {
		fprintf(stderr, "shardfs: cannot detach from the terminal\n");
		goto out_unmount;
	}
	if (!o->foreground)
		sfs_log_use_syslog();
	else
		sfs_log_use_timestamps(); /* a log now; refusals above stay one plain line */
	fs->se = se;
	if (m->resume) {
		fs->carry = sfs_carry_load(m->state_fd, fs->keeper); /* after a takeover */
		if ((rc = sfs_fusedev_resume(se, fs->keeper)) < 0) {
			sfs_log(SFS_LOG_ERR, "main", "cannot resume the FUSE connection: %s",
				strerror(-rc));
			goto out_unmount;
		}
		sfs_log(SFS_LOG_WARN, "main",
			"resumed %s on %s (serving process %u of this mount; %llu inodes the "
			"kernel holds kept)",
			o->source, o->mountpoint, fs->keeper->epoch,
			(unsigned long long)sfs_inode_count(fs->inodes));
	} else if (rc == 0) {
		start_keeper(fs, o, se, m);
	}
	if (fs->keeper) {
		signalled_session = se;
		sigaction(SIGUSR2, &(struct sigaction){.sa_handler = on_handover}, NULL);
	}
	sfs_handles_set_epoch(fs->keeper ? fs->keeper->epoch : 0);
	if (start_daemon(fs, o, n_addrs) == 0) {
		watchdog = start_watchdog(fs, o);
		status = run_loop(se, o, fs->keeper != NULL);
	}
	if (handing_over) {
		/* What was read and not answered goes to the next binary (RESEND);
		 * the cache recovers what was being written, as after a crash.
		 * The counters go on in the next process (carry.h). */
		sfs_log(SFS_LOG_INFO, "main", "handing %s over to the next binary", o->mountpoint);
		if ((rc = carry_counters(fs, m->state_fd)) < 0)
			sfs_log(SFS_LOG_WARN, "main", "counters not carried over: %s",
				strerror(-rc));
		_exit(SFS_TAKEOVER_EXIT);
	}

out_unmount:
	sfs_watchdog_close(watchdog); /* before the origin it watches closes */
	sfs_memtrim_stop();
	fuse_session_unmount(se); /* resumed: nothing (libfuse did not mount) */
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	/* The origin goes before the session: its close completes the lookups
	 * still in flight (fs/ops answers them from I/O threads), whose replies
	 * need the session and the inode table. */
	close_origin(fs);
	fuse_session_destroy(se);
	return status;
}

/* A takeover's check of this binary (takeover.h): the command line parsed
 * already; the keeper's state and inode region must be of this build's
 * layouts. One line and exit 1 when not. */
static int check_resume(const char *fds, const char *fault)
{
	int state_fd, inode_fd, rc;

	if (fault && access(fault, F_OK) == 0) {
		printf("%s exists (a test's fault)\n", fault);
		return 70;
	}
	if (sscanf(fds, "%d,%d", &state_fd, &inode_fd) != 2 || !sfs_keeper_state_map(state_fd)) {
		printf("no keeper state\n");
		return 1;
	}
	if ((rc = sfs_inode_table_check_region(inode_fd)) < 0) {
		printf("its inode table layout differs from the running daemon's (%s): unmount "
		       "and mount again to upgrade\n",
		       strerror(-rc));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct sfs_options o;
	struct sfs_pt pt = {0};
	struct sfs_fs fs = {.pt = &pt};
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	char err[512] = "";
	char **addrs = NULL;
	int n_addrs = 0, status = 1, resume_inode_fd = -1;
	struct serve_mode mode = {.argv = argv, .state_fd = -1, .fuse_fd = -1};

	if (argc > 1 && strcmp(argv[1], "--keeper") == 0)
		return sfs_keeper_main(argc, argv);
	mode.resume = sfs_keeper_resume_fds(&mode.fuse_fd, &mode.state_fd, &resume_inode_fd);
	/* A fault for the tests (test_keeper.sh): a resumed server dies at its
	 * start while the file this names exists, as a bad build would. */
	const char *fault = getenv("SHARDFS_TEST_RESUME_FAULT");
	if (mode.resume && fault && access(fault, F_OK) == 0) {
		fprintf(stderr, "shardfs: %s exists: dying at start (a test's fault)\n", fault);
		return 70;
	}
	if (mode.resume && !(fs.keeper = sfs_keeper_state_map(mode.state_fd))) {
		fprintf(stderr, "shardfs: resumed without its keeper's state\n");
		return 1;
	}
	if (sfs_options_parse(argc, argv, &o, err, sizeof(err)) != 0) {
		fprintf(stderr, "shardfs: %s (see shardfs --help)\n", err);
		sfs_options_free(&o);
		return 1;
	}
	sfs_memtrim_tune(o.mem_max); /* before any thread starts */
	if (o.help || o.version) {
		if (o.help)
			sfs_options_usage(stdout, "shardfs");
		else
			printf("shardfs %s\n", SFS_VERSION);
		status = 0;
		goto out_opts;
	}
	if (o.debug)
		sfs_log_max_level = SFS_LOG_DEBUG;
	const char *check = getenv(SFS_CHECK_RESUME_ENV);
	if (check) {
		status = check_resume(check, fault);
		goto out_opts;
	}
	if (o.takeover && !mode.resume) {
		/* Canonical, as the keeper has it; a path the caller may not
		 * resolve (another user's mount) is taken as given. */
		char *mnt = realpath(o.mountpoint, NULL);
		if (!mnt && o.mountpoint[0] == '/')
			mnt = strdup(o.mountpoint);
		if (!mnt) {
			fprintf(stderr, "shardfs: mountpoint '%s': %s\n", o.mountpoint,
				strerror(errno));
			status = 1;
			goto out_opts;
		}
		status = sfs_takeover_request(mnt, o.source, argv);
		free(mnt);
		goto out_opts;
	}
	if (mode.resume && fs.keeper->mountpoint[0] == '/') {
		/* Absolute, as the first server resolved it: never resolved here,
		 * where a stat of the mount would wait for this very process. */
		free(o.mountpoint);
		o.mountpoint = strdup(fs.keeper->mountpoint);
	}
	if (check_target(&o, mode.resume) < 0)
		goto out_opts;
	n_addrs = sfs_resolve_hosts(o.hosts, &addrs, err, sizeof(err));
	if (n_addrs < 0) {
		fprintf(stderr, "shardfs: %s\n", err);
		n_addrs = 0;
		goto out_opts;
	}
	if (open_modules(&fs, &o, addrs, n_addrs, resume_inode_fd) < 0)
		goto out_modules;
	if (build_fuse_args(&o, &args, argv[0]) != 0) {
		fprintf(stderr, "shardfs: out of memory\n");
		goto out_modules;
	}
	status = serve(&fs, &o, &args, n_addrs, &mode);

out_modules:
	fuse_opt_free_args(&args);
	close_origin(&fs);
	sfs_inode_table_close(fs.inodes);
	sfs_pt_close(fs.pt); /* its holds are store references */
	free(fs.ctl_dir);
	free(fs.stats_file);
	sfs_store_close(fs.store); /* finishes queued writes, whose callbacks too */
	sfs_prefetch_close(fs.prefetch);
	sfs_staging_close(fs.staging);
	sfs_jobs_close(fs.jobs);
	sfs_ns_close(fs.ns); /* after the origin: its threads record listings */
	sfs_ns_close(fs.listings);
	sfs_carry_free(fs.carry);
	sfs_addrs_free(addrs, (size_t)n_addrs);
out_opts:
	sfs_options_free(&o);
	return status;
}
