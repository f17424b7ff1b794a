// SPDX-License-Identifier: Apache-2.0
/*
 * shardfs-cache — what a shardfs cache holds, per dataset, and evicting it.
 *
 *   shardfs-cache [--json] list  TARGET
 *   shardfs-cache evict TARGET DATASET|PATH...
 *   shardfs-cache purge TARGET
 *
 * TARGET is a live mount (its mountpoint, a directory): the daemon does
 * the work through the mount's ioctls (include/shardfs/shardfs_ioctl.h,
 * SHARDFS_IOC_CACHE_*), on its store's writer thread, while readers go on.
 * Or TARGET is the cache_dir of a mount that is not running: the tool opens
 * the store itself (cache/store/store.h, the daemon's own code), which takes
 * cache_dir/LOCK, so a cache a daemon holds is refused with the daemon's
 * pid. Nothing here edits cache files by itself.
 *
 * Exit status: 0 done; 1 the operation failed or matched nothing; 2 bad
 * usage. Errors are one line on stderr.
 *
 * Owns: the command line and the output. Does not own: the cache (the
 * store's, through the daemon or opened here). Threading: the tool's main
 * thread; an opened store runs its own writer thread.
 */
#include "log.h"
#include <shardfs/shardfs_ioctl.h>
#include "store.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define EXIT_FAIL  1
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: shardfs-cache [--json] list TARGET\n"
    "       shardfs-cache evict TARGET DATASET|PATH...\n"
    "       shardfs-cache purge TARGET\n"
    "\n"
    "What a shardfs cache holds per dataset (an export's top-level directory),\n"
    "and evicting it.\n"
    "\n"
    "commands:\n"
    "  list     per dataset: bytes and files cached, hit ratio, last use; on a live\n"
    "           mount also, since it mounted, the hit share of the last epoch-sized\n"
    "           window, bytes admitted and bytes refused (the main reason)\n"
    "  evict    evict datasets: a name as listed (/EXPORT/DIR), a prefix of names\n"
    "           (/EXPORT: every dataset of the export), or a directory on the mount\n"
    "  purge    evict everything\n"
    "\n"
    "TARGET: a shardfs mountpoint (the running daemon evicts, readers go on), or\n"
    "the cache_dir of a mount that is not running (refused while a daemon holds it).\n"
    "\n"
    "options:\n"
    "  --json      list: print one JSON document\n"
    "  -h, --help  show this help and exit\n";

/* One dataset as the tool shows it, from either source. */
struct ds {
	uint32_t id;
	char *name; /* NULL: objects of no known dataset */
	uint64_t bytes, objects, packed, hit, miss;
	int64_t last_use_s;
	/* A live mount's policy counters since it mounted (from its stats
	 * file): have_policy says they were found. */
	bool have_policy;
	double window;		       /* the last window's hit share; < 0: none yet */
	uint64_t admitted, refused[3]; /* refused: full, scan, share */
};

static const char *const refusal_names[3] = {"full", "scan", "share"};

struct listing {
	struct ds *v;
	size_t n, cap;
	bool have_capacity; /* live mounts know their cache_size */
	uint64_t capacity_bytes, used_bytes;
};

/* How the tool reaches the cache. */
struct target {
	const char *arg;
	char root[PATH_MAX]; /* realpath of TARGET */
	int fd;		     /* live: the mountpoint, opened; -1 offline */
	sfs_store *store;    /* offline: the store, opened and started */
};

static bool json;

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
	va_list ap;
	fputs("shardfs-cache: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/* Add d unless seen already or idle (nothing cached and no reads since its
 * last eviction: names are never forgotten, so old ones would pile up).
 * Returns 0 or -ENOMEM. */
static int listing_add(struct listing *l, const struct ds *d)
{
	if (!d->objects && !d->hit && !d->miss)
		return 0;
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].id == d->id && (d->id || !l->v[i].name))
			return 0; /* seen on an earlier page */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 64;
		struct ds *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n] = *d;
	if (d->name && !(l->v[l->n].name = strdup(d->name)))
		return -ENOMEM;
	l->n++;
	return 0;
}

