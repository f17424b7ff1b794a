// SPDX-License-Identifier: Apache-2.0
/*
 * test_open_file — fs/ops/open_file.c alone: the inode's open state as
 * opens of one version and of a newer one come and go, the fetch states'
 * references, a dead server's open made again for the version it read,
 * and an open file's regions dropped at release.
 *
 * Its neighbours are faked here: cache/prefetch's file states (counted
 * references, the versions they were made for), the inode's lock and
 * handle (fs/inode), the handle table (fs/kernel/handles.c: this process's
 * handles, and a dead server's ones adopted) and cache/staging's regions.
 * Owns: nothing. Single-threaded.
 */
#include "tap.h"
#include "../../fs/ops/open_file.h"
#include "../../fs/kernel/handles.h"

#include <errno.h>
#include <pthread.h>

/* --- fake cache/prefetch ---------------------------------------------------- */

struct sfs_pf_file {
	int refs;
	int idle_drops, opened;
	struct sfs_file_version v;
};

static int n_live, n_made, fail_open;

int sfs_pf_file_open_version(sfs_prefetch *p, const struct sfs_fh *fh,
			     const struct sfs_file_version *v, sfs_pf_file **out)
{
	(void)p;
	(void)fh;
	if (fail_open)
		return -ENOMEM;
	sfs_pf_file *f = calloc(1, sizeof(*f));
	f->refs = 1;
	f->v = *v;
	n_live++;
	n_made++;
	*out = f;
	return 0;
}

void sfs_pf_file_ref(sfs_pf_file *f) { f->refs++; }

void sfs_pf_file_unref(sfs_pf_file *f)
{
	if (--f->refs == 0) {
		n_live--;
		free(f);
	}
}

void sfs_pf_file_drop_idle(sfs_pf_file *f) { f->idle_drops++; }

void sfs_pf_file_opened(sfs_pf_file *f) { f->opened++; }

/* --- fake fs/inode -------------------------------------------------------- */

static pthread_mutex_t inode_lock = PTHREAD_MUTEX_INITIALIZER;
static int lock_depth;

void sfs_inode_lock(const struct sfs_inode *ino)
{
	(void)ino;
	pthread_mutex_lock(&inode_lock);
	lock_depth++;
}

void sfs_inode_unlock(const struct sfs_inode *ino)
{
	(void)ino;
	lock_depth--;
	pthread_mutex_unlock(&inode_lock);
}

struct sfs_fh sfs_inode_fh(const struct sfs_inode *ino)
{
	struct sfs_fh fh = {.len = ino->fh_len};
	memcpy(fh.data, ino->fh, ino->fh_len);
	return fh;
}

void sfs_inode_attr_get(const struct sfs_inode *ino, struct sfs_attr *out)
{
	memset(out, 0, sizeof(*out));
	out->fsid = ino->fsid;
	out->fileid = ino->fileid;
	out->size = ino->attr.size;
	out->mtime = (struct timespec){.tv_sec = ino->attr.mtime_s, .tv_nsec = ino->attr.mtime_ns};
	out->ctime = (struct timespec){.tv_sec = ino->attr.ctime_s, .tv_nsec = ino->attr.ctime_ns};
}

static struct sfs_inode *inode_new(uint64_t fileid)
{
	struct sfs_inode *i = calloc(1, sizeof(*i) + 8);
	i->fsid = 7;
	i->fileid = fileid;
	i->fh_len = 8;
	memcpy(i->fh, "handle!!", 8);
	return i;
}

/* --- fake fs/kernel/handles.c: fh is a small number here ------------------ */

#define N_FH 8
static void *mine[N_FH];    /* this process's states */
static void *adopted[N_FH]; /* states made again for a dead server's fh */
static void *adopt_race;    /* set: another thread adopts this first */

void *sfs_handle_get(uint64_t fh) { return fh < N_FH ? mine[fh] : NULL; }

void *sfs_handle_adopted(uint64_t fh) { return fh < N_FH ? adopted[fh] : NULL; }

void *sfs_handle_adopt(uint64_t fh, void *state)
{
	if (adopt_race && !adopted[fh])
		adopted[fh] = adopt_race;
	if (!adopted[fh])
		adopted[fh] = state;
	return adopted[fh];
}

/* --- fake cache/staging ----------------------------------------------------- */

static int n_regions_freed;

void sfs_stage_region_free(sfs_stage_region *r)
{
	(void)r;
	n_regions_freed++;
}

/* --- the tests ---------------------------------------------------------------- */

