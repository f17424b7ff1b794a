// SPDX-License-Identifier: Apache-2.0
/*
 * test_hints — fs/hints/hints.c with its wing (hint_list.c, hint_resolve.c):
 * a list's items resolved as its sender would open them and fetched ahead
 * within the window, held until read; the items skipped (missing, not a
 * file, denied, cached); a list cancelled with items held unread (waste);
 * a reader that opens an item ahead of the fetch (the fetch skips there);
 * chunks that land later (the fetch observer), for more items than
 * fetchers at once; the datasets named; the
 * lookups that miss a listing starting it; refusals.
 *
 * Linked with the hints wing (sfs_hints) and the log. Its neighbours are
 * faked here: prefetch (files held and fetched ahead; the observers the
 * test calls as prefetch would), the origin (LOOKUP and GETATTR of a small
 * tree), the namespace and listings, the inode table's root, the store's
 * datasets and the export path join (options). The fetchers are real
 * threads: the test waits for the counters it checks, never for a time.
 */
#include "../../fs/hints/hints.h"
#include "../../fs/inode/inode.h"
#include "../../fs/options.h"
#include "../../cache/namespace/listing.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

/* --- the tree the fake origin serves ------------------------------------------ */

enum { ROOT = 1, DIR_D, DIR_SECRET, TOP, SECRET_X, CACHED, SLOW, FILE0 };
#define N_FILES	   40
#define FILEID0	   1000 /* d/fNNN has fileid FILEID0 + NNN */
#define FILE_BYTES 4096

struct node {
	int id, parent;
	char name[16];
	struct sfs_attr a;
};
static struct node tree[FILE0 + N_FILES];
static int n_nodes;

static void add(int id, int parent, const char *name, uint32_t type, uint32_t mode, uint32_t uid,
		uint64_t fileid, uint64_t size)
{
	struct node *n = &tree[n_nodes++];
	*n = (struct node){.id = id, .parent = parent};
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->a = (struct sfs_attr){
	    .type = type, .mode = mode, .uid = uid, .fsid = 9, .fileid = fileid, .size = size};
}

static void make_tree(void)
{
	add(ROOT, 0, "", S_IFDIR, 0755, 0, 1, 0);
	add(DIR_D, ROOT, "d", S_IFDIR, 0755, 0, 2, 0);
	add(DIR_SECRET, ROOT, "secret", S_IFDIR, 0700, 0, 3, 0);
	add(TOP, ROOT, "top.bin", S_IFREG, 0644, 0, 4, 3 * FILE_BYTES);
	add(SECRET_X, DIR_SECRET, "x", S_IFREG, 0644, 0, 5, FILE_BYTES);
	add(CACHED, DIR_D, "cached", S_IFREG, 0644, 0, 6, FILE_BYTES);
	add(SLOW, DIR_D, "slow", S_IFREG, 0644, 0, 7, 2 * FILE_BYTES);
	for (int i = 0; i < N_FILES; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%03d", i);
		add(FILE0 + i, DIR_D, name, S_IFREG, 0644, 0, FILEID0 + (uint64_t)i, FILE_BYTES);
	}
}

static struct sfs_fh fh_of(int id) { return (struct sfs_fh){.len = 1, .data = {(uint8_t)id}}; }

static struct node *node_by_id(int id)
{
	for (int k = 0; k < n_nodes; k++)
		if (tree[k].id == id)
			return &tree[k];
	return NULL;
}

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER; /* the fakes' state below */
static char lookups[256][16];				      /* names looked up, in order */
static unsigned n_lookups;

static char origin_marker, prefetch_marker, store_marker, listings_marker, inodes_marker;

int sfs_origin_call(sfs_origin *pool, struct sfs_origin_req *r)
{
	if (pool != (sfs_origin *)&origin_marker)
		return -EFAULT;
	if (r->op == SFS_ORIGIN_GETATTR) {
		struct node *n = node_by_id(r->fh.data[0]);
		if (!n)
			return -ESTALE;
		r->attr = n->a;
		r->have_attr = true;
		return 0;
	}
	if (r->op != SFS_ORIGIN_LOOKUP)
		return -ENOTSUP;
	pthread_mutex_lock(&fake_lock);
	if (n_lookups < 256)
		snprintf(lookups[n_lookups++], sizeof(lookups[0]), "%s", r->name);
	pthread_mutex_unlock(&fake_lock);
	for (int k = 0; k < n_nodes; k++)
		if (tree[k].parent == r->fh.data[0] && !strcmp(tree[k].name, r->name)) {
			r->out_fh = fh_of(tree[k].id);
			r->attr = tree[k].a;
			r->have_attr = tree[k].id != TOP; /* top.bin: a GETATTR follows */
			return 0;
		}
	return -ENOENT;
}