/* --- reaching the cache ---------------------------------------------------- */

static bool is_cache_dir(const char *dir)
{
	char p[PATH_MAX + 16];
	struct stat st;

	snprintf(p, sizeof(p), "%s/LOCK", dir);
	if (stat(p, &st) != 0 || !S_ISREG(st.st_mode))
		return false;
	snprintf(p, sizeof(p), "%s/objects", dir);
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Open the store of an unmounted cache_dir (its LOCK keeps a daemon out
 * while we work, and keeps us out of one a daemon holds). */
static void open_offline(struct target *t)
{
	char err[512] = "", sub[PATH_MAX + 16];
	struct sfs_store_conf c = {.dir = t->root, .chunk_bytes = 1u << 20};

	/* The store would start "offline" on a directory it cannot use (a
	 * daemon degrades to NFS); the tool says why instead. */
	snprintf(sub, sizeof(sub), "%s/objects", t->root);
	if (access(t->root, R_OK | W_OK | X_OK) != 0 || access(sub, R_OK | W_OK | X_OK) != 0)
		die(EXIT_FAIL, "%s: %s (a cache directory is used by root, or the mount's user)",
		    t->arg, strerror(errno));
	int rc = sfs_store_open(&c, &t->store, err, sizeof(err));
	if (rc == -EBUSY)
		die(EXIT_FAIL, "%s; run it on the mount instead (shardfs-cache ... MOUNTPOINT)",
		    err);
	if (rc < 0)
		die(EXIT_FAIL, "%s: %s", t->arg, err[0] ? err : strerror(-rc));
	struct sfs_store_stats st;
	sfs_store_get_stats(t->store, &st);
	if (!st.online) /* the store logged why */
		die(EXIT_FAIL, "%s: the cache directory cannot be used", t->arg);
	if ((rc = sfs_store_start(t->store)) < 0)
		die(EXIT_FAIL, "%s: %s", t->arg, strerror(-rc));
}

static void target_open(struct target *t, const char *arg)
{
	struct stat st;

	t->arg = arg;
	t->fd = -1;
	if (!realpath(arg, t->root))
		die(EXIT_USAGE, "%s: %s", arg, strerror(errno));
	if (stat(t->root, &st) != 0 || !S_ISDIR(st.st_mode))
		die(EXIT_USAGE, "%s: not a directory (give the mountpoint or the cache_dir)", arg);
	if (is_cache_dir(t->root)) {
		open_offline(t);
		return;
	}
	t->fd = open(t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (t->fd < 0)
		die(EXIT_FAIL, "%s: %s", arg, strerror(errno));
}

static void target_close(struct target *t)
{
	if (t->fd >= 0)
		close(t->fd);
	sfs_store_close(t->store);
}

/* An ioctl on the mount; dies with one line on a failure that is not
 * `tolerated`. Returns 0 or -errno (tolerated). */
static int mount_ioctl(struct target *t, unsigned long cmd, void *arg, int tolerated)
{
	if (ioctl(t->fd, cmd, arg) == 0)
		return 0;
	int e = errno;
	if (e == tolerated)
		return -e;
	if (e == ENOTTY)
		die(EXIT_USAGE, "%s: neither a shardfs mount nor a shardfs cache directory",
		    t->arg);
	if (e == EPERM)
		die(EXIT_FAIL, "%s: only root or the user running the mount may do this", t->arg);
	if (e == ENOTSUP)
		die(EXIT_FAIL, "%s: this mount has no cache (mounted without cache_dir)", t->arg);
	die(EXIT_FAIL, "%s: %s", t->arg, strerror(e));
}

/* --- list ------------------------------------------------------------------ */

static void list_live(struct target *t, struct listing *l)
{
	struct shardfs_cache_list *q = calloc(1, sizeof(*q));

	if (!q)
		die(EXIT_FAIL, "out of memory");
	for (uint32_t start = 0;;) {
		memset(q, 0, sizeof(*q));
		q->size = sizeof(*q);
		q->start = start;
		mount_ioctl(t, SHARDFS_IOC_CACHE_LIST, q, 0);
		size_t at = 0;
		for (uint32_t k = 0; k < q->n_entries; k++) {
			struct shardfs_cache_entry e;
			memcpy(&e, q->buf + at, sizeof(e));
			struct ds d = {e.id,
				       e.name_len ? (char *)q->buf + at + sizeof(e) : NULL,
				       e.bytes,
				       e.objects,
				       e.packed_objects,
				       e.hit_bytes,
				       e.miss_bytes,
				       e.last_use_s,
				       false,
				       -1,
				       0,
				       {0}};
			if (listing_add(l, &d) < 0)
				die(EXIT_FAIL, "out of memory");
			at += e.entry_bytes;
		}
		l->have_capacity = true;
		l->capacity_bytes = q->capacity_bytes;
		l->used_bytes = q->used_bytes;
		start += q->n_entries;
		if (start >= q->total || !q->n_entries)
			break;
	}
	free(q);
}

static void list_offline(struct target *t, struct listing *l)
{
	struct sfs_store_dataset *d;
	struct sfs_store_stats st;
	size_t n;

	if (sfs_store_list(t->store, &d, &n) < 0)
		die(EXIT_FAIL, "out of memory");
	for (size_t i = 0; i < n; i++) {
		struct ds x = {d[i].id,
			       (char *)d[i].name,
			       d[i].bytes,
			       d[i].objects,
			       d[i].packed_objects,
			       d[i].hit_bytes,
			       d[i].miss_bytes,
			       d[i].last_use_s,
			       false,
			       -1,
			       0,
			       {0}};
		if (listing_add(l, &x) < 0)
			die(EXIT_FAIL, "out of memory");
	}
	free(d);
	sfs_store_get_stats(t->store, &st);
	l->used_bytes = st.used_bytes;
}

/* The dataset a stats line is about: its unescaped label value, or NULL. */
static char *stats_dataset(const char *line, char *buf, size_t len)
{
	const char *p = strstr(line, "{dataset=\"");
	size_t n = 0;

	if (!p)
		return NULL;
	for (p += 10; *p && *p != '"' && n + 1 < len; p++) {
		if (*p == '\\' && p[1])
			p++;
		buf[n++] = *p == 'n' && p[-1] == '\\' ? '\n' : *p;
	}
	buf[n] = 0;
	return *p == '"' ? buf : NULL;
}

/* A live mount: the policy's per-dataset counters from its stats file. */
static void policy_from_stats(struct target *t, struct listing *l)
{
	char path[PATH_MAX + 32], line[8192], name[4200];
	snprintf(path, sizeof(path), "%s/.shardfs/stats", t->root);
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "shardfs_cache_dataset_", 22) ||
		    !stats_dataset(line, name, sizeof(name)))
			continue;
		const char *val = strrchr(line, ' ');
		for (size_t i = 0; val && i < l->n; i++) {
			struct ds *d = &l->v[i];
			if (strcmp(d->name ? d->name : "(unknown)", name))
				continue;
			if (!d->have_policy)
				d->window = -1;
			d->have_policy = true;
			if (!strncmp(line + 22, "admitted_bytes_total{", 21))
				d->admitted = strtoull(val + 1, NULL, 10);
			else if (!strncmp(line + 22, "window_hit_ratio{", 17))
				d->window = strtod(val + 1, NULL);
			for (int r = 0; r < 3; r++) {
				char want[32];
				snprintf(want, sizeof(want), ",reason=\"%s\"}", refusal_names[r]);
				if (!strncmp(line + 22, "refused_bytes_total{", 20) &&
				    strstr(line, want))
					d->refused[r] = strtoull(val + 1, NULL, 10);
			}
		}
	}
	fclose(f);
}

