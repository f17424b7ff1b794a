// SPDX-License-Identifier: Apache-2.0
/*
 * store/policy — what the cache admits and what it evicts to make room, by
 * dataset, and the per-dataset counters a user reads the decisions from.
 *
 * lru and pin are rules of capacity alone (make_room in index.c,
 * write_refusal in writer.c). auto (store.h) decides by dataset, from what
 * this file keeps per dataset (struct pol_ds, by the dataset table's slot):
 *
 *   held     its per-file objects' bytes (kept as they change) plus the
 *            bytes of the segments counted under it (recounted by
 *            seg_refresh: a scan of the segment table, not of the index)
 *   read     when a reader last got bytes of it (lock-free, read path)
 *   reused   POL_GHOST_REUSE ghost hits (a chunk offered again after it was
 *            refused or evicted) or a warm-up, within idle_ms
 *
 * While the cache has room, a dataset takes it, except what other datasets
 * being offered bytes now still lack of an equal share once it holds its
 * own (reserved_for_others). Once the cache is full, a write of dataset d
 * may evict dataset x != d
 * when x is idle (not read for idle_ms); or, d being reused, when x is not
 * in use (not read for idle_ms / 20), or x is in use but holds more than an
 * equal share of the cache among the datasets in use while d holds less.
 * Nothing of d is ever evicted for d. A refusal says which rule stopped it:
 * full (nothing another dataset holds may go), scan (a first pass; the
 * others were read within idle_ms), share (reused, at its share).
 *
 * The ghost list is a direct-mapped table of POL_GHOSTS tagged 64-bit
 * hashes of (key, chunk): a slot keeps the last chunk hashed to it, so it
 * remembers a sample of what was refused or evicted lately, which is all
 * that telling reuse from a one-off pass needs.
 *
 * Not here: the evictions themselves (index.c, the writer), the dataset
 * names and read counters (datasets.c).
 * Threading: see the fields of struct pol_ds; every function says whether
 * the caller holds s->lock.
 */
#include "store_int.h"

#define GHOST_MIX	 0x9e3779b97f4a7c15ull
#define WINDOW_MIN_BYTES (256ull << 20)

int policy_open(sfs_store *s)
{
	s->pol = calloc(POL_SLOTS, sizeof(*s->pol));
	s->pol_live = calloc(POL_SLOTS, sizeof(*s->pol_live));
	s->ghosts = calloc(POL_GHOSTS, sizeof(*s->ghosts));
	if (!s->pol || !s->pol_live || !s->ghosts)
		return -ENOMEM;
	for (size_t i = 0; i < POL_SLOTS; i++)
		s->pol[i].win_ppm = -1;
	return 0;
}

void policy_close(sfs_store *s)
{
	free(s->pol);
	free(s->pol_live);
	free(s->ghosts);
}

static size_t slot_of(sfs_store *s, uint32_t id)
{
	long at = sfs_dsets_find(s->dsets, id);
	return at < 0 ? SFS_DSETS_MAX : (size_t)at;
}

/* The entry of dataset id, listed. Caller holds lock. */
static struct pol_ds *pol_get(sfs_store *s, uint32_t id)
{
	size_t at = slot_of(s, id);
	struct pol_ds *d = &s->pol[at];

	if (!d->listed) {
		d->listed = true;
		d->id = at == SFS_DSETS_MAX ? 0 : id;
		s->pol_live[s->n_pol_live++] = (uint16_t)at;
	}
	return d;
}

static uint64_t held(const struct pol_ds *d) { return d->obj_bytes + d->seg_bytes; }

static uint64_t idle_ms(const sfs_store *s)
{
	return s->conf.idle_ms ? s->conf.idle_ms : SFS_STORE_IDLE_MS_DEFAULT;
}

static uint64_t last_read(const struct pol_ds *d)
{
	return __atomic_load_n(&d->last_read_ms, __ATOMIC_RELAXED);
}

