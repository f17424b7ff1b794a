// SPDX-License-Identifier: Apache-2.0
/*
 * ops — the FUSE low-level operations of shardfs.
 *
 * Owns: turning FUSE requests into origin calls and prefetch reads, the
 * virtual .shardfs/ tree, EROFS for every modifying operation, and the
 * replies of every operation but ioctl (fs/ops/ioctl.c replies to its own).
 * Threading: ops run on FUSE worker threads. A LOOKUP that goes to NFS is
 * answered from the origin I/O thread that gets its reply (lookup_call); a
 * READ whose bytes were not at hand (read_call, sfs_pf_read_async) by the
 * thread that lands them: the origin I/O thread for bytes fetched, a loader
 * thread or another worker for a chunk loaded from the cache; other ops
 * may block on the origin or the cache disk. Replies are sent with no lock
 * held. READDIRPLUS entries are added from the origin I/O thread that
 * decoded the reply (the FUSE buffer is private to the request until we
 * reply).
 */
#include "../fs.h"
#include "../hints/hints.h"
#include "../kernel/fusedev.h"
#include "../kernel/handles.h"
#include "../kernel/pagecache.h"
#include "../memtrim.h"
#include <shardfs/shardfs_ioctl.h>
#include "../../cache/common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/statvfs.h>
#include <unistd.h>

static struct sfs_fs *FS(fuse_req_t req) { return fuse_req_userdata(req); }

static struct sfs_inode *I(struct sfs_fs *fs, fuse_ino_t ino) { return sfs_fs_inode(fs, ino); }

static fuse_ino_t INO(struct sfs_fs *fs, struct sfs_inode *i) { return sfs_fs_ino(fs, i); }

static void op_count(struct sfs_fs *fs, enum sfs_fuse_op op)
{
	__atomic_fetch_add(&fs->op_count[op], 1, __ATOMIC_RELAXED);
}

static void reply_err(fuse_req_t req, int neg_errno) { fuse_reply_err(req, -neg_errno); }

static void attr_to_stat(const struct sfs_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->fileid;
	st->st_mode = a->type | (a->mode & 07777);
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_blksize = SFS_CHUNK_BYTES;
	st->st_blocks = (blkcnt_t)((a->used + 511) / 512);
	st->st_rdev = makedev(a->rdev_major, a->rdev_minor);
	st->st_atim = a->atime;
	st->st_mtim = a->mtime;
	st->st_ctim = a->ctime;
}

/* Attributes of the virtual .shardfs directory and its stats file. */
static void virtual_stat(struct sfs_fs *fs, struct sfs_inode *i, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = i->fileid;
	st->st_uid = getuid();
	st->st_gid = getgid();
	st->st_mode = sfs_inode_kind(i) == SFS_INODE_CTL_DIR ? S_IFDIR | 0555 : S_IFREG | 0444;
	st->st_nlink = sfs_inode_kind(i) == SFS_INODE_CTL_DIR ? 2 : 1;
	st->st_blksize = 4096;
	clock_gettime(CLOCK_REALTIME, &st->st_mtim);
	st->st_atim = st->st_ctim = st->st_mtim;
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		/* An upper bound of the text's size: twice its size now, in 4 KiB
		 * pages. Tools that check st_size (test -s) see a non-empty file;
		 * copiers that stop at st_size (cp with copy_file_range) never cut
		 * the snapshot, which is served with direct_io and ends at EOF. */
		char *text;
		ssize_t n = sfs_stats_render(fs, &text);
		if (n > 0) {
			st->st_size = (2 * n + 4095) & ~(off_t)4095;
			free(text);
		}
	}
}

/* The key of a directory in the namespace (fs->ns): the root has its own. */
static uint64_t ns_key(struct sfs_fs *fs, struct sfs_inode *i)
{
	return i == sfs_inode_root(fs->inodes) ? SFS_NS_ROOT : i->fileid;
}

/*
 * Fresh attributes of an NFS inode: cached if younger than actimeo, and
 * forever under immutable (fs->ns), where the root's come from the
 * namespace of an earlier mount when it holds them. Takes the inode lock briefly;
 * calls the origin with no lock held. Returns 0 or -errno.
 */
static int inode_getattr(struct sfs_fs *fs, struct sfs_inode *i, struct sfs_attr *out, bool force)
{
	uint64_t now = sfs_now_ms();
	bool is_root = i == sfs_inode_root(fs->inodes);

	sfs_inode_lock(i);
	bool fresh =
	    i->attr_time_ms && (fs->ns || now - i->attr_time_ms < fs->opts->actimeo_s * 1000ull);
	sfs_inode_attr_get(i, out);
	sfs_inode_unlock(i);
	if (fresh && !force)
		return 0;
	if (fs->ns && is_root && !force && sfs_ns_lookup(fs->ns, SFS_NS_ROOT, "", NULL, out) == 0) {
		sfs_inode_set_attr(i, out, now);
		return 0;
	}
	struct sfs_fh fh = sfs_inode_fh(i);
	struct sfs_origin_req r = {.op = SFS_ORIGIN_GETATTR, .fh = fh};
	int rc = sfs_origin_call(fs->origin, &r);
	if (rc < 0)
		return rc;
	sfs_inode_set_attr(i, &r.attr, now);
	if (fs->ns && is_root)
		sfs_ns_add(fs->ns, SFS_NS_ROOT, "", &fh, &r.attr);
	*out = r.attr;
	return 0;
}

static void fill_entry(struct sfs_fs *fs, struct fuse_entry_param *e, struct sfs_inode *i,
		       const struct sfs_attr *a)
{
	memset(e, 0, sizeof(*e));
	e->ino = INO(fs, i);
	if (sfs_inode_kind(i) == SFS_INODE_NFS)
		attr_to_stat(a, &e->attr);
	else
		virtual_stat(fs, i, &e->attr);
	e->attr_timeout = fs->attr_timeout_s;
	e->entry_timeout = fs->attr_timeout_s;
}

/* --- namespace ------------------------------------------------------------ */

/* How long the kernel may keep what NFS said at seen_ms (0: now): what is
 * left of actimeo, so that no answer is older than actimeo; immutable:
 * the attribute timeout (a year). */
static double timeout_left(struct sfs_fs *fs, uint64_t seen_ms)
{
	uint64_t ttl = fs->opts->actimeo_s * 1000ull, now = sfs_now_ms();

	if (fs->ns || !seen_ms)
		return fs->attr_timeout_s;
	return now - seen_ms >= ttl ? 0 : (double)(ttl - (now - seen_ms)) / 1000.0;
}

