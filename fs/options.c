// SPDX-License-Identifier: Apache-2.0
/*
 * options — argv and -o parsing, validation, host resolution. See options.h.
 *
 * Everything about a mount option lives in its row of opt_table: the
 * defaults are stored from it (set_defaults), -o items are parsed and
 * range-checked by it (parse_one), and --help is generated from it
 * (sfs_options_usage). Checks across options run after parsing
 * (finish_options).
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

/* Every default that is not a constant: like the kernel NFS client, the
 * mounter's identity. */
static uint64_t caller_uid(void) { return getuid(); }

static uint64_t caller_gid(void) { return getgid(); }

/* mem_max's default: a share of the machine's memory (SFS_MEM_MAX_SHARE),
 * clamped; the bounds it derives (derive_from_mem_max) as defaults too. */
static uint64_t default_mem_max(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	uint64_t ram = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page : 0;
	uint64_t m = ram / SFS_MEM_MAX_SHARE;
	if (m < SFS_MEM_MAX_DEFAULT_MIN)
		m = SFS_MEM_MAX_DEFAULT_MIN;
	if (m > SFS_MEM_MAX_DEFAULT_MAX)
		m = SFS_MEM_MAX_DEFAULT_MAX;
	return m & ~((1ull << 20) - 1);
}

static uint64_t mem_prefetch(uint64_t mem_max)
{
	uint64_t b = (mem_max / SFS_MEM_PREFETCH_SHARE) & ~((1ull << 20) - 1);
	return b < (4ull << 20) ? 4ull << 20 : b;
}
static uint64_t mem_inodes(uint64_t mem_max) { return mem_max / 4 / SFS_MEM_INODE_BYTES; }
static uint64_t mem_names(uint64_t mem_max)
{
	uint64_t n = mem_max / 8 / SFS_MEM_NAME_BYTES;
	return n < 1000 ? 1000 : n;
}
static uint64_t default_prefetch_mem(void) { return mem_prefetch(default_mem_max()); }
static uint64_t default_inode_max(void) { return mem_inodes(default_mem_max()); }
static uint64_t default_names(void) { return mem_names(default_mem_max()); }

static const struct sfs_opt_choice policy_choices[] = {
    {"auto", SFS_STORE_AUTO}, {"lru", SFS_STORE_LRU}, {"pin", SFS_STORE_PIN}, {NULL, 0}};
static const struct sfs_opt_choice prefetch_choices[] = {{"readahead", SFS_PREFETCH_READAHEAD},
							 {"shard", SFS_PREFETCH_SHARD},
							 {"off", SFS_PREFETCH_OFF},
							 {NULL, 0}};
static const struct sfs_opt_choice passthrough_choices[] = {
    {"auto", SFS_PASSTHROUGH_AUTO}, {"off", SFS_PASSTHROUGH_OFF}, {NULL, 0}};
static const struct sfs_opt_choice page_cache_choices[] = {{"auto", SFS_PAGE_CACHE_AUTO},
							   {"always", SFS_PAGE_CACHE_ALWAYS},
							   {"never", SFS_PAGE_CACHE_NEVER},
							   {NULL, 0}};
_Static_assert(sizeof(enum sfs_store_policy) == 4 && sizeof(enum sfs_prefetch_mode) == 4 &&
		   sizeof(enum sfs_page_cache) == 4 && sizeof(enum sfs_passthrough) == 4,
	       "choices are stored as 4-byte values");

#define FIELD(f)                                                                                   \
	.offset = offsetof(struct sfs_options, f), .width = sizeof(((struct sfs_options *)0)->f)
