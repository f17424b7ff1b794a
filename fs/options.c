// SPDX-License-Identifier: Apache-2.0
/*
 * options — argv and -o parsing, validation, host resolution. See options.h.
 */
#include "options.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

enum opt_kind {
	OPT_FLAG,
	OPT_UINT,
	OPT_SIZE,
	OPT_STRING,
	OPT_CHOICE,
	OPT_IGNORED,
	OPT_IGNORED_VALUE
};

/* The one option table: name, kind, range, and where the value goes. */
struct opt_def {
	const char *name;
	enum opt_kind kind;
	uint64_t min, max;
	size_t offset;	     /* into struct sfs_options */
	int width;	     /* bytes of the destination, or the flag's value (0/1) */
	const char *choices; /* OPT_CHOICE: "a|b|c", stored as the index */
};

#define UINT_OPT(n, field, lo, hi)                                                                 \
	{                                                                                          \
		n, OPT_UINT, lo, hi, offsetof(struct sfs_options, field),                          \
		    (int)sizeof(((struct sfs_options *)0)->field), NULL                            \
	}
#define FLAG_OPT(n, field, val)                                                                    \
	{                                                                                          \
		n, OPT_FLAG, 0, 0, offsetof(struct sfs_options, field), val, NULL                  \
	}

static const struct opt_def opt_table[] = {
    UINT_OPT("nconnect", nconnect, 1, 16),
    {"rsize", OPT_SIZE, 4096, 1u << 20, offsetof(struct sfs_options, rsize), 4, NULL},
    UINT_OPT("timeo", timeo_ds, 1, 6000),
    UINT_OPT("retrans", retrans, 1, 100),
    FLAG_OPT("soft", hard, 0),
    FLAG_OPT("hard", hard, 1),
    UINT_OPT("actimeo", actimeo_s, 0, 86400),
    UINT_OPT("uid", uid, 0, 4294967294u),
    UINT_OPT("gid", gid, 0, 4294967294u),
    FLAG_OPT("allow_other", allow_other, 1),
    FLAG_OPT("default_permissions", default_permissions, 1),
    FLAG_OPT("allow_other_unchecked", allow_other_unchecked, 1),
    FLAG_OPT("overmount", overmount, 1),
    FLAG_OPT("direct_io", direct_io, 1),
    UINT_OPT("io_threads", io_threads, 0, 64),
    UINT_OPT("max_threads", max_threads, 1, 1024),
    {"prefetch_mem", OPT_SIZE, 4u << 20, 1ull << 40, offsetof(struct sfs_options, prefetch_mem), 8,
     NULL},
    {"prefetch_max", OPT_SIZE, 0, 1ull << 50, offsetof(struct sfs_options, prefetch_max), 8, NULL},
    {"prefetch", OPT_CHOICE, 0, 0, offsetof(struct sfs_options, prefetch), 4,
     "readahead|shard|off"},
    {"cache_dir", OPT_STRING, 0, 0, offsetof(struct sfs_options, cache_dir), 0, NULL},
    {"cache_size", OPT_SIZE, 16u << 20, 1ull << 60, offsetof(struct sfs_options, cache_size), 8,
     NULL},
    FLAG_OPT("immutable", immutable, 1),
    FLAG_OPT("noimmutable", noimmutable, 1),
    UINT_OPT("namespace_max", namespace_max, 1000, 1000000000),
    {"cache_policy", OPT_CHOICE, 0, 0, offsetof(struct sfs_options, cache_policy), 4, "lru|pin"},
    /* Generic mount(8) options that mount.fuse3 may pass on: accepted and
     * ignored (the mount is always read-only, nodev, nosuid). */
    {"ro", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"rw", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"defaults", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"auto", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"noauto", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"_netdev", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"nofail", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"user", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"nouser", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"users", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"dev", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"nodev", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"suid", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"nosuid", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"exec", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"noexec", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"async", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"atime", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"noatime", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"relatime", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"nodiratime", OPT_IGNORED, 0, 0, 0, 0, NULL},
    {"comment", OPT_IGNORED_VALUE, 0, 0, 0, 0, NULL},
};