/* Reply a negative entry for what NFS (or the immutable namespace) said
 * just now, cached by the kernel for the attribute timeout. Never for a
 * name a listing merely lacks (lookup_from_listing). */
static void reply_noent(struct sfs_fs *fs, fuse_req_t req)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.entry_timeout = fs->attr_timeout_s;
	fuse_reply_entry(req, &e);
}

/*
 * The dataset (cache/store/store.h) of `name` in directory p: for an entry of the
 * root, the export's top-level directory "EXPORT/NAME" if it is a
 * directory, else the export itself; deeper, p's. 0 without a cache. Any
 * thread (the store's table is lock-free for a known name).
 */
static uint32_t child_dataset(struct sfs_fs *fs, struct sfs_inode *p, const char *name,
			      const struct sfs_attr *a)
{
	char buf[2048];

	if (!fs->store)
		return 0;
	if (p != sfs_inode_root(fs->inodes))
		return __atomic_load_n(&p->dataset, __ATOMIC_RELAXED);
	if (a->type != S_IFDIR)
		return fs->root_dataset;
	if (sfs_export_join(fs->opts, name, strlen(name), buf, sizeof(buf)) >= (int)sizeof(buf))
		return 0;
	return sfs_store_dataset(fs->store, buf);
}

/* The first dataset an inode is reached through is its dataset (a hard
 * link in another dataset does not move it). */