static void get_listing(struct target *t, struct listing *l)
{
	memset(l, 0, sizeof(*l));
	if (t->store) {
		list_offline(t, l);
	} else {
		list_live(t, l);
		policy_from_stats(t, l);
	}
}

/* --- output ------------------------------------------------------------------ */

static void human(uint64_t n, char *buf, size_t len)
{
	static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
	double x = (double)n;
	int u = 0;

	while (x >= 1024 && u < 5) {
		x /= 1024;
		u++;
	}
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", x, unit[u]);
}

static void when(int64_t s, char *buf, size_t len)
{
	struct tm tm;
	time_t t = (time_t)s;

	if (!s || !localtime_r(&t, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm))
		snprintf(buf, len, "never");
}

static int by_bytes(const void *a, const void *b)
{
	const struct ds *x = a, *y = b;
	if (x->bytes != y->bytes)
		return x->bytes < y->bytes ? 1 : -1;
	if (!x->name || !y->name)
		return !x->name - !y->name;
	return strcmp(x->name, y->name);
}

static void json_str(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	putchar('"');
}

static void print_json(const struct target *t, const struct listing *l)
{
	printf("{\"target\": ");
	json_str(t->root);
	printf(", \"mode\": \"%s\", \"used_bytes\": %" PRIu64 ", \"capacity_bytes\": ",
	       t->store ? "offline" : "mounted", l->used_bytes);
	if (l->have_capacity)
		printf("%" PRIu64, l->capacity_bytes);
	else
		printf("null");
	printf(", \"datasets\": [");
	for (size_t i = 0; i < l->n; i++) {
		const struct ds *d = &l->v[i];
		printf("%s\n  {\"name\": ", i ? "," : "");
		if (d->name)
			json_str(d->name);
		else
			printf("null");
		printf(", \"id\": %" PRIu32 ", \"bytes\": %" PRIu64 ", \"files\": %" PRIu64
		       ", \"packed_files\": %" PRIu64 ", \"hit_bytes\": %" PRIu64
		       ", \"miss_bytes\": %" PRIu64 ", \"hit_ratio\": ",
		       d->id, d->bytes, d->objects, d->packed, d->hit, d->miss);
		if (d->hit + d->miss)
			printf("%.4f", (double)d->hit / (double)(d->hit + d->miss));
		else
			printf("null");
		printf(", \"last_use\": ");
		if (d->last_use_s)
			printf("%" PRId64, d->last_use_s);
		else
			printf("null");
		if (d->have_policy) {
			printf(", \"window_hit_ratio\": ");
			if (d->window >= 0)
				printf("%.4f", d->window);
			else
				printf("null");
			printf(", \"admitted_bytes\": %" PRIu64 ", \"refused_bytes\": {",
			       d->admitted);
			for (int r = 0; r < 3; r++)
				printf("%s\"%s\": %" PRIu64, r ? ", " : "", refusal_names[r],
				       d->refused[r]);
			printf("}");
		}
		printf("}");
	}
	printf("%s]}\n", l->n ? "\n" : "");
}

