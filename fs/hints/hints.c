// SPDX-License-Identifier: Apache-2.0
/*
 * hints — epoch hints fetched ahead of their readers. See hints.h for the
 * contract.
 *
 *   sfs_hints ──lock──> pending lists (being built, one per owner)
 *                       lists: active ones, and dead ones fetchers still work on
 *   hint_list  ──────> items (immutable once committed), the window of slots
 *                       [lo, next): item i in slots[i % window]
 *
 * An item's slot: TAKEN while a fetcher resolves and fetches it, then HELD
 * (the fetcher's hold keeps its chunks for the reader) or DONE (skipped, or
 * read before its fetch ended). The window moves on (advance) past DONE
 * slots and past HELD ones that were read, or that lie a window behind the
 * furthest item read (passed: their bytes are waste). A fetcher takes the
 * next item only while next - lo < window and the bytes held unread by all
 * lists stay under mem_bytes: a reader that stops stops the fetch within a
 * window.
 */
#include "hints.h"
#include "hint_list.h"
#include "hint_resolve.h"
#include "../../cache/common/log.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum slot_state { SLOT_FREE, SLOT_TAKEN, SLOT_FLIGHT, SLOT_HELD, SLOT_DONE };

struct hint_slot {
	sfs_pf_file *pf;   /* HELD: the fetcher's hold */
	uint64_t off, end; /* TAKEN with pf, HELD: the item's bytes in the file */
	uint8_t state;	   /* enum slot_state */
	bool read;	   /* a reader asked for bytes of it */
};

#define SFS_HINT_THREADS 4 /* fetcher threads at most */
/* Items resolved ahead of the fetch, per list: a reader's open of any of
 * them is seen (sfs_hints_opened), so a reader that runs ahead of the fetch
 * is noticed and the fetch skips to it instead of fetching behind it. */
#define RES_AHEAD 2048
#define RMAP_CAP  8192 /* (fsid, fileid) -> item, open addressing; cleared when half full */

struct hint_resolved {
	uint64_t idx1; /* item + 1; 0: none */
	int rc;	       /* 0, or why the item is skipped */
	struct sfs_fh fh;
	struct sfs_attr a;
};

struct rmap_entry {
	uint64_t key, idx1;
};

struct hint_list {
	struct hint_list *next;
	uint64_t owner;
	unsigned job; /* index in h->jobs */
	struct sfs_hint_items items;
	uint64_t lo, next_item, hi_read; /* hi_read: 1 + the furthest item read */
	unsigned window_read;		 /* slots in [lo, next_item) marked read */
	uint64_t resolved_to;		 /* items below it were resolved (ahead, or when taken) */
	struct hint_resolved *ahead;	 /* RES_AHEAD: item i at i % RES_AHEAD; NULL: none yet */
	struct rmap_entry *rmap;	 /* RMAP_CAP: whole-file items resolved, by file */
	unsigned rmap_n;
	struct hint_slot *slots; /* window of them */
	unsigned window;	 /* conf.window: how many slots */
	unsigned busy;		 /* fetchers on its items */
	bool dead;		 /* replaced, cancelled or released */
	struct sfs_hint_counts c;
	struct sfs_hint_dirs *dirs; /* directories resolved for it */
};

struct hint_pending {
	struct hint_pending *next;
	uint64_t owner;
	struct sfs_hint_sender sender;
	struct sfs_hint_items items;
};

struct sfs_hints {
	struct sfs_hints_handles hh; /* set at open, then read-only */
	struct sfs_hints_conf conf;
	pthread_mutex_t lock;
	pthread_cond_t work; /* an item to take, or stop */
	/* protected by lock */
	struct hint_list *lists;
	struct hint_pending *pending;
	pthread_t *threads;
	unsigned n_threads;
	bool stop;
	uint64_t held_bytes;
	unsigned in_flight; /* items whose chunks are being fetched (SLOT_FLIGHT) */
	struct flight {
		struct hint_list *L;
		uint64_t idx;
	} * flight;	     /* those items, for the fetch observer */
	unsigned flight_cap; /* room in flight: see flight_room */
	unsigned waiting;    /* fetchers waiting for work */
	uint64_t list_mem;
	struct sfs_hints_stats st;
	struct sfs_hint_job_counts jobs[SFS_HINT_JOBS_MAX];
	unsigned n_jobs;
	unsigned owners; /* atomic: lists and pending lists, for release's fast path */
};

/* Add n to one counter of L, of its job and of the total. */
#define COUNT(h, L, field, n)                                                                      \
	do {                                                                                       \
		(L)->c.field += (n);                                                               \
		(h)->jobs[(L)->job].c.field += (n);                                                \
		(h)->st.all.field += (n);                                                          \
	} while (0)

/* --- lists ------------------------------------------------------------------ */