static void inode_set_dataset(struct sfs_inode *i, uint32_t ds)
{
	uint32_t none = 0;
	if (ds)
		__atomic_compare_exchange_n(&i->dataset, &none, ds, false, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
}

/* Reply an entry for (fh, attr), `name` in directory p, as NFS said it at
 * seen_ms (0: now; older only from a listing): the inode gains one lookup
 * reference. Attributes the inode got since seen_ms win. */
static void reply_child(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p, const char *name,
			const struct sfs_fh *fh, const struct sfs_attr *a, uint64_t seen_ms)
{
	struct fuse_entry_param e;
	struct sfs_attr cur;
	struct sfs_inode *child =
	    sfs_inode_get(fs->inodes, fh, a, seen_ms ? seen_ms : sfs_now_ms());

	if (!child) {
		reply_err(req, -ENOMEM);
		return;
	}
	inode_set_dataset(child, child_dataset(fs, p, name, a));
	if (!seen_ms) {
		fill_entry(fs, &e, child, a);
	} else {
		sfs_inode_lock(child);
		sfs_inode_attr_get(child, &cur);
		uint64_t attr_ms = child->attr_time_ms;
		sfs_inode_unlock(child);
		fill_entry(fs, &e, child, &cur);
		e.entry_timeout = timeout_left(fs, seen_ms);
		e.attr_timeout = timeout_left(fs, attr_ms);
	}
	if (fuse_reply_entry(req, &e) != 0)
		sfs_inode_forget(fs->inodes, child, 1);
}

/* Immutable: answer a lookup from the namespace. Returns true if it replied. */
static bool lookup_from_ns(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p, const char *name)
{
	struct sfs_fh fh;
	struct sfs_attr a;
	int rc = sfs_ns_lookup(fs->ns, ns_key(fs, p), name, &fh, &a);

	if (rc == -ENODATA)
		return false;
	if (rc == -ENOENT)
		reply_noent(fs, req);
	else
		reply_child(fs, req, p, name, &fh, &a, 0);
	return true;
}

/*
 * A LOOKUP that goes to NFS is answered by the I/O thread that gets its
 * reply: the FUSE worker submits it and goes back to the kernel's queue
 * instead of sleeping until NFS answers. A waiting worker was one more
 * thread put to sleep and woken per file, and libfuse starts more workers
 * while those wait (several per reader, for readers of small files).
 */
struct lookup_call {
	struct sfs_origin_req r; /* LOOKUP, then GETATTR if the reply had no attributes */
	struct sfs_fs *fs;
	fuse_req_t req;
	struct sfs_inode *parent; /* held by the kernel during the lookup */
	uint64_t ns_dir;	  /* immutable: the parent's namespace key */
	struct sfs_fh fh;	  /* the child, once the LOOKUP answered */
	bool getattr;		  /* r is the follow-up GETATTR */
	char name[];		  /* r.name points here */
};

/* Runs on an I/O thread (or in sfs_origin_submit when the pool is closing);
 * owns c and frees it, unless it hands c on to a GETATTR. */
static void lookup_done(struct sfs_origin_req *r)
{
	struct lookup_call *c = r->arg;
	struct sfs_fs *fs = c->fs;
	int rc = r->result;

	if (rc == -ENOENT && !c->getattr) {
		reply_noent(fs, c->req); /* cached by the kernel for actimeo */
	} else if (rc < 0) {
		reply_err(c->req, rc);
	} else if (!c->getattr && !r->have_attr) {
		c->fh = r->out_fh;
		c->getattr = true;
		c->r = (struct sfs_origin_req){
		    .op = SFS_ORIGIN_GETATTR, .fh = c->fh, .done = lookup_done, .arg = c};
		sfs_origin_submit(fs->origin, &c->r);
		return;
	} else {
		if (!c->getattr)
			c->fh = r->out_fh;
		if (fs->ns) /* ".." and "." are refused: they are not names of the tree */
			sfs_ns_add(fs->ns, c->ns_dir, c->name, &c->fh, &r->attr);
		reply_child(fs, c->req, c->parent, c->name, &c->fh, &r->attr, 0);
	}
	free(c);
}

static void lookup_from_nfs(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p,
			    const char *name)
{
	size_t len = strlen(name);
	struct lookup_call *c = malloc(sizeof(*c) + len + 1);

	if (!c) {
		reply_err(req, -ENOMEM);
		return;
	}
	memcpy(c->name, name, len + 1);
	c->fs = fs;
	c->req = req;
	c->parent = p;
	c->ns_dir = fs->ns ? ns_key(fs, p) : 0;
	c->getattr = false;
	c->r = (struct sfs_origin_req){.op = SFS_ORIGIN_LOOKUP,
				       .fh = sfs_inode_fh(p),
				       .name = c->name,
				       .done = lookup_done,
				       .arg = c};
	sfs_origin_submit(fs->origin, &c->r);
}

/*
 * Not immutable, the kernel asks again for every name whose entry is older
 * than actimeo (and for every name after drop_caches or memory pressure):
 * an NFS LOOKUP per file per epoch, a metadata call on the cluster for
 * every image. A directory whose names miss SFS_NS_LIST_AFTER times within
 * actimeo is listed whole instead (READDIRPLUS: the names, handles and
 * attributes of a few hundred entries a call), and that listing answers its
 * lookups until actimeo after the listing started; the kernel is told the
 * time left, so no answer is older than actimeo, as with LOOKUPs
 * (fs->listings, the listings mode of cache/namespace/namespace.h). The listing runs
 * on the I/O threads; lookups meanwhile go to NFS.
 */
#define LISTING_REPLY_BYTES 65536 /* READDIRPLUS maxcount */

struct listing_call {
	struct sfs_origin_req r;
	struct sfs_fs *fs;
	struct sfs_fh fh;     /* the directory */
	uint64_t dir;	      /* its listings key */
	uint64_t names;	      /* recorded so far */
	uint64_t last_cookie; /* where the next READDIRPLUS resumes */
	unsigned in_reply;    /* entries in the current reply */
	bool bad;	      /* a name could not be recorded: the listing fails */
};

static void listing_done(struct sfs_origin_req *r);

/* Runs on the origin I/O thread (sfs_origin_dirent_fn); never blocks. */
static int listing_dirent(struct sfs_origin_req *r, const char *name, uint64_t cookie,
			  const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct listing_call *c = r->arg;

	c->last_cookie = cookie;
	c->in_reply++;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	if (!attr || !fh || sfs_ns_add(c->fs->listings, c->dir, name, fh, attr) < 0) {
		c->bad = true; /* no handle or attributes, or over listing_max */
		return 1;
	}
	c->names++;
	return 0;
}

static void listing_send(struct listing_call *c, const uint8_t *verf)
{
	c->in_reply = 0;
	c->r = (struct sfs_origin_req){.op = SFS_ORIGIN_READDIRPLUS,
				       .fh = c->fh,
				       .cookie = c->last_cookie,
				       .dir_max_bytes = LISTING_REPLY_BYTES,
				       .dirent = listing_dirent,
				       .done = listing_done,
				       .arg = c};
	if (verf)
		memcpy(c->r.dir_verf, verf, sizeof(c->r.dir_verf));
	sfs_origin_submit(c->fs->origin, &c->r);
}

/* Runs on an I/O thread; owns c. */
static void listing_done(struct sfs_origin_req *r)
{
	struct listing_call *c = r->arg;
	sfs_ns *ls = c->fs->listings;

	if (r->result < 0 || c->bad ||
	    (!r->eof && (!c->in_reply || !sfs_ns_listing_may_go_on(ls, c->dir, c->names)))) {
		sfs_ns_listing_failed(ls, c->dir); /* or a huge folder, few lookups */
	} else if (!r->eof) {
		uint8_t verf[SFS_DIR_VERF_BYTES];
		memcpy(verf, r->dir_verf, sizeof(verf));
		listing_send(c, verf);
		return;
	} else {
		sfs_ns_dir_complete(ls, c->dir, c->names); /* a miscount fails it */
	}
	free(c);
}

void sfs_fs_listing_start(struct sfs_fs *fs, const struct sfs_fh *dir, uint64_t key)
{
	struct listing_call *c = calloc(1, sizeof(*c));

	if (!c) {
		sfs_ns_listing_failed(fs->listings, key);
		return;
	}
	c->fs = fs;
	c->fh = *dir;
	c->dir = key;
	listing_send(c, NULL);
}

/* Not immutable: answer a lookup from p's listing, or count the miss (and
 * start the listing). A name the listing lacks is not answered: it may have
 * been created on the cluster since the listing, and only NFS knows (a name
 * NFS found missing is then cached by the kernel for actimeo, as on NFS).
 * Returns true if it replied. */
static bool lookup_from_listing(struct sfs_fs *fs, fuse_req_t req, struct sfs_inode *p,
				const char *name)
{
	uint64_t key = ns_key(fs, p), listed_ms = 0;
	struct sfs_fh fh;
	struct sfs_attr a;
	int rc = sfs_ns_lookup_listed(fs->listings, key, name, &fh, &a, &listed_ms);

	if (rc == -ENODATA && sfs_ns_listing_wanted(fs->listings, key)) {
		struct sfs_fh dir = sfs_inode_fh(p);
		sfs_fs_listing_start(fs, &dir, key);
	}
	if (rc < 0)
		return false;
	reply_child(fs, req, p, name, &fh, &a, listed_ms);
	return true;
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *p = I(fs, parent), *child = NULL;
	struct fuse_entry_param e;

	op_count(fs, SFS_OP_LOOKUP);
	if (p == sfs_inode_root(fs->inodes) && !strcmp(name, ".shardfs"))
		child = fs->ctl_dir;
	else if (sfs_inode_kind(p) == SFS_INODE_CTL_DIR && !strcmp(name, "stats"))
		child = fs->stats_file;
	if (child) {
		fill_entry(fs, &e, child, NULL);
		fuse_reply_entry(req, &e);
		return;
	}
	if (sfs_inode_kind(p) != SFS_INODE_NFS) {
		reply_err(req, -ENOENT);
		return;
	}
	if (fs->ns && lookup_from_ns(fs, req, p, name))
		return;
	if (fs->listings && lookup_from_listing(fs, req, p, name))
		return;
	lookup_from_nfs(fs, req, p, name);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_FORGET);
	sfs_inode_forget(fs->inodes, I(fs, ino), nlookup);
	fuse_reply_none(req);
	sfs_memtrim_freed(1);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_FORGET);
	for (size_t k = 0; k < count; k++)
		sfs_inode_forget(fs->inodes, I(fs, forgets[k].ino), forgets[k].nlookup);
	fuse_reply_none(req);
	sfs_memtrim_freed(count); /* memtrim.h: given back within a second */
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct sfs_attr a;
	struct stat st;

	op_count(fs, SFS_OP_GETATTR);
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		virtual_stat(fs, i, &st);
		fuse_reply_attr(req, &st, 0);
		return;
	}
	int rc = inode_getattr(fs, i, &a, false);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	attr_to_stat(&a, &st);
	fuse_reply_attr(req, &st, fs->attr_timeout_s);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_READLINK);
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -EINVAL);
		return;
	}
	struct sfs_origin_req r = {.op = SFS_ORIGIN_READLINK, .fh = sfs_inode_fh(i)};
	int rc = sfs_origin_call(fs->origin, &r);
	if (rc < 0) {
		reply_err(req, rc);
		return;
	}
	fuse_reply_readlink(req, r.link);
	free(r.link);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs_fs *fs = FS(req);
	struct statvfs sv = {0};

	op_count(fs, SFS_OP_STATFS);
	struct sfs_origin_req r = {.op = SFS_ORIGIN_FSSTAT,
				   .fh = sfs_inode_fh(sfs_inode_root(fs->inodes))};
	/* Immutable: the first answer serves the whole mount, and a mount with
	 * no answer yet reports no sizes rather than wait for a node. */
	bool cached = false;
	if (fs->ns) {
		pthread_mutex_lock(&fs->statfs_lock);
		cached = fs->have_fsstat;
		r.fsstat = fs->fsstat;
		pthread_mutex_unlock(&fs->statfs_lock);
	}
	if (!cached) {
		int rc = sfs_origin_call(fs->origin, &r);
		if (rc < 0 && !fs->ns) {
			reply_err(req, rc);
			return;
		}
		if (rc == 0 && fs->ns) {
			pthread_mutex_lock(&fs->statfs_lock);
			fs->fsstat = r.fsstat;
			fs->have_fsstat = true;
			pthread_mutex_unlock(&fs->statfs_lock);
		}
	}
	sv.f_bsize = SFS_CHUNK_BYTES;
	sv.f_frsize = 4096;
	sv.f_blocks = r.fsstat.total_bytes / 4096;
	sv.f_bfree = r.fsstat.free_bytes / 4096;
	sv.f_bavail = r.fsstat.avail_bytes / 4096;
	sv.f_files = r.fsstat.total_files;
	sv.f_ffree = r.fsstat.free_files;
	sv.f_favail = r.fsstat.avail_files;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