static bool in_use(const sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	uint64_t t = last_read(d);
	return t && now - t < idle_ms(s) / 20;
}

static bool idle(const sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	uint64_t t = last_read(d);
	return !t || now - t >= idle_ms(s);
}

/* Caller holds lock. */
static bool reused(const sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	return d->ghost_hits >= POL_GHOST_REUSE && now - d->reuse_ms < idle_ms(s);
}

void obj_bytes_add(sfs_store *s, sfs_store_obj *o, int64_t delta)
{
	s->used_bytes += (uint64_t)delta;
	o->used_bytes += (uint64_t)delta;
	/* atomic: the read path reads it without the lock (the window) */
	__atomic_fetch_add(&pol_get(s, o->dataset)->obj_bytes, (uint64_t)delta, __ATOMIC_RELAXED);
}

void policy_restore_reads(sfs_store *s)
{
	struct timespec ts;
	uint64_t now = sfs_now_ms();

	clock_gettime(CLOCK_REALTIME, &ts);
	for (size_t i = 0; i < s->n_pol_live; i++) {
		size_t at = s->pol_live[i];
		struct sfs_dset_info in;
		if (at == SFS_DSETS_MAX || !sfs_dsets_get(s->dsets, at, &in) || !in.last_use_s)
			continue;
		uint64_t age_ms =
		    (uint64_t)(ts.tv_sec > in.last_use_s ? ts.tv_sec - in.last_use_s : 0) * 1000;
		if (age_ms < idle_ms(s) && age_ms < now)
			__atomic_store_n(&s->pol[at].last_read_ms, now - age_ms, __ATOMIC_RELAXED);
	}
}

void policy_loaded(sfs_store *s, const sfs_store_obj *o)
{
	__atomic_fetch_add(&pol_get(s, o->dataset)->obj_bytes, o->used_bytes, __ATOMIC_RELAXED);
}

static void seg_count(void *arg, uint32_t dataset, uint64_t bytes)
{
	sfs_store *s = arg;
	__atomic_fetch_add(&pol_get(s, dataset)->seg_bytes, bytes, __ATOMIC_RELAXED);
}

void policy_seg_recount(sfs_store *s)
{
	sfs_seg *sg = seg_of(s);

	if (!sg)
		return;
	for (size_t i = 0; i < s->n_pol_live; i++)
		__atomic_store_n(&s->pol[s->pol_live[i]].seg_bytes, 0, __ATOMIC_RELAXED);
	sfs_seg_foreach_segment(sg, seg_count, s);
}

/* --- the ghost list -------------------------------------------------------- */

static uint64_t ghost_hash(const uint8_t key[16], uint32_t index)
{
	uint64_t h;
	memcpy(&h, key, sizeof(h));
	return (h ^ ((uint64_t)index + 1) * GHOST_MIX) | 1; /* 0: an empty slot */
}

static uint64_t *ghost_slot(sfs_store *s, uint64_t h) { return &s->ghosts[(h >> 32) % POL_GHOSTS]; }

/* Remember chunk index of key. Caller holds lock. */
static void ghost_put(sfs_store *s, const uint8_t key[16], uint32_t index)
{
	uint64_t h = ghost_hash(key, index);
	*ghost_slot(s, h) = h;
}

/* Whether chunk index of key was remembered; forgets it. Caller holds lock. */
static bool ghost_take(sfs_store *s, const uint8_t key[16], uint32_t index)
{
	uint64_t h = ghost_hash(key, index), *g = ghost_slot(s, h);
	if (*g != h)
		return false;
	*g = 0;
	return true;
}

void policy_evicted(sfs_store *s, const sfs_store_obj *o)
{
	for (uint32_t i = 0; i < o->n_chunks && i < 8; i++)
		ghost_put(s, o->key, i);
}

/* --- decisions ---------------------------------------------------------------- */