static int fail(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int sfs_parse_size(const char *s, uint64_t *out)
{
	char *end;
	uint64_t mult = 1;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	switch (*end) {
	case 0:
		break;
	case 'k':
	case 'K':
		mult = 1ull << 10;
		end++;
		break;
	case 'm':
	case 'M':
		mult = 1ull << 20;
		end++;
		break;
	case 'g':
	case 'G':
		mult = 1ull << 30;
		end++;
		break;
	case 't':
	case 'T':
		mult = 1ull << 40;
		end++;
		break;
	default:
		return -EINVAL;
	}
	if (*end || (v && mult > UINT64_MAX / v))
		return -EINVAL;
	*out = v * mult;
	return 0;
}

static int parse_uint(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

static void store(struct sfs_options *o, const struct opt_def *d, uint64_t v)
{
	char *p = (char *)o + d->offset;

	switch (d->width) {
	case 1:
		*(bool *)p = v != 0;
		break;
	case 4:
		*(uint32_t *)p = (uint32_t)v;
		break;
	case 8:
		*(uint64_t *)p = v;
		break;
	}
}

/* Edit distance between two short option names (insertions, deletions,
 * substitutions, and swaps of neighbours count 1 each). */
static unsigned name_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned d[40][40];

	if (la >= 40 || lb >= 40)
		return 99;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = (unsigned)i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = (unsigned)j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			unsigned best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[la][lb];
}

/* The refusal of an unknown option, with the closest known name when one
 * is a slip away (at most 2 edits, and fewer than half its letters). */
static int unknown_option(const char *item, char *err, size_t len)
{
	const char *best = NULL;
	unsigned best_d = 3;

	for (size_t i = 0; i < sizeof(opt_table) / sizeof(opt_table[0]); i++) {
		unsigned dist = name_distance(item, opt_table[i].name);
		if (dist < best_d && 2 * dist < strlen(opt_table[i].name)) {
			best_d = dist;
			best = opt_table[i].name;
		}
	}
	if (best)
		return fail(err, len, "unknown mount option '%s' (did you mean '%s'?)", item, best);
	return fail(err, len, "unknown mount option '%s'", item);
}

/* One "name[=value]" item of -o. */
static int parse_one(struct sfs_options *o, char *item, char *err, size_t len)
{
	char *val = strchr(item, '=');

	if (val)
		*val++ = 0;
	if (!*item)
		return fail(err, len, "mount option '=%s' has no name", val ? val : "");
	if (!strncmp(item, "x-", 2))
		return 0; /* userspace mount hints (x-systemd.*) are not ours */
	for (size_t i = 0; i < sizeof(opt_table) / sizeof(opt_table[0]); i++) {
		const struct opt_def *d = &opt_table[i];
		uint64_t v;
		if (strcmp(d->name, item))
			continue;
		switch (d->kind) {
		case OPT_IGNORED:
		case OPT_FLAG:
			if (val)
				return fail(err, len, "mount option '%s' takes no value", item);
			if (d->kind == OPT_FLAG)
				*(bool *)((char *)o + d->offset) = d->width;
			return 0;
		case OPT_IGNORED_VALUE:
			return 0;
		case OPT_STRING: {
			if (!val || !*val)
				return fail(err, len, "mount option '%s' needs a value", item);
			char **dst = (char **)((char *)o + d->offset);
			free(*dst);
			if (!(*dst = strdup(val)))
				return -ENOMEM;
			return 0;
		}
		case OPT_CHOICE: {
			if (!val || !*val)
				return fail(err, len, "mount option '%s' needs a value (%s)", item,
					    d->choices);
			unsigned k = 0;
			for (const char *c = d->choices; *c; k++) {
				size_t n = strcspn(c, "|");
				if (strlen(val) == n && !strncmp(c, val, n)) {
					*(unsigned *)((char *)o + d->offset) = k;
					if (d->offset == offsetof(struct sfs_options, cache_policy))
						o->cache_policy_given = true;
					return 0;
				}
				c += n + (c[n] == '|');
			}
			return fail(err, len, "mount option '%s=%s': expected one of %s", item, val,
				    d->choices);
		}
		case OPT_UINT:
		case OPT_SIZE:
			if (!val || !*val)
				return fail(err, len, "mount option '%s' needs a value", item);
			if ((d->kind == OPT_UINT ? parse_uint(val, &v) : sfs_parse_size(val, &v)) <
			    0)
				return fail(err, len, "mount option '%s=%s': not a%s number", item,
					    val, d->kind == OPT_SIZE ? " size or" : "n unsigned");
			if (v < d->min || v > d->max)
				return fail(err, len,
					    "mount option '%s=%s' is out of range (%llu..%llu)",
					    item, val, (unsigned long long)d->min,
					    (unsigned long long)d->max);
			store(o, d, v);
			return 0;
		}
	}
	return unknown_option(item, err, len);
}

static int parse_opt_list(struct sfs_options *o, const char *list, char *err, size_t len)
{
	char *copy = strdup(list), *save = NULL;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	if (!*copy)
		rc = fail(err, len, "empty -o option list");
	for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save))
		rc = parse_one(o, tok, err, len);
	if (!rc && (list[0] == ',' || strstr(list, ",,") || list[strlen(list) - 1] == ','))
		rc = fail(err, len, "empty mount option in '%s'", list);
	free(copy);
	return rc;
}