/* --- files ---------------------------------------------------------------- */

/* What fi->fh points to for the stats file: a snapshot taken at open. */
struct stats_snapshot {
	char *text;
	size_t len;
	/* Set (release) once text and len are, before the OPEN reply; read
	 * (acquire) by the READs and the RELEASE of its fh, and released again
	 * by each READ once done with the snapshot. The kernel orders OPEN,
	 * READs and RELEASE, but ThreadSanitizer cannot see through /dev/fuse:
	 * this makes the handoffs ones it sees. */
	int published;
};

/* The snapshot of a stats file's fh (this process's), published. */
static struct stats_snapshot *stats_snapshot_of(uint64_t fh)
{
	struct stats_snapshot *s = sfs_handle_get(fh);

	if (s)
		(void)__atomic_load_n(&s->published, __ATOMIC_ACQUIRE);
	return s;
}

/* The identity of a file version: what names it in the cache. */
static struct sfs_file_version version_of(const struct sfs_attr *a, const struct sfs_inode *i)
{
	return (struct sfs_file_version){.dataset = __atomic_load_n(&i->dataset, __ATOMIC_RELAXED),
					 .fsid = a->fsid,
					 .fileid = a->fileid,
					 .size = a->size,
					 .mtime_s = a->mtime.tv_sec,
					 .mtime_ns = (uint32_t)a->mtime.tv_nsec,
					 .ctime_s = a->ctime.tv_sec,
					 .ctime_ns = (uint32_t)a->ctime.tv_nsec};
}

/* Whether the kernel's pages of i (the version last opened) are of v. */
static bool opened_is(const struct sfs_inode *i, const struct sfs_file_version *v)
{
	const struct sfs_inode_version *o = &i->opened;
	return i->have_opened && o->size == v->size && o->mtime_s == v->mtime_s &&
	       o->mtime_ns == v->mtime_ns && o->ctime_s == v->ctime_s && o->ctime_ns == v->ctime_ns;
}

static void opened_set(struct sfs_inode *i, const struct sfs_file_version *v)
{
	i->opened = (struct sfs_inode_version){.size = v->size,
					       .mtime_s = v->mtime_s,
					       .ctime_s = v->ctime_s,
					       .mtime_ns = v->mtime_ns,
					       .ctime_ns = v->ctime_ns};
	i->have_opened = 1;
}

/* The end of one open of i (its handle holds a reference on pf). When the
 * last one closes, the inode lets go of its fetch state too: chunks kept for
 * it go back to the memory budget, and a file the kernel remembers but
 * nobody reads holds no prefetch or store state. Returns whether it was the
 * last. */
static bool file_closed(struct sfs_inode *i, sfs_pf_file *pf)
{
	sfs_pf_file *last = NULL;
	bool was_last;

	sfs_inode_lock(i);
	was_last = --i->n_open == 0;
	if (was_last) {
		last = i->pf;
		i->pf = NULL;
		i->first_epoch = 0;
		i->referenced = 0; /* read and done with: the first to prune */
	}
	sfs_inode_unlock(i);
	sfs_pf_file_drop_idle(pf); /* pairs with sfs_pf_file_opened() */
	sfs_pf_file_unref(pf);
	if (last)
		sfs_pf_file_unref(last); /* the inode's reference */
	return was_last;
}

/* open() of the stats file: a snapshot of the text, served direct_io. */
static void open_stats_file(fuse_req_t req, struct sfs_fs *fs, struct fuse_file_info *fi)
{
	struct stats_snapshot *s = calloc(1, sizeof(*s));
	ssize_t n = s ? sfs_stats_render(fs, &s->text) : -ENOMEM;

	if (n < 0) {
		free(s);
		reply_err(req, (int)n);
		return;
	}
	s->len = (size_t)n;
	__atomic_store_n(&s->published, 1, __ATOMIC_RELEASE);
	fi->fh = sfs_handle_make(s);
	fi->direct_io = 1; /* size is not known in advance */
	fi->nonseekable = 0;
	fuse_reply_open(req, fi);
}

/*
 * One more open of version v of i: the fetch state shared by the opens of
 * v (made if none is), referenced for the caller and counted in n_open.
 * *unchanged: the kernel's pages of i, if any, are of v (keep_cache);
 * *changed: they are of another version and must be dropped; *first_epoch:
 * this open overlaps the first open of v since the kernel took i in (the
 * kernel's page cache cannot hold v yet). Returns 0 or
 * -ENOMEM. Takes the inode lock.
 */
