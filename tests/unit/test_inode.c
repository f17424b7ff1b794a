// SPDX-License-Identifier: Apache-2.0
/*
 * test_inode — the inode table of fs/inode/inode.c.
 *
 * Linked with fs/inode/inode.c only. inode.c's one call into prefetch,
 * sfs_pf_file_unref(), is faked here: it records which fetch states were
 * dropped, so the test can tell which inodes were freed. The fake pointers
 * handed out as sfs_pf_file are addresses in pf_tokens[], never dereferenced.
 */
#include "../../fs/inode/inode.h"
#include "tap.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* --- fake neighbour: prefetch ---------------------------------------------- */

#define N_TOKENS 64
static char pf_tokens[N_TOKENS];
static int pf_unrefs[N_TOKENS]; /* protected by pf_lock */
static pthread_mutex_t pf_lock = PTHREAD_MUTEX_INITIALIZER;

static sfs_pf_file *token(int i) { return (sfs_pf_file *)(void *)&pf_tokens[i]; }

void sfs_pf_file_unref(sfs_pf_file *f)
{
	char *p = (char *)(void *)f;

	if (p < pf_tokens || p >= pf_tokens + N_TOKENS) {
		printf("Bail out! sfs_pf_file_unref(%p): not a token\n", (void *)f);
		exit(1);
	}
	pthread_mutex_lock(&pf_lock);
	pf_unrefs[p - pf_tokens]++;
	pthread_mutex_unlock(&pf_lock);
}

static int unrefs(int i)
{
	pthread_mutex_lock(&pf_lock);
	int n = pf_unrefs[i];
	pthread_mutex_unlock(&pf_lock);
	return n;
}

/* --- helpers --------------------------------------------------------------- */

static struct sfs_fh mkfh(uint64_t a, uint64_t b)
{
	struct sfs_fh fh = {.len = 24};

	memcpy(fh.data, &a, 8);
	memcpy(fh.data + 8, &b, 8);
	memcpy(fh.data + 16, "testfh!!", 8);
	return fh;
}

static struct sfs_attr mkattr(uint64_t fsid, uint64_t fileid, uint64_t size)
{
	struct sfs_attr a = {.type = 0100000, .mode = 0644, .nlink = 1, .size = size};

	a.fsid = fsid;
	a.fileid = fileid;
	return a;
}

static bool same_fh(const struct sfs_inode *ino, const struct sfs_fh *b)
{
	struct sfs_fh a = sfs_inode_fh(ino);
	return a.len == b->len && !memcmp(a.data, b->data, a.len);
}

/* --- tests ----------------------------------------------------------------- */

static void test_basic(void)
{
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;

	ok(sfs_inode_table_open(&root_fh, &t) == 0, "table opens");
	struct sfs_inode *root = sfs_inode_root(t);
	ok(root && same_fh(root, &root_fh) && sfs_inode_kind(root) == SFS_INODE_NFS,
	   "root inode holds the root handle");
	ok(sfs_inode_count(t) == 0, "empty table counts 0");

	struct sfs_fh fa = mkfh(1, 100);
	struct sfs_attr aa = mkattr(1, 100, 10);
	struct sfs_inode *a = sfs_inode_get(t, &fa, &aa, 1000);
	ok(a && a != root && sfs_inode_kind(a) == SFS_INODE_NFS && a->fsid == 1 &&
	       a->fileid == 100 && same_fh(a, &fa) && a->nlookup == 1,
	   "get creates an inode with key, handle and one lookup");
	ok(a && a->attr.size == 10 && a->attr_time_ms == 1000, "get stores attributes and time");
	ok(sfs_inode_count(t) == 1, "count 1");

	aa.size = 20;
	struct sfs_inode *a2 = sfs_inode_get(t, &fa, &aa, 2000);
	ok(a2 == a && a->nlookup == 2, "same file again: same inode, 2 lookups (%llu)",
	   a ? (unsigned long long)a->nlookup : 0);
	ok(a->attr.size == 20 && a->attr_time_ms == 2000, "a second get refreshes attributes");

	struct sfs_fh fb = mkfh(2, 100);
	struct sfs_attr ab = mkattr(2, 100, 5);
	struct sfs_inode *b = sfs_inode_get(t, &fb, &ab, 2000);
	ok(b && b != a && sfs_inode_count(t) == 2, "same fileid, other fsid: another inode");

	struct sfs_attr an = mkattr(1, 100, 30);
	sfs_inode_set_attr(a, &an, 3000);
	ok(a->attr.size == 30 && a->attr_time_ms == 3000, "set_attr stores attributes and time");

	/* forget: freed exactly when the count reaches zero */
	a->pf = token(1);
	sfs_inode_forget(t, a, 1);
	ok(unrefs(1) == 0 && sfs_inode_count(t) == 2, "forget 1 of 2: inode kept");
	ok(sfs_inode_get(t, &fa, &aa, 4000) == a && a->nlookup == 2,
	   "still found after a partial forget");
	sfs_inode_forget(t, a, 2);
	ok(unrefs(1) == 1 && sfs_inode_count(t) == 1,
	   "forget to zero frees the inode and drops its fetch state");
	struct sfs_inode *a3 = sfs_inode_get(t, &fa, &aa, 5000);
	ok(a3 && a3->nlookup == 1 && a3->pf == NULL, "after the free, get makes a fresh inode");
	sfs_inode_forget(t, a3, 1000);
	ok(sfs_inode_count(t) == 1, "forget of more than nlookup frees");

	/* root */
	struct sfs_attr ar = mkattr(1, 2, 4096);
	ar.type = 0040000;
	struct sfs_inode *r = sfs_inode_get(t, &root_fh, &ar, 6000);
	ok(r == root && root->nlookup == 0 && root->attr.size == 4096 && root->attr_time_ms == 6000,
	   "get with the root handle returns the root, refreshing its attributes");
	ok(sfs_inode_count(t) == 1, "root lookups do not count");
	sfs_inode_forget(t, root, 5);
	ok(sfs_inode_root(t) == root && same_fh(root, &root_fh), "forget of the root is ignored");

	/* close frees what is left and drops every fetch state */
	b->pf = token(2);
	root->pf = token(3);
	sfs_inode_table_close(t);
	ok(unrefs(2) == 1 && unrefs(3) == 1, "close frees remaining inodes and the root's state");
}