/* Does the export path go through a ".snapshot" component? */
static bool is_snapshot_path(const char *path)
{
	for (const char *p = path; (p = strstr(p, "/.snapshot")); p++)
		if (p[10] == '/' || p[10] == 0)
			return true;
	return false;
}

static int parse_source(struct sfs_options *o, const char *src, char *err, size_t len)
{
	const char *colon = strstr(src, ":/");

	if (!*src)
		return fail(err, len, "empty source: expected HOST[,HOST...]:/EXPORT");
	if (!colon)
		return fail(err, len, "source '%s' is not HOST[,HOST...]:/EXPORT", src);
	if (colon == src)
		return fail(err, len, "source '%s' names no host", src);
	o->hosts = strndup(src, (size_t)(colon - src));
	o->export_path = strdup(colon + 1);
	o->source = strdup(src);
	if (!o->hosts || !o->export_path || !o->source)
		return -ENOMEM;
	/* Hosts: letters, digits, '-', '.', separated by single commas. */
	const char *h = o->hosts;
	if (*h == ',' || h[strlen(h) - 1] == ',' || strstr(h, ",,"))
		return fail(err, len, "source '%s' has an empty host in its list", src);
	for (; *h; h++)
		if (!isalnum((unsigned char)*h) && !strchr("-._,", *h))
			return fail(err, len, "source '%s': invalid character '%c' in host list",
				    src, *h);
	if (strlen(o->export_path) > 1024)
		return fail(err, len, "export path too long");
	return 0;
}

int sfs_options_parse(int argc, char **argv, struct sfs_options *o, char *err, size_t len)
{
	const char *pos[2];
	int n_pos = 0, rc;

	memset(o, 0, sizeof(*o));
	o->nconnect = SFS_DEFAULT_NCONNECT;
	o->rsize = SFS_DEFAULT_RSIZE;
	o->timeo_ds = SFS_DEFAULT_TIMEO_DS;
	o->retrans = SFS_DEFAULT_RETRANS;
	o->actimeo_s = SFS_DEFAULT_ACTIMEO_S;
	o->max_threads = 64;
	o->uid = getuid(); /* like the kernel NFS client: the mounter's identity */
	o->gid = getgid();
	o->prefetch_mem = SFS_DEFAULT_PREFETCH_MEM;
	o->prefetch_max = SFS_DEFAULT_PREFETCH_MAX;
	o->prefetch = 1; /* shard */
	o->namespace_max = SFS_DEFAULT_NAMESPACE_MAX;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			o->help = true;
			return 0;
		}
		if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			o->version = true;
			return 0;
		}
		if (!strcmp(a, "-f")) {
			o->foreground = true;
		} else if (!strcmp(a, "-d")) {
			o->debug = o->foreground = true;
		} else if (!strcmp(a, "-s")) {
			/* single-threaded: accepted for FUSE compatibility, ignored */
		} else if (!strncmp(a, "-o", 2)) {
			const char *list = a[2] ? a + 2 : (i + 1 < argc ? argv[++i] : NULL);
			if (!list)
				return fail(err, len, "option -o needs an argument");
			if ((rc = parse_opt_list(o, list, err, len)))
				return rc;
		} else if (a[0] == '-' && a[1]) {
			return fail(err, len, "unknown option '%s'", a);
		} else if (n_pos < 2) {
			pos[n_pos++] = a;
		} else {
			return fail(err, len, "unexpected argument '%s'", a);
		}
	}
	if (n_pos < 2)
		return fail(err, len,
			    n_pos ? "missing MOUNTPOINT" : "missing source and MOUNTPOINT");
	if ((rc = parse_source(o, pos[0], err, len)))
		return rc;
	if (!*pos[1])
		return fail(err, len, "empty mountpoint");
	o->mountpoint = strdup(pos[1]);
	if (!o->mountpoint)
		return -ENOMEM;
	if (o->cache_dir && o->cache_dir[0] != '/')
		return fail(err, len, "cache_dir '%s' must be an absolute path", o->cache_dir);
	/* Settings of a cache that is not there mean a forgotten cache_dir. */
	if (!o->cache_dir && (o->cache_size || o->cache_policy_given))
		return fail(err, len,
			    "%s without cache_dir: there is no cache to size or to manage",
			    o->cache_size ? "cache_size" : "cache_policy");
	/* allow_other lets every local user in: the kernel must then check
	 * each caller against the file's mode, owner and group, or everyone
	 * reads what the mount's NFS identity reads. */
	if (o->allow_other_unchecked && o->default_permissions)
		return fail(err, len,
			    "allow_other_unchecked and default_permissions contradict each other");
	if (o->allow_other_unchecked)
		o->allow_other = true;
	else if (o->allow_other)
		o->default_permissions = true;
	if (o->rsize % 4096)
		o->rsize -= o->rsize % 4096; /* nfs(5) rounds rsize down, so do we */
	/* A snapshot cannot change: a path through .snapshot/ is immutable
	 * unless the user says otherwise (noimmutable wins over both). */
	if (is_snapshot_path(o->export_path))
		o->immutable = true;
	if (o->noimmutable)
		o->immutable = false;
	return 0;
}