static int open_fetch_state(struct sfs_fs *fs, struct sfs_inode *i,
			    const struct sfs_file_version *v, sfs_pf_file **out, bool *unchanged,
			    bool *changed, bool *first_epoch)
{
	sfs_inode_lock(i);
	*unchanged = opened_is(i, v);
	*changed = i->have_opened && !*unchanged;
	sfs_pt_opened_version(i, *unchanged); /* no open of v joins an older backing file */
	if (!*unchanged)
		i->first_epoch = 1; /* ends when every open of it closed */
	*first_epoch = i->first_epoch;
	sfs_pf_file *pf = i->pf;
	if (pf && !*unchanged) {
		sfs_pf_file_unref(pf); /* open handles of the old version keep theirs */
		pf = i->pf = NULL;
	}
	if (!pf) {
		struct sfs_fh fh = sfs_inode_fh(i);
		int rc = sfs_pf_file_open_version(fs->prefetch, &fh, v, &pf);
		if (rc < 0) {
			sfs_inode_unlock(i);
			return rc;
		}
		i->pf = pf;
	}
	opened_set(i, v);
	sfs_pf_file_ref(pf);
	i->n_open++;
	sfs_inode_unlock(i);
	*out = pf;
	return 0;
}

static void open_reply(struct sfs_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
		       struct sfs_inode *i, struct sfs_open_file *of,
		       const struct sfs_file_version *v, bool unchanged, bool first_epoch,
		       enum sfs_pt_mode pt, int backing_id);

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct sfs_attr a;
	sfs_pf_file *pf;
	bool unchanged, changed, first_epoch;
	int rc;

	op_count(fs, SFS_OP_OPEN);
	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
		reply_err(req, -EROFS);
		return;
	}
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		open_stats_file(req, fs, fi);
		return;
	}
	if (sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -EISDIR);
		return;
	}
	/* Revalidate after actimeo: a changed file gets a new fetch state, and
	 * the kernel keeps its page cache only for an unchanged file. */
	if ((rc = inode_getattr(fs, i, &a, false)) < 0) {
		reply_err(req, rc);
		return;
	}
	struct sfs_file_version v = version_of(&a, i);
	if ((rc = open_fetch_state(fs, i, &v, &pf, &unchanged, &changed, &first_epoch)) < 0) {
		reply_err(req, rc);
		return;
	}
	if (changed) {
		/* The file changed on the server: pages the kernel cached for the
		 * old version must go (AUTO_INVAL_DATA also does this on the next
		 * getattr; this makes it immediate). */
		__atomic_fetch_add(&fs->invalidations, 1, __ATOMIC_RELAXED);
		fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	}
	/* O_NONBLOCK, meaningless for a regular file, marks a tool's open
	 * (shardfs-warm): no whole-file fetch for a reader, the tool's ioctl
	 * says what it wants. A passthrough open fetches nothing either: the
	 * kernel reads the cache itself. */
	bool tool = (fi->flags & O_NONBLOCK) != 0;
	int backing_id = 0;
	sfs_pf_file_opened_no_prefetch(pf);
	enum sfs_pt_mode pt =
	    fs->pt.wanted ? sfs_pt_open(&fs->pt, i, pf, v.size, !tool, &backing_id) : SFS_PT_NO;
	if (pt == SFS_PT_STALE) { /* the kernel looks the name up again and retries */
		file_closed(i, pf);
		reply_err(req, -ESTALE);
		return;
	}
	if (!tool && pt != SFS_PT_OPEN)
		sfs_pf_file_prefetch_whole(pf);
	if (!unchanged && !tool && pt != SFS_PT_OPEN) /* the kernel will read it */
		sfs_pf_file_preload(pf);
	sfs_hints_opened(fs->hints, a.fsid, a.fileid); /* where a hint list's reader is */
	struct sfs_open_file *of = calloc(1, sizeof(*of));
	if (!of) {
		if (pt == SFS_PT_OPEN)
			sfs_pt_release(&fs->pt, i);
		file_closed(i, pf);
		reply_err(req, -ENOMEM);
		return;
	}
	of->pf = pf;
	of->uid = fuse_req_ctx(req)->uid;
	of->next_region_id = sfs_fs_first_region_id(fs);
	pthread_mutex_init(&of->lock, NULL);
	open_reply(fs, req, fi, i, of, &v, unchanged, first_epoch, pt, backing_id);
}

/* Answer an open (op_open's last step): the handle, the page cache or
 * passthrough, the accounting of a passthrough open (its reads never reach
 * the daemon: the version counts as read from the cache at open). */
static void open_reply(struct sfs_fs *fs, fuse_req_t req, struct fuse_file_info *fi,
		       struct sfs_inode *i, struct sfs_open_file *of,
		       const struct sfs_file_version *v, bool unchanged, bool first_epoch,
		       enum sfs_pt_mode pt, int backing_id)
{
	fi->fh = sfs_handle_make_flagged(of, pt == SFS_PT_OPEN ? SFS_HANDLE_PASSTHROUGH : 0);
	fi->keep_cache = unchanged && pt != SFS_PT_OPEN;
	fi->direct_io = of->direct =
	    pt == SFS_PT_NO && sfs_pc_open_direct(&fs->page_cache, v->size, first_epoch);
	if (fi->direct_io)
		__atomic_fetch_add(&fs->direct_opens, 1, __ATOMIC_RELAXED);
	if (pt == SFS_PT_OPEN) {
		struct sfs_job_read jr = sfs_fs_job_begin(fs, req);
		sfs_jobs_read_end(fs->jobs, &jr, (ssize_t)v->size, v->size);
		if (fs->store)
			sfs_store_dataset_read(fs->store, v->dataset, v->size, 0);
	}
	if (sfs_fusedev_reply_open(req, fi, pt == SFS_PT_OPEN ? backing_id : 0) != 0) {
		if (pt == SFS_PT_OPEN)
			sfs_pt_release(&fs->pt, i);
		pthread_mutex_destroy(&of->lock);
		sfs_pf_file *pf = of->pf;
		free(of);
		file_closed(i, pf);
	}
}

struct sfs_open_file *sfs_fs_open_file(struct sfs_fs *fs, struct sfs_inode *i, uint64_t fh)
{
	struct sfs_open_file *of = sfs_handle_get(fh);

	if (of || sfs_inode_kind(i) != SFS_INODE_NFS || (of = sfs_handle_adopted(fh)))
		return of;
	/* A dead server's open: the version it read is the inode's last opened
	 * one (the region kept it); never a newer one, so a reader gets no mix. */
	struct sfs_attr a;
	sfs_inode_lock(i);
	sfs_inode_attr_get(i, &a);
	if (i->have_opened) {
		a.size = i->opened.size;
		a.mtime =
		    (struct timespec){.tv_sec = i->opened.mtime_s, .tv_nsec = i->opened.mtime_ns};
		a.ctime =
		    (struct timespec){.tv_sec = i->opened.ctime_s, .tv_nsec = i->opened.ctime_ns};
	}
	sfs_inode_unlock(i);
	struct sfs_file_version v = version_of(&a, i);
	sfs_pf_file *pf;
	bool unchanged, changed, first_epoch;
	if (open_fetch_state(fs, i, &v, &pf, &unchanged, &changed, &first_epoch) < 0)
		return NULL;
	sfs_pf_file_opened(pf);
	struct sfs_open_file *mine = calloc(1, sizeof(*mine));
	if (!mine) {
		file_closed(i, pf);
		return NULL;
	}
	mine->pf = pf;
	mine->next_region_id = sfs_fs_first_region_id(fs);
	pthread_mutex_init(&mine->lock, NULL);
	of = sfs_handle_adopt(fh, mine);
	if (of != mine) { /* another thread was first, or ENOMEM */
		pthread_mutex_destroy(&mine->lock);
		free(mine);
		file_closed(i, pf);
	}
	return of;
}