static void test_reuse(void)
{
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;

	sfs_inode_table_open(&root_fh, &t);
	struct sfs_fh f1 = mkfh(3, 7), f2 = mkfh(3, 0x7007);
	struct sfs_attr a1 = mkattr(3, 7, 111), a2 = mkattr(3, 7, 222);

	struct sfs_inode *old = sfs_inode_get(t, &f1, &a1, 1);
	old->pf = token(10);
	struct sfs_inode *cur = sfs_inode_get(t, &f2, &a2, 2);
	ok(cur && cur != old && same_fh(cur, &f2) && cur->nlookup == 1 && cur->attr.size == 222,
	   "fileid reused with a new handle: a new inode");
	ok(same_fh(old, &f1) && old->nlookup == 1 && old->attr.size == 111 &&
	       old->pf == token(10) && unrefs(10) == 0,
	   "the old inode stays valid until forgotten");
	ok(sfs_inode_get(t, &f2, &a2, 3) == cur && cur->nlookup == 2,
	   "the new handle now maps to the new inode");

	sfs_inode_forget(t, old, 1);
	ok(unrefs(10) == 1, "forgetting the old inode frees it");
	ok(sfs_inode_get(t, &f2, &a2, 4) == cur && cur->nlookup == 3,
	   "the new inode is still found after the old one is freed");
	sfs_inode_forget(t, cur, 3);
	ok(sfs_inode_count(t) == 0, "count back to 0 (%llu)",
	   (unsigned long long)sfs_inode_count(t));

	/* A replaced inode the kernel never forgot is still freed at close. */
	old = sfs_inode_get(t, &f1, &a1, 5);
	old->pf = token(11);
	cur = sfs_inode_get(t, &f2, &a2, 6);
	cur->pf = token(12);
	sfs_inode_table_close(t);
	ok(unrefs(11) == 1 && unrefs(12) == 1,
	   "close frees a replaced (reused-fileid) inode still referenced (unrefs %d, %d)",
	   unrefs(11), unrefs(12));
}