/* Datasets being read now (d among them: it is being offered bytes). */
static uint64_t share_of(sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	uint64_t n = 1;
	for (size_t i = 0; i < s->n_pol_live; i++) {
		const struct pol_ds *x = &s->pol[s->pol_live[i]];
		if (x != d && in_use(s, x, now))
			n++;
	}
	return s->capacity_bytes / n;
}

/* The largest object or segment of x a write of d may evict now (see the
 * file's comment): UINT64_MAX, or 0 for none. Under the share rule a
 * victim must be smaller than the gap between x and d, so that moving it
 * narrows the gap: the shares settle within one object instead of passing
 * whole objects back and forth. Caller holds lock. */
static uint64_t may_evict(sfs_store *s, const struct pol_ds *d, const struct pol_ds *x,
			  uint64_t now, bool d_reused, uint64_t share)
{
	if (x == d || !held(x))
		return 0;
	if (idle(s, x, now) || (d_reused && !in_use(s, x, now)))
		return UINT64_MAX;
	if (d_reused && held(x) > share && held(d) < share)
		return held(x) - held(d) - 1;
	return 0;
}

bool policy_allow(sfs_store *s, uint32_t dataset, struct pol_allow *a)
{
	uint64_t now = sfs_now_ms();
	const struct pol_ds *d = pol_get(s, dataset);
	bool d_reused = reused(s, d, now), any = false;
	uint64_t share = share_of(s, d, now);

	memset(a, 0, sizeof(*a));
	for (size_t i = 0; i < s->n_pol_live; i++) {
		size_t at = s->pol_live[i];
		struct pol_ds *x = &s->pol[at];
		x->victim_max = may_evict(s, d, x, now, d_reused, share);
		if (x->victim_max) {
			a->bits[at / 64] |= 1ull << (at % 64);
			any = true;
		}
	}
	return any;
}

/* Why nothing may be evicted for d. Caller holds lock. */
static enum sfs_store_refusal refusal(sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	bool others = false;
	for (size_t i = 0; i < s->n_pol_live && !others; i++) {
		const struct pol_ds *x = &s->pol[s->pol_live[i]];
		others = x != d && held(x);
	}
	if (!others)
		return SFS_STORE_REFUSED_FULL;
	return reused(s, d, now) ? SFS_STORE_REFUSED_SHARE : SFS_STORE_REFUSED_SCAN;
}

static bool hungry(const sfs_store *s, const struct pol_ds *d, uint64_t now)
{
	return d->last_offer_ms && now - d->last_offer_ms < idle_ms(s) / 20;
}

/*
 * Whether the free space left after d takes need is what other hungry
 * datasets (offered bytes now) still lack of an equal share, while d holds
 * its share already: then it is theirs. Datasets filling the cache together
 * split it equally in their first pass, instead of the faster reader's
 * taking more and giving it back in the next epoch. Caller holds lock.
 */
static bool reserved_for_others(sfs_store *s, const struct pol_ds *d, uint64_t need, uint64_t now)
{
	uint64_t n = 1, lacking = 0;
	for (size_t i = 0; i < s->n_pol_live; i++) {
		const struct pol_ds *x = &s->pol[s->pol_live[i]];
		n += x != d && hungry(s, x, now);
	}
	uint64_t share = s->capacity_bytes / n;
	if (n == 1 || held(d) + need <= share)
		return false;
	for (size_t i = 0; i < s->n_pol_live; i++) {
		const struct pol_ds *x = &s->pol[s->pol_live[i]];
		if (x != d && hungry(s, x, now) && held(x) < share)
			lacking += share - held(x);
	}
	uint64_t used = used_total(s) + s->queued_bytes + need;
	return used > s->capacity_bytes || s->capacity_bytes - used < lacking;
}

