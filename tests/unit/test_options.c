// SPDX-License-Identifier: Apache-2.0
/*
 * test_options — sfs_options_parse, sfs_parse_size and sfs_resolve_hosts.
 *
 * Linked against fs/options.c only. Every rejected command line must give a
 * non-empty one-line message that names the offending text. Host resolution
 * uses numeric addresses, "localhost" and a name under the reserved ".invalid"
 * TLD (RFC 6761), so no network is needed.
 */
#include "options.h"
#include "tap.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ARGS 32

/* argv = { "shardfs", args..., NULL }; err is cleared first. */
static int parse(const char *const *args, struct sfs_options *o, char *err, size_t len)
{
	char *argv[MAX_ARGS + 2];
	int argc = 0;

	argv[argc++] = "shardfs";
	for (; args[argc - 1]; argc++)
		argv[argc] = (char *)args[argc - 1];
	argv[argc] = NULL;
	memset(err, 0, len);
	return sfs_options_parse(argc, argv, o, err, len);
}

/* The table's row for name, or NULL. */
static const struct sfs_opt_def *table_row(const char *name)
{
	size_t n;
	const struct sfs_opt_def *t = sfs_options_table(&n);

	for (size_t i = 0; i < n; i++)
		if (!strcmp(t[i].name, name))
			return &t[i];
	return NULL;
}

/* The default the table declares for name (UINT, SIZE, CHOICE). */
static uint64_t table_default(const char *name)
{
	const struct sfs_opt_def *d = table_row(name);

	if (!d)
		abort();
	return d->def_fn ? d->def_fn() : d->def;
}

#define ARGV(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The command line must be rejected with -EINVAL and a one-line message
 * that contains needle. */
static void check_err(const char *what, const char *needle, const char *const *args)
{
	struct sfs_options o;
	char err[512];
	int rc = parse(args, &o, err, sizeof(err));

	ok(rc == -EINVAL && err[0] && !strchr(err, '\n') && strstr(err, needle),
	   "reject %s: message names '%s' (rc %d, \"%s\")", what, needle, rc, err);
	sfs_options_free(&o);
}
#define ERR(needle, ...) check_err(#__VA_ARGS__, needle, ARGV(__VA_ARGS__))

static uint64_t field(const struct sfs_options *o, size_t off, size_t width)
{
	const char *p = (const char *)o + off;

	switch (width) {
	case sizeof(bool):
		return *(const bool *)p;
	case sizeof(uint32_t):
		return *(const uint32_t *)p;
	case sizeof(uint64_t):
		return *(const uint64_t *)p;
	}
	abort();
}
#define FIELD(name) offsetof(struct sfs_options, name), sizeof(((struct sfs_options *)0)->name)