static bool looked_up(const char *name)
{
	bool seen = false;
	pthread_mutex_lock(&fake_lock);
	for (unsigned k = 0; k < n_lookups && !seen; k++)
		seen = !strcmp(lookups[k], name);
	pthread_mutex_unlock(&fake_lock);
	return seen;
}

/* --- the inode table's root --------------------------------------------------- */

static struct sfs_inode root_inode;

struct sfs_inode *sfs_inode_root(sfs_inode_table *t)
{
	return t == (sfs_inode_table *)&inodes_marker ? &root_inode : NULL;
}
void sfs_inode_lock(const struct sfs_inode *ino) { (void)ino; }
void sfs_inode_unlock(const struct sfs_inode *ino) { (void)ino; }
void sfs_inode_attr_get(const struct sfs_inode *ino, struct sfs_attr *out)
{
	(void)ino;
	*out = node_by_id(ROOT)->a;
}
struct sfs_fh sfs_inode_fh(const struct sfs_inode *ino)
{
	(void)ino;
	return fh_of(ROOT);
}

/* --- namespace and listings, store, options ------------------------------------ */

static bool listings_on;	   /* sfs_ns_lookup_listed misses and wants a listing */
static struct sfs_fh listed_fh[8]; /* what sfs_listing_missed started */
static uint64_t listed_key[8];
static unsigned n_listed;

int sfs_ns_lookup(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
		  struct sfs_attr *a)
{
	return -ENODATA; /* the tests run without a namespace */
}
int sfs_ns_lookup_listed(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
			 struct sfs_attr *a, uint64_t *listed_ms)
{
	return -ENODATA;
}
bool sfs_ns_listing_wanted(sfs_ns *ns, uint64_t dir)
{
	return ns == (sfs_ns *)&listings_marker && listings_on;
}
int sfs_ns_add(sfs_ns *ns, uint64_t parent, const char *name, const struct sfs_fh *fh,
	       const struct sfs_attr *a)
{
	return 0;
}

/* The listing module (cache/namespace/listing.h), faked: a miss in a
 * directory of the listings whose listing is wanted starts one. */
void sfs_listing_missed(sfs_ns *ls, sfs_origin *origin, const struct sfs_fh *dir, uint64_t key)
{
	(void)origin;
	if (!sfs_ns_listing_wanted(ls, key))
		return;
	pthread_mutex_lock(&fake_lock);
	if (n_listed < 8) {
		listed_fh[n_listed] = *dir;
		listed_key[n_listed++] = key;
	}
	pthread_mutex_unlock(&fake_lock);
}

static char dataset_names[8][64];
static unsigned n_datasets;

uint32_t sfs_store_dataset(sfs_store *store, const char *name)
{
	if (store != (sfs_store *)&store_marker)
		return 0;
	pthread_mutex_lock(&fake_lock);
	unsigned k = 0;
	while (k < n_datasets && strcmp(dataset_names[k], name))
		k++;
	if (k == n_datasets && k < 8)
		snprintf(dataset_names[n_datasets++], sizeof(dataset_names[0]), "%s", name);
	pthread_mutex_unlock(&fake_lock);
	return 100 + k;
}

int sfs_export_join(const struct sfs_options *o, const char *rel, size_t rel_len, char *buf,
		    size_t size)
{
	return snprintf(buf, size, "%s/%.*s", o->export_path, (int)rel_len, rel);
}

/* --- prefetch: files held and fetched ahead ------------------------------------ */

struct sfs_pf_file {
	uint64_t fsid, fileid;
	uint32_t dataset;
	int refs, holds; /* protected by fake_lock */
	bool busy;	 /* protected by fake_lock: its chunks are still being fetched */
	bool opened;	 /* protected by fake_lock: open_version was called for it */
};
static struct sfs_pf_file pf_files[FILE0 + N_FILES];

static sfs_pf_read_observer read_obs;
static sfs_pf_fetch_observer fetch_obs;
static void *obs_arg;
static unsigned window_conf;	 /* the list's window, for the check below */
static unsigned reads_done;	 /* atomic: items the test's reader has read */
static unsigned window_breaches; /* atomic: a file opened a window or more past the reads */