/* A read answered from the thread that got its bytes (a fetch without a
 * chunk, or the chunk it waited for: see sfs_pf_read_async), which keeps
 * the copy. */
struct read_call {
	struct sfs_fs *fs;
	fuse_req_t req;
	struct sfs_job_read jr;
};

/* Account a read's outcome to its job and reply with its bytes or its
 * error. (Its dataset's counters are kept where the bytes were found:
 * prefetch and the store.) */
static void read_reply(struct sfs_fs *fs, fuse_req_t req, const struct sfs_job_read *jr, ssize_t n,
		       const struct sfs_pf_view *v)
{
	sfs_jobs_read_end(fs->jobs, jr, n, v->cache_bytes);
	if (n < 0) {
		__atomic_fetch_add(&fs->read_errors, 1, __ATOMIC_RELAXED);
		reply_err(req, (int)n);
		return;
	}
	__atomic_fetch_add(&fs->read_bytes, (uint64_t)n, __ATOMIC_RELAXED);
	if (v->n_iov)
		fuse_reply_iov(req, v->iov, v->n_iov);
	else
		fuse_reply_buf(req, NULL, 0);
}

/* Runs on the thread that lands the read's bytes (sfs_pf_read_async): an
 * origin I/O thread (a fetch, or a chunk fetched from the origin), a loader
 * thread or another FUSE worker (a chunk loaded from the cache), or a thread
 * submitting READs while the origin pool closes (this read's own, among
 * others). */
static void read_done(void *arg, ssize_t n, const struct sfs_pf_view *v)
{
	struct read_call *c = arg;

	read_reply(c->fs, c->req, &c->jr, n, v);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_READ);
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		struct stats_snapshot *s = stats_snapshot_of(fi->fh);
		if (!s) { /* opened from a server that died: its snapshot is gone */
			fuse_reply_buf(req, NULL, 0);
			return;
		}
		size_t from = (size_t)off < s->len ? (size_t)off : s->len;
		size_t n = s->len - from < size ? s->len - from : size;
		/* Replied from a copy this thread frees: the snapshot is freed by
		 * the release, on another thread, once the kernel has this reply,
		 * and ThreadSanitizer marks writev's bytes read only after the
		 * call returns, so it took that for a use after free. */
		char *copy = n ? malloc(n) : NULL;
		if (n && !copy) {
			reply_err(req, -ENOMEM);
			return;
		}
		if (n)
			memcpy(copy, s->text + from, n);
		/* Done with s: the RELEASE that frees it acquires this. */
		__atomic_fetch_add(&s->published, 0, __ATOMIC_RELEASE);
		fuse_reply_buf(req, copy, n);
		free(copy);
		return;
	}
	struct sfs_open_file *of = sfs_fs_open_file(fs, i, fi->fh);
	if (!of) {
		reply_err(req, -ENOMEM);
		return;
	}
	sfs_pf_file *pf = of->pf;
	struct sfs_pf_view v;
	if (of->direct) { /* what its reader asks for (pagecache.h) */
		__atomic_fetch_add(&of->direct_reads, 1, __ATOMIC_RELAXED);
		__atomic_fetch_add(&of->direct_read_bytes, size, __ATOMIC_RELAXED);
	}
	struct read_call c = {fs, req, sfs_fs_job_begin(fs, req)};
	ssize_t n = sfs_pf_read_async(pf, (uint64_t)off, size, &v, read_done, &c, sizeof(c));
	if (n == -EINPROGRESS)
		return; /* read_done replies */
	read_reply(fs, req, &c.jr, n, &v);
	sfs_pf_view_release(pf, &v);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);

	op_count(fs, SFS_OP_RELEASE);
	if (sfs_inode_kind(i) == SFS_INODE_STATS) {
		struct stats_snapshot *s = stats_snapshot_of(fi->fh);
		if (s)
			free(s->text);
		free(s);
	} else if (fi->fh) {
		struct sfs_open_file *of = sfs_handle_get(fi->fh);
		if (fi->fh & SFS_HANDLE_PASSTHROUGH) /* this server's or a dead one's */
			sfs_pt_release(&fs->pt, i);
		if (!of && !(of = sfs_handle_drop(fi->fh))) { /* a dead server's, never used here */
			fuse_reply_err(req, 0);
			return;
		}
		sfs_open_file_drop_regions(of);	      /* regions belong to the open file */
		sfs_hints_release(fs->hints, fi->fh); /* and so do hint lists */
		if (of->direct)
			sfs_pc_direct_closed(&fs->page_cache, of->direct_reads,
					     of->direct_read_bytes);
		if (file_closed(i, of->pf)) /* the kernel holds i until this reply */
			sfs_inode_closed(fs->inodes, i);
		pthread_mutex_destroy(&of->lock);
		free(of);
	}
	fuse_reply_err(req, 0);
}

/* --- directories ---------------------------------------------------------- */

/* An open directory. Readdirs of one handle are serialised by the kernel. */
struct dir_handle {
	uint8_t dir_verf[SFS_DIR_VERF_BYTES]; /* from the last READDIRPLUS reply */
	/* immutable only: where this listing comes from, and what NFS gave */
	enum { DIR_SRC_ANY, DIR_SRC_NS, DIR_SRC_NFS } src;
	uint64_t next_off; /* the offset that continues the listing */
	uint64_t n_seen;   /* names recorded from offset 0 on, in order */
	bool gap;	   /* a seek or an unrecorded name: do not mark complete */
};

/* The dir_handle of fh: this process's, or, for a directory a dead server
 * opened (keeper.h), a fresh one adopted under its fh: the listing goes on
 * from the kernel's offset as after a seek. NULL on ENOMEM. */
static struct dir_handle *dir_handle_of(uint64_t fh)
{
	struct dir_handle *h = sfs_handle_get(fh);