/* "-o opt" must parse and set the field to want. */
static void check_opt(const char *opt, size_t off, size_t width, uint64_t want)
{
	struct sfs_options o;
	char err[512];
	int rc = parse(ARGV("-o", opt, "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	uint64_t got = rc == 0 ? field(&o, off, width) : 0;

	ok(rc == 0 && got == want, "-o %s -> %llu (rc %d, got %llu, \"%s\")", opt,
	   (unsigned long long)want, rc, (unsigned long long)got, err);
	sfs_options_free(&o);
}

static void test_defaults(void)
{
	struct sfs_options o;
	char err[512];
	int rc = parse(ARGV("h1:/ifs", "/mnt"), &o, err, sizeof(err));

	ok(rc == 0, "plain SOURCE MOUNTPOINT parses (rc %d, \"%s\")", rc, err);
	ok(o.nconnect == 2 && o.nconnect == table_default("nconnect"), "default nconnect 2 (%u)",
	   o.nconnect);
	ok(o.rsize == 1048576 && o.rsize == table_default("rsize"), "default rsize 1 MiB (%u)",
	   o.rsize);
	ok(o.timeo_ds == 50 && o.timeo_ds == table_default("timeo"), "default timeo 50 (%u)",
	   o.timeo_ds);
	ok(o.retrans == 2 && o.retrans == table_default("retrans"), "default retrans 2 (%u)",
	   o.retrans);
	ok(!o.hard, "default soft");
	ok(o.actimeo_s == 60 && o.actimeo_s == table_default("actimeo"), "default actimeo 60 (%u)",
	   o.actimeo_s);
	ok(o.prefetch_mem == table_default("prefetch_mem"), "default prefetch_mem (%llu)",
	   (unsigned long long)o.prefetch_mem);
	ok(o.uid == getuid() && o.gid == getgid(), "default uid/gid are the caller's (%u/%u)",
	   o.uid, o.gid);
	ok(!o.foreground && !o.debug && !o.help && !o.version && !o.allow_other &&
	       !o.default_permissions && !o.direct_io && o.io_threads == 0,
	   "default flags off, io_threads 0");
	ok(o.page_cache == SFS_PAGE_CACHE_AUTO &&
	       table_default("page_cache") == SFS_PAGE_CACHE_AUTO,
	   "default page_cache=auto");
	ok(o.source && !strcmp(o.source, "h1:/ifs") && o.hosts && !strcmp(o.hosts, "h1") &&
	       o.export_path && !strcmp(o.export_path, "/ifs") && o.mountpoint &&
	       !strcmp(o.mountpoint, "/mnt"),
	   "source split into hosts 'h1' and export '/ifs', mountpoint '/mnt'");
	sfs_options_free(&o);
	ok(!o.source && !o.hosts && !o.export_path && !o.mountpoint, "sfs_options_free clears");
}

static void test_values(void)
{
	check_opt("nconnect=1", FIELD(nconnect), 1);
	check_opt("nconnect=16", FIELD(nconnect), 16);
	check_opt("nconnect=3,nconnect=5", FIELD(nconnect), 5);
	check_opt("rsize=4096", FIELD(rsize), 4096);
	check_opt("rsize=1048576", FIELD(rsize), 1048576);
	check_opt("rsize=1M", FIELD(rsize), 1048576);
	check_opt("rsize=64K", FIELD(rsize), 65536);
	check_opt("rsize=4097", FIELD(rsize), 4096);
	check_opt("rsize=8191", FIELD(rsize), 4096);
	check_opt("rsize=1048575", FIELD(rsize), 1044480);
	check_opt("timeo=1", FIELD(timeo_ds), 1);
	check_opt("timeo=6000", FIELD(timeo_ds), 6000);
	check_opt("retrans=1", FIELD(retrans), 1);
	check_opt("retrans=100", FIELD(retrans), 100);
	check_opt("actimeo=0", FIELD(actimeo_s), 0);
	check_opt("actimeo=86400", FIELD(actimeo_s), 86400);
	check_opt("uid=0", FIELD(uid), 0);
	check_opt("uid=4294967294", FIELD(uid), 4294967294u);
	check_opt("gid=1234", FIELD(gid), 1234);
	check_opt("allow_other", FIELD(allow_other), 1);
	check_opt("default_permissions", FIELD(default_permissions), 1);
	/* allow_other implies the kernel's permission check; only the explicit
	 * opt-out turns it off (issue 11). */
	check_opt("allow_other", FIELD(default_permissions), 1);
	check_opt("allow_other_unchecked", FIELD(allow_other), 1);
	check_opt("overmount", FIELD(overmount), 1);
	check_opt("ro", FIELD(overmount), 0);
	check_opt("allow_other_unchecked", FIELD(default_permissions), 0);
	check_opt("allow_other,allow_other_unchecked", FIELD(default_permissions), 0);
	check_opt("allow_other,default_permissions", FIELD(default_permissions), 1);
	check_opt("direct_io", FIELD(direct_io), 1);
	check_opt("direct_io", FIELD(page_cache), SFS_PAGE_CACHE_NEVER);
	check_opt("direct_io,page_cache=never", FIELD(page_cache), SFS_PAGE_CACHE_NEVER);
	check_opt("page_cache=never", FIELD(page_cache), SFS_PAGE_CACHE_NEVER);
	check_opt("page_cache=always", FIELD(page_cache), SFS_PAGE_CACHE_ALWAYS);
	check_opt("page_cache=auto", FIELD(page_cache), SFS_PAGE_CACHE_AUTO);
	check_opt("page_cache=never", FIELD(direct_io), 0);
	check_opt("io_threads=0", FIELD(io_threads), 0);
	check_opt("io_threads=64", FIELD(io_threads), 64);
	check_opt("max_threads=1", FIELD(max_threads), 1);
	check_opt("max_threads=1024", FIELD(max_threads), 1024);
	check_opt("prefetch_mem=1G", FIELD(prefetch_mem), 1ull << 30);
	check_opt("prefetch_mem=4M", FIELD(prefetch_mem), 4ull << 20);
	check_opt("prefetch_mem=4194304", FIELD(prefetch_mem), 4194304);
	check_opt("prefetch_mem=1T", FIELD(prefetch_mem), 1ull << 40);
	check_opt("hard", FIELD(hard), 1);
	check_opt("soft", FIELD(hard), 0);
	check_opt("hard,soft", FIELD(hard), 0);
	check_opt("soft,hard", FIELD(hard), 1);
}

static void test_value_errors(void)
{
	ERR("did you mean 'nconnect'", "-o", "nconect=2", "h1:/ifs", "/mnt");
	ERR("did you mean 'cache_policy'", "-o", "cache_dir=/c,cache_polcy=pin", "h1:/ifs", "/mnt");
	ERR("did you mean 'immutable'", "-o", "immutible", "h1:/ifs", "/mnt");
	ERR("cache_policy without cache_dir", "-o", "cache_policy=pin", "h1:/ifs", "/mnt");
	ERR("cache_size without cache_dir", "-o", "cache_size=1G", "h1:/ifs", "/mnt");
	ERR("nconnect=0", "-o", "nconnect=0", "h1:/ifs", "/mnt");
	ERR("nconnect=17", "-o", "nconnect=17", "h1:/ifs", "/mnt");
	ERR("rsize=4095", "-o", "rsize=4095", "h1:/ifs", "/mnt");
	ERR("rsize=1048577", "-o", "rsize=1048577", "h1:/ifs", "/mnt");
	ERR("rsize=2M", "-o", "rsize=2M", "h1:/ifs", "/mnt");
	ERR("timeo=0", "-o", "timeo=0", "h1:/ifs", "/mnt");
	ERR("timeo=6001", "-o", "timeo=6001", "h1:/ifs", "/mnt");
	ERR("retrans=0", "-o", "retrans=0", "h1:/ifs", "/mnt");
	ERR("retrans=101", "-o", "retrans=101", "h1:/ifs", "/mnt");
	ERR("actimeo=86401", "-o", "actimeo=86401", "h1:/ifs", "/mnt");
	ERR("uid=-1", "-o", "uid=-1", "h1:/ifs", "/mnt");
	ERR("uid=4294967295", "-o", "uid=4294967295", "h1:/ifs", "/mnt");
	ERR("gid=abc", "-o", "gid=abc", "h1:/ifs", "/mnt");
	ERR("io_threads=65", "-o", "io_threads=65", "h1:/ifs", "/mnt");
	ERR("max_threads=0", "-o", "max_threads=0", "h1:/ifs", "/mnt");
	ERR("prefetch_mem=2X", "-o", "prefetch_mem=2X", "h1:/ifs", "/mnt");
	ERR("prefetch_mem=3M", "-o", "prefetch_mem=3M", "h1:/ifs", "/mnt");
	ERR("prefetch_mem=2T", "-o", "prefetch_mem=2T", "h1:/ifs", "/mnt");
	ERR("nconnect=4x", "-o", "nconnect=4x", "h1:/ifs", "/mnt");
	ERR("nconnect= 4", "-o", "nconnect= 4", "h1:/ifs", "/mnt");
	ERR("nconnect=+4", "-o", "nconnect=+4", "h1:/ifs", "/mnt");
	ERR("nconnect=99999999999999999999999", "-o", "nconnect=99999999999999999999999", "h1:/ifs",
	    "/mnt");
	ERR("nconnect", "-o", "nconnect=", "h1:/ifs", "/mnt");
	ERR("nconnect", "-o", "nconnect", "h1:/ifs", "/mnt");
	ERR("soft", "-o", "soft=1", "h1:/ifs", "/mnt");
	ERR("hard", "-o", "hard=0", "h1:/ifs", "/mnt");
	ERR("allow_other", "-o", "allow_other=yes", "h1:/ifs", "/mnt");
	ERR("direct_io", "-o", "direct_io=1", "h1:/ifs", "/mnt");
	ERR("direct_io and page_cache=always contradict each other", "-o",
	    "direct_io,page_cache=always", "h1:/ifs", "/mnt");
	ERR("direct_io and page_cache=auto contradict each other", "-o",
	    "page_cache=auto,direct_io", "h1:/ifs", "/mnt");
	ERR("expected one of auto|always|never", "-o", "page_cache=sometimes", "h1:/ifs", "/mnt");
	ERR("contradict", "-o", "allow_other_unchecked,default_permissions", "h1:/ifs", "/mnt");
	ERR("allow_other_unchecked", "-o", "allow_other_unchecked=1", "h1:/ifs", "/mnt");
	ERR("ro", "-o", "ro=1", "h1:/ifs", "/mnt");
	ERR("bogus", "-o", "bogus", "h1:/ifs", "/mnt");
	ERR("foo", "-o", "foo=bar", "h1:/ifs", "/mnt");
	ERR("vers", "-o", "ro,vers=3", "h1:/ifs", "/mnt");
	/* a bad option in the second -o still fails the mount */
	ERR("bogus", "-o", "nconnect=4", "-o", "bogus", "h1:/ifs", "/mnt");
}

static void test_list_syntax(void)
{
	ERR(",nconnect=2", "-o", ",nconnect=2", "h1:/ifs", "/mnt");
	ERR("nconnect=2,,", "-o", "nconnect=2,,", "h1:/ifs", "/mnt");
	ERR("nconnect=2,", "-o", "nconnect=2,", "h1:/ifs", "/mnt");
	ERR("nconnect=2,,ro", "-o", "nconnect=2,,ro", "h1:/ifs", "/mnt");
	ERR("-o", "-o", "", "h1:/ifs", "/mnt");
	ERR("=5", "-o", "=5", "h1:/ifs", "/mnt");
	ERR("-o", "h1:/ifs", "/mnt", "-o");
	ERR("-x", "-x", "h1:/ifs", "/mnt");
	ERR("--foreground", "--foreground", "h1:/ifs", "/mnt");

	struct sfs_options o;
	char err[512];
	int rc;

	rc = parse(ARGV("-onconnect=4", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && o.nconnect == 4, "glued -onconnect=4 (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);

	rc = parse(ARGV("-o", "nconnect=4", "-o", "rsize=64K", "-otimeo=7", "h1:/ifs", "/mnt"), &o,
		   err, sizeof(err));
	ok(rc == 0 && o.nconnect == 4 && o.rsize == 65536 && o.timeo_ds == 7,
	   "several -o accumulate (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);

	rc = parse(ARGV("-o", "nconnect=4", "-o", "nconnect=8", "h1:/ifs", "/mnt"), &o, err,
		   sizeof(err));
	ok(rc == 0 && o.nconnect == 8, "later -o wins (%u)", o.nconnect);
	sfs_options_free(&o);

	rc = parse(ARGV("-o", "hard", "-o", "soft", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && !o.hard, "-o hard -o soft: soft wins");
	sfs_options_free(&o);

	/* mount.fuse3 style: options after the positionals */
	rc = parse(ARGV("h1,h2:/ifs", "/mnt/x", "-o", "ro,nconnect=3,_netdev"), &o, err,
		   sizeof(err));
	ok(rc == 0 && o.nconnect == 3 && !strcmp(o.hosts, "h1,h2") &&
	       !strcmp(o.mountpoint, "/mnt/x"),
	   "options after positionals (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);

	rc = parse(ARGV("-o", "nconnect=3", "h1:/ifs", "-o", "timeo=9", "/mnt", "-f"), &o, err,
		   sizeof(err));
	ok(rc == 0 && o.nconnect == 3 && o.timeo_ds == 9 && o.foreground &&
	       !strcmp(o.export_path, "/ifs") && !strcmp(o.mountpoint, "/mnt"),
	   "options between positionals (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);

	rc = parse(ARGV("-o",
			"ro,rw,_netdev,nofail,defaults,x-systemd.automount,comment=foo,noauto,auto,"
			"user,nouser,users,dev,nodev,suid,nosuid,exec,noexec,async,atime,noatime,"
			"relatime,nodiratime,x-systemd.requires=network-online.target,comment",
			"h1:/ifs", "/mnt"),
		   &o, err, sizeof(err));
	ok(rc == 0 && o.nconnect == table_default("nconnect") &&
	       o.rsize == table_default("rsize") && !o.hard && !o.allow_other,
	   "generic mount options accepted and ignored (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);

	rc = parse(ARGV("-f", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && o.foreground && !o.debug, "-f: foreground");
	sfs_options_free(&o);
	rc = parse(ARGV("-d", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && o.foreground && o.debug, "-d: debug implies foreground");
	sfs_options_free(&o);
	rc = parse(ARGV("-s", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0, "-s accepted (rc %d, \"%s\")", rc, err);
	sfs_options_free(&o);
}

static void check_source(const char *src, const char *hosts, const char *export_path)
{
	struct sfs_options o;
	char err[512];
	int rc = parse(ARGV(src, "/mnt"), &o, err, sizeof(err));

	ok(rc == 0 && !strcmp(o.source, src) && !strcmp(o.hosts, hosts) &&
	       !strcmp(o.export_path, export_path),
	   "source '%s' -> hosts '%s', export '%s' (rc %d, \"%s\")", src, hosts, export_path, rc,
	   err);
	sfs_options_free(&o);
}

static void test_sources(void)
{
	check_source("h1,h2:/ifs", "h1,h2", "/ifs");
	check_source("10.0.0.1:/", "10.0.0.1", "/");
	check_source("node-1.example.com,10.1.2.3:/ifs/data", "node-1.example.com,10.1.2.3",
		     "/ifs/data");
	ERR(":/ifs", ":/ifs", "/mnt");
	ERR("h1", "h1", "/mnt");
	ERR("h1:ifs", "h1:ifs", "/mnt");
	ERR("source", "", "/mnt");
	ERR("h1,,h2:/ifs", "h1,,h2:/ifs", "/mnt");
	ERR(",h1:/ifs", ",h1:/ifs", "/mnt");
	ERR("h1,:/ifs", "h1,:/ifs", "/mnt");
	ERR("h 1:/x", "h 1:/x", "/mnt");
	ERR("h1;rm:/x", "h1;rm:/x", "/mnt");
	ERR("MOUNTPOINT", "h1:/ifs");
	ERR("MOUNTPOINT", "-f");
	ERR("mountpoint", "h1:/ifs", "");
	ERR("extra", "h1:/ifs", "/mnt", "extra");

	struct sfs_options o;
	char err[512];
	int rc;

	rc = parse(ARGV("-h"), &o, err, sizeof(err));
	ok(rc == 0 && o.help, "-h alone: help");
	sfs_options_free(&o);
	rc = parse(ARGV("h1:/ifs", "/mnt", "--help"), &o, err, sizeof(err));
	ok(rc == 0 && o.help, "--help after positionals: help");
	sfs_options_free(&o);
	rc = parse(ARGV("-V"), &o, err, sizeof(err));
	ok(rc == 0 && o.version && !o.help, "-V: version");
	sfs_options_free(&o);
	rc = parse(ARGV("--version"), &o, err, sizeof(err));
	ok(rc == 0 && o.version, "--version: version");
	sfs_options_free(&o);

	char *big = malloc(2100);
	memcpy(big, "h1:/", 4);
	memset(big + 4, 'a', 2000);
	big[2004] = 0;
	ERR("too long", big, "/mnt");
	free(big);
}

static void test_parse_size(void)
{
	static const struct {
		const char *s;
		uint64_t want;
	} good[] = {
	    {"0", 0},
	    {"0K", 0},
	    {"123", 123},
	    {"64K", 64ull << 10},
	    {"64k", 64ull << 10},
	    {"256M", 256ull << 20},
	    {"256m", 256ull << 20},
	    {"2G", 2ull << 30},
	    {"1T", 1ull << 40},
	    {"16777215T", 16777215ull << 40},
	    {"17179869183G", 17179869183ull << 30},
	    {"18446744073709551615", UINT64_MAX},
	};
	static const char *const bad[] = {
	    "",
	    "K",
	    "-1",
	    "+1",
	    " 1",
	    "1 ",
	    "1.5G",
	    "1KB",
	    "1P",
	    "0x10",
	    "12a",
	    "16777216T",
	    "17179869184G",
	    "18446744073709551616",
	    "99999999999999999999999K",
	};

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		uint64_t v = 42;
		int rc = sfs_parse_size(good[i].s, &v);
		ok(rc == 0 && v == good[i].want, "sfs_parse_size(\"%s\") = %llu (rc %d, got %llu)",
		   good[i].s, (unsigned long long)good[i].want, rc, (unsigned long long)v);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 42;
		int rc = sfs_parse_size(bad[i], &v);
		ok(rc == -EINVAL, "sfs_parse_size(\"%s\") rejected (rc %d, got %llu)", bad[i], rc,
		   (unsigned long long)v);
	}
	uint64_t v;
	ok(sfs_parse_size(NULL, &v) == -EINVAL, "sfs_parse_size(NULL) rejected");
}

static bool has_addr(char **addrs, int n, const char *a)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(addrs[i], a))
			return true;
	return false;
}

static void test_resolve(void)
{
	char **addrs = NULL, err[512] = "";
	int n;

	n = sfs_resolve_hosts("10.0.0.1,10.0.0.2,10.0.0.1,10.0.0.3,10.0.0.2", &addrs, err,
			      sizeof(err));
	ok(n == 3 && !strcmp(addrs[0], "10.0.0.1") && !strcmp(addrs[1], "10.0.0.2") &&
	       !strcmp(addrs[2], "10.0.0.3"),
	   "numeric list deduplicated in order (n %d, \"%s\")", n, err);
	if (n > 0)
		sfs_addrs_free(addrs, (size_t)n);

	addrs = NULL;
	n = sfs_resolve_hosts("localhost", &addrs, err, sizeof(err));
	ok(n >= 1 && has_addr(addrs, n, "127.0.0.1"),
	   "localhost contributes 127.0.0.1 (n %d, \"%s\")", n, err);
	if (n > 0)
		sfs_addrs_free(addrs, (size_t)n);

	addrs = NULL;
	n = sfs_resolve_hosts("127.0.0.1,localhost,127.0.0.1", &addrs, err, sizeof(err));
	ok(n == 1 && !strcmp(addrs[0], "127.0.0.1"),
	   "a name resolving to an address already listed adds nothing (n %d)", n);
	if (n > 0)
		sfs_addrs_free(addrs, (size_t)n);

	addrs = NULL;
	memset(err, 0, sizeof(err));
	n = sfs_resolve_hosts("no-such-host.invalid", &addrs, err, sizeof(err));
	ok(n < 0 && err[0] && !strchr(err, '\n') && strstr(err, "no-such-host.invalid"),
	   "unresolvable name fails naming it (n %d, \"%s\")", n, err);
	if (n > 0)
		sfs_addrs_free(addrs, (size_t)n);

	/* the addresses collected before the bad name are freed (ASan checks) */
	addrs = NULL;
	memset(err, 0, sizeof(err));
	n = sfs_resolve_hosts("10.0.0.1,localhost,no-such-host.invalid,10.0.0.2", &addrs, err,
			      sizeof(err));
	ok(n < 0 && strstr(err, "no-such-host.invalid"),
	   "bad name after good ones fails naming it (n %d, \"%s\")", n, err);
	if (n > 0)
		sfs_addrs_free(addrs, (size_t)n);
}

/* immutable, noimmutable, namespace_max, and .snapshot/ paths (issue 10). */
static void check_immutable(const char *src, const char *opts, bool want)
{
	struct sfs_options o;
	char err[512];
	int rc = opts ? parse(ARGV("-o", opts, src, "/mnt"), &o, err, sizeof(err))
		      : parse(ARGV(src, "/mnt"), &o, err, sizeof(err));

	ok(rc == 0 && o.immutable == want, "%s -o %s: immutable %d (rc %d, \"%s\")", src,
	   opts ? opts : "(none)", want, rc, err);
	sfs_options_free(&o);
}

/* mem_max: the bounds not given follow it; given ones win; too small is
 * refused with the minimum (issue 38). */
static void test_mem_max(void)
{
	struct sfs_options o;
	char err[512];
	uint64_t def = table_default("mem_max"), mib = 1ull << 20;

	ok(def >= (256ull << 20) && def <= (8ull << 30), "default mem_max %lluM within 256M..8G",
	   (unsigned long long)(def >> 20));
	int rc = parse(ARGV("h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && o.mem_max == def && o.prefetch_mem == (def / 6 & ~(mib - 1)) &&
	       o.inode_max == def / 4 / 460 && o.listing_max == def / 8 / 200 &&
	       o.namespace_max == def / 8 / 200,
	   "defaults derived from mem_max: prefetch_mem %llu, inode_max %u, listing_max %llu",
	   (unsigned long long)o.prefetch_mem, o.inode_max, (unsigned long long)o.listing_max);
	sfs_options_free(&o);
	rc = parse(ARGV("-o", "mem_max=128M", "h1:/ifs", "/mnt"), &o, err, sizeof(err));
	ok(rc == 0 && o.prefetch_mem == 21 * mib && o.inode_max == (128u << 20) / 4 / 460 &&
	       o.listing_max == (128ull << 20) / 8 / 200,
	   "mem_max=128M: prefetch_mem 21M, inode_max %u, listing_max %llu", o.inode_max,
	   (unsigned long long)o.listing_max);
	sfs_options_free(&o);
	rc = parse(ARGV("-o", "mem_max=128M,prefetch_mem=1G,inode_max=5", "h1:/ifs", "/mnt"), &o,
		   err, sizeof(err));
	ok(rc == 0 && o.prefetch_mem == 1ull << 30 && o.inode_max == 5 &&
	       o.listing_max == (128ull << 20) / 8 / 200,
	   "given bounds win over mem_max, the others follow it");
	sfs_options_free(&o);
	ERR("mem_max=32M is too small to run the daemon: the minimum is 64M", "-o", "mem_max=32M",
	    "h1:/ifs", "/mnt");
	check_opt("mem_max=64M", FIELD(mem_max), 64ull << 20);
}

static void test_immutable(void)
{
	struct sfs_options o;
	char err[512];

	ok(parse(ARGV("h1:/ifs", "/mnt"), &o, err, sizeof(err)) == 0 && !o.immutable &&
	       o.namespace_max == table_default("namespace_max"),
	   "default: not immutable, namespace_max %llu",
	   (unsigned long long)table_default("namespace_max"));
	sfs_options_free(&o);
	check_immutable("h1:/ifs", "immutable", true);
	check_immutable("h1:/ifs", "immutable,noimmutable", false);
	check_immutable("h1:/ifs/data/.snapshot/daily/train", NULL, true);
	check_immutable("h1:/ifs/data/.snapshot", NULL, true);
	check_immutable("h1:/ifs/data/.snapshot/daily", "noimmutable", false);
	check_immutable("h1:/ifs/data/.snapshots/x", NULL, false);
	check_immutable("h1:/ifs/data/x.snapshot/y", NULL, false);
	check_opt("namespace_max=1000", FIELD(namespace_max), 1000);
	check_opt("namespace_max=50000000", FIELD(namespace_max), 50000000);
	ERR("namespace_max", "-o", "namespace_max=10", "h1:/ifs", "/mnt");
	ERR("immutable", "-o", "immutable=1", "h1:/ifs", "/mnt");
}

/* Every row of the table: a help text and a default that parses back into
 * range, applied by a plain parse; every choice maps to its enum. */
static void test_table(void)
{
	size_t n;
	const struct sfs_opt_def *t = sfs_options_table(&n);
	struct sfs_options o;
	char err[512];
	int rc = parse(ARGV("h1:/ifs", "/mnt"), &o, err, sizeof(err));

	ok(rc == 0 && n > 20, "table of %zu rows; plain parse (rc %d)", n, rc);
	for (size_t i = 0; i < n; i++) {
		const struct sfs_opt_def *d = &t[i];
		bool ignored = d->kind == SFS_OPT_IGNORED || d->kind == SFS_OPT_IGNORED_VALUE;
		bool number = d->kind == SFS_OPT_UINT || d->kind == SFS_OPT_SIZE;
		uint64_t def = d->def_fn ? d->def_fn() : d->def;
		bool has_def = true, applied = true;
		if (number)
			has_def = (def >= d->min && def <= d->max) || d->def_help;
		if (d->kind == SFS_OPT_STRING)
			has_def =
			    d->def_help != NULL; /* starts NULL; the help says what that means */
		if (d->kind == SFS_OPT_CHOICE) {
			has_def = false;
			for (const struct sfs_opt_choice *c = d->choices; c->name; c++)
				has_def |= (uint64_t)c->value == def;
		}
		if (number || d->kind == SFS_OPT_CHOICE || d->kind == SFS_OPT_FLAG)
			applied = rc == 0 && field(&o, d->offset, d->width) ==
						 (d->kind == SFS_OPT_FLAG ? 0 : def);
		ok(d->name && d->name[0] && (ignored || (d->help && d->help[0])) && has_def &&
		       applied,
		   "table row '%s': help text, a default (%llu) in range or in words, applied",
		   d->name, (unsigned long long)def);
	}
	sfs_options_free(&o);
	ok(table_default("prefetch") == SFS_PREFETCH_SHARD &&
	       table_default("cache_policy") == SFS_STORE_AUTO &&
	       table_default("cache_idle") == 600,
	   "default prefetch=shard, cache_policy=auto, cache_idle=600");
	check_opt("prefetch=readahead", FIELD(prefetch), SFS_PREFETCH_READAHEAD);
	check_opt("prefetch=shard", FIELD(prefetch), SFS_PREFETCH_SHARD);
	check_opt("prefetch=off", FIELD(prefetch), SFS_PREFETCH_OFF);
	check_opt("cache_dir=/c,cache_policy=pin", FIELD(cache_policy), SFS_STORE_PIN);
	check_opt("cache_dir=/c,cache_policy=lru", FIELD(cache_policy), SFS_STORE_LRU);
	check_opt("cache_dir=/c,cache_policy=auto", FIELD(cache_policy), SFS_STORE_AUTO);
	check_opt("cache_dir=/c,cache_idle=30", FIELD(cache_idle_s), 30);
	check_opt("cache_dir=/c,cache_size=16M", FIELD(cache_size), 16ull << 20);
	check_opt("prefetch_max=0", FIELD(prefetch_max), 0);
	ERR("expected one of readahead|shard|off", "-o", "prefetch=x", "h1:/ifs", "/mnt");
	ERR("'prefetch' needs a value (readahead|shard|off)", "-o", "prefetch", "h1:/ifs", "/mnt");
	ERR("expected one of auto|lru|pin", "-o", "cache_dir=/c,cache_policy=mru", "h1:/ifs",
	    "/mnt");
	ERR("cache_idle without cache_dir", "-o", "cache_idle=30", "h1:/ifs", "/mnt");
	ERR("'cache_idle=0'", "-o", "cache_dir=/c,cache_idle=0", "h1:/ifs", "/mnt");
	ERR("must be an absolute path", "-o", "cache_dir=c", "h1:/ifs", "/mnt");
}

/* --help is generated from the table: every option has its line
 * ("  name" then '=' or a space, as test_package.sh reads it), every
 * ignored generic option is named, and every default is shown. */
static void test_usage(void)
{
	char *text = NULL;
	size_t text_len = 0, n;
	FILE *f = open_memstream(&text, &text_len);
	const struct sfs_opt_def *t = sfs_options_table(&n);

	sfs_options_usage(f, "shardfs");
	fclose(f);
	for (size_t i = 0; i < n; i++) {
		char line[128], word[128];
		bool listed;
		if (t[i].kind == SFS_OPT_IGNORED || t[i].kind == SFS_OPT_IGNORED_VALUE) {
			/* a word of the generic paragraph: " ro," or "\nro," */
			size_t len = strlen(t[i].name);
			listed = false;
			for (const char *p = text; (p = strstr(p + 1, t[i].name));)
				listed |= (p[-1] == ' ' || p[-1] == '\n') &&
					  (p[len] == ',' || p[len] == '=');
		} else {
			snprintf(line, sizeof(line), "\n  %s=", t[i].name);
			snprintf(word, sizeof(word), "\n  %s ", t[i].name);
			listed = strstr(text, line) || strstr(text, word);
		}
		ok(listed, "--help lists '%s'", t[i].name);
	}
	ok(strstr(text, "(1..16, default 2)") && strstr(text, "(4M..1T, default: mem_max / 6)") &&
	       strstr(text, "(default shard)") && strstr(text, "(default auto)") &&
	       strstr(text, "default: the mounting user's") && strstr(text, "(default)"),
	   "--help shows ranges and defaults from the table");
	bool narrow = true;
	for (const char *l = text; *l; l += strcspn(l, "\n") + (l[strcspn(l, "\n")] != 0))
		narrow &= strcspn(l, "\n") <= 80;
	ok(narrow, "--help lines fit 80 columns");
	free(text);
}

/* Server paths of datasets and evictions: one '/' between the export and
 * the rest, whatever '/' the export ends with, and none doubled at "/". */
static void test_export_join(void)
{
	static const struct {
		const char *source, *rel, *want;
	} cases[] = {
	    {"h1:/ifs", "data", "/ifs/data"},
	    {"h1:/ifs/", "data", "/ifs/data"},
	    {"h1:/ifs//", "", "/ifs"},
	    {"h1:/", "data", "/data"},
	    {"h1:/", "", "/"},
	    {"h1:/ifs/a", "b/c", "/ifs/a/b/c"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sfs_options o;
		char err[512], buf[64] = "";
		int rc = parse(ARGV(cases[i].source, "/mnt"), &o, err, sizeof(err));
		if (rc == 0)
			sfs_export_join(&o, cases[i].rel, strlen(cases[i].rel), buf, sizeof(buf));
		ok(rc == 0 && !strcmp(buf, cases[i].want),
		   "export join: %s + '%s' = '%s' (want '%s')", cases[i].source, cases[i].rel, buf,
		   cases[i].want);
		if (rc == 0)
			sfs_options_free(&o);
	}
}

int main(void)
{
	test_table();
	test_usage();
	test_immutable();
	test_mem_max();
	test_defaults();
	test_values();
	test_value_errors();
	test_list_syntax();
	test_sources();
	test_parse_size();
	test_resolve();
	test_export_join();
	return tap_done();
}