static int n_seen, seen_unchanged;

static void seen(struct sfs_inode *i, bool unchanged)
{
	(void)i;
	n_seen++;
	seen_unchanged = unchanged;
	ok(lock_depth == 1, "the seen callback runs under the inode lock");
}

static struct sfs_file_version version(struct sfs_inode *i, uint64_t size, int64_t mtime_s)
{
	struct sfs_attr a = {.fsid = i->fsid, .fileid = i->fileid, .size = size};
	a.mtime.tv_sec = mtime_s;
	a.ctime.tv_sec = mtime_s;
	return sfs_open_file_version(&a, i);
}

static void test_versions(void)
{
	struct sfs_inode *i = inode_new(100);
	struct sfs_open_state st;
	sfs_pf_file *a, *b, *c;

	i->dataset = 5;
	struct sfs_file_version v1 = version(i, 1000, 10);
	ok(v1.dataset == 5 && v1.fsid == 7 && v1.fileid == 100 && v1.size == 1000 &&
	       v1.mtime_s == 10,
	   "a version is the inode's dataset, fsid, fileid, size and times");

	ok(sfs_open_file_begin(NULL, i, &v1, seen, &a, &st) == 0, "first open of v1");
	ok(!st.unchanged && !st.changed && st.first_epoch,
	   "first open: not unchanged, nothing to drop, the first epoch");
	ok(n_seen == 1 && !seen_unchanged, "seen told: a version not opened before");
	ok(i->pf == a && i->n_open == 1 && a->refs == 2,
	   "the inode holds the fetch state, and the open one more reference");
	ok(i->have_opened && i->opened.size == 1000, "the version opened is recorded");

	ok(sfs_open_file_begin(NULL, i, &v1, seen, &b, &st) == 0, "second open of v1");
	ok(b == a && n_made == 1, "it shares v1's fetch state");
	ok(st.unchanged && !st.changed && st.first_epoch,
	   "unchanged: the kernel's pages are of v1; still its first epoch");
	ok(n_seen == 2 && seen_unchanged, "seen told: the version last opened");

	struct sfs_file_version v2 = version(i, 2000, 20);
	ok(sfs_open_file_begin(NULL, i, &v2, seen, &c, &st) == 0, "open of v2 while v1 is open");
	ok(c != a && n_made == 2 && i->pf == c, "v2 gets a fetch state of its own");
	ok(st.changed && !st.unchanged, "changed: the kernel's pages of v1 must go");
	ok(a->refs == 2 && c->refs == 2,
	   "v1's state keeps its opens' references only; v2's: the inode's and the open's");
	ok(i->n_open == 3 && i->opened.size == 2000, "three opens, v2 the version last opened");

	ok(!sfs_open_file_end(i, a), "closing one open of v1: not the last");
	ok(a->refs == 1 && a->idle_drops == 1, "its reference goes, its idle chunks dropped");
	ok(!sfs_open_file_end(i, b), "closing the other open of v1: not the last");
	ok(n_live == 1, "v1's fetch state is gone with its last open");
	i->referenced = 1;
	ok(sfs_open_file_end(i, c), "closing v2's open: the last");
	ok(!i->pf && i->n_open == 0 && !i->first_epoch && !i->referenced,
	   "the inode lets go of its fetch state, its first epoch and its second chance");
	ok(n_live == 0, "no fetch state outlives the last close");
	ok(i->have_opened && i->opened.size == 2000,
	   "the version last opened is kept across closes (keep_cache)");

	ok(sfs_open_file_begin(NULL, i, &v2, seen, &a, &st) == 0 && st.unchanged &&
	       st.first_epoch == 0,
	   "reopening v2 after every close: unchanged, past its first epoch");
	sfs_open_file_end(i, a);
	ok(n_live == 0 && lock_depth == 0, "balanced again, no lock held");
	free(i);
}

static void test_open_fails(void)
{
	struct sfs_inode *i = inode_new(101);
	struct sfs_open_state st;
	sfs_pf_file *a = NULL;
	struct sfs_file_version v = version(i, 10, 1);

	fail_open = 1;
	ok(sfs_open_file_begin(NULL, i, &v, NULL, &a, &st) == -ENOMEM,
	   "a fetch state that cannot be made: -ENOMEM");
	fail_open = 0;
	ok(i->n_open == 0 && !i->pf && lock_depth == 0 && n_live == 0,
	   "nothing counted, no lock left held");
	free(i);
}

/* One open of inode i's version (size 10, t 1) as an open file of uid's,
 * region ids from first_region_id. */