static unsigned job_index(sfs_hints *h, const char *label)
{
	for (unsigned j = 0; j < h->n_jobs; j++)
		if (!strcmp(h->jobs[j].job, label))
			return j;
	if (h->n_jobs < SFS_HINT_JOBS_MAX - 1 ||
	    (h->n_jobs == SFS_HINT_JOBS_MAX - 1 && !strcmp(label, "other"))) {
		snprintf(h->jobs[h->n_jobs].job, sizeof(h->jobs[0].job), "%s", label);
		return h->n_jobs++;
	}
	return job_index(h, "other"); /* the last slot */
}

static void list_free(sfs_hints *h, struct hint_list *L)
{
	h->list_mem -= sfs_hint_items_bytes(&L->items);
	sfs_hint_items_free(&L->items);
	sfs_hint_dirs_free(L->dirs);
	free(L->ahead);
	free(L->rmap);
	free(L->slots);
	free(L);
	__atomic_fetch_sub(&h->owners, 1, __ATOMIC_RELAXED);
}

/* Let go of slot s's hold; its bytes leave held_bytes if nobody read them
 * (counted as waste when wasted). Caller holds h->lock. */
static void slot_release(sfs_hints *h, struct hint_list *L, struct hint_slot *s, bool wasted)
{
	if (s->state == SLOT_HELD && !s->read) {
		h->held_bytes -= s->end - s->off;
		if (wasted)
			COUNT(h, L, wasted_bytes, s->end - s->off);
	}
	if (s->read)
		L->window_read--;
	if (s->pf)
		sfs_pf_file_hint_release(s->pf);
	*s = (struct hint_slot){.state = SLOT_FREE};
}

/* Item idx of L is in flight no more. Caller holds h->lock. */
static void flight_remove(sfs_hints *h, struct hint_list *L, uint64_t idx)
{
	for (unsigned k = 0; k < h->in_flight; k++)
		if (h->flight[k].L == L && h->flight[k].idx == idx) {
			h->flight[k] = h->flight[--h->in_flight];
			return;
		}
}

/* Mark L dead: its held items go (unread ones as waste); it is freed now,
 * or by the last fetcher working on it. Caller holds h->lock. */
static void list_kill(sfs_hints *h, struct hint_list *L)
{
	L->dead = true;
	for (uint64_t i = L->lo; i < L->next_item; i++) {
		struct hint_slot *s = &L->slots[i % h->conf.window];
		if (s->state == SLOT_FLIGHT) { /* its fetch ends on its own */
			flight_remove(h, L, i);
			COUNT(h, L, fetched_items, 1);
			COUNT(h, L, fetched_bytes, s->end - s->off);
			if (!s->read)
				COUNT(h, L, wasted_bytes, s->end - s->off);
		}
		if (s->state == SLOT_HELD || s->state == SLOT_DONE || s->state == SLOT_FLIGHT)
			slot_release(h, L, s, true);
	}
	L->lo = L->next_item;
	if (L->busy)
		return;
	for (struct hint_list **p = &h->lists; *p; p = &(*p)->next)
		if (*p == L) {
			*p = L->next;
			break;
		}
	list_free(h, L);
}

/* A fetcher is done with an item of L: a dead L goes with the last one.
 * Caller holds h->lock. */
static void list_unbusy(sfs_hints *h, struct hint_list *L)
{
	if (--L->busy || !L->dead)
		return;
	for (struct hint_list **p = &h->lists; *p; p = &(*p)->next)
		if (*p == L) {
			*p = L->next;
			break;
		}
	list_free(h, L);
}

static struct hint_list *list_of(sfs_hints *h, uint64_t owner)
{
	for (struct hint_list *L = h->lists; L; L = L->next)
		if (L->owner == owner && !L->dead)
			return L;
	return NULL;
}

static struct hint_pending **pending_of(sfs_hints *h, uint64_t owner)
{
	struct hint_pending **p = &h->pending;
	while (*p && (*p)->owner != owner)
		p = &(*p)->next;
	return p;
}

static void pending_drop(sfs_hints *h, struct hint_pending **p)
{
	struct hint_pending *q = *p;
	*p = q->next;
	h->list_mem -= sfs_hint_items_bytes(&q->items);
	sfs_hint_items_free(&q->items);
	free(q);
	__atomic_fetch_sub(&h->owners, 1, __ATOMIC_RELAXED);
}

static void *fetcher_main(void *arg);

/* How many fetcher threads a pool of conf->fetchers runs. */
static unsigned fetcher_threads(const struct sfs_hints_conf *conf)
{
	return conf->fetchers < SFS_HINT_THREADS ? conf->fetchers : SFS_HINT_THREADS;
}

/* Room the flight array needs. An item is taken only while in_flight <
 * fetchers, but it joins the flight when its fetch returns, and meanwhile
 * the other threads' items may have joined: at the last moment in_flight
 * was below fetchers, at most fetchers - 1 were in flight and each thread
 * held at most one item taken before, so in_flight <= fetchers - 1 +
 * threads. */
static unsigned flight_room(const struct sfs_hints_conf *conf)
{
	return conf->fetchers + fetcher_threads(conf);
}