static struct sfs_pf_file *pf_of_fileid(uint64_t fileid)
{
	for (int k = 0; k < n_nodes; k++)
		if (tree[k].a.fileid == fileid)
			return &pf_files[tree[k].id];
	return NULL;
}

void sfs_prefetch_set_observers(sfs_prefetch *pf, sfs_pf_read_observer read,
				sfs_pf_fetch_observer fetched, void *arg)
{
	if (pf == (sfs_prefetch *)&prefetch_marker) {
		read_obs = read;
		fetch_obs = fetched;
		obs_arg = arg;
	}
}

int sfs_pf_file_open_version(sfs_prefetch *pf, const struct sfs_fh *fh,
			     const struct sfs_file_version *v, sfs_pf_file **out)
{
	struct sfs_pf_file *f = pf_of_fileid(v->fileid);

	if (pf != (sfs_prefetch *)&prefetch_marker || !f)
		return -EIO;
	if (v->fileid >= FILEID0 &&
	    v->fileid - FILEID0 >= __atomic_load_n(&reads_done, __ATOMIC_SEQ_CST) + window_conf)
		__atomic_fetch_add(&window_breaches, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&fake_lock);
	f->fsid = v->fsid;
	f->fileid = v->fileid;
	f->dataset = v->dataset;
	f->refs++;
	f->opened = true;
	pthread_mutex_unlock(&fake_lock);
	*out = f;
	return 0;
}

void sfs_pf_file_unref(sfs_pf_file *f)
{
	pthread_mutex_lock(&fake_lock);
	f->refs--;
	pthread_mutex_unlock(&fake_lock);
}

void sfs_pf_file_hint_hold(sfs_pf_file *f)
{
	pthread_mutex_lock(&fake_lock);
	f->holds++;
	f->refs++;
	pthread_mutex_unlock(&fake_lock);
}

void sfs_pf_file_hint_release(sfs_pf_file *f)
{
	pthread_mutex_lock(&fake_lock);
	f->holds--;
	f->refs--;
	pthread_mutex_unlock(&fake_lock);
}

void sfs_pf_file_id(const sfs_pf_file *f, uint64_t *fsid, uint64_t *fileid)
{
	*fsid = f->fsid;
	*fileid = f->fileid;
}

bool sfs_pf_file_range_busy(sfs_pf_file *f, uint64_t off, uint64_t end)
{
	pthread_mutex_lock(&fake_lock);
	bool busy = f->busy;
	pthread_mutex_unlock(&fake_lock);
	return busy;
}

/* Every fetch lands only when the test says so (test_flight_full). */
static bool all_slow;
/* The gate (test_flight_full): fetches after the first gate_free wait
 * until gate_n of them are waiting together, then all go on. */
static unsigned gate_free, gate_n, gate_calls, gate_waiting;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;

/* Called with fake_lock held. Returns whether gate_n fetches met. */
static bool gate_pass(void)
{
	if (!gate_n || ++gate_calls <= gate_free)
		return true;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10; /* a generous bound: a hang becomes a failure */
	gate_waiting++;
	pthread_cond_broadcast(&gate_cond);
	while (gate_waiting < gate_n)
		if (pthread_cond_timedwait(&gate_cond, &fake_lock, &until) == ETIMEDOUT)
			return false;
	return true;
}

/* "cached" is in the store; "slow" lands only when the test says so. */
int sfs_pf_file_fetch_ahead(sfs_pf_file *f, uint64_t off, uint64_t end, unsigned wait_ms,
			    struct sfs_pf_ahead *out)
{
	bool cached = f == &pf_files[CACHED];

	*out = (struct sfs_pf_ahead){.cached = cached, .started_bytes = cached ? 0 : end - off};
	pthread_mutex_lock(&fake_lock);
	gate_pass();
	f->busy = f == &pf_files[SLOW] || all_slow;
	out->busy = f->busy;
	pthread_mutex_unlock(&fake_lock);
	return 0;
}

static int holds_of(int id)
{
	pthread_mutex_lock(&fake_lock);
	int n = pf_files[id].holds;
	pthread_mutex_unlock(&fake_lock);
	return n;
}

static bool opened(int id)
{
	pthread_mutex_lock(&fake_lock);
	bool o = pf_files[id].opened;
	pthread_mutex_unlock(&fake_lock);
	return o;
}