int policy_admit(sfs_store *s, sfs_store_obj *o, uint32_t index, uint64_t need, uint32_t len,
		 bool record)
{
	struct pol_ds *d = pol_get(s, o->dataset);
	uint64_t now = sfs_now_ms();
	struct pol_allow a;
	enum sfs_store_refusal why;

	if (record && ghost_take(s, o->key, index)) {
		if (now - d->reuse_ms >= idle_ms(s))
			d->ghost_hits = 0; /* evidence older than idle_ms is forgotten */
		d->ghost_hits++;
		d->reuse_ms = now;
	}
	if (record)
		d->last_offer_ms = now;
	if (used_total(s) + s->queued_bytes + need <= s->capacity_bytes) {
		if (!reserved_for_others(s, d, need, now))
			return 0;
		why = SFS_STORE_REFUSED_SHARE;
	} else {
		if (policy_allow(s, o->dataset, &a))
			return 0;
		why = refusal(s, d, now);
	}
	if (record) {
		ghost_put(s, o->key, index);
		__atomic_fetch_add(&d->refused_bytes[why], len, __ATOMIC_RELAXED);
	}
	return -ENOSPC;
}

void policy_admitted(sfs_store *s, const sfs_store_obj *o, uint32_t len)
{
	__atomic_fetch_add(&pol_get(s, o->dataset)->admitted_bytes, len, __ATOMIC_RELAXED);
}

/* Whether a in allows evicting `bytes` of dataset. Caller holds lock. */
static bool allowed(sfs_store *s, const struct pol_allow *a, uint32_t dataset, uint64_t bytes)
{
	size_t at = slot_of(s, dataset);
	return (a->bits[at / 64] >> (at % 64) & 1) && bytes <= s->pol[at].victim_max;
}

/* Objects looked at per search of the LRU list: the coldest allowed one is
 * usually near its head (what was read longest ago), and a search that
 * finds none in this many costs a refusal, not a walk of every object. */
#define VICTIM_SEARCH 65536

sfs_store_obj *policy_coldest_object(sfs_store *s, const struct pol_allow *a)
{
	size_t n = 0;
	for (sfs_store_obj *o = s->lru_head; o && n < VICTIM_SEARCH; o = o->lru_next, n++)
		if (o->refs == 0 && o->used_bytes && allowed(s, a, o->dataset, o->used_bytes))
			return o;
	return NULL;
}

struct seg_pick {
	sfs_store *s;
	const struct pol_allow *a;
};

/* sfs_seg_dataset_fn: under segment.c's lock, the caller holding s->lock. */
static bool seg_allowed(void *arg, uint32_t dataset, uint64_t bytes)
{
	const struct seg_pick *p = arg;
	return allowed(p->s, p->a, dataset, bytes);
}

bool policy_coldest_segment(sfs_store *s, const struct pol_allow *a, uint64_t *last_use_ms,
			    uint32_t *seq)
{
	sfs_seg *sg = seg_of(s);
	struct seg_pick p = {s, a};

	return sg && sfs_seg_coldest_of(sg, seg_allowed, &p, last_use_ms, seq);
}

/* --- readers and what users read ------------------------------------------ */