	if (h || (h = sfs_handle_adopted(fh)))
		return h;
	struct dir_handle *mine = calloc(1, sizeof(*mine));
	if (!mine)
		return NULL;
	mine->gap = true;
	h = sfs_handle_adopt(fh, mine);
	if (h != mine)
		free(mine);
	return h;
}

struct dir_fill {
	fuse_req_t req;
	struct sfs_fs *fs;
	bool plus;
	char *buf;
	size_t size, used;
	unsigned added;
	uint64_t now_ms;
	uint64_t last_cookie;
	struct sfs_inode *dir;	   /* the directory listed */
	struct dir_handle *record; /* immutable, from NFS: record names here */
	uint64_t ns_dir;	   /* ... under this namespace key */
};

static int dir_add(struct dir_fill *d, const char *name, uint64_t cookie,
		   const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct fuse_entry_param e;
	bool dot = !strcmp(name, ".") || !strcmp(name, "..");
	size_t need = d->plus ? fuse_add_direntry_plus(d->req, NULL, 0, name, NULL, 0)
			      : fuse_add_direntry(d->req, NULL, 0, name, NULL, 0);

	if (d->used + need > d->size)
		return 1;
	memset(&e, 0, sizeof(e));
	if (attr)
		attr_to_stat(attr, &e.attr);
	if (d->plus && attr && fh && !dot) {
		struct sfs_inode *i = sfs_inode_get(d->fs->inodes, fh, attr, d->now_ms);
		if (i) {
			inode_set_dataset(i, child_dataset(d->fs, d->dir, name, attr));
			fill_entry(d->fs, &e, i, attr);
		}
	}
	if (d->plus)
		fuse_add_direntry_plus(d->req, d->buf + d->used, d->size - d->used, name, &e,
				       (off_t)cookie);
	else
		fuse_add_direntry(d->req, d->buf + d->used, d->size - d->used, name, &e.attr,
				  (off_t)cookie);
	d->used += need;
	d->added++;
	d->last_cookie = cookie;
	return 0;
}

/* Runs on the origin I/O thread (see sfs_origin_dirent_fn); never blocks. */
static int dirent_cb(struct sfs_origin_req *r, const char *name, uint64_t cookie,
		     const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct dir_fill *d = r->arg;
	int full = dir_add(d, name, cookie, attr, fh);

	if (!full && d->record && strcmp(name, ".") && strcmp(name, "..")) {
		if (attr && fh && sfs_ns_add(d->fs->ns, d->ns_dir, name, fh, attr) == 0)
			d->record->n_seen++;
		else
			d->record->gap = true;
	}
	return full;
}

static int ns_dirent_cb(void *arg, const char *name, uint64_t next, const struct sfs_fh *fh,
			const struct sfs_attr *attr)
{
	return dir_add(arg, name, next, attr, fh);
}

/*
 * Immutable: list a directory whose whole listing the namespace holds
 * ("." and ".." first, at offsets 1 and 2). Returns true when it filled d.
 */
static bool readdir_from_ns(struct sfs_fs *fs, struct sfs_inode *i, struct dir_handle *h, off_t off,
			    struct dir_fill *d)
{
	struct sfs_attr self;

	if (off == 0)
		h->src = DIR_SRC_ANY; /* rewinddir: decide again */
	if (h->src == DIR_SRC_NFS)
		return false;
	sfs_inode_lock(i);
	sfs_inode_attr_get(i, &self);
	sfs_inode_unlock(i);
	struct sfs_attr parent = {.type = S_IFDIR, .mode = 0555};
	for (off_t k = off; k < 2; k++)
		if (dir_add(d, k ? ".." : ".", (uint64_t)k + 1, k ? &parent : &self, NULL))
			break;
	if (sfs_ns_readdir(fs->ns, ns_key(fs, i), (uint64_t)off, ns_dirent_cb, d) < 0) {
		d->used = d->added = 0; /* not held: NFS lists it, cookies are its own */
		h->src = DIR_SRC_NFS;
		return false;
	}
	h->src = DIR_SRC_NS;
	return true;
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_OPENDIR);
	struct dir_handle *h = calloc(1, sizeof(*h));
	if (!h) {
		reply_err(req, -ENOMEM);
		return;
	}
	fi->fh = sfs_handle_make(h);
	/* The kernel may keep listings until memory pressure: immutable, for
	 * good; else (AUTO_INVAL_DATA) a listing read again from its start is
	 * reused only while the directory's mtime, as of attributes at most
	 * actimeo old (GETATTR when older), is the one it was read at. */
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	if (fuse_reply_open(req, fi) != 0)
		free(h);
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	struct dir_handle *h = dir_handle_of(fi->fh);
	struct dir_fill d = {
	    .req = req, .fs = fs, .plus = plus, .size = size, .now_ms = sfs_now_ms(), .dir = i};

	op_count(fs, plus ? SFS_OP_READDIRPLUS : SFS_OP_READDIR);
	if (!h) {
		reply_err(req, -ENOMEM);
		return;
	}
	d.buf = malloc(size);
	if (!d.buf) {
		reply_err(req, -ENOMEM);
		return;
	}
	if (sfs_inode_kind(i) == SFS_INODE_CTL_DIR) {
		/* ".", "..", "stats" at offsets 1, 2, 3. */
		static const char *const names[] = {".", "..", "stats"};
		for (off_t k = off; k < 3; k++) {
			struct sfs_attr a = {.type = k == 2 ? S_IFREG : S_IFDIR,
					     .fileid = k == 2 ? fs->stats_file->fileid
							      : fs->ctl_dir->fileid};
			if (dir_add(&d, names[k], (uint64_t)k + 1, &a, NULL))
				break;
		}
	} else if (fs->ns && readdir_from_ns(fs, i, h, off, &d)) {
		/* served from the namespace */
	} else {
		if (fs->ns) {
			/* Record what NFS lists; a listing read whole from offset 0
			 * without a gap becomes complete in the namespace. */
			if (off == 0) {
				h->n_seen = 0;
				h->gap = false;
			} else if ((uint64_t)off != h->next_off)
				h->gap = true;
			d.record = h;
			d.ns_dir = ns_key(fs, i);
		}
		struct sfs_origin_req r = {.op = SFS_ORIGIN_READDIRPLUS,
					   .fh = sfs_inode_fh(i),
					   .cookie = (uint64_t)off,
					   .dir_max_bytes =
					       size * 2 < 8192 ? 8192 : (uint32_t)size * 2,
					   .dirent = dirent_cb};
		r.arg = &d;
		if (off)
			memcpy(r.dir_verf, h->dir_verf, sizeof(r.dir_verf));
		int rc = sfs_origin_call(fs->origin, &r);
		if (rc < 0) {
			free(d.buf);
			reply_err(req, rc);
			return;
		}
		memcpy(h->dir_verf, r.dir_verf, sizeof(h->dir_verf));
		if (d.record) {
			h->next_off = d.added ? d.last_cookie : (uint64_t)off;
			if (r.eof && !h->gap)
				sfs_ns_dir_complete(fs->ns, d.ns_dir, h->n_seen);
		}
	}
	fuse_reply_buf(req, d.buf, d.used);
	free(d.buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			   struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_fs *fs = FS(req);

	op_count(fs, SFS_OP_RELEASEDIR);
	sfs_hints_release(fs->hints, fi->fh); /* hint lists sent on the directory */
	void *h = sfs_handle_get(fi->fh);
	free(h ? h : sfs_handle_drop(fi->fh));
	fuse_reply_err(req, 0);
}