static void print_text(const struct target *t, const struct listing *l)
{
	char b[32], c[32], w[32], ratio[16];

	char win[16], adm[32], ref[48];

	printf("%-40s %10s %9s %9s %6s %6s %10s %17s  %s\n", "DATASET", "CACHED", "FILES", "PACKED",
	       "HIT", "WINDOW", "ADMITTED", "REFUSED", "LAST USE");
	for (size_t i = 0; i < l->n; i++) {
		const struct ds *d = &l->v[i];
		human(d->bytes, b, sizeof(b));
		when(d->last_use_s, w, sizeof(w));
		if (d->hit + d->miss)
			snprintf(ratio, sizeof(ratio), "%.1f%%",
				 100.0 * (double)d->hit / (double)(d->hit + d->miss));
		else
			snprintf(ratio, sizeof(ratio), "-");
		/* since the mount: the last window's hit share, bytes admitted,
		 * bytes refused and the main reason */
		snprintf(win, sizeof(win), "-");
		snprintf(adm, sizeof(adm), "-");
		snprintf(ref, sizeof(ref), "-");
		if (d->have_policy) {
			int top = 0;
			uint64_t sum = d->refused[0] + d->refused[1] + d->refused[2];
			for (int r = 1; r < 3; r++)
				top = d->refused[r] > d->refused[top] ? r : top;
			if (d->window >= 0)
				snprintf(win, sizeof(win), "%.1f%%", 100.0 * d->window);
			human(d->admitted, adm, sizeof(adm));
			human(sum, c, sizeof(c));
			snprintf(ref, sizeof(ref), sum ? "%s %s" : "%s", c, refusal_names[top]);
		}
		printf("%-40s %10s %9" PRIu64 " %9" PRIu64 " %6s %6s %10s %17s  %s\n",
		       d->name ? d->name : "(unknown dataset)", b, d->objects, d->packed, ratio,
		       win, adm, ref, w);
	}
	human(l->used_bytes, b, sizeof(b));
	if (l->have_capacity) {
		human(l->capacity_bytes, c, sizeof(c));
		printf("cache %s: %s used of %s\n", t->root, b, c);
	} else {
		printf("cache %s (not mounted): %s used\n", t->root, b);
	}
}