#define UINT(n, f, lo, hi) .name = n, .kind = SFS_OPT_UINT, FIELD(f), .min = lo, .max = hi
#define SIZE(n, f, lo, hi) .name = n, .kind = SFS_OPT_SIZE, FIELD(f), .min = lo, .max = hi
#define FLAG(n, f, v)	   .name = n, .kind = SFS_OPT_FLAG, FIELD(f), .set_to = v
#define CHOICE(n, f, c)	   .name = n, .kind = SFS_OPT_CHOICE, FIELD(f), .choices = c
#define IGNORED(n)                                                                                 \
	{                                                                                          \
		.name = n, .kind = SFS_OPT_IGNORED                                                 \
	}

/*
 * The one option table. Adding an option: a field in struct sfs_options,
 * a row here (its default and --help text included), its paragraph in
 * packaging/man/shardfs.8, and the module that reads it. The order is that
 * of --help, and breaks ties between "did you mean" suggestions.
 */
static const struct sfs_opt_def opt_table[] = {
    {UINT("nconnect", nconnect, 1, 16), .def = 2, .meta = "N",
     .help = "TCP connections per node address"},
    {SIZE("rsize", rsize, 4096, 1u << 20), .def = 1u << 20, .meta = "BYTES",
     .help = "largest READ, rounded down to 4K, capped by the server"},
    {UINT("timeo", timeo_ds, 1, 6000), .def = 50, .meta = "DECISECONDS",
     .help = "a request without a reply after this is re-issued on another node"},
    {UINT("retrans", retrans, 1, 100), .def = 2, .meta = "N",
     .help = "after timeo*retrans without a reply a connection is dropped and, under soft, "
	     "a request no node can serve fails with EIO"},
    {FLAG("soft", hard, false), .help = "fail reads with EIO when no node answers"},
    {FLAG("hard", hard, true), .help = "wait for the cluster to come back instead"},
    {UINT("actimeo", actimeo_s, 0, 86400), .def = 60, .meta = "SECONDS",
     .help = "attribute and directory entry cache time"},
    {UINT("uid", uid, 0, 4294967294u), .def_fn = caller_uid, .meta = "N",
     .help = "AUTH_SYS user of every NFS request, whoever the reader is",
     .def_help = "the mounting user's"},
    {UINT("gid", gid, 0, 4294967294u), .def_fn = caller_gid, .meta = "N",
     .help = "AUTH_SYS group of every NFS request, whoever the reader is",
     .def_help = "the mounting user's"},
    {FLAG("allow_other", allow_other, true),
     .help = "let users other than the mounter access the mount; implies default_permissions: "
	     "the kernel checks each caller's uid, gid and groups against the file's mode, owner "
	     "and group"},
    {FLAG("default_permissions", default_permissions, true),
     .help = "let the kernel check file modes (also without allow_other)"},
    {FLAG("allow_other_unchecked", allow_other_unchecked, true),
     .help = "allow_other WITHOUT that check: every local user reads whatever the NFS identity "
	     "(uid=, gid=) can read, whatever the mode. Unsafe on shared nodes; only for "
	     "single-tenant nodes whose users are all allowed to read the whole export"},
    {FLAG("takeover", takeover, true),
     .help = "do not mount: hand the live shardfs mount at MOUNTPOINT (of the same "
	     "HOST:/EXPORT) over to this binary, under its readers (an upgrade)"},
    {FLAG("overmount", overmount, true),
     .help = "mount even if MOUNTPOINT is already a mount (stacks this mount on top; refused "
	     "by default)"},
    {CHOICE("page_cache", page_cache, page_cache_choices), .def = SFS_PAGE_CACHE_AUTO,
     .given = offsetof(struct sfs_options, page_cache_given),
     .help = "auto: the first read of a file over 1 MiB since the kernel took it in bypasses "
	     "the kernel page cache (direct_io: one copy less per byte), later opens of it use "
	     "the page cache (needs Linux 6.6 for shared mmap, else always); always: every open "
	     "uses the page cache; never: every open is direct_io"},
    {FLAG("direct_io", direct_io, true), .help = "page_cache=never"},
    {UINT("io_threads", io_threads, 0, 64), .def = 0, .meta = "N",
     .help = "NFS I/O threads, 0 = one per CPU"},
    {UINT("max_threads", max_threads, 1, 1024), .def = 64, .meta = "N",
     .help = "FUSE worker threads"},
    {UINT("active_threads", active_threads, 0, 1024), .def = 8, .meta = "N",
     .help = "FUSE workers taking requests while none waits for NFS or a chunk "
	     "(at most max_threads; the rest are parked); 0: libfuse's loop instead"},
    {UINT("wedge_timeout", wedge_timeout_s, 0, 3600), .def = 10, .meta = "SECONDS",
     .help = "a serving process whose I/O threads or workers are stuck this long (not "
	     "waiting for NFS: a deadlock, SIGSTOP) is killed and replaced by the mount's "
	     "keeper, its readers' requests sent again; 0: never"},
    {SIZE("mem_max", mem_max, 1u << 20, 1ull << 44), .def_fn = default_mem_max, .meta = "SIZE",
     .help = "the daemon's memory budget, K/M/G/T suffixes: prefetch_mem, inode_max, "
	     "listing_max and namespace_max not given are derived from it (a sixth, a quarter "
	     "at ~460 B per inode, an eighth at ~200 B per name); at least 64M",
     .def_help = "1/16 of RAM, 256M..8G"},
    {UINT("inode_max", inode_max, 0, 1u << 30), .def_fn = default_inode_max, .meta = "N",
     .given = offsetof(struct sfs_options, inode_max_given),
     .help = "inodes the kernel may hold (~460 B of daemon memory each): past it, the "
	     "kernel is asked to forget files closed longest ago, then those looked up "
	     "least recently (needs FUSE protocol 7.45); 0: no limit",
     .def_help = "mem_max / 4 / 460"},
    {SIZE("prefetch_mem", prefetch_mem, 4u << 20, 1ull << 40), .def_fn = default_prefetch_mem,
     .meta = "SIZE", .given = offsetof(struct sfs_options, prefetch_mem_given),
     .help = "memory for fetch buffers in flight, K/M/G/T suffixes", .def_help = "mem_max / 6"},
    {SIZE("prefetch_max", prefetch_max, 0, 1ull << 50), .def = 2ull << 30, .meta = "SIZE",
     .help = "largest file that prefetch=shard fetches whole on open"},
    {UINT("hint_window", hint_window, 1, 65536), .def = 1024, .meta = "N",
     .help = "epoch hints (SHARDFS_IOC_HINT_*): items of one list fetched ahead of its "
	     "reader at most; all lists together hold at most half of prefetch_mem unread"},
    {UINT("hint_fetchers", hint_fetchers, 1, 256), .def = 16, .meta = "N",
     .help = "epoch hints: hinted items being fetched at once, all lists together "
	     "(independent of the readers' own concurrency)"},
    {UINT("warm_share", warm_share, 1, 100), .def = 25, .meta = "PERCENT",
     .help = "warm-ups (SHARDFS_IOC_WARM, shardfs-warm) fetch with at most this share of the "
	     "NFS connections' request slots, and only slots readers leave free: the other "
	     "nodes of a fleet reading the same cluster keep their pace; 100: no share"},
    {SIZE("warm_rate", warm_rate, 0, 1ull << 44), .def = 0, .meta = "BYTES",
     .help = "warm-ups fetch at most this many bytes per second, K/M/G suffixes; 0: no "
	     "limit but warm_share"},
    {CHOICE("prefetch", prefetch, prefetch_choices), .def = SFS_PREFETCH_SHARD,
     .help = "shard: open() of a file up to prefetch_max fetches it whole into the cache; "
	     "readahead: a window ahead of sequential readers only; off: only what readers ask "
	     "for"},
    {.name = "cache_dir",
     .kind = SFS_OPT_STRING,
     FIELD(cache_dir),
     .meta = "PATH",
     .help = "keep fetched chunks on local disk (NVMe) in PATH, across epochs and restarts; "
	     "created 0700",
     .def_help = "no cache"},
    {SIZE("cache_size", cache_size, 16u << 20, 1ull << 60), .def = 0, .meta = "SIZE",
     .help = "cache capacity, K/M/G/T suffixes; 5% of the filesystem, at most 4G, is always "
	     "left free",
     .def_help = "90% of the filesystem"},
    {FLAG("immutable", immutable, true),
     .help = "the files under the export do not change while mounted: never revalidate, keep "
	     "the names and attributes seen in cache_dir, and serve them (and cached data) with "
	     "every node down. Implied by a path under .snapshot/"},
    {FLAG("noimmutable", noimmutable, true), .help = "not immutable, even under .snapshot/"},
    {UINT("namespace_max", namespace_max, 1000, 1000000000), .def_fn = default_names, .meta = "N",
     .given = offsetof(struct sfs_options, namespace_max_given),
     .help = "immutable: names kept at most, ~200 bytes each in memory and on disk; beyond it, "
	     "NFS answers",
     .def_help = "mem_max / 8 / 200"},
    {UINT("listing_max", listing_max, 0, 1000000000), .def_fn = default_names, .meta = "N",
     .given = offsetof(struct sfs_options, listing_max_given), .def_help = "mem_max / 8 / 200",
     .help = "not immutable: names held from directory listings (~200 bytes each, for "
	     "actimeo) to answer lookups of a directory whose names miss twice, instead of an "
	     "NFS LOOKUP per file; 0: none"},
    {CHOICE("cache_policy", cache_policy, policy_choices), .def = SFS_STORE_AUTO,
     .given = offsetof(struct sfs_options, cache_policy_given),
     .help = "auto: each dataset keeps what it holds (one larger than the cache keeps a stable "
	     "part, never churned); a full cache gives a dataset's space to another only when it "
	     "was not read for cache_idle, or to a dataset read again (not a one-off scan) while "
	     "it is not being read, or beyond an equal share among datasets being read; lru: "
	     "evict least recently used files; pin: once full keep what is cached, admit nothing "
	     "new"},
    {CHOICE("passthrough", passthrough, passthrough_choices), .def = SFS_PASSTHROUGH_AUTO,
     .bare = "auto", .given = offsetof(struct sfs_options, passthrough_given),
     .help = "auto: with cache_dir, a file whose version is wholly cached and verified is "
	     "opened as a kernel passthrough of its cache file, its reads never reaching the "
	     "daemon (checked at fill and by the scrubber, not per read), wherever the kernel "
	     "offers it (Linux 6.9) and the daemon may register backing files (root); off: "
	     "every read through the daemon, verified as it is read"},
    {UINT("scrub_interval", scrub_interval_s, 0, 31536000), .def = 0, .meta = "SECONDS",
     .given = offsetof(struct sfs_options, scrub_interval_given),
     .help = "re-read every cached file with its checksums this often (a pass starts at "
	     "most this often, at scrub_rate), evicting those that fail; 0: never",
     .def_help = "86400 with cache_dir and passthrough=auto, else 0"},
    {SIZE("scrub_rate", scrub_rate, 1u << 20, 1ull << 44), .def = 256ull << 20, .meta = "BYTES",
     .given = offsetof(struct sfs_options, scrub_rate_given),
     .help = "the scrubber reads at most this many bytes per second, K/M/G suffixes"},
    {UINT("cache_idle", cache_idle_s, 1, 31536000), .def = 600, .meta = "SECONDS",
     .given = offsetof(struct sfs_options, cache_idle_given),
     .help = "cache_policy=auto: a dataset not read for this long is idle (its space goes to "
	     "any dataset); one not read for a twentieth of it is not being read now"},
    /* Generic mount(8) options that mount.fuse3 may pass on: accepted and
     * ignored (the mount is always read-only, nodev, nosuid). */
    IGNORED("ro"),
    IGNORED("rw"),
    IGNORED("defaults"),
    IGNORED("auto"),
    IGNORED("noauto"),
    IGNORED("_netdev"),
    IGNORED("nofail"),
    IGNORED("user"),
    IGNORED("nouser"),
    IGNORED("users"),
    IGNORED("dev"),
    IGNORED("nodev"),
    IGNORED("suid"),
    IGNORED("nosuid"),
    IGNORED("exec"),
    IGNORED("noexec"),
    IGNORED("async"),
    IGNORED("atime"),
    IGNORED("noatime"),
    IGNORED("relatime"),
    IGNORED("nodiratime"),
    {.name = "comment", .kind = SFS_OPT_IGNORED_VALUE},
};
#define N_OPTS (sizeof(opt_table) / sizeof(opt_table[0]))