/* --- cache control: xattr and ioctl ---------------------------------------- */

/* Bytes of the inode's current version in the cache. */
static uint64_t inode_cached_bytes(struct sfs_fs *fs, struct sfs_inode *i)
{
	struct sfs_attr a;

	if (!fs->store || inode_getattr(fs, i, &a, false) < 0)
		return 0;
	struct sfs_file_version v = version_of(&a, i);
	return sfs_store_cached_bytes(fs->store, &v);
}

/* The cache key of the inode's current version as 32 hex digits in out
 * (33 bytes). Returns 32, or -ENODATA (no cache, not a regular file) or
 * the getattr's -errno. */
static int inode_key_hex(struct sfs_fs *fs, struct sfs_inode *i, char *out)
{
	struct sfs_attr a;
	uint8_t key[16];
	int rc;

	if (!fs->store)
		return -ENODATA;
	if ((rc = inode_getattr(fs, i, &a, false)) < 0)
		return rc;
	if (a.type != S_IFREG)
		return -ENODATA;
	struct sfs_file_version v = version_of(&a, i);
	sfs_store_key(&v, key);
	for (int k = 0; k < 16; k++)
		snprintf(out + 2 * k, 3, "%02x", key[k]);
	return 32;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	char val[40];

	op_count(fs, SFS_OP_GETXATTR);
	bool key = !strcmp(name, SHARDFS_XATTR_KEY);
	if ((strcmp(name, SHARDFS_XATTR_CACHED) != 0 && !key) ||
	    sfs_inode_kind(i) != SFS_INODE_NFS) {
		reply_err(req, -ENODATA);
		return;
	}
	int n =
	    key ? inode_key_hex(fs, i, val)
		: snprintf(val, sizeof(val), "%llu", (unsigned long long)inode_cached_bytes(fs, i));
	if (n < 0) {
		reply_err(req, n);
		return;
	}
	if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else if (size < (size_t)n)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, val, (size_t)n);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct sfs_fs *fs = FS(req);
	struct sfs_inode *i = I(fs, ino);
	static const char names[] = SHARDFS_XATTR_CACHED; /* one name, NUL included */

	op_count(fs, SFS_OP_GETXATTR);
	size_t n = sfs_inode_kind(i) == SFS_INODE_NFS ? sizeof(names) : 0;
	if (size == 0)
		fuse_reply_xattr(req, n);
	else if (size < n)
		reply_err(req, -ERANGE);
	else
		fuse_reply_buf(req, names, n);
}

/* --- everything that would modify: EROFS ---------------------------------- */

static void deny(fuse_req_t req)
{
	op_count(FS(req), SFS_OP_WRITE_DENIED);
	fuse_reply_err(req, EROFS);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	deny(req);
}
static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	deny(req);
}
static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	deny(req);
}
static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name) { deny(req); }
static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	deny(req);
}
static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	deny(req);
}
static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	deny(req);
}
static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		     struct fuse_file_info *fi)
{
	deny(req);
}
static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		      struct fuse_file_info *fi)
{
	deny(req);
}
static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	deny(req);
}
static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name) { deny(req); }
static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
			 struct fuse_file_info *fi)
{
	deny(req);
}

/* --- init ----------------------------------------------------------------- */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	/* 1 MiB requests and a deep kernel readahead: the kernel's default,
	 * 128 KiB requests, caps a buffered FUSE reader far below the network
	 * (a round trip per 128 KiB). */
	conn->max_readahead = SFS_FUSE_MAX_READAHEAD;
	if (conn->max_write < SFS_CHUNK_BYTES)
		conn->max_write = SFS_CHUNK_BYTES;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	if (conn->capable & FUSE_CAP_ASYNC_READ)
		conn->want |= FUSE_CAP_ASYNC_READ;
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* Replies are written from our chunk buffers (writev); libfuse's splice
	 * path gave short replies under load (cache/prefetch/prefetch_int.h). */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE);
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
	/* fusedev has read the INIT request by now (fusedev.h). */
	struct sfs_fs *fs = userdata;
	fs->page_cache.direct_mmap = sfs_fusedev_direct_io_mmap();
	sfs_pt_kernel_ready(&fs->pt);
}

const char *const sfs_fuse_op_names[SFS_OP_COUNT] = {
    [SFS_OP_LOOKUP] = "lookup",
    [SFS_OP_FORGET] = "forget",
    [SFS_OP_GETATTR] = "getattr",
    [SFS_OP_READLINK] = "readlink",
    [SFS_OP_OPEN] = "open",
    [SFS_OP_READ] = "read",
    [SFS_OP_RELEASE] = "release",
    [SFS_OP_OPENDIR] = "opendir",
    [SFS_OP_READDIR] = "readdir",
    [SFS_OP_READDIRPLUS] = "readdirplus",
    [SFS_OP_RELEASEDIR] = "releasedir",
    [SFS_OP_STATFS] = "statfs",
    [SFS_OP_GETXATTR] = "getxattr",
    [SFS_OP_IOCTL] = "ioctl",
    [SFS_OP_WRITE_DENIED] = "write_denied",
};

const struct fuse_lowlevel_ops sfs_fuse_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .readlink = op_readlink,
    .open = op_open,
    .read = op_read,
    .release = op_release,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .statfs = op_statfs,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .ioctl = sfs_op_ioctl,
    .setattr = op_setattr,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_unlink,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .write = op_write,
    .create = op_create,
    .setxattr = op_setxattr,
    .removexattr = op_removexattr,
    .fallocate = op_fallocate,
};