static int cmd_list(struct target *t)
{
	struct listing l;

	get_listing(t, &l);
	qsort(l.v, l.n, sizeof(*l.v), by_bytes);
	if (json)
		print_json(t, &l);
	else
		print_text(t, &l);
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i].name);
	free(l.v);
	return 0;
}

/* --- evict and purge ---------------------------------------------------------- */

/* What one eviction did, or why not: 0, -ENOENT (nothing matched), -errno. */
static int evict_one(struct target *t, const char *what, bool mount_path, bool all,
		     struct sfs_store_evicted *r)
{
	if (t->store)
		return sfs_store_evict(t->store, all ? NULL : what, r);
	struct shardfs_cache_evict *e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->size = sizeof(*e);
	e->flags = (all ? SHARDFS_EVICT_ALL : 0) | (mount_path ? SHARDFS_EVICT_MOUNT_PATH : 0);
	snprintf(e->prefix, sizeof(e->prefix), "%s", what);
	int rc = mount_ioctl(t, SHARDFS_IOC_CACHE_EVICT, e, ENOENT);
	*r = (struct sfs_store_evicted){e->datasets, e->objects, e->bytes, e->disk_bytes};
	free(e);
	return rc;
}

/* Whether dataset d holds `what`: a name below d, or (rel) a path of the
 * mount whose first component is d's top-level directory. */
static bool holds(const char *d, const char *what, bool rel)
{
	size_t n = strlen(d), k = strcspn(what, "/");

	if (!rel)
		return !strncmp(what, d, n) && what[n] == '/';
	return what[k] == '/' && n > k && d[n - k - 1] == '/' && !strncmp(d + n - k, what, k);
}

/* Whether some dataset other than d lies under d (d is then an export's
 * own dataset, which holds only the files at the export's root). */
static bool has_nested(const struct listing *l, const char *d)
{
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].name && holds(d, l->v[i].name, false))
			return true;
	return false;
}

/* The dataset that holds `what` (a name or mount path inside a dataset),
 * for the message: the longest name that holds it, but not an export's own
 * dataset for a name one level below it (that would be a top-level
 * directory, a dataset of its own). NULL if none; else malloc'd. */
static char *dataset_holding(struct target *t, const char *what, bool rel)
{
	struct listing l;
	const char *best = NULL;

	get_listing(t, &l);
	for (size_t i = 0; i < l.n; i++) {
		const char *d = l.v[i].name;
		if (d && holds(d, what, rel) && (!best || strlen(d) > strlen(best)))
			best = d;
	}
	if (best && !rel && !strchr(what + strlen(best) + 1, '/') && has_nested(&l, best))
		best = NULL;
	char *found = best ? strdup(best) : NULL;
	for (size_t i = 0; i < l.n; i++)
		free(l.v[i].name);
	free(l.v);
	return found;
}

/* --- a path inside a dataset: its files' versions, by key ------------------- */

/* The walk of one path (nftw passes no argument: one walk at a time). */
struct walk {
	struct target *t;
	struct shardfs_cache_evict_keys *k;
	uint64_t files, no_key;
	struct sfs_store_evicted r;
};
static struct walk *walk_cur;