static struct sfs_open_file *open_one(struct sfs_inode *i, uid_t uid, uint64_t first_region_id)
{
	struct sfs_open_state st;
	sfs_pf_file *pf;
	struct sfs_file_version v = version(i, 10, 1);

	if (sfs_open_file_begin(NULL, i, &v, NULL, &pf, &st) < 0)
		return NULL;
	return sfs_open_file_new(pf, uid, first_region_id);
}

static void test_regions(void)
{
	struct sfs_inode *i = inode_new(102);
	struct sfs_open_file *of = open_one(i, 1000, (3ull << 32) | 1);
	sfs_pf_file *pf = of ? of->pf : NULL;
	ok(of && of->pf == pf && of->uid == 1000 && of->next_region_id == ((3ull << 32) | 1),
	   "a new open file reads pf, for its opener, region ids from the epoch's first");
	static char fake_region[3];
	for (int k = 0; k < 3; k++) {
		of->regions[k * 5].id = of->next_region_id++;
		of->regions[k * 5].region = (sfs_stage_region *)&fake_region[k];
	}
	n_regions_freed = 0;
	sfs_open_file_drop_regions(of);
	ok(n_regions_freed == 3, "drop_regions frees every region (%d)", n_regions_freed);
	int left = 0;
	for (int k = 0; k < SFS_MAX_REGIONS; k++)
		left += of->regions[k].id != 0 || of->regions[k].region != NULL;
	ok(left == 0, "and leaves no slot taken");
	ok(pthread_mutex_trylock(&of->lock) == 0, "the open file's lock is free after it");
	pthread_mutex_unlock(&of->lock);
	n_regions_freed = 0;
	ok(sfs_open_file_free(of) == pf && n_regions_freed == 0,
	   "free hands the fetch state back to the caller");
	ok(sfs_open_file_end(i, pf) && n_live == 0, "which ends the open");
	free(i);
}

static void test_dead_server_open(void)
{
	struct sfs_inode *i = inode_new(103);

	/* This process's open: found as it is. */
	struct sfs_open_file *of = open_one(i, 0, 1);
	sfs_pf_file *pf = of->pf;
	mine[1] = of;
	ok(sfs_open_file_of(NULL, i, 1, 1) == of, "this process's open file");
	ok(pf->refs == 2, "found without a new reference");
	mine[1] = NULL;
	sfs_open_file_end(i, sfs_open_file_free(of));

	/* A dead server's open of version (size 300, t 30); the server's
	 * attributes say the file is (size 900, t 90) by now. */
	i->have_opened = 1;
	i->opened = (struct sfs_inode_version){.size = 300, .mtime_s = 30, .ctime_s = 30};
	i->attr.size = 900;
	i->attr.mtime_s = i->attr.ctime_s = 90;
	int made = n_made;
	struct sfs_open_file *dead = sfs_open_file_of(NULL, i, 2, (2ull << 32) | 1);
	ok(dead && n_made == made + 1, "a dead server's fh: an open file made again");
	ok(dead && dead->pf->v.size == 300 && dead->pf->v.mtime_s == 30,
	   "for the version that open read, not the newer one (no mix)");
	ok(dead && dead->pf->opened == 1, "its fetch state told of the open");
	ok(dead && dead->next_region_id == ((2ull << 32) | 1),
	   "its regions numbered in this epoch");
	ok(i->n_open == 1, "counted among the inode's opens");
	ok(sfs_open_file_of(NULL, i, 2, 1) == dead && n_made == made + 1,
	   "the second use finds the adopted one");

	/* Another thread adopts fh 3 first: ours is undone. */
	static struct sfs_open_file other;
	adopt_race = &other;
	ok(sfs_open_file_of(NULL, i, 3, 1) == &other, "a lost race returns the winner's");
	adopt_race = NULL;
	ok(i->n_open == 1, "and the loser's open is ended");

	struct sfs_inode *ctl = calloc(1, sizeof(*ctl));
	ctl->fileid = SFS_INODE_STATS_FILEID;
	ok(sfs_open_file_of(NULL, ctl, 4, 1) == NULL, "no open file for a virtual inode");
	free(ctl);

	sfs_open_file_end(i, sfs_open_file_free(dead));
	adopted[2] = NULL;
	ok(i->n_open == 0 && n_live == 0 && lock_depth == 0, "balanced after the release");
	free(i);
}

int main(void)
{
	test_versions();
	test_open_fails();
	test_regions();
	test_dead_server_open();
	return tap_done();
}