void sfs_store_dataset_read(sfs_store *s, uint32_t id, uint64_t hit_bytes, uint64_t miss_bytes)
{
	if (id)
		sfs_dsets_count_read(s->dsets, id, hit_bytes, miss_bytes);
	struct pol_ds *d = &s->pol[slot_of(s, id)];
	uint64_t now = sfs_now_ms();
	if (__atomic_load_n(&d->last_read_ms, __ATOMIC_RELAXED) != now)
		__atomic_store_n(&d->last_read_ms, now, __ATOMIC_RELAXED);
	/* The window: a reader that closes it publishes its share (racing
	 * readers may close it twice; a counter, not a ledger). */
	uint64_t h = __atomic_add_fetch(&d->read_hit, hit_bytes, __ATOMIC_RELAXED);
	uint64_t m = __atomic_add_fetch(&d->read_miss, miss_bytes, __ATOMIC_RELAXED);
	uint64_t h0 = __atomic_load_n(&d->win_hit, __ATOMIC_RELAXED);
	uint64_t m0 = __atomic_load_n(&d->win_miss, __ATOMIC_RELAXED);
	uint64_t bytes = __atomic_load_n(&d->obj_bytes, __ATOMIC_RELAXED) +
			 __atomic_load_n(&d->seg_bytes, __ATOMIC_RELAXED);
	uint64_t want = 2 * bytes > WINDOW_MIN_BYTES ? 2 * bytes : WINDOW_MIN_BYTES;
	if ((h - h0) + (m - m0) >= want &&
	    __atomic_compare_exchange_n(&d->win_hit, &h0, h, false, __ATOMIC_RELAXED,
					__ATOMIC_RELAXED)) {
		__atomic_store_n(&d->win_miss, m, __ATOMIC_RELAXED);
		__atomic_store_n(&d->win_ppm, (int32_t)((h - h0) * 1000000 / ((h - h0) + (m - m0))),
				 __ATOMIC_RELAXED);
	}
}

void sfs_store_obj_wanted(sfs_store_obj *o)
{
	sfs_store *s = o->store;

	pthread_mutex_lock(&s->lock);
	struct pol_ds *d = pol_get(s, o->dataset);
	d->ghost_hits = POL_GHOST_REUSE;
	d->reuse_ms = sfs_now_ms();
	pthread_mutex_unlock(&s->lock);
}

uint64_t sfs_store_dataset_overflows(sfs_store *s)
{
	return __atomic_load_n(&s->dataset_overflows, __ATOMIC_RELAXED);
}

int sfs_store_dataset_stats(sfs_store *s, struct sfs_store_dataset **out, size_t *n_out)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->n_pol_live;
	struct sfs_store_dataset *v = calloc(n ? n : 1, sizeof(*v));
	for (size_t i = 0; v && i < n; i++) {
		size_t at = s->pol_live[i];
		const struct pol_ds *d = &s->pol[at];
		struct sfs_dset_info in = {0};
		v[i].id = d->id;
		if (at < SFS_DSETS_MAX && sfs_dsets_get(s->dsets, at, &in))
			v[i].name = in.name;
		v[i].bytes = held(d);
		v[i].hit_bytes = __atomic_load_n(&d->read_hit, __ATOMIC_RELAXED);
		v[i].miss_bytes = __atomic_load_n(&d->read_miss, __ATOMIC_RELAXED);
		policy_list_fill(s, &v[i]);
	}
	pthread_mutex_unlock(&s->lock);
	if (!v)
		return -ENOMEM;
	*out = v;
	*n_out = n;
	return 0;
}

enum sfs_store_policy sfs_store_policy_of(sfs_store *s, uint64_t *idle)
{
	*idle = idle_ms(s);
	return s->conf.policy;
}

/* Fill the policy's fields of a listing entry for dataset id. Caller holds
 * lock. */
void policy_list_fill(sfs_store *s, struct sfs_store_dataset *out)
{
	size_t at = slot_of(s, out->id);
	const struct pol_ds *d = &s->pol[at];
	uint64_t now = sfs_now_ms();

	out->window_hit_ppm = -1;
	if (!s->pol || (at == SFS_DSETS_MAX && out->id))
		return;
	out->admitted_bytes = __atomic_load_n(&d->admitted_bytes, __ATOMIC_RELAXED);
	for (int r = 0; r < SFS_STORE_REFUSALS; r++)
		out->refused_bytes[r] = __atomic_load_n(&d->refused_bytes[r], __ATOMIC_RELAXED);
	out->window_hit_ppm = __atomic_load_n(&d->win_ppm, __ATOMIC_RELAXED);
	out->reused = reused(s, d, now);
	out->in_use = in_use(s, d, now);
}