/* Send the keys gathered so far. Dies on a failure (mount_ioctl). */
static void walk_flush(struct walk *w)
{
	if (!w->k->n_keys)
		return;
	w->k->size = sizeof(*w->k);
	mount_ioctl(w->t, SHARDFS_IOC_CACHE_EVICT_KEYS, w->k, 0);
	w->r.objects += w->k->objects;
	w->r.bytes += w->k->bytes;
	w->r.disk_bytes += w->k->disk_bytes;
	memset(w->k, 0, sizeof(*w->k));
}

static bool parse_key(const char *hex, uint8_t key[16])
{
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return false;
		key[i] = (uint8_t)v;
	}
	return true;
}

/* nftw callback: a regular file's key (an xattr: opens nothing, fetches
 * nothing) joins the batch. */
static int walk_one(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	struct walk *w = walk_cur;
	char hex[64];

	(void)ftw;
	if (type != FTW_F || !S_ISREG(st->st_mode))
		return 0;
	w->files++;
	ssize_t n = lgetxattr(path, SHARDFS_XATTR_KEY, hex, sizeof(hex) - 1);
	if (n != 32 || (hex[32] = 0, !parse_key(hex, w->k->keys[w->k->n_keys]))) {
		w->no_key++;
		return 0;
	}
	if (++w->k->n_keys == SHARDFS_CACHE_EVICT_KEYS_MAX)
		walk_flush(w);
	return 0;
}

/* Evict the current versions of the files at or under path (a path of the
 * live mount). *files: how many were looked at. Returns 0 or -errno. */
static int evict_walk(struct target *t, const char *path, struct sfs_store_evicted *r,
		      uint64_t *files)
{
	struct walk w = {.t = t, .k = calloc(1, sizeof(*w.k))};
	struct shardfs_cache_list *probe = calloc(1, sizeof(*probe));

	if (!w.k || !probe)
		die(EXIT_FAIL, "out of memory");
	probe->size = sizeof(*probe);
	mount_ioctl(t, SHARDFS_IOC_CACHE_LIST, probe, 0); /* a cache, and may we? */
	free(probe);
	walk_cur = &w;
	int rc = nftw(path, walk_one, 64, FTW_PHYS | FTW_MOUNT) ? -errno : 0;
	walk_flush(&w);
	walk_cur = NULL;
	free(w.k);
	*r = w.r;
	*files = w.files;
	if (w.no_key)
		fprintf(stderr, "shardfs-cache: %s: %" PRIu64 " files gave no cache key, skipped\n",
			path, w.no_key);
	return rc;
}

/* A path under the live mount's root, as the part below the root; NULL if
 * arg is not one. */
static const char *mount_relative(const struct target *t, const char *arg, char *buf)
{
	size_t n = strlen(t->root);

	if (t->store || !realpath(arg, buf))
		return NULL;
	if (!strcmp(buf, t->root))
		return "";
	if (strncmp(buf, t->root, n) || (buf[n] != '/' && strcmp(t->root, "/")))
		return NULL;
	return buf + n + (buf[n] == '/');
}

/* One line: what was evicted (datasets: 0 for a purge, which names none). */
static void report(const char *what, const struct sfs_store_evicted *r)
{
	char b[32], d[32], n[48] = "";

	human(r->bytes, b, sizeof(b));
	human(r->disk_bytes, d, sizeof(d));
	if (r->datasets)
		snprintf(n, sizeof(n), "%" PRIu32 " dataset%s, ", r->datasets,
			 r->datasets == 1 ? "" : "s");
	printf("%s: %s%" PRIu64 " files, %s evicted (%s of disk freed now)\n", what, n, r->objects,
	       b, d);
}

/* Why nothing matched `arg`, in one line on stderr. */
static void explain_miss(struct target *t, const char *arg, const char *rel)
{
	char *holder = dataset_holding(t, rel ? rel : arg, rel != NULL);

	if (holder)
		fprintf(stderr, "shardfs-cache: '%s' is inside dataset '%s': %s\n", arg, holder,
			t->store ? "an unmounted cache evicts whole datasets only"
				 : "give its path on the mount, or evict the whole dataset");
	else
		fprintf(stderr,
			"shardfs-cache: '%s': no cached dataset is or is under it (see "
			"shardfs-cache list)\n",
			arg);
	free(holder);
}