/* Start the fetchers with the first list. Caller holds h->lock. */
static int start_fetchers(sfs_hints *h)
{
	if (h->threads)
		return 0;
	/* A thread waits only for a LOOKUP or for budget: a few start what
	 * fetchers many items have in flight. */
	unsigned n = fetcher_threads(&h->conf);
	h->threads = calloc(n, sizeof(*h->threads));
	if (!h->threads)
		return -ENOMEM;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&h->threads[i], NULL, fetcher_main, h) != 0)
			break;
		h->n_threads++;
	}
	if (!h->n_threads) {
		free(h->threads);
		h->threads = NULL;
		return -EAGAIN;
	}
	return 0;
}

int sfs_hints_begin(sfs_hints *h, uint64_t owner, const struct sfs_hint_sender *s)
{
	struct hint_pending *q = calloc(1, sizeof(*q));

	if (!q)
		return -ENOMEM;
	q->owner = owner;
	q->sender = *s;
	pthread_mutex_lock(&h->lock);
	struct hint_pending **p = pending_of(h, owner);
	if (*p)
		pending_drop(h, p); /* a new BEGIN replaces the list being built */
	q->next = h->pending;
	h->pending = q;
	__atomic_fetch_add(&h->owners, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

int sfs_hints_append(sfs_hints *h, uint64_t owner, const struct shardfs_hint_append *a)
{
	int rc = -EINVAL;

	pthread_mutex_lock(&h->lock);
	struct hint_pending **p = pending_of(h, owner);
	if (*p && a->used <= sizeof(a->buf)) {
		size_t before = sfs_hint_items_bytes(&(*p)->items);
		rc = sfs_hint_items_append(&(*p)->items, a->buf, a->used, a->n_items);
		h->list_mem += sfs_hint_items_bytes(&(*p)->items) - before;
		if (rc == 0 && h->list_mem > h->conf.list_mem_max) {
			rc = -ENOMEM; /* the lists of all jobs hold their share of mem_max */
			h->st.refused_memory++;
			static struct sfs_log_ratelimit rl;
			if (sfs_log_ratelimit(&rl, 60000))
				sfs_log(SFS_LOG_WARN, "hints",
					"a hint list was refused: the lists would hold more than "
					"%llu MiB (mem_max / 8)",
					(unsigned long long)(h->conf.list_mem_max >> 20));
		}
	}
	if (rc < 0) {
		if (rc == -EINVAL)
			h->st.refused_invalid++;
		else if (rc == -E2BIG)
			h->st.refused_too_long++;
		if (*p)
			pending_drop(h, p); /* a refused batch drops the whole list */
	}
	pthread_mutex_unlock(&h->lock);
	return rc;
}

int sfs_hints_commit(sfs_hints *h, uint64_t owner, uint64_t *n_items)
{
	struct hint_list *L = calloc(1, sizeof(*L));
	struct hint_slot *slots = calloc(h->conf.window, sizeof(*slots));
	int rc = 0;

	pthread_mutex_lock(&h->lock);
	struct hint_pending **p = pending_of(h, owner);
	if (!*p) {
		h->st.refused_invalid++;
		rc = -EINVAL;
	} else if (!L || !slots || (rc = start_fetchers(h)) < 0 ||
		   !(L->dirs = sfs_hint_dirs_new(&h->hh, &(*p)->sender, h->conf.check_perms))) {
		rc = rc ? rc : -ENOMEM;
	} else {
		struct hint_list *old = list_of(h, owner);
		if (old)
			list_kill(h, old); /* the new list replaces it */
		struct hint_pending *q = *p;
		*p = q->next;
		L->owner = owner;
		size_t before = sfs_hint_items_bytes(&q->items);
		sfs_hint_items_shrink(&q->items); /* doubling left up to half unused */
		h->list_mem -= before - sfs_hint_items_bytes(&q->items);
		L->items = q->items;
		L->slots = slots;
		L->window = h->conf.window;
		L->job = job_index(h, q->sender.job);
		free(q);
		*n_items = L->items.n;
		COUNT(h, L, lists, 1);
		COUNT(h, L, items, L->items.n);
		L->next = h->lists;
		h->lists = L;
		L = NULL;
		slots = NULL;
		pthread_cond_broadcast(&h->work);
	}
	pthread_mutex_unlock(&h->lock);
	if (L)
		sfs_hint_dirs_free(L->dirs);
	free(L);
	free(slots);
	return rc;
}

int sfs_hints_cancel(sfs_hints *h, uint64_t owner)
{
	pthread_mutex_lock(&h->lock);
	struct hint_pending **p = pending_of(h, owner);
	if (*p)
		pending_drop(h, p);
	struct hint_list *L = list_of(h, owner);
	if (L)
		list_kill(h, L);
	pthread_mutex_unlock(&h->lock);
	return 0;
}

void sfs_hints_release(sfs_hints *h, uint64_t owner)
{
	if (!h || !__atomic_load_n(&h->owners, __ATOMIC_RELAXED))
		return;
	sfs_hints_cancel(h, owner);
}

void sfs_hints_status(sfs_hints *h, uint64_t owner, struct shardfs_hint_status *out)
{
	pthread_mutex_lock(&h->lock);
	struct hint_list *L = list_of(h, owner);
	if (L) {
		out->active = L->lo < L->items.n;
		out->n_items = L->items.n;
		out->position = L->lo;
		out->fetched_items = L->c.fetched_items;
		out->fetched_bytes = L->c.fetched_bytes;
		out->read_items = L->c.read_items;
		out->wasted_bytes = L->c.wasted_bytes;
		out->cached_items = L->c.cached_items;
		out->unknown_items = L->c.unknown_items;
		out->denied_items = L->c.denied_items;
	}
	pthread_mutex_unlock(&h->lock);
}

/* --- the window ----------------------------------------------------------------- */

/* How far ahead of L's oldest item still to be read the fetch may go: as
 * far as the reader's own spread (its furthest read less that item: a
 * DataLoader's workers read several batches at once) twice over, and at
 * least four items per fetcher, at most hint_window. A reader of one item
 * at a time keeps a few dozen items in memory, not a thousand. Caller
 * holds h->lock. */
static uint64_t window_of(const sfs_hints *h, const struct hint_list *L)
{
	uint64_t spread = L->hi_read > L->lo ? L->hi_read - L->lo : 0;
	uint64_t w = 2 * spread + 4 * (uint64_t)h->conf.fetchers;
	return w < h->conf.window ? w : h->conf.window;
}

/* Move L's window past the items done with. Caller holds h->lock. */
static void advance(sfs_hints *h, struct hint_list *L)
{
	unsigned w = h->conf.window;

	while (L->lo < L->next_item) {
		struct hint_slot *s = &L->slots[L->lo % w];
		/* Passed: the reader read an item a window further on, or most
		 * of a full window after it (it may also have read this one
		 * before it was held: reads are seen only on held files). */
		uint64_t eff = window_of(h, L), left = L->items.n - L->lo;
		uint64_t full = eff < left ? eff : left; /* a full window, or the list's tail */
		bool passed = L->lo + w <= L->hi_read ||
			      (L->next_item - L->lo >= full && L->window_read >= full - full / 4);
		if (s->state == SLOT_DONE || (s->state == SLOT_HELD && (s->read || passed)))
			slot_release(h, L, s, true);
		else
			break; /* being fetched, or held for a reader still to come */
		L->lo++;
	}
}

/* The next item of some list that may be fetched now: round robin over the
 * lists, each within its window, all within mem_bytes. Caller holds
 * h->lock; on true the slot is TAKEN and its list busy. */
static bool take_item(sfs_hints *h, struct hint_list **out, uint64_t *idx)
{
	struct hint_list *pick = NULL;

	for (struct hint_list *L = h->lists; L; L = L->next) {
		if (L->dead)
			continue;
		advance(h, L);
		if (L->next_item >= L->items.n || L->next_item - L->lo >= window_of(h, L))
			continue;
		if (!pick || L->next_item - L->lo < pick->next_item - pick->lo)
			pick = L; /* the list furthest behind its window goes first */
	}
	if (!pick || h->held_bytes >= h->conf.mem_bytes || h->in_flight >= h->conf.fetchers)
		return false;
	*idx = pick->next_item++;
	if (pick->resolved_to < pick->next_item)
		pick->resolved_to = pick->next_item;
	struct hint_slot *s = &pick->slots[*idx % h->conf.window];
	*s = (struct hint_slot){.state = SLOT_TAKEN};
	pick->busy++;
	*out = pick;
	return true;
}

/* Wake a waiting fetcher if L's window, after moving past what is done
 * with, has room for a few items, so that a wake-up starts several (one per
 * item read cost two context switches an item). Caller holds h->lock. */
static void wake_for_window(sfs_hints *h, struct hint_list *L)
{
	if (!h->waiting)
		return;
	advance(h, L);
	uint64_t w = window_of(h, L), used = L->next_item - L->lo;
	uint64_t batch = w / 2 < 4 ? w / 2 : 4;
	if (used + batch <= w || L->next_item + batch >= L->items.n)
		pthread_cond_signal(&h->work);
}

/* Item i of L (slot s) was read. Returns whether the window may move.
 * Caller holds h->lock. */
static bool mark_read(sfs_hints *h, struct hint_list *L, uint64_t i, struct hint_slot *s)
{
	s->read = true;
	L->window_read++;
	if (s->state == SLOT_HELD) {
		h->held_bytes -= s->end - s->off;
		COUNT(h, L, read_items, 1);
		COUNT(h, L, read_bytes, s->end - s->off);
	}
	if (i + 1 > L->hi_read)
		L->hi_read = i + 1;
	return i == L->lo; /* only then can the window move on */
}

/* --- opens of files resolved ahead ------------------------------------------ */

/* What a reader's open (a whole-file item) or read (a range item, at the
 * range's first byte) of file (fsid, fileid) is matched by. */
static uint64_t rmap_key(uint64_t fsid, uint64_t fileid, uint16_t kind, uint64_t off)
{
	uint64_t k = (fileid ^ (fsid << 32 | fsid >> 32)) * 0x9E3779B97F4A7C15ull;
	k = (k ^ off ^ ((uint64_t)kind << 63)) * 0xC2B2AE3D27D4EB4Full;
	return k ? k : 1;
}

static void rmap_insert(struct hint_list *L, uint64_t key, uint64_t idx)
{
	for (size_t i = key & (RMAP_CAP - 1);; i = (i + 1) & (RMAP_CAP - 1)) {
		struct rmap_entry *e = &L->rmap[i];
		if (e->key == key || !e->key) {
			L->rmap_n += !e->key;
			e->key = key;
			e->idx1 = idx + 1; /* a file named twice: its later item */
			return;
		}
	}
}

/* The table again with only the items not done with: those in the window
 * (by their held file) and those resolved ahead. Caller holds h->lock. */
static void rmap_rebuild(struct hint_list *L)
{
	unsigned window = L->window;

	memset(L->rmap, 0, RMAP_CAP * sizeof(*L->rmap));
	L->rmap_n = 0;
	for (uint64_t i = L->lo; i < L->next_item; i++) {
		const struct hint_slot *s = &L->slots[i % window];
		const struct sfs_hint_item *it = &L->items.items[i];
		uint64_t fsid, fileid;
		if (!s->pf)
			continue;
		sfs_pf_file_id(s->pf, &fsid, &fileid);
		rmap_insert(L, rmap_key(fsid, fileid, it->kind, it->offset), i);
	}
	for (uint64_t i = L->next_item; L->ahead && i < L->resolved_to; i++) {
		const struct hint_resolved *r = &L->ahead[i % RES_AHEAD];
		const struct sfs_hint_item *it = &L->items.items[i];
		if (r->idx1 == i + 1 && r->rc == 0)
			rmap_insert(L, rmap_key(r->a.fsid, r->a.fileid, it->kind, it->offset), i);
	}
}

/* Remember that item idx of L has key `key` (rmap_key). Caller holds
 * h->lock. */
static void rmap_put(struct hint_list *L, uint64_t key, uint64_t idx)
{
	if (!L->rmap && !(L->rmap = calloc(RMAP_CAP, sizeof(*L->rmap))))
		return;
	if (L->rmap_n >= RMAP_CAP / 2)
		rmap_rebuild(L); /* most entries are of items done with */
	rmap_insert(L, key, idx);
}

static uint64_t rmap_get(const struct hint_list *L, uint64_t key)
{
	if (!L->rmap)
		return 0;
	for (size_t i = key & (RMAP_CAP - 1);; i = (i + 1) & (RMAP_CAP - 1)) {
		const struct rmap_entry *e = &L->rmap[i];
		if (!e->key)
			return 0;
		if (e->key == key)
			return e->idx1;
	}
}

/* The reader opened item i of L, at or past the items being fetched: the
 * fetch skips to it (at most a window past lo: slots are addressed by item
 * modulo the window), those skipped counted as passed. Caller holds h->lock. */
static void skip_to(sfs_hints *h, struct hint_list *L, uint64_t i)
{
	L->hi_read = i + 1 > L->hi_read ? i + 1 : L->hi_read;
	advance(h, L);		     /* what lies a window behind i goes as passed */
	if (L->lo == L->next_item) { /* nothing in the window: jump */
		COUNT(h, L, passed_items, i + 1 - L->next_item);
		L->lo = L->next_item = i + 1;
		L->resolved_to = L->resolved_to > L->next_item ? L->resolved_to : L->next_item;
		return;
	}
	uint64_t to = i + 1 < L->lo + h->conf.window ? i + 1 : L->lo + h->conf.window;

	for (uint64_t j = L->next_item; j < to; j++)
		L->slots[j % h->conf.window] = (struct hint_slot){.state = SLOT_DONE};
	if (to > L->next_item)
		COUNT(h, L, passed_items, to - L->next_item);
	L->next_item = to > L->next_item ? to : L->next_item;
	if (L->resolved_to < L->next_item)
		L->resolved_to = L->next_item;
}

/* A reader asked for [off, end) of f, which some list holds: its item is
 * read (found by file and offset: rmap). Prefetch's read observer: no
 * prefetch lock held. */
static void observe_read(void *arg, sfs_pf_file *f, uint64_t off, uint64_t end)
{
	sfs_hints *h = arg;
	uint64_t fsid, fileid;

	sfs_pf_file_id(f, &fsid, &fileid);
	/* The item: the file's whole-file item, else the range that starts at
	 * off (a record's read starts at its first byte). */
	uint64_t kfile = rmap_key(fsid, fileid, SHARDFS_HINT_FILE, 0);
	uint64_t krange = rmap_key(fsid, fileid, SHARDFS_HINT_RANGE, off);
	pthread_mutex_lock(&h->lock);
	for (struct hint_list *L = h->lists; L; L = L->next) {
		uint64_t idx1 = L->dead ? 0 : rmap_get(L, kfile);
		if (!idx1 && !L->dead)
			idx1 = rmap_get(L, krange);
		if (!idx1 || idx1 - 1 < L->lo || idx1 - 1 >= L->items.n)
			continue;
		uint64_t i = idx1 - 1;
		bool moved = false;
		if (i >= L->next_item) { /* past the fetch: the reader is there */
			skip_to(h, L, i);
			moved = true;
		} else {
			struct hint_slot *s = &L->slots[i % h->conf.window];
			if (!s->read && s->state != SLOT_DONE && s->state != SLOT_FREE)
				moved = mark_read(h, L, i, s);
		}
		if (moved)
			wake_for_window(h, L);
	}
	pthread_mutex_unlock(&h->lock);
}

void sfs_hints_opened(sfs_hints *h, uint64_t fsid, uint64_t fileid)
{
	if (!h || !__atomic_load_n(&h->owners, __ATOMIC_RELAXED))
		return;
	pthread_mutex_lock(&h->lock);
	for (struct hint_list *L = h->lists; L; L = L->next) {
		uint64_t idx1 =
		    L->dead ? 0 : rmap_get(L, rmap_key(fsid, fileid, SHARDFS_HINT_FILE, 0));
		if (!idx1 || idx1 - 1 < L->lo || idx1 - 1 >= L->items.n)
			continue;
		uint64_t i = idx1 - 1;
		bool moved = false;
		if (i >= L->next_item) {
			skip_to(h, L, i);
			moved = true;
		} else {
			struct hint_slot *s = &L->slots[i % h->conf.window];
			if (!s->read && s->state != SLOT_DONE && s->state != SLOT_FREE)
				moved |= mark_read(h, L, i, s);
		}
		if (i + 1 > L->hi_read)
			L->hi_read = i + 1;
		if (moved)
			wake_for_window(h, L);
	}
	pthread_mutex_unlock(&h->lock);
}

/* --- fetching an item -------------------------------------------------------- */

enum item_outcome { ITEM_FETCHED, ITEM_CACHED, ITEM_UNKNOWN, ITEM_DENIED };

struct item_result {
	enum item_outcome outcome;
	sfs_pf_file *pf; /* FETCHED: held */
	uint64_t off, end;
};

/* Whether L no longer needs item idx. Takes h->lock. */
static bool item_gone(sfs_hints *h, struct hint_list *L, uint64_t idx)
{
	pthread_mutex_lock(&h->lock);
	bool gone = h->stop || L->dead || idx + h->conf.window <= L->hi_read ||
		    L->slots[idx % h->conf.window].read;
	pthread_mutex_unlock(&h->lock);
	return gone;
}

/* Item idx of L as resolved ahead, if it was. Takes h->lock. */
static bool take_resolved(sfs_hints *h, struct hint_list *L, uint64_t idx, int *rc,
			  struct sfs_fh *fh, struct sfs_attr *a)
{
	bool hit = false;

	pthread_mutex_lock(&h->lock);
	struct hint_resolved *e = L->ahead ? &L->ahead[idx % RES_AHEAD] : NULL;
	if (e && e->idx1 == idx + 1) {
		*rc = e->rc;
		*fh = e->fh;
		*a = e->a;
		e->idx1 = 0;
		hit = true;
	}
	pthread_mutex_unlock(&h->lock);
	return hit;
}

/* The next item of some list to resolve ahead of its fetch (RES_AHEAD
 * at most past what is being fetched). Caller holds h->lock; on true the
 * list is busy. */
static bool take_resolve(sfs_hints *h, struct hint_list **out, uint64_t *idx)
{
	for (struct hint_list *L = h->lists; L; L = L->next)
		if (!L->dead && L->resolved_to < L->items.n &&
		    L->resolved_to < L->next_item + RES_AHEAD) {
			*idx = L->resolved_to++;
			L->busy++;
			*out = L;
			return true;
		}
	return false;
}

/* Resolve item idx of L ahead of its fetch; called without h->lock, returns
 * with it held. */
static void resolve_ahead(sfs_hints *h, struct hint_list *L, uint64_t idx)
{
	const struct sfs_hint_item *it = &L->items.items[idx]; /* immutable */
	struct hint_resolved r = {.idx1 = idx + 1};

	r.rc = sfs_hint_resolve(L->dirs, L->items.arena + it->path_off, it->path_len, &r.fh, &r.a);
	pthread_mutex_lock(&h->lock);
	if (!L->dead && idx >= L->next_item &&
	    (L->ahead || (L->ahead = calloc(RES_AHEAD, sizeof(*L->ahead)))))
		L->ahead[idx % RES_AHEAD] = r;
	if (!L->dead && r.rc == 0)
		rmap_put(L, rmap_key(r.a.fsid, r.a.fileid, it->kind, it->offset), idx);
	list_unbusy(h, L);
}

/* Resolve, skip or fetch item idx of L. No lock held. */
static struct item_result fetch_item(sfs_hints *h, struct hint_list *L, uint64_t idx)
{
	const struct sfs_hint_item *it = &L->items.items[idx]; /* immutable */
	const char *path = L->items.arena + it->path_off;
	struct item_result r = {.outcome = ITEM_UNKNOWN};
	struct sfs_fh fh;
	struct sfs_attr a;
	int rc;

	if (!take_resolved(h, L, idx, &rc, &fh, &a)) {
		rc = sfs_hint_resolve(L->dirs, path, it->path_len, &fh, &a);
		pthread_mutex_lock(&h->lock);
		if (rc == 0)
			rmap_put(L, rmap_key(a.fsid, a.fileid, it->kind, it->offset), idx);
		pthread_mutex_unlock(&h->lock);
	}
	if (rc < 0) {
		r.outcome = rc == -EACCES ? ITEM_DENIED : ITEM_UNKNOWN;
		return r;
	}
	r.off = it->length ? it->offset : 0;
	r.end = it->length ? it->offset + it->length : a.size;
	r.end = r.end < a.size ? r.end : a.size;
	if (r.off >= r.end) {
		if (!it->length && !a.size)
			r.outcome = ITEM_CACHED; /* an empty file: nothing to fetch */
		return r;			 /* else a range past its end: unknown */
	}
	struct sfs_file_version v = {.dataset = sfs_hint_path_dataset(&h->hh, path, it->path_len),
				     .fsid = a.fsid,
				     .fileid = a.fileid,
				     .size = a.size,
				     .mtime_s = a.mtime.tv_sec,
				     .mtime_ns = (uint32_t)a.mtime.tv_nsec,
				     .ctime_s = a.ctime.tv_sec,
				     .ctime_ns = (uint32_t)a.ctime.tv_nsec};
	sfs_pf_file *pf;
	if (sfs_pf_file_open_version(h->hh.prefetch, &fh, &v, &pf) < 0)
		return r;
	sfs_pf_file_hint_hold(pf);
	sfs_pf_file_unref(pf); /* the hold has its own reference */
	/* Published before the fetch, so that a reader that gets there first
	 * marks the item read. */
	pthread_mutex_lock(&h->lock);
	struct hint_slot *s = &L->slots[idx % h->conf.window];
	s->pf = pf;
	s->off = r.off;
	s->end = r.end;
	pthread_mutex_unlock(&h->lock);
	/* Started, not waited for: the fetch observer sees its chunks land.
	 * Only a budget with no room makes this thread wait and try again. */
	struct sfs_pf_ahead ahead;
	for (bool first = true;; first = false) {
		sfs_pf_file_fetch_ahead(pf, r.off, r.end, 0, &ahead);
		if (first && ahead.cached) {
			r.outcome = ITEM_CACHED;
			return r;
		}
		if (!ahead.pending || item_gone(h, L, idx))
			break;
		nanosleep(&(struct timespec){.tv_nsec = 5 * 1000 * 1000}, NULL);
	}
	r.outcome = ITEM_FETCHED;
	r.pf = pf;
	return r;
}

/* Item s of L is fetched (its chunks landed, or it was cached by the time
 * it was started): held for its reader, or already read. Caller holds
 * h->lock. */
static void slot_fetched(sfs_hints *h, struct hint_list *L, struct hint_slot *s)
{
	uint64_t bytes = s->end - s->off;

	COUNT(h, L, fetched_items, 1);
	COUNT(h, L, fetched_bytes, bytes);
	s->state = SLOT_HELD;
	if (s->read) {
		COUNT(h, L, read_items, 1);
		COUNT(h, L, read_bytes, bytes);
	} else {
		h->held_bytes += bytes;
	}
}

/* A chunk of f, which some list holds, landed: the items of f in flight
 * whose chunks all did are fetched. Prefetch's fetch observer, on an I/O
 * thread with no prefetch lock held (the file locks taken here come after
 * h->lock). */
static void observe_fetched(void *arg, sfs_pf_file *f)
{
	sfs_hints *h = arg;
	bool freed = false;

	pthread_mutex_lock(&h->lock);
	for (unsigned k = 0; k < h->in_flight;) {
		struct hint_list *L = h->flight[k].L;
		struct hint_slot *s = &L->slots[h->flight[k].idx % h->conf.window];
		if (s->pf != f || sfs_pf_file_range_busy(f, s->off, s->end)) {
			k++;
			continue;
		}
		h->flight[k] = h->flight[--h->in_flight];
		slot_fetched(h, L, s);
		freed = true;
	}
	/* Room for a few more in flight: one wake-up starts several. */
	unsigned batch = h->conf.fetchers / 2 < 4 ? h->conf.fetchers / 2 : 4;
	if (freed && h->waiting && h->in_flight + batch <= h->conf.fetchers)
		pthread_cond_signal(&h->work);
	pthread_mutex_unlock(&h->lock);
}

/* Record the outcome of item idx of L. Caller holds h->lock. */
static void item_finish(sfs_hints *h, struct hint_list *L, uint64_t idx, struct item_result *r)
{
	struct hint_slot *s = &L->slots[idx % h->conf.window];
	uint64_t bytes = r->end - r->off;

	if (r->outcome == ITEM_FETCHED || r->outcome == ITEM_CACHED)
		COUNT(h, L, item_bytes, bytes);
	if (r->outcome == ITEM_UNKNOWN)
		COUNT(h, L, unknown_items, 1);
	else if (r->outcome == ITEM_DENIED)
		COUNT(h, L, denied_items, 1);
	else if (r->outcome == ITEM_CACHED)
		COUNT(h, L, cached_items, 1);
	if (r->outcome != ITEM_FETCHED || L->dead) {
		s->state = SLOT_DONE; /* released by advance (or list_kill) */
		if (r->outcome == ITEM_FETCHED) {
			COUNT(h, L, fetched_items, 1);
			COUNT(h, L, fetched_bytes, bytes);
			COUNT(h, L, wasted_bytes, s->read ? 0 : bytes);
		}
	} else if (sfs_pf_file_range_busy(r->pf, r->off, r->end)) {
		s->state = SLOT_FLIGHT; /* observe_fetched ends it (checked under h->lock) */
		assert(h->in_flight < h->flight_cap);
		h->flight[h->in_flight++] = (struct flight){.L = L, .idx = idx};
	} else {
		slot_fetched(h, L, s);
	}
	if (L->dead && s->pf) {
		sfs_pf_file_hint_release(s->pf);
		s->pf = NULL;
		s->state = SLOT_FREE;
	}
	list_unbusy(h, L);
	/* No wake-up: this fetcher takes the next item itself. */
}

static void *fetcher_main(void *arg)
{
	sfs_hints *h = arg;
	struct hint_list *L;
	uint64_t idx;

	pthread_setname_np(pthread_self(), "sfs-hint"); /* top -H, perf --sort comm */
	pthread_mutex_lock(&h->lock);
	while (!h->stop) {
		if (take_item(h, &L, &idx)) {
			pthread_mutex_unlock(&h->lock);
			struct item_result r = fetch_item(h, L, idx);
			pthread_mutex_lock(&h->lock);
			item_finish(h, L, idx, &r);
		} else if (take_resolve(h, &L, &idx)) {
			pthread_mutex_unlock(&h->lock);
			resolve_ahead(h, L, idx); /* returns with the lock */
		} else {
			/* Woken by a commit, a read, an open or a fetch that
			 * ends; the timeout drops items readers passed meanwhile. */
			struct timespec until = sfs_deadline(CLOCK_REALTIME, 100 * 1000);
			h->waiting++;
			pthread_cond_timedwait(&h->work, &h->lock, &until);
			h->waiting--;
		}
	}
	pthread_mutex_unlock(&h->lock);
	return NULL;
}

/* --- open, close, stats -------------------------------------------------------- */

int sfs_hints_open(const struct sfs_hints_handles *hh, const struct sfs_hints_conf *conf,
		   sfs_hints **out)
{
	sfs_hints *h = calloc(1, sizeof(*h));

	if (!h)
		return -ENOMEM;
	h->hh = *hh;
	h->conf = *conf;
	if (!h->conf.window)
		h->conf.window = 1;
	if (!h->conf.fetchers)
		h->conf.fetchers = 1;
	h->flight_cap = flight_room(&h->conf);
	if (!(h->flight = calloc(h->flight_cap, sizeof(*h->flight)))) {
		free(h);
		return -ENOMEM;
	}
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->work, NULL);
	snprintf(h->jobs[SFS_HINT_JOBS_MAX - 1].job, sizeof(h->jobs[0].job), "other");
	sfs_prefetch_set_observers(hh->prefetch, observe_read, observe_fetched, h);
	*out = h;
	return 0;
}

void sfs_hints_close(sfs_hints *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->lock);
	h->stop = true;
	pthread_cond_broadcast(&h->work);
	pthread_mutex_unlock(&h->lock);
	for (unsigned i = 0; i < h->n_threads; i++)
		pthread_join(h->threads[i], NULL);
	free(h->threads);
	while (h->pending)
		pending_drop(h, &h->pending);
	while (h->lists)
		list_kill(h, h->lists);
	pthread_cond_destroy(&h->work);
	pthread_mutex_destroy(&h->lock);
	free(h->flight);
	free(h);
}

size_t sfs_hints_stats(sfs_hints *h, struct sfs_hints_stats *out, struct sfs_hint_job_counts *jobs,
		       size_t max)
{
	size_t n = 0;

	memset(out, 0, sizeof(*out));
	if (!h)
		return 0;
	pthread_mutex_lock(&h->lock);
	*out = h->st;
	out->held_bytes = h->held_bytes;
	out->list_mem_bytes = h->list_mem;
	for (struct hint_list *L = h->lists; L; L = L->next)
		out->active_lists += !L->dead && L->lo < L->items.n;
	for (unsigned j = 0; j < SFS_HINT_JOBS_MAX && n < max; j++)
		if (h->jobs[j].c.lists)
			jobs[n++] = h->jobs[j];
	pthread_mutex_unlock(&h->lock);
	return n;
}