/* --- helpers -------------------------------------------------------------------- */

static struct sfs_options opts = {.export_path = "/export"};

static sfs_hints *open_hints(unsigned window, unsigned fetchers, bool check_perms,
			     uint64_t list_mem_max)
{
	struct sfs_hints_handles hh = {.prefetch = (sfs_prefetch *)&prefetch_marker,
				       .origin = (sfs_origin *)&origin_marker,
				       .listings = (sfs_ns *)&listings_marker,
				       .inodes = (sfs_inode_table *)&inodes_marker,
				       .attr_timeout_s = 60,
				       .store = (sfs_store *)&store_marker,
				       .root_dataset = 7,
				       .opts = &opts};
	struct sfs_hints_conf c = {.window = window,
				   .fetchers = fetchers,
				   .mem_bytes = 1ull << 30,
				   .list_mem_max = list_mem_max,
				   .check_perms = check_perms};
	sfs_hints *h = NULL;

	window_conf = window;
	memset(pf_files, 0, sizeof(pf_files));
	n_lookups = 0;
	__atomic_store_n(&reads_done, 0, __ATOMIC_SEQ_CST);
	ok(sfs_hints_open(&hh, &c, &h) == 0 && h && read_obs && obs_arg == h,
	   "opened, its observers set on prefetch");
	return h;
}

struct batch {
	struct shardfs_hint_append a;
};

static void put(struct batch *b, const char *path, uint16_t kind, uint64_t off, uint64_t len)
{
	struct shardfs_hint_item it = {
	    .path_len = (uint16_t)strlen(path), .kind = kind, .offset = off, .length = len};
	it.item_bytes = (uint16_t)((sizeof(it) + it.path_len + 7) & ~7u);
	memset(b->a.buf + b->a.used, 0, it.item_bytes);
	memcpy(b->a.buf + b->a.used, &it, sizeof(it));
	memcpy(b->a.buf + b->a.used + sizeof(it), path, it.path_len);
	b->a.used += it.item_bytes;
	b->a.n_items++;
}

/* The files d/f000 .. d/f(n-1), whole, into b. */
static void put_files(struct batch *b, int n)
{
	char path[32];

	for (int i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "d/f%03d", i);
		put(b, path, SHARDFS_HINT_FILE, 0, 0);
	}
}

static int send_list(sfs_hints *h, uint64_t owner, uid_t uid, struct batch *b, uint64_t *n)
{
	struct sfs_hint_sender s = {.uid = uid, .gid = uid};
	int rc;

	snprintf(s.job, sizeof(s.job), "job%u", (unsigned)uid);
	b->a.size = sizeof(b->a);
	if ((rc = sfs_hints_begin(h, owner, &s)) < 0 ||
	    (rc = sfs_hints_append(h, owner, &b->a)) < 0)
		return rc;
	return sfs_hints_commit(h, owner, n);
}

static struct sfs_hints_stats stats(sfs_hints *h)
{
	struct sfs_hints_stats t;
	struct sfs_hint_job_counts jobs[SFS_HINT_JOBS_MAX];
	sfs_hints_stats(h, &t, jobs, SFS_HINT_JOBS_MAX);
	return t;
}

/* Wait until what(h) holds (the fetchers are threads). A generous bound
 * only turns a hang into a failure. */
static bool wait_for(sfs_hints *h, bool (*what)(sfs_hints *h, uint64_t arg), uint64_t arg)
{
	for (int i = 0; i < 60000; i++) {
		if (what(h, arg))
			return true;
		nanosleep(&(struct timespec){.tv_nsec = 1000 * 1000}, NULL);
	}
	return false;
}

static bool fetched_at_least(sfs_hints *h, uint64_t n) { return stats(h).all.fetched_items >= n; }
static bool items_settled(sfs_hints *h, uint64_t n)
{
	struct sfs_hints_stats t = stats(h);
	return t.all.fetched_items + t.all.cached_items + t.all.unknown_items +
		   t.all.denied_items >=
	       n;
}
static bool opened_pred(sfs_hints *h, uint64_t id) { return opened((int)id); }
static bool in_flight(sfs_hints *h, uint64_t n) { return stats(h).all.item_bytes >= n; }
static bool behind_reader(sfs_hints *h, uint64_t owner)
{
	struct shardfs_hint_status st = {0};
	sfs_hints_status(h, owner, &st);
	return st.n_items && st.position == st.n_items && !st.active;
}
static bool looked_up_name(sfs_hints *h, uint64_t i)
{
	char name[16];
	snprintf(name, sizeof(name), "f%03u", (unsigned)i);
	return looked_up(name);
}