static void test_growth(void)
{
	enum { N = 100000 };
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;
	struct sfs_inode **ino = calloc(2 * N, sizeof(*ino));

	sfs_inode_table_open(&root_fh, &t);
	/* N files on fsid 9 with spread-out fileids, and the same fileids on fsid 10 */
	for (uint64_t i = 0; i < 2 * N; i++) {
		uint64_t fsid = 9 + i / N, fileid = (i % N) * 7919 + 3;
		struct sfs_fh fh = mkfh(fsid, fileid);
		struct sfs_attr a = mkattr(fsid, fileid, i);
		ino[i] = sfs_inode_get(t, &fh, &a, 1);
	}
	ok(sfs_inode_count(t) == 2 * N, "%d inodes (%llu)", 2 * N,
	   (unsigned long long)sfs_inode_count(t));
	int bad = 0;
	for (uint64_t i = 0; i < 2 * N; i++) {
		uint64_t fsid = 9 + i / N, fileid = (i % N) * 7919 + 3;
		struct sfs_fh fh = mkfh(fsid, fileid);
		struct sfs_attr a = mkattr(fsid, fileid, i);
		struct sfs_inode *p = sfs_inode_get(t, &fh, &a, 2);
		bad += p != ino[i] || p->nlookup != 2 || p->fileid != fileid || p->fsid != fsid;
	}
	ok(bad == 0, "after growth every key finds its own inode (%d wrong)", bad);
	for (uint64_t i = 0; i < 2 * N; i += 2)
		sfs_inode_forget(t, ino[i], 2);
	ok(sfs_inode_count(t) == N, "forgot every other one: %d left (%llu)", N,
	   (unsigned long long)sfs_inode_count(t));
	bad = 0;
	for (uint64_t i = 1; i < 2 * N; i += 2) {
		uint64_t fsid = 9 + i / N, fileid = (i % N) * 7919 + 3;
		struct sfs_fh fh = mkfh(fsid, fileid);
		struct sfs_attr a = mkattr(fsid, fileid, i);
		bad += sfs_inode_get(t, &fh, &a, 3) != ino[i];
	}
	ok(bad == 0, "the rest are still found (%d wrong)", bad);
	for (uint64_t i = 1; i < 2 * N; i += 2)
		sfs_inode_forget(t, ino[i], 3);
	ok(sfs_inode_count(t) == 0, "all forgotten: count 0 (%llu)",
	   (unsigned long long)sfs_inode_count(t));
	sfs_inode_table_close(t);
	free(ino);
}

/* --- concurrency ----------------------------------------------------------- */

enum { THREADS = 4, KEYS = 2000, CHURN_KEYS = 100, CHURN_ROUNDS = 20000 };

struct worker {
	sfs_inode_table *t;
	pthread_barrier_t *barrier;
	struct sfs_inode *got[KEYS];
	int bad;
	uint64_t seed;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	pthread_barrier_wait(w->barrier);
	for (uint64_t k = 0; k < KEYS; k++) {
		struct sfs_fh fh = mkfh(1, k);
		struct sfs_attr a = mkattr(1, k, k);
		w->got[k] = sfs_inode_get(w->t, &fh, &a, 1);
	}
	pthread_barrier_wait(w->barrier); /* main compares got[] now */
	pthread_barrier_wait(w->barrier);
	/* forget ours while churning other keys: get + forget pairs */
	for (uint64_t i = 0; i < CHURN_ROUNDS; i++) {
		w->seed = w->seed * 6364136223846793005ull + 1442695040888963407ull;
		uint64_t k = 1000000 + (w->seed >> 33) % CHURN_KEYS;
		struct sfs_fh fh = mkfh(1, k);
		struct sfs_attr a = mkattr(1, k, i);
		struct sfs_inode *p = sfs_inode_get(w->t, &fh, &a, 2);
		w->bad += !p || p->fileid != k;
		if (p)
			sfs_inode_forget(w->t, p, 1);
		if (i < KEYS)
			sfs_inode_forget(w->t, w->got[i], 1);
	}
	return NULL;
}

static void test_concurrent(void)
{
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;
	pthread_barrier_t barrier;
	struct worker *w = calloc(THREADS, sizeof(*w));
	pthread_t th[THREADS];

	sfs_inode_table_open(&root_fh, &t);
	pthread_barrier_init(&barrier, NULL, THREADS + 1);
	for (int i = 0; i < THREADS; i++) {
		w[i].t = t;
		w[i].barrier = &barrier;
		w[i].seed = (uint64_t)i + 1;
		pthread_create(&th[i], NULL, worker_main, &w[i]);
	}
	pthread_barrier_wait(&barrier);
	pthread_barrier_wait(&barrier);
	int differ = 0, counts = 0;
	for (int k = 0; k < KEYS; k++) {
		for (int i = 1; i < THREADS; i++)
			differ += w[i].got[k] != w[0].got[k];
		counts += w[0].got[k]->nlookup != THREADS;
	}
	ok(differ == 0 && counts == 0 && sfs_inode_count(t) == KEYS,
	   "%d threads getting the same %d files get the same inodes, %d lookups each "
	   "(%d differ, %d miscounted)",
	   THREADS, KEYS, THREADS, differ, counts);
	pthread_barrier_wait(&barrier);
	int bad = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		bad += w[i].bad;
	}
	ok(bad == 0 && sfs_inode_count(t) == 0,
	   "concurrent forget and get/forget churn: all freed, count 0 (%llu, %d wrong)",
	   (unsigned long long)sfs_inode_count(t), bad);
	pthread_barrier_destroy(&barrier);
	sfs_inode_table_close(t);
	free(w);
}