const struct sfs_opt_def *sfs_options_table(size_t *n)
{
	*n = N_OPTS;
	return opt_table;
}

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

/* Write v into d's destination in o, at the destination's width. */
static void store(struct sfs_options *o, const struct sfs_opt_def *d, uint64_t v)
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

/* "a|b|c": the words of a CHOICE option, into buf. Returns buf. */
static const char *choice_list(const struct sfs_opt_def *d, char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (const struct sfs_opt_choice *c = d->choices; c->name && used < len; c++)
		used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? "|" : "", c->name);
	return buf;
}

/* Clear o and store every default of the table into it. */
static void set_defaults(struct sfs_options *o)
{
	memset(o, 0, sizeof(*o));
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct sfs_opt_def *d = &opt_table[i];
		if (d->kind == SFS_OPT_UINT || d->kind == SFS_OPT_SIZE || d->kind == SFS_OPT_CHOICE)
			store(o, d, d->def_fn ? d->def_fn() : d->def);
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

	for (size_t i = 0; i < N_OPTS; i++) {
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

/* The value of a CHOICE option: stores the matching word's value. Returns
 * 0, or -EINVAL with the reason in err. */
static int parse_choice(struct sfs_options *o, const struct sfs_opt_def *d, const char *val,
			char *err, size_t len)
{
	char words[256];

	if (!val && d->bare)
		val = d->bare;
	if (!val || !*val)
		return fail(err, len, "mount option '%s' needs a value (%s)", d->name,
			    choice_list(d, words, sizeof(words)));
	for (const struct sfs_opt_choice *c = d->choices; c->name; c++)
		if (!strcmp(c->name, val)) {
			store(o, d, (uint64_t)c->value);
			return 0;
		}
	return fail(err, len, "mount option '%s=%s': expected one of %s", d->name, val,
		    choice_list(d, words, sizeof(words)));
}

/* The value of a UINT or SIZE option, checked against its range. Returns
 * 0, or -EINVAL with the reason in err. */
static int parse_number(struct sfs_options *o, const struct sfs_opt_def *d, const char *val,
			char *err, size_t len)
{
	uint64_t v;

	if (!val || !*val)
		return fail(err, len, "mount option '%s' needs a value", d->name);
	if ((d->kind == SFS_OPT_UINT ? parse_uint(val, &v) : sfs_parse_size(val, &v)) < 0)
		return fail(err, len, "mount option '%s=%s': not a%s number", d->name, val,
			    d->kind == SFS_OPT_SIZE ? " size or" : "n unsigned");
	if (v < d->min || v > d->max)
		return fail(err, len, "mount option '%s=%s' is out of range (%llu..%llu)", d->name,
			    val, (unsigned long long)d->min, (unsigned long long)d->max);
	store(o, d, v);
	return 0;
}

/* The value (NULL: none given) of the table's option d. Returns 0, -ENOMEM,
 * or -EINVAL with the reason in err. */
static int parse_value(struct sfs_options *o, const struct sfs_opt_def *d, const char *val,
		       char *err, size_t len)
{
	switch (d->kind) {
	case SFS_OPT_IGNORED:
	case SFS_OPT_FLAG:
		if (val)
			return fail(err, len, "mount option '%s' takes no value", d->name);
		if (d->kind == SFS_OPT_FLAG)
			store(o, d, d->set_to);
		return 0;
	case SFS_OPT_IGNORED_VALUE:
		return 0;
	case SFS_OPT_STRING: {
		if (!val || !*val)
			return fail(err, len, "mount option '%s' needs a value", d->name);
		char **dst = (char **)((char *)o + d->offset);
		free(*dst);
		return (*dst = strdup(val)) ? 0 : -ENOMEM;
	}
	case SFS_OPT_CHOICE:
		return parse_choice(o, d, val, err, len);
	case SFS_OPT_UINT:
	case SFS_OPT_SIZE:
		return parse_number(o, d, val, err, len);
	}
	return -EINVAL;
}

/* One "name[=value]" item of -o (modified in place). Returns 0, -ENOMEM, or
 * -EINVAL with the reason in err. */
static int parse_one(struct sfs_options *o, char *item, char *err, size_t len)
{
	char *val = strchr(item, '=');

	if (val)
		*val++ = 0;
	if (!*item)
		return fail(err, len, "mount option '=%s' has no name", val ? val : "");
	if (!strncmp(item, "x-", 2))
		return 0; /* userspace mount hints (x-systemd.*) are not ours */
	for (size_t i = 0; i < N_OPTS; i++) {
		const struct sfs_opt_def *d = &opt_table[i];
		if (strcmp(d->name, item))
			continue;
		int rc = parse_value(o, d, val, err, len);
		if (rc == 0 && d->given)
			*(bool *)((char *)o + d->given) = true;
		return rc;
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

/* The command line after argv[0]: flags, -o lists, and the two positionals
 * into pos (*n_pos of them). Returns 0 (also for -h and -V, which stop it),
 * -ENOMEM, or -EINVAL with the reason in err. */
static int parse_args(int argc, char **argv, struct sfs_options *o, const char *pos[2], int *n_pos,
		      char *err, size_t len)
{
	int rc;

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
		} else if (*n_pos < 2) {
			pos[(*n_pos)++] = a;
		} else {
			return fail(err, len, "unexpected argument '%s'", a);
		}
	}
	return 0;
}

/* Checks and implications across options, once all are parsed. Returns 0,
 * or -EINVAL with the reason in err. */
static int finish_options(struct sfs_options *o, char *err, size_t len)
{
	if (o->cache_dir && o->cache_dir[0] != '/')
		return fail(err, len, "cache_dir '%s' must be an absolute path", o->cache_dir);
	if (o->mem_max < SFS_MEM_MAX_MIN)
		return fail(err, len,
			    "mem_max=%lluM is too small to run the daemon: the minimum is %lluM",
			    (unsigned long long)(o->mem_max >> 20),
			    (unsigned long long)(SFS_MEM_MAX_MIN >> 20));
	/* The bounds not given follow mem_max (their table defaults are the
	 * same rules applied to mem_max's default). */
	if (!o->prefetch_mem_given)
		o->prefetch_mem = mem_prefetch(o->mem_max);
	if (!o->inode_max_given)
		o->inode_max = (unsigned)mem_inodes(o->mem_max);
	if (!o->listing_max_given)
		o->listing_max = mem_names(o->mem_max);
	if (!o->namespace_max_given)
		o->namespace_max = mem_names(o->mem_max);
	/* Settings of a cache that is not there mean a forgotten cache_dir. */
	if (!o->cache_dir && (o->cache_size || o->cache_policy_given || o->cache_idle_given ||
			      (o->passthrough_given && o->passthrough) || o->scrub_interval_given ||
			      o->scrub_rate_given))
		return fail(err, len,
			    "%s without cache_dir: there is no cache to size or to manage",
			    o->cache_size			     ? "cache_size"
			    : o->cache_policy_given		     ? "cache_policy"
			    : o->cache_idle_given		     ? "cache_idle"
			    : o->passthrough_given && o->passthrough ? "passthrough"
			    : o->scrub_interval_given		     ? "scrub_interval"
								     : "scrub_rate");
	/* Passthrough reads are not checked as they are read: the scrubber
	 * is what re-reads them, daily unless told otherwise. */
	if (o->cache_dir && o->passthrough && !o->scrub_interval_given)
		o->scrub_interval_s = 86400;
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
	if (o->direct_io && o->page_cache_given && o->page_cache != SFS_PAGE_CACHE_NEVER)
		return fail(err, len, "direct_io and page_cache=%s contradict each other",
			    o->page_cache == SFS_PAGE_CACHE_AUTO ? "auto" : "always");
	if (o->direct_io)
		o->page_cache = SFS_PAGE_CACHE_NEVER;
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

int sfs_options_parse(int argc, char **argv, struct sfs_options *o, char *err, size_t len)
{
	const char *pos[2];
	int n_pos = 0, rc;

	set_defaults(o);
	if ((rc = parse_args(argc, argv, o, pos, &n_pos, err, len)) || o->help || o->version)
		return rc;
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
	return finish_options(o, err, len);
}

int sfs_export_join(const struct sfs_options *o, const char *rel, size_t rel_len, char *buf,
		    size_t size)
{
	const char *ex = o->export_path;
	size_t n = strlen(ex);

	while (n > 1 && ex[n - 1] == '/')
		n--;
	bool root = n == 1 && ex[0] == '/';
	return snprintf(buf, size, "%.*s%s%.*s", root && rel_len ? 0 : (int)n, ex,
			rel_len ? "/" : "", (int)rel_len, rel);
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

#define USAGE_WIDTH    79	    /* columns of --help */
#define USAGE_TEXT_COL 22	    /* where an option's text starts */
#define USAGE_FOREVER  (1ull << 50) /* a maximum this large is not worth showing */

/* Print text's words from column col on, wrapped at USAGE_WIDTH, each new
 * line indented to column indent; ends the line. */
static void print_wrapped(FILE *out, size_t col, size_t indent, const char *text)
{
	bool fresh = true; /* no word on this line yet */

	for (const char *w = text; *w;) {
		size_t n = strcspn(w, " ");
		if (!fresh && col + 1 + n > USAGE_WIDTH) {
			fprintf(out, "\n%*s", (int)indent, "");
			col = indent;
			fresh = true;
		}
		fprintf(out, "%s%.*s", fresh ? "" : " ", (int)n, w);
		col += n + !fresh;
		fresh = false;
		w += n;
		w += strspn(w, " ");
	}
	fputc('\n', out);
}

/* A number as --help shows it: sizes with the largest exact suffix. */
static const char *format_value(const struct sfs_opt_def *d, uint64_t v, char *buf, size_t len)
{
	static const char suffix[] = "KMGT";
	int k = 0;

	while (d->kind == SFS_OPT_SIZE && v && k < 4 && v % 1024 == 0) {
		v /= 1024;
		k++;
	}
	snprintf(buf, len, "%llu%.*s", (unsigned long long)v, k > 0, k > 0 ? &suffix[k - 1] : "");
	return buf;
}

/* The parenthesis closing an option's --help text: its range and default,
 * into buf (empty for a flag that is off by default). Returns buf. */
static const char *describe_default(const struct sfs_opt_def *d, char *buf, size_t len)
{
	char lo[32], hi[32], def[64] = "";

	buf[0] = 0;
	if (d->def_help)
		snprintf(def, sizeof(def), "default: %s", d->def_help);
	else if (d->kind == SFS_OPT_UINT || d->kind == SFS_OPT_SIZE)
		snprintf(def, sizeof(def), "default %s", format_value(d, d->def, lo, sizeof(lo)));
	else if (d->kind == SFS_OPT_CHOICE)
		for (const struct sfs_opt_choice *c = d->choices; c->name; c++)
			if ((uint64_t)c->value == d->def)
				snprintf(def, sizeof(def), "default %s", c->name);
	if (d->kind == SFS_OPT_FLAG && !d->set_to)
		snprintf(def, sizeof(def), "default"); /* stores what the field starts as */
	if ((d->kind == SFS_OPT_UINT || d->kind == SFS_OPT_SIZE) && d->max < USAGE_FOREVER)
		snprintf(buf, len, " (%s..%s, %s)", format_value(d, d->min, lo, sizeof(lo)),
			 format_value(d, d->max, hi, sizeof(hi)), def);
	else if (def[0])
		snprintf(buf, len, " (%s)", def);
	return buf;
}

/* One option of the table in --help: "  name=META  text (range, default)". */
static void usage_option(FILE *out, const struct sfs_opt_def *d)
{
	char label[300], text[1200], tail[160];

	if (d->kind == SFS_OPT_CHOICE) {
		char words[256];
		snprintf(label, sizeof(label), "  %s=%s", d->name,
			 choice_list(d, words, sizeof(words)));
	} else {
		snprintf(label, sizeof(label), "  %s%s%s", d->name, d->meta ? "=" : "",
			 d->meta ? d->meta : "");
	}
	snprintf(text, sizeof(text), "%s%s", d->help, describe_default(d, tail, sizeof(tail)));
	/* The text starts at USAGE_TEXT_COL, or two spaces after a longer label:
	 * every option's line is "  name" and a space or '=' (test_package.sh). */
	size_t n = strlen(label), col = n < USAGE_TEXT_COL ? USAGE_TEXT_COL : n + 2;
	fprintf(out, "%s%*s", label, (int)(col - n), "");
	print_wrapped(out, col, USAGE_TEXT_COL, text);
}

/* The generic mount(8) options the table accepts and ignores, as one
 * paragraph. */
static void usage_ignored(FILE *out)
{
	char text[1024];
	size_t used = (size_t)snprintf(text, sizeof(text),
				       "Generic mount options, accepted and "
				       "ignored (the mount is always "
				       "read-only):");

	for (size_t i = 0; i < N_OPTS && used < sizeof(text); i++)
		if (opt_table[i].kind == SFS_OPT_IGNORED ||
		    opt_table[i].kind == SFS_OPT_IGNORED_VALUE)
			used += (size_t)snprintf(
			    text + used, sizeof(text) - used, " %s%s,", opt_table[i].name,
			    opt_table[i].kind == SFS_OPT_IGNORED ? "" : "=...");
	if (used < sizeof(text))
		snprintf(text + used, sizeof(text) - used, " x-*");
	print_wrapped(out, 0, 0, text);
}

void sfs_options_usage(FILE *out, const char *prog)
{
	fprintf(out,
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
		"Mount options (-o):\n",
		prog);
	for (size_t i = 0; i < N_OPTS; i++)
		if (opt_table[i].help)
			usage_option(out, &opt_table[i]);
	usage_ignored(out);
	fputs("\n"
	      "Permissions: NFS sees only the uid=/gid= identity; the server's own checks\n"
	      "(and ACLs) apply to that identity, not to the local reader. The kernel check\n"
	      "covers mode bits, owner and group (supplementary groups included) as NFS\n"
	      "reports them, cached for actimeo; server-side ACLs are not evaluated per\n"
	      "reader.\n"
	      "\n"
	      "Statistics: MOUNTPOINT/.shardfs/stats (Prometheus text format), with reads\n"
	      "counted per job (Slurm job, Kubernetes pod or uid, from the reader's cgroup).\n",
	      out);
}