/* One argument of evict: a dataset name or prefix, a dataset's directory on
 * the mount, or (live) a path inside a dataset, whose files go one by one.
 * Returns 0, or EXIT_FAIL after one line on stderr. */
static int evict_arg(struct target *t, const char *arg)
{
	char buf[PATH_MAX], n[PATH_MAX + 48];
	const char *rel = mount_relative(t, arg, buf);
	struct sfs_store_evicted r = {0};
	struct stat st;
	uint64_t files;
	int rc;

	if (!rel && arg[0] != '/')
		die(EXIT_USAGE, "'%s': not a dataset name (/EXPORT/DIR) or a path of the mount",
		    arg);
	if (rel && (strchr(rel, '/') || (stat(buf, &st) == 0 && !S_ISDIR(st.st_mode)))) {
		rc = evict_walk(t, buf, &r, &files);
		snprintf(n, sizeof(n), "%s (%" PRIu64 " files under it)", arg, files);
		if (rc == 0)
			report(n, &r);
		else
			fprintf(stderr, "shardfs-cache: '%s': %s\n", arg, strerror(-rc));
		return rc ? EXIT_FAIL : 0;
	}
	rc = evict_one(t, rel ? rel : arg, rel != NULL, false, &r);
	if (rc == 0)
		report(arg, &r);
	else if (rc == -ENOENT)
		explain_miss(t, arg, rel);
	else
		fprintf(stderr, "shardfs-cache: '%s': %s\n", arg, strerror(-rc));
	return rc ? EXIT_FAIL : 0;
}

static int cmd_evict(struct target *t, char **args, int n)
{
	int status = 0;

	for (int i = 0; i < n; i++)
		if (evict_arg(t, args[i]))
			status = EXIT_FAIL;
	return status;
}

static int cmd_purge(struct target *t)
{
	struct sfs_store_evicted r = {0};
	int rc = evict_one(t, "", false, true, &r);

	if (rc < 0)
		die(EXIT_FAIL, "%s: %s", t->arg, strerror(-rc));
	r.datasets = 0; /* everything, not a match */
	report("purge", &r);
	return 0;
}

/* --- main -------------------------------------------------------------------- */

int main(int argc, char **argv)
{
	struct target t = {0};
	int i = 1, rc;

	sfs_log_max_level = SFS_LOG_ERR; /* the store's warnings are a daemon's */
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			fputs(usage_text, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--json")) {
			json = true;
		} else {
			die(EXIT_USAGE, "unknown option '%s' (see shardfs-cache --help)", argv[i]);
		}
	}
	const char *cmd = i < argc ? argv[i++] : NULL;
	int n_args = argc - i;
	if (!cmd)
		die(EXIT_USAGE, "no command: list, evict or purge (see shardfs-cache --help)");
	if (strcmp(cmd, "list") && strcmp(cmd, "evict") && strcmp(cmd, "purge"))
		die(EXIT_USAGE, "unknown command '%s': list, evict or purge", cmd);
	if (!strcmp(cmd, "evict") && n_args < 2)
		die(EXIT_USAGE, "usage: shardfs-cache evict TARGET DATASET|PATH...");
	if (strcmp(cmd, "evict") && n_args != 1)
		die(EXIT_USAGE, "usage: shardfs-cache %s TARGET", cmd);
	if (json && strcmp(cmd, "list"))
		die(EXIT_USAGE, "--json goes with list only");
	target_open(&t, argv[i]);
	if (!strcmp(cmd, "list"))
		rc = cmd_list(&t);
	else if (!strcmp(cmd, "purge"))
		rc = cmd_purge(&t);
	else
		rc = cmd_evict(&t, argv + i + 1, n_args - 1);
	target_close(&t);
	return rc;
}