static bool same_time(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* An inode keeps its handle at its own length and its attributes packed:
 * both come back exactly, and the table counts the bytes it holds. */
static void test_compact(void)
{
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;

	sfs_inode_table_open(&root_fh, &t);
	struct sfs_fh big = {.len = SFS_FH_MAX}, tiny = {.len = 1, .data = {0x5a}};
	for (unsigned k = 0; k < SFS_FH_MAX; k++)
		big.data[k] = (uint8_t)(k * 7 + 1);
	struct sfs_attr ab = {.type = 0100000,
			      .mode = 04755,
			      .nlink = 3,
			      .uid = 1001,
			      .gid = 2002,
			      .size = (1ull << 40) + 5,
			      .used = (1ull << 40) + 4096,
			      .fsid = 9,
			      .fileid = 0xfedcba9876543210ull,
			      .rdev_major = 8,
			      .rdev_minor = 17,
			      .atime = {.tv_sec = -5, .tv_nsec = 999999999},
			      .mtime = {.tv_sec = 4102444800, .tv_nsec = 1},
			      .ctime = {.tv_sec = 1700000000, .tv_nsec = 123456789}};
	struct sfs_attr at = mkattr(9, 77, 1);
	uint64_t b0 = sfs_inode_bytes(t);
	struct sfs_inode *ib = sfs_inode_get(t, &big, &ab, 1),
			 *it = sfs_inode_get(t, &tiny, &at, 1);
	ok(ib && it && same_fh(ib, &big) && same_fh(it, &tiny),
	   "handles of 64 and 1 bytes come back exactly");
	struct sfs_attr got;
	sfs_inode_lock(ib);
	sfs_inode_attr_get(ib, &got);
	sfs_inode_unlock(ib);
	ok(got.type == ab.type && got.mode == ab.mode && got.nlink == ab.nlink &&
	       got.uid == ab.uid && got.gid == ab.gid && got.size == ab.size &&
	       got.used == ab.used && got.fsid == ab.fsid && got.fileid == ab.fileid &&
	       got.rdev_major == ab.rdev_major && got.rdev_minor == ab.rdev_minor &&
	       same_time(got.atime, ab.atime) && same_time(got.mtime, ab.mtime) &&
	       same_time(got.ctime, ab.ctime),
	   "attributes come back exactly (every field)");
	uint64_t b1 = sfs_inode_bytes(t);
	ok(b0 == 0 && b1 == offsetof(struct sfs_inode, fh) + SFS_FH_MAX + sizeof(struct sfs_inode),
	   "the table counts the inodes' bytes: %llu for handles of 64 and 1 bytes",
	   (unsigned long long)b1);
	sfs_inode_forget(t, ib, 1);
	sfs_inode_forget(t, it, 1);
	ok(sfs_inode_bytes(t) == 0, "forgotten inodes are uncounted");
	struct sfs_inode *v = sfs_inode_virtual(SFS_INODE_STATS),
			 *d = sfs_inode_virtual(SFS_INODE_CTL_DIR);
	ok(v && d && sfs_inode_kind(v) == SFS_INODE_STATS &&
	       sfs_inode_kind(d) == SFS_INODE_CTL_DIR && v->fileid == SFS_INODE_STATS_FILEID &&
	       d->fileid == SFS_INODE_CTL_DIR_FILEID && v->fh_len == 0 && d->fh_len == 0,
	   "virtual inodes have no handle, and their kind and fileid");
	free(v);
	free(d);
	sfs_inode_table_close(t);
}

static int cmp_uptr(const void *a, const void *b)
{
	uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
	return x < y ? -1 : x > y;
}

/* Inodes come from a slab of 64 KiB pages: slots freed by forgets are handed
 * out again before a page is added, and come back zeroed. */
static void test_slab(void)
{
	enum { N = 3000 };
	static struct sfs_inode *ino[N];
	static uintptr_t pages[N];
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;

	sfs_inode_table_open(&root_fh, &t);
	bool made = true;
	for (unsigned i = 0; i < N; i++) {
		struct sfs_fh fh = mkfh(i, 7);
		struct sfs_attr a = mkattr(1, 1000 + i, i);
		made &= (ino[i] = sfs_inode_get(t, &fh, &a, 1)) != NULL;
		pages[i] = made ? (uintptr_t)ino[i] & ~(uintptr_t)0xffff : 0;
	}
	qsort(pages, N, sizeof(*pages), cmp_uptr);
	unsigned n_pages = 0;
	for (unsigned i = 0; i < N; i++)
		n_pages += !i || pages[i] != pages[i - 1];
	ok(made && n_pages <= N * 216 / (64 * 1024 - 64) + 2, "%d inodes on %u pages of 64 KiB", N,
	   n_pages);
	for (unsigned i = 0; i < N; i += 2)
		sfs_inode_forget(t, ino[i], 1);
	bool reused = true, fresh = true;
	for (unsigned i = 0; i < N; i += 2) {
		struct sfs_fh fh = mkfh(i, 9);
		struct sfs_attr a = mkattr(1, 100000 + i, 5);
		ino[i] = sfs_inode_get(t, &fh, &a, 1);
		uintptr_t pg = ino[i] ? (uintptr_t)ino[i] & ~(uintptr_t)0xffff : 0;
		reused &= bsearch(&pg, pages, N, sizeof(*pages), cmp_uptr) != NULL;
		fresh &= ino[i] && ino[i]->nlookup == 1 && !ino[i]->pf && !ino[i]->n_open &&
			 !ino[i]->have_opened && same_fh(ino[i], &fh);
	}
	ok(reused, "after forgetting every other one, as many new inodes fit the same pages");
	ok(fresh, "and each comes back as a new inode (its handle, one lookup, nothing open)");
	bool kept = true;
	for (unsigned i = 1; i < N; i += 2) {
		struct sfs_fh fh = mkfh(i, 7);
		kept &= same_fh(ino[i], &fh) && ino[i]->fileid == 1000 + i && ino[i]->nlookup == 1;
	}
	ok(kept, "the inodes kept are untouched (handles, fileids, lookups)");
	for (unsigned i = 0; i < N; i++)
		sfs_inode_forget(t, ino[i], 1);
	ok(sfs_inode_count(t) == 0 && sfs_inode_bytes(t) == 0, "all forgotten");
	sfs_inode_table_close(t);
}

/* The prune picker: CLOCK over the table, only closed files and symlinks,
 * the excess over the target at most, no id twice. */
static bool has_id(sfs_inode_table *t, const uint64_t *ids, size_t n, const struct sfs_inode *ino)
{
	for (size_t k = 0; k < n; k++)
		if (ids[k] == sfs_inode_id(t, ino))
			return true;
	return false;
}

static void test_prune_pick(void)
{
	enum { N = 300 };
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;
	struct sfs_inode *ino[N];
	uint64_t ids[2 * N];

	ok(sfs_inode_table_open(&root_fh, &t) == 0, "table opens");
	for (int k = 0; k < N; k++) {
		struct sfs_fh fh = mkfh(1, 1000 + (uint64_t)k);
		struct sfs_attr a = mkattr(1, 1000 + (uint64_t)k, 1);
		if (k < 10)
			a.type = 0040000; /* directories: never picked */
		ino[k] = sfs_inode_get(t, &fh, &a, 1);
	}
	for (int k = 10; k < 20; k++)
		ino[k]->n_open = 1; /* open files: never picked */
	ok(sfs_inode_prune_pick(t, N, ids, 2 * N) == 0, "at the target: nothing picked");

	/* Every inode was just looked up: the hand's first turn clears that,
	 * the second picks. */
	size_t n = sfs_inode_prune_pick(t, N - 100, ids, 2 * N);
	ok(n == 100, "100 over the target: 100 picked (%zu)", n);
	bool fine = true;
	for (size_t k = 0; k < n; k++)
		for (size_t j = k + 1; j < n; j++)
			fine = fine && ids[k] != ids[j];
	ok(fine, "no inode picked twice");
	fine = true;
	for (int k = 0; k < 20; k++)
		fine = fine && !has_id(t, ids, n, ino[k]);
	ok(fine, "directories and open files are never picked");
	ok(sfs_inode_count(t) == N, "picking frees nothing (the kernel's FORGETs do)");

	/* The kernel forgets what it was asked to (none is in use). Of the
	 * rest, the even ones are looked up again: a second chance. */
	for (size_t k = 0; k < n; k++)
		for (int j = 20; j < N; j++)
			if (ids[k] == sfs_inode_id(t, ino[j])) {
				sfs_inode_forget(t, ino[j], 1);
				ino[j] = NULL;
			}
	ok(sfs_inode_count(t) == N - 100, "the kernel's FORGETs free the picked");
	for (int k = 20; k < N; k += 2)
		if (ino[k]) {
			struct sfs_fh fh = mkfh(1, 1000 + (uint64_t)k);
			struct sfs_attr a = mkattr(1, 1000 + (uint64_t)k, 1);
			sfs_inode_get(t, &fh, &a, 2);
		}
	n = sfs_inode_prune_pick(t, N - 100 - 50, ids, 2 * N);
	fine = n == 50;
	for (int k = 20; k < N; k += 2)
		fine = fine && !(ino[k] && has_id(t, ids, n, ino[k]));
	ok(fine,
	   "inodes looked up since the hand passed are passed over: 50 picked (%zu), none "
	   "of them looked up again",
	   n);

	/* A file read and closed (fs/ops/open_file.c clears referenced at the last close)
	 * goes before one only looked up, however recently, when the hand
	 * passes both. */
	int closed = 0;
	for (int k = 20; k < N; k++)
		if (ino[k]) {
			struct sfs_fh fh = mkfh(1, 1000 + (uint64_t)k);
			struct sfs_attr a = mkattr(1, 1000 + (uint64_t)k, 1);
			sfs_inode_get(t, &fh, &a, 3);
			if (k % 5 == 0 && closed < 20) {
				ino[k]->referenced = 0;
				closed++;
			}
		}
	n = sfs_inode_prune_pick(t, sfs_inode_count(t) - (uint64_t)closed, ids, 2 * N);
	fine = n == (size_t)closed;
	for (size_t k = 0; k < n; k++) {
		const struct sfs_inode *p = sfs_inode_by_id(t, ids[k]);
		fine = fine && p->fileid % 5 == 0;
	}
	ok(fine,
	   "files read and closed since their lookup are picked first: %zu of %d, all of them "
	   "closed ones",
	   n, closed);

	/* All open: nothing to give, and the scan ends. */
	for (int k = 0; k < N; k++)
		if (ino[k])
			ino[k]->n_open = 1;
	ok(sfs_inode_prune_pick(t, 0, ids, 2 * N) == 0, "nothing prunable: none picked");
	for (int k = 0; k < N; k++)
		if (ino[k])
			ino[k]->n_open = 0;
	sfs_inode_table_close(t);
}

/* The closed queue: files closed go first, oldest close first; one looked
 * up again since its close is passed over; past the ring, the oldest
 * closes are dropped. */
static void test_prune_closed(void)
{
	enum { N = 100, RING = 8 };
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;
	struct sfs_inode *ino[N];
	uint64_t ids[N];

	ok(sfs_inode_table_open(&root_fh, &t) == 0 &&
	       sfs_inode_prune_enable(t, &(struct sfs_inode_prune_conf){.ring = RING}) == 0,
	   "table opens with a closed queue of %d", RING);
	for (int k = 0; k < N; k++) {
		struct sfs_fh fh = mkfh(1, 5000 + (uint64_t)k);
		struct sfs_attr a = mkattr(1, 5000 + (uint64_t)k, 1);
		ino[k] = sfs_inode_get(t, &fh, &a, 1);
	}
	/* Closed, in this order: 40, 41, ..., 47 (what fs/ops/open_file.c does at the last
	 * close: referenced cleared, then queued). */
	for (int k = 40; k < 48; k++) {
		ino[k]->referenced = 0;
		sfs_inode_closed(t, ino[k]);
	}
	size_t n = sfs_inode_prune_pick(t, N - 3, ids, N);
	ok(n == 3 && ids[0] == sfs_inode_id(t, ino[40]) &&
	       ids[1] == sfs_inode_id(t, ino[41]) && ids[2] == sfs_inode_id(t, ino[42]),
	   "the files closed longest ago go first (%zu picked)", n);
	/* 43 is looked up again after its close; 44 is forgotten by the kernel. */
	struct sfs_fh fh43 = mkfh(1, 5043);
	struct sfs_attr a43 = mkattr(1, 5043, 1);
	sfs_inode_get(t, &fh43, &a43, 2);
	sfs_inode_forget(t, ino[44], 1);
	n = sfs_inode_prune_pick(t, sfs_inode_count(t) - 3, ids, N);
	ok(n == 3 && ids[0] == sfs_inode_id(t, ino[45]) &&
	       ids[1] == sfs_inode_id(t, ino[46]) && ids[2] == sfs_inode_id(t, ino[47]),
	   "a file looked up again since its close and one forgotten are passed over");
	/* Ring of 8: 12 closes keep the last 8. */
	for (int k = 60; k < 72; k++) {
		ino[k]->referenced = 0;
		sfs_inode_closed(t, ino[k]);
	}
	n = sfs_inode_prune_pick(t, sfs_inode_count(t) - 1, ids, N);
	ok(n == 1 && ids[0] == sfs_inode_id(t, ino[64]),
	   "past the ring the oldest closes are dropped: the first picked is the 5th of 12");
	sfs_inode_table_close(t);

	/* Below `from` inodes closes are not queued (a lock per close saved). */
	ok(sfs_inode_table_open(&root_fh, &t) == 0 &&
	       sfs_inode_prune_enable(
		   t, &(struct sfs_inode_prune_conf){.ring = RING, .from = N + 1}) == 0,
	   "table opens, queueing closes from %d inodes", N + 1);
	for (int k = 0; k <= N; k++) {
		struct sfs_fh fh = mkfh(1, 7000 + (uint64_t)k);
		struct sfs_attr a = mkattr(1, 7000 + (uint64_t)k, 1);
		ino[k < N ? k : 0] = sfs_inode_get(t, &fh, &a, 1);
		if (k == N - 1) /* N inodes: below from */
			for (int j = 40; j < 48; j++) {
				ino[j]->referenced = 0;
				sfs_inode_closed(t, ino[j]);
			}
	}
	ino[50]->referenced = 0;
	sfs_inode_closed(t, ino[50]); /* N + 1 inodes: queued */
	n = sfs_inode_prune_pick(t, sfs_inode_count(t) - 1, ids, N);
	ok(n == 1 && ids[0] == sfs_inode_id(t, ino[50]),
	   "closes below the threshold were not queued, the one at it was");
	sfs_inode_table_close(t);
}

/* The kick: once when a lookup brings the table to kick_at, again only after
 * it went below. */
static int kicks;
static void count_kick(void) { kicks++; }

static void test_prune_kick(void)
{
	struct sfs_fh root_fh = mkfh(0, 1);
	sfs_inode_table *t;
	struct sfs_inode *ino[12];

	ok(sfs_inode_table_open(&root_fh, &t) == 0 &&
	       sfs_inode_prune_enable(
		   t, &(struct sfs_inode_prune_conf){.kick_at = 10, .kick = count_kick}) == 0,
	   "table opens with a kick at 10 inodes");
	for (int k = 0; k < 12; k++) {
		struct sfs_fh fh = mkfh(1, 9000 + (uint64_t)k);
		struct sfs_attr a = mkattr(1, 9000 + (uint64_t)k, 1);
		ino[k] = sfs_inode_get(t, &fh, &a, 1);
		if (k == 8)
			ok(kicks == 0, "9 inodes: no kick");
	}
	ok(kicks == 1, "10, 11, 12 inodes: one kick (%d)", kicks);
	sfs_inode_forget(t, ino[11], 1);
	sfs_inode_forget(t, ino[10], 1);
	struct sfs_fh fh = mkfh(1, 9010);
	struct sfs_attr a = mkattr(1, 9010, 1);
	sfs_inode_get(t, &fh, &a, 2);
	ok(kicks == 1, "down to 11 and up again: still one");
	sfs_inode_forget(t, ino[9], 1);
	sfs_inode_forget(t, ino[8], 1);
	fh = mkfh(1, 9008);
	a = mkattr(1, 9008, 1);
	sfs_inode_get(t, &fh, &a, 3);
	ok(kicks == 2, "below 10 and back to it: a second kick (%d)", kicks);
	sfs_inode_table_close(t);
}

/* A handle of len bytes naming (a, b). */
static struct sfs_fh mkfh_len(uint64_t a, uint64_t b, uint32_t len)
{
	struct sfs_fh fh = mkfh(a, b);

	fh.len = len;
	for (uint32_t i = 24; i < len; i++)
		fh.data[i] = (uint8_t)(i * 7 + b);
	return fh;
}

/* What a restarted daemon needs of the inodes the kernel holds: the table
 * adopted from the region (as a new process would, through the memfd)
 * answers every id the old one gave with the same inode (key, handle, both
 * sizes of it, lookup count, attributes), with nothing open; an orphan
 * keeps its id but not its key; a slot the old process was filling when it
 * stopped (no lookup yet) is freed; another export's region is refused,
 * and so is a region of another layout. The adopted table then works on:
 * lookups, forgets down to nothing, new inodes in the freed slots. */
#define N_ADOPT 3000
static void test_adopt(void)
{
	static uint64_t ids[N_ADOPT];
	static struct sfs_fh fhs[N_ADOPT];
	struct sfs_fh root_fh = mkfh(0, 1), other_root = mkfh(0, 2);
	sfs_inode_table *a, *b;

	ok(sfs_inode_table_open(&root_fh, &a) == 0, "adopt: the first table opens");
	for (int k = 0; k < N_ADOPT; k++) {
		fhs[k] = mkfh_len(7, 5000 + (uint64_t)k, k % 3 ? 28 : 60);
		struct sfs_attr at = mkattr(7, 5000 + (uint64_t)k, (uint64_t)k * 11);
		struct sfs_inode *ino = NULL;
		for (int l = 0; l <= k % 3; l++)
			ino = sfs_inode_get(a, &fhs[k], &at, 5);
		ids[k] = sfs_inode_id(a, ino);
	}
	for (int k = 0; k < N_ADOPT; k += 4) /* holes in the pages */
		sfs_inode_forget(a, sfs_inode_by_id(a, ids[k]), (uint64_t)(k % 3) + 1);
	sfs_inode_by_id(a, ids[1])->pf = token(3); /* the old process's open */
	sfs_inode_by_id(a, ids[1])->n_open = 2;
	struct sfs_fh reused = mkfh_len(7, 99999, 28);
	struct sfs_attr ra = mkattr(7, 5000 + 2, 1);
	struct sfs_inode *fresh = sfs_inode_get(a, &reused, &ra, 6); /* fileid 5002 reused */
	uint64_t fresh_id = sfs_inode_id(a, fresh);
	struct sfs_fh torn_fh = mkfh(7, 123456);
	struct sfs_attr torn_a = mkattr(7, 123456, 1);
	struct sfs_inode *torn = sfs_inode_get(a, &torn_fh, &torn_a, 6);
	uint64_t torn_id = sfs_inode_id(a, torn);
	torn->nlookup = 0; /* as if the process died before counting it */
	uint64_t count_a = sfs_inode_count(a);

	ok(sfs_inode_table_adopt(sfs_inode_table_region_fd(a), &other_root, &b) == -ESTALE,
	   "adopt: another export's region is refused (-ESTALE)");
	int zero = memfd_create("not-inodes", MFD_CLOEXEC);
	ok(zero >= 0 && ftruncate(zero, 1 << 20) == 0 &&
	       sfs_inode_table_adopt(zero, &root_fh, &b) == -EINVAL,
	   "adopt: a region of no table (or another layout) is refused (-EINVAL)");
	close(zero);
	int region = dup(sfs_inode_table_region_fd(a));
	sfs_inode_table_close(a); /* the old process is gone; the memfd is not */
	ok(sfs_inode_table_adopt(region, &root_fh, &b) == 0, "adopt: the region adopted");
	close(region);
	ok(sfs_inode_count(b) == count_a - 1,
	   "adopt: every inode but the torn one (%llu of %llu)",
	   (unsigned long long)sfs_inode_count(b), (unsigned long long)count_a);
	ok(sfs_inode_by_id(b, torn_id) == NULL, "adopt: the torn slot is free");

	bool same = true;
	int live = 0;
	for (int k = 0; k < N_ADOPT; k++) {
		struct sfs_inode *ino = sfs_inode_by_id(b, ids[k]);
		uint64_t want = k % 4 == 0 ? 0 : (uint64_t)(k % 3) + 1;
		if (!want) {
			same = same && (!ino || ino->fileid != 5000 + (uint64_t)k);
			continue;
		}
		live++;
		same = same && ino && ino->fileid == 5000 + (uint64_t)k && ino->fsid == 7 &&
		       same_fh(ino, &fhs[k]) && ino->attr.size == (uint64_t)k * 11 &&
		       (k == 2 ? ino->orphaned && ino->nlookup == want : ino->nlookup == want) &&
		       !ino->pf && ino->n_open == 0;
	}
	ok(same, "adopt: %d inodes under their old ids, same key, handle (28 and 60 B), size, "
		 "lookups; nothing open; forgotten ids not answered", live);
	struct sfs_inode *root = sfs_inode_root(b);
	ok(root && same_fh(root, &root_fh), "adopt: the root is the old root");

	struct sfs_attr at = mkattr(7, 5000 + 5, 55);
	struct sfs_inode *again = sfs_inode_get(b, &fhs[5], &at, 9);
	ok(again && sfs_inode_id(b, again) == ids[5] && again->nlookup == 4,
	   "adopt: a lookup of an adopted key finds the same inode (lookups 3 -> 4)");
	struct sfs_inode *fr = sfs_inode_get(b, &reused, &ra, 9);
	ok(fr && sfs_inode_id(b, fr) == fresh_id,
	   "adopt: a reused fileid finds the new file, the orphan keeps its id only");

	for (int k = 0; k < N_ADOPT; k++) {
		struct sfs_inode *ino = sfs_inode_by_id(b, ids[k]);
		if (ino && (ino->fileid == 5000 + (uint64_t)k))
			sfs_inode_forget(b, ino, ino->nlookup);
	}
	sfs_inode_forget(b, fr, fr->nlookup);
	ok(sfs_inode_count(b) == 0 && sfs_inode_bytes(b) == 0,
	   "adopt: forgotten down to nothing (%llu left)", (unsigned long long)sfs_inode_count(b));
	struct sfs_fh nf = mkfh(8, 1);
	struct sfs_attr na = mkattr(8, 1, 1);
	struct sfs_inode *n1 = sfs_inode_get(b, &nf, &na, 10);
	ok(n1 && sfs_inode_by_id(b, sfs_inode_id(b, n1)) == n1, "adopt: new inodes after it");
	sfs_inode_table_close(b);
}

int main(void)
{
	test_basic();
	test_compact();
	test_slab();
	test_reuse();
	test_growth();
	test_concurrent();
	test_prune_pick();
	test_prune_closed();
	test_prune_kick();
	test_adopt();
	return tap_done();
}