void sfs_options_free(struct sfs_options *o)
{
	free(o->source);
	free(o->hosts);
	free(o->export_path);
	free(o->mountpoint);
	free(o->cache_dir);
	memset(o, 0, sizeof(*o));
}

void sfs_addrs_free(char **addrs, size_t n)
{
	for (size_t i = 0; addrs && i < n; i++)
		free(addrs[i]);
	free(addrs);
}

static int addr_add(char ***addrs, size_t *n, const char *a)
{
	for (size_t i = 0; i < *n; i++)
		if (!strcmp((*addrs)[i], a))
			return 0;
	char **na = realloc(*addrs, (*n + 1) * sizeof(char *));
	if (!na)
		return -ENOMEM;
	*addrs = na;
	if (!(na[*n] = strdup(a)))
		return -ENOMEM;
	(*n)++;
	return 0;
}

int sfs_resolve_hosts(const char *hosts, char ***out, char *err, size_t len)
{
	char *copy = strdup(hosts), *save = NULL, **addrs = NULL;
	size_t n = 0;
	int rc = 0;

	if (!copy)
		return -ENOMEM;
	if (!*copy) {
		free(copy);
		snprintf(err, len, "no host given");
		return -EINVAL;
	}
	for (char *h = strtok_r(copy, ",", &save); h && !rc; h = strtok_r(NULL, ",", &save)) {
		struct in_addr in;
		if (inet_pton(AF_INET, h, &in) == 1) {
			rc = addr_add(&addrs, &n, h);
			continue;
		}
		struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res;
		int g = getaddrinfo(h, NULL, &hints, &res);
		if (g) {
			snprintf(err, len, "cannot resolve host '%s': %s", h, gai_strerror(g));
			rc = -EHOSTUNREACH;
			break;
		}
		for (struct addrinfo *ai = res; ai && !rc; ai = ai->ai_next) {
			char buf[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, buf,
				  sizeof(buf));
			rc = addr_add(&addrs, &n, buf);
		}
		freeaddrinfo(res);
	}
	free(copy);
	if (rc) {
		sfs_addrs_free(addrs, n);
		return rc;
	}
	*out = addrs;
	return (int)n;
}