/* The reader reads item i (a whole file), as prefetch reports it. */
static void reader_reads(int id)
{
	__atomic_fetch_add(&reads_done, 1, __ATOMIC_SEQ_CST);
	read_obs(obs_arg, &pf_files[id], 0, FILE_BYTES);
}

/* --- the tests ------------------------------------------------------------------- */

/* Items fetched ahead within the window, held until read, then let go. */
static void test_fetch_and_read(void)
{
	sfs_hints *h = open_hints(16, 1, false, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;

	put_files(&b, N_FILES);
	ok(send_list(h, 1, 0, &b, &n) == 0 && n == N_FILES, "a list of %d files committed",
	   N_FILES);
	ok(wait_for(h, fetched_at_least, 4), "the first items fetched ahead, before any read");
	bool all = true;
	for (int i = 0; i < N_FILES && all; i++) {
		all = wait_for(h, fetched_at_least, (uint64_t)i + 1);
		all = all && holds_of(FILE0 + i) == 1;
		reader_reads(FILE0 + i);
	}
	ok(all, "each item fetched and held before its read");
	struct sfs_hints_stats t = stats(h);
	ok(t.all.fetched_items == N_FILES && t.all.read_items == N_FILES &&
	       t.all.read_bytes == (uint64_t)N_FILES * FILE_BYTES && t.all.wasted_bytes == 0,
	   "every item fetched and read, no waste (%llu fetched, %llu read)",
	   (unsigned long long)t.all.fetched_items, (unsigned long long)t.all.read_items);
	ok(__atomic_load_n(&window_breaches, __ATOMIC_SEQ_CST) == 0,
	   "never a file fetched a window ahead of the reader");
	/* The window moves past the last item read when a fetcher next looks. */
	ok(wait_for(h, behind_reader, 1), "status: the whole list behind the reader");
	ok(stats(h).held_bytes == 0 && holds_of(FILE0 + N_FILES - 1) == 0,
	   "nothing held once read");
	ok(pf_files[FILE0].dataset == 100 && !strcmp(dataset_names[0], "/export/d"),
	   "a file under d/ is fetched as dataset /export/d");
	sfs_hints_close(h);
}

/* Missing, a directory, denied, cached, fetched; then the list cancelled
 * with an item held unread: its bytes are waste, its hold goes. */
static void test_skips_and_cancel(void)
{
	sfs_hints *h = open_hints(16, 2, true, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;

	put(&b, "d/nope", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "d", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "secret/x", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "d/cached", SHARDFS_HINT_FILE, 0, 0);
	put(&b, "top.bin", SHARDFS_HINT_RANGE, FILE_BYTES, FILE_BYTES);
	ok(send_list(h, 2, 1000, &b, &n) == 0 && n == 5, "a list of five items from uid 1000");
	ok(wait_for(h, items_settled, 5), "every item taken");
	struct sfs_hints_stats t = stats(h);
	ok(t.all.unknown_items == 2, "missing and not a file: unknown (%llu)",
	   (unsigned long long)t.all.unknown_items);
	ok(t.all.denied_items == 1 && !opened(SECRET_X), "under a folder uid 1000 may not search: "
							 "denied, never opened");
	ok(t.all.cached_items == 1, "in the cache: skipped as cached");
	ok(t.all.fetched_items == 1 && t.all.fetched_bytes == FILE_BYTES && holds_of(TOP) == 1,
	   "the range fetched (its bytes only) and held");
	ok(t.held_bytes == FILE_BYTES, "held, not yet read: %llu bytes",
	   (unsigned long long)t.held_bytes);
	ok(pf_files[TOP].dataset == 7, "a file at the root: the export's own dataset");
	ok(sfs_hints_cancel(h, 2) == 0, "cancelled");
	t = stats(h);
	ok(t.all.wasted_bytes == FILE_BYTES && t.held_bytes == 0 && holds_of(TOP) == 0,
	   "the item held unread is waste, its hold let go");

	struct batch r = {0};
	put(&r, "secret/x", SHARDFS_HINT_FILE, 0, 0);
	ok(send_list(h, 3, 0, &r, &n) == 0, "the same item from root");
	ok(wait_for(h, fetched_at_least, 2) && opened(SECRET_X), "root may: fetched");
	sfs_hints_release(h, 3);
	ok(holds_of(SECRET_X) == 0, "the open's release drops its list and holds");
	sfs_hints_close(h);
}

/* The reader opens an item the fetch has not reached: the fetch skips
 * there, the items between are passed, never fetched. */
static void test_reader_ahead(void)
{
	sfs_hints *h = open_hints(16, 1, false, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;
	char path[32];

	for (int i = 0; i < 20; i++) {
		snprintf(path, sizeof(path), "d/f%03d", i);
		put(&b, path, SHARDFS_HINT_FILE, 0, 0);
	}
	ok(send_list(h, 4, 0, &b, &n) == 0, "a list of 20 files");
	/* Four fetched (the first window, no read yet); item 10 resolved
	 * ahead once the lookup of item 11 began (one thread, in order). */
	ok(wait_for(h, fetched_at_least, 4) && wait_for(h, looked_up_name, 11),
	   "the first window fetched, the items after it resolved ahead");
	ok(stats(h).all.fetched_items == 4, "no more than the window before a read");
	sfs_hints_opened(h, 9, FILEID0 + 10);
	struct sfs_hints_stats t = stats(h);
	ok(t.all.passed_items == 7, "opened item 10: items 4-10 passed (%llu)",
	   (unsigned long long)t.all.passed_items);
	ok(wait_for(h, fetched_at_least, 5) && opened(FILE0 + 11), "the fetch goes on at item 11");
	bool skipped = true;
	for (int i = 4; i <= 10; i++)
		skipped = skipped && !opened(FILE0 + i);
	ok(skipped, "the passed items were never fetched");
	sfs_hints_opened(h, 9, FILEID0 + 0);
	ok(stats(h).all.read_items == 1, "opening a held item marks it read");
	sfs_hints_close(h);
}

/* A chunk that lands after its fetch was started: the fetch observer
 * makes the item held. */
static void test_late_chunks(void)
{
	sfs_hints *h = open_hints(16, 1, false, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;

	put(&b, "d/slow", SHARDFS_HINT_FILE, 0, 0);
	ok(send_list(h, 5, 0, &b, &n) == 0, "a list of one slow file");
	/* Its fetch started (its bytes counted as resolved): in flight until
	 * its chunks land. */
	ok(wait_for(h, opened_pred, SLOW) && wait_for(h, in_flight, 2 * FILE_BYTES),
	   "its fetch started");
	ok(stats(h).all.fetched_items == 0 && stats(h).held_bytes == 0,
	   "in flight: not yet fetched, nothing held");
	pthread_mutex_lock(&fake_lock);
	pf_files[SLOW].busy = false;
	pthread_mutex_unlock(&fake_lock);
	fetch_obs(obs_arg, &pf_files[SLOW]);
	struct sfs_hints_stats t = stats(h);
	ok(t.all.fetched_items == 1 && t.held_bytes == 2 * FILE_BYTES,
	   "its chunks landed: fetched and held");
	sfs_hints_close(h);
	ok(holds_of(SLOW) == 0, "close lets every hold go");
}

static bool gate_met(sfs_hints *h, uint64_t n)
{
	(void)h;
	pthread_mutex_lock(&fake_lock);
	bool met = gate_waiting >= n;
	pthread_mutex_unlock(&fake_lock);
	return met;
}

/* Every fetcher returns with an item whose chunks are still coming while
 * fetchers - 1 items are in flight already: all of them join the flight
 * (more than fetchers at once), and all are held once their chunks land. */
static void test_flight_full(void)
{
	enum { FETCHERS = 4, ITEMS = 2 * FETCHERS - 1 };
	pthread_mutex_lock(&fake_lock);
	all_slow = true;
	gate_free = FETCHERS - 1, gate_n = FETCHERS, gate_calls = gate_waiting = 0;
	pthread_mutex_unlock(&fake_lock);
	sfs_hints *h = open_hints(16, FETCHERS, false, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;

	put_files(&b, ITEMS);
	ok(send_list(h, 6, 0, &b, &n) == 0 && n == ITEMS, "a list of %d slow files", ITEMS);
	ok(wait_for(h, gate_met, FETCHERS), "%d fetches at once with %d items in flight", FETCHERS,
	   FETCHERS - 1);
	ok(wait_for(h, in_flight, (uint64_t)ITEMS * FILE_BYTES), "all %d items in flight", ITEMS);
	ok(stats(h).all.fetched_items == 0, "none fetched before its chunks land");
	pthread_mutex_lock(&fake_lock);
	for (int i = 0; i < ITEMS; i++)
		pf_files[FILE0 + i].busy = false;
	pthread_mutex_unlock(&fake_lock);
	for (int i = 0; i < ITEMS; i++)
		fetch_obs(obs_arg, &pf_files[FILE0 + i]);
	struct sfs_hints_stats t = stats(h);
	ok(t.all.fetched_items == ITEMS && t.held_bytes == (uint64_t)ITEMS * FILE_BYTES,
	   "their chunks landed: all fetched and held (%llu)",
	   (unsigned long long)t.all.fetched_items);
	sfs_hints_close(h);
	bool none = true;
	for (int i = 0; i < ITEMS; i++)
		none = none && holds_of(FILE0 + i) == 0;
	ok(none, "close lets every hold go");
	pthread_mutex_lock(&fake_lock);
	all_slow = false;
	gate_n = 0;
	pthread_mutex_unlock(&fake_lock);
}

/* A lookup that misses a directory's listing starts the listing, with
 * the directory's handle and namespace key. */
static void test_listing(void)
{
	sfs_hints *h = open_hints(16, 1, false, 1 << 20);
	struct batch b = {0};
	uint64_t n = 0;

	listings_on = true;
	n_listed = 0;
	put(&b, "d/f001", SHARDFS_HINT_FILE, 0, 0);
	ok(send_list(h, 6, 0, &b, &n) == 0, "a list of one file");
	ok(wait_for(h, fetched_at_least, 1), "fetched");
	pthread_mutex_lock(&fake_lock);
	bool root = false, d = false;
	for (unsigned k = 0; k < n_listed; k++) {
		root |= listed_key[k] == SFS_NS_ROOT && listed_fh[k].data[0] == ROOT;
		d |= listed_key[k] == 2 && listed_fh[k].data[0] == DIR_D;
	}
	pthread_mutex_unlock(&fake_lock);
	ok(root && d, "the root's and d's listings started (%u)", n_listed);
	listings_on = false;
	sfs_hints_close(h);
}

static void test_refusals(void)
{
	sfs_hints *h = open_hints(16, 1, false, 64);
	uint64_t n = 0;
	struct batch bad = {0};
	struct sfs_hint_sender s = {.job = "j"};

	ok(sfs_hints_commit(h, 7, &n) == -EINVAL, "a commit without a begin: EINVAL");
	put(&bad, "../x", SHARDFS_HINT_FILE, 0, 0);
	bad.a.size = sizeof(bad.a);
	ok(sfs_hints_begin(h, 7, &s) == 0 && sfs_hints_append(h, 7, &bad.a) == -EINVAL,
	   "a path out of the mount: EINVAL");
	ok(sfs_hints_commit(h, 7, &n) == -EINVAL, "and the list it was in is gone");
	struct batch big = {0};
	char path[64];
	for (int i = 0; i < 8; i++) {
		snprintf(path, sizeof(path), "d/a-rather-long-name-%d", i);
		put(&big, path, SHARDFS_HINT_FILE, 0, 0);
	}
	ok(send_list(h, 8, 0, &big, &n) == -ENOMEM, "past the lists' memory: ENOMEM");
	struct sfs_hints_stats t = stats(h);
	ok(t.refused_invalid == 3 && t.refused_memory == 1,
	   "refusals counted: %llu invalid, %llu memory", (unsigned long long)t.refused_invalid,
	   (unsigned long long)t.refused_memory);
	ok(t.all.lists == 0 && t.list_mem_bytes == 0, "nothing kept");
	sfs_hints_close(h);
	sfs_hints_stats(NULL, &t, NULL, 0);
	ok(t.all.lists == 0, "stats of no hints: all zero");
}

int main(int argc, char **argv)
{
	static const struct tap_test tests[] = {{"fetch_and_read", test_fetch_and_read},
						{"skips_and_cancel", test_skips_and_cancel},
						{"reader_ahead", test_reader_ahead},
						{"late_chunks", test_late_chunks},
						{"flight_full", test_flight_full},
						{"listing", test_listing},
						{"refusals", test_refusals}};

	make_tree();
	return tap_run(tests, sizeof(tests) / sizeof(tests[0]), argc, argv);
}