void sfs_options_usage(FILE *out, const char *prog)
{
	fprintf(
	    out,
	    "usage: %s [-f] [-d] [-o OPT[,OPT...]] HOST[,HOST...]:/EXPORT MOUNTPOINT\n"
	    "\n"
	    "Mount an NFSv3 export served by every HOST (the nodes of a scale-out cluster)\n"
	    "read-only at MOUNTPOINT, striping reads across all nodes. A HOST is an IPv4\n"
	    "address or a DNS name; a name with several addresses contributes them all.\n"
	    "\n"
	    "  -f                  stay in the foreground (log to stderr)\n"
	    "  -d                  debug logging (implies -f)\n"
	    "  -h, --help          this text\n"
	    "  -V, --version       print the version\n"
	    "\n"
	    "Mount options (-o):\n"
	    "  nconnect=N          TCP connections per node address, 1..16 (default %u)\n"
	    "  rsize=BYTES         largest READ, 4096..1048576, capped by the server (default %u)\n"
	    "  timeo=DECISECONDS   a request without a reply after this is re-issued on\n"
	    "                      another node, 1..6000 (default %u = %.1f s)\n"
	    "  retrans=N           after timeo*retrans without a reply a connection is dropped\n"
	    "                      and, under soft, a request no node can serve fails with EIO\n"
	    "                      (default %u)\n"
	    "  soft                fail reads with EIO when no node answers (default)\n"
	    "  hard                wait for the cluster to come back instead\n"
	    "  actimeo=SECONDS     attribute and directory entry cache time, 0..86400\n"
	    "                      (default %u)\n"
	    "  uid=N, gid=N        AUTH_SYS identity of every NFS request, whoever the\n"
	    "                      reader is (default: the mounting user's)\n"
	    "  allow_other         let users other than the mounter access the mount; implies\n"
	    "                      default_permissions: the kernel checks each caller's uid,\n"
	    "                      gid and groups against the file's mode, owner and group\n"
	    "  default_permissions let the kernel check file modes (also without allow_other)\n"
	    "  allow_other_unchecked  allow_other WITHOUT that check: every local user reads\n"
	    "                      whatever the NFS identity (uid=, gid=) can read, whatever\n"
	    "                      the mode. Unsafe on shared nodes; only for single-tenant\n"
	    "                      nodes whose users are all allowed to read the whole export\n"
	    "  immutable           the files under the export do not change while mounted:\n"
	    "                      never revalidate, keep the names and attributes seen in\n"
	    "                      cache_dir, and serve them (and cached data) with every\n"
	    "                      node down. Implied by a path under .snapshot/\n"
	    "  noimmutable         not immutable, even under .snapshot/\n"
	    "  namespace_max=N     immutable: names kept at most, ~200 bytes each in memory\n"
	    "                      and on disk (default %u); beyond it, NFS answers\n"
	    "  overmount           mount even if MOUNTPOINT is already a mount (stacks this\n"
	    "                      mount on top; refused by default)\n"
	    "  direct_io           bypass the kernel page cache: one copy less per byte,\n"
	    "                      no sharing of cached pages between readers\n"
	    "  prefetch_mem=SIZE   memory for fetch buffers in flight, K/M/G suffixes\n"
	    "                      (default %lluM)\n"
	    "  cache_dir=PATH      keep fetched chunks on local disk (NVMe) in PATH, across\n"
	    "                      epochs and restarts; created 0700. Default: no cache\n"
	    "  cache_size=SIZE     cache capacity, K/M/G/T (default: 90%% of the filesystem;\n"
	    "                      5%% of it, at most 4G, is always left free)\n"
	    "  cache_policy=lru|pin lru: evict least recently used files (dataset fits);\n"
	    "                      pin: once full keep what is cached, admit nothing new\n"
	    "                      (dataset larger than the cache) (default lru)\n"
	    "  prefetch=shard|readahead|off  shard: open() of a file up to prefetch_max\n"
	    "                      fetches it whole into the cache; readahead: a window\n"
	    "                      ahead of sequential readers only (default shard)\n"
	    "  prefetch_max=SIZE   largest file fetched whole on open (default %lluG)\n"
	    "  io_threads=N        NFS I/O threads, 0 = one per CPU (default 0)\n"
	    "  max_threads=N       FUSE worker threads (default 64)\n"
	    "Generic mount options (ro, rw, _netdev, nofail, noauto, defaults, ...) are\n"
	    "accepted and ignored: the mount is always read-only.\n"
	    "\n"
	    "\n"
	    "Permissions: NFS sees only the uid=/gid= identity; the server's own checks\n"
	    "(and ACLs) apply to that identity, not to the local reader. The kernel check\n"
	    "covers mode bits, owner and group (supplementary groups included) as NFS\n"
	    "reports them, cached for actimeo; server-side ACLs are not evaluated per\n"
	    "reader.\n"
	    "\n"
	    "Statistics: MOUNTPOINT/.shardfs/stats (Prometheus text format), with reads\n"
	    "counted per job (Slurm job, Kubernetes pod or uid, from the reader's cgroup).\n",
	    prog, SFS_DEFAULT_NCONNECT, SFS_DEFAULT_RSIZE, SFS_DEFAULT_TIMEO_DS,
	    SFS_DEFAULT_TIMEO_DS / 10.0, SFS_DEFAULT_RETRANS, SFS_DEFAULT_ACTIMEO_S,
	    SFS_DEFAULT_NAMESPACE_MAX, (unsigned long long)(SFS_DEFAULT_PREFETCH_MEM >> 20),
	    (unsigned long long)(SFS_DEFAULT_PREFETCH_MAX >> 30));
}
