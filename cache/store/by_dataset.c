// SPDX-License-Identifier: Apache-2.0
/*
 * store/by_dataset — the cache per dataset: listing what each dataset holds (the
 * index and the segments summed by dataset id) and evicting datasets or
 * everything. Not here: the dataset names and counters (datasets.c), the
 * admission and eviction rules (policy.c, index.c).
 *
 * Threading: listing from any thread, under the locks briefly; evictions
 * run on the writer thread while their caller waits.
 */
#include "store_int.h"

/* --- datasets: listing and eviction -------------------------------------------- */

uint32_t sfs_store_dataset(sfs_store *s, const char *name)
{
	uint32_t id = sfs_dsets_intern(s->dsets, name);
	if (!id && name && *name)
		__atomic_fetch_add(&s->dataset_overflows, 1, __ATOMIC_RELAXED);
	return id;
}

/* Per-dataset sums of a listing: by table slot, the last one for ids
 * without a name. */
struct list_acc {
	sfs_store *s;
	struct sfs_store_dataset *by_slot; /* SFS_DSETS_MAX + 1 */
};

static struct sfs_store_dataset *acc_of(struct list_acc *a, uint32_t id)
{
	long at = sfs_dsets_find(a->s->dsets, id);
	return &a->by_slot[at < 0 ? SFS_DSETS_MAX : at];
}

/* sfs_seg_foreach callback: runs under segment.c's lock. */
static void acc_packed(void *arg, uint32_t dataset, uint32_t len)
{
	struct sfs_store_dataset *d = acc_of(arg, dataset);
	d->bytes += len;
	d->objects++;
	d->packed_objects++;
}

int sfs_store_list(sfs_store *s, struct sfs_store_dataset **out, size_t *n_out)
{
	struct list_acc a = {s, calloc(SFS_DSETS_MAX + 1, sizeof(*a.by_slot))};
	sfs_seg *sg = seg_of(s);
	size_t n = 0;

	if (!a.by_slot)
		return -ENOMEM;
	pthread_mutex_lock(&s->lock);
	for (size_t b = 0; b < s->index.n_buckets; b++)
		for (sfs_store_obj *o = s->index.buckets[b]; o; o = o->hnext)
			if (!o->packed && o->used_bytes) {
				struct sfs_store_dataset *d = acc_of(&a, o->dataset);
				d->bytes += o->used_bytes;
				d->objects++;
			}
	pthread_mutex_unlock(&s->lock);
	if (sg)
		sfs_seg_foreach(sg, acc_packed, &a);
	for (size_t i = 0; i <= SFS_DSETS_MAX; i++) {
		struct sfs_store_dataset d = a.by_slot[i];
		struct sfs_dset_info in;
		if (i < SFS_DSETS_MAX && sfs_dsets_get(s->dsets, i, &in)) {
			d.id = in.id;
			d.name = in.name;
			d.hit_bytes = in.hit_bytes;
			d.miss_bytes = in.miss_bytes;
			d.last_use_s = in.last_use_s;
		} else if (i < SFS_DSETS_MAX || !d.objects) {
			continue;
		}
		pthread_mutex_lock(&s->lock);
		policy_list_fill(s, &d);
		pthread_mutex_unlock(&s->lock);
		a.by_slot[n++] = d; /* n <= i: compacting in place */
	}
	*out = a.by_slot;
	*n_out = n;
	return 0;
}

/* The ids of the datasets an eviction takes, sorted (for bsearch). */
struct id_set {
	uint32_t *ids;
	size_t n;
};

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static bool id_set_has(void *arg, uint32_t id, const uint8_t key8[8])
{
	const struct id_set *m = arg;
	(void)key8;
	return m->n && bsearch(&id, m->ids, m->n, sizeof(id), cmp_u32);
}

static int cmp_key(const void *a, const void *b) { return memcmp(a, b, 16); }

/* Orders keys by their first 8 bytes: keys sorted by cmp_key are sorted by
 * it too. */
static int cmp_key8(const void *a, const void *b) { return memcmp(a, b, 8); }

/* sfs_seg_match_fn of sfs_store_evict_keys: arg is the ctl job. */
static bool keys_have(void *arg, uint32_t id, const uint8_t key8[8])
{
	const struct ctl_job *c = arg;
	(void)id;
	return c->n_keys && bsearch(key8, c->keys, c->n_keys, 16, cmp_key8);
}

/* Whether dataset `name` is `prefix` or lies under it (trailing slashes of
 * prefix ignored; "/" takes every name). */
static bool name_under(const char *name, const char *prefix)
{
	size_t n = strlen(prefix);

	while (n > 1 && prefix[n - 1] == '/')
		n--;
	if (strncmp(name, prefix, n) != 0)
		return false;
	return name[n] == 0 || name[n] == '/' || (n == 1 && prefix[0] == '/');
}

/* Fill m with the ids of the datasets under prefix. Returns 0 or -ENOMEM. */
static int match_ids(sfs_store *s, const char *prefix, struct id_set *m)
{
	struct sfs_dset_info in;

	m->n = 0;
	m->ids = malloc(SFS_DSETS_MAX * sizeof(*m->ids));
	if (!m->ids)
		return -ENOMEM;
	for (size_t i = 0; i < SFS_DSETS_MAX; i++)
		if (sfs_dsets_get(s->dsets, i, &in) && name_under(in.name, prefix))
			m->ids[m->n++] = in.id;
	qsort(m->ids, m->n, sizeof(*m->ids), cmp_u32);
	return 0;
}

/* Take one matching object out of the index. Nobody holds it: chained on
 * *victims (its file unlinked and it freed by the caller). Held: detached
 * (every chunk ABSENT, evicted, its bytes held until it is freed with its
 * last reference); its key is added to keys[] for the unlink. Caller holds
 * lock. */
static void evict_one(sfs_store *s, sfs_store_obj *o, struct sfs_store_evicted *r,
		      sfs_store_obj **victims, uint8_t (*keys)[16], size_t *n_keys)
{
	index_remove(s, o);
	if (o->packed) { /* held: its bytes are the segments' (evicted there) */
		o->evicted = true;
		return;
	}
	uint64_t had = o->used_bytes;
	obj_bytes_add(s, o, -(int64_t)had);
	r->objects += had ? 1 : 0;
	r->bytes += had;
	r->disk_bytes += had;
	if (o->refs == 0) {
		o->hnext = *victims;
		*victims = o;
		return;
	}
	for (uint32_t i = 0; i < o->n_chunks; i++)
		if (chunk_cached(o, i))
			o->state[i] = SFS_CHUNK_ABSENT;
	o->used_bytes = 0;
	o->held_bytes = had; /* until its last reference (sfs_store_obj_put) */
	s->held_bytes += had;
	o->gen++; /* reads planned before see that their chunk went */
	o->evicted = true;
	if (o->on_disk)
		memcpy(keys[(*n_keys)++], o->key, 16);
	o->on_disk = false;
}

/* The per-file side of an eviction (match NULL: all). Writer thread; takes
 * the lock for the index, unlinks without it. Returns 0 or -ENOMEM. */
static int evict_index(sfs_store *s, sfs_seg_match_fn *match, void *arg,
		       struct sfs_store_evicted *r)
{
	sfs_store_obj *victims = NULL;
	uint8_t(*keys)[16] = NULL;
	size_t n_keys = 0;

	pthread_mutex_lock(&s->lock);
	if (s->index.n && !(keys = malloc(s->index.n * sizeof(*keys)))) {
		pthread_mutex_unlock(&s->lock);
		return -ENOMEM;
	}
	for (size_t b = 0; b < s->index.n_buckets; b++)
		for (sfs_store_obj *o = s->index.buckets[b], *next; o; o = next) {
			next = o->hnext;
			if (!match || match(arg, o->dataset, o->key))
				evict_one(s, o, r, &victims, keys, &n_keys);
		}
	pthread_mutex_unlock(&s->lock);
	victims_free(s, victims);
	for (size_t i = 0; i < n_keys; i++)
		obj_unlink(s, keys[i]);
	free(keys);
	return 0;
}

/* An eviction (struct ctl_job), on the writer thread (or inline before it
 * was started). Sets c->rc and c->result. */
void run_ctl(sfs_store *s, struct ctl_job *c)
{
	struct id_set m = {0};
	struct sfs_store_evicted *r = &c->result;
	sfs_seg_match_fn *match = c->keys ? keys_have : c->prefix ? id_set_has : NULL;
	void *arg = c->keys ? (void *)c : &m;

	memset(r, 0, sizeof(*r));
	if (c->prefix && (c->rc = match_ids(s, c->prefix, &m)) < 0)
		return;
	c->rc = c->prefix && !m.n ? -ENOENT : 0;
	pthread_mutex_lock(&s->lock);
	if (!c->rc && !s->online)
		c->rc = -EAGAIN;
	pthread_mutex_unlock(&s->lock);
	if (!c->rc)
		c->rc = evict_index(s, match, arg, r);
	sfs_seg *sg = seg_of(s);
	if (!c->rc && sg) {
		struct sfs_seg_evicted se;
		c->rc = sfs_seg_evict_where(sg, match, arg, &se);
		r->objects += se.objects;
		r->bytes += se.bytes;
		r->disk_bytes += se.disk_bytes;
		pthread_mutex_lock(&s->lock);
		seg_refresh(s);
		pthread_mutex_unlock(&s->lock);
	}
	r->datasets = (uint32_t)m.n;
	for (size_t i = 0; i < m.n; i++)
		sfs_dsets_reset(s->dsets, m.ids[i]);
	if (!c->prefix && !c->keys)
		sfs_dsets_reset(s->dsets, 0);
	if (c->rc != -ENOENT && c->rc != -EAGAIN)
		sfs_dsets_save(s->dsets, false);
	free(m.ids);
}

/* Run c on the writer thread (inline if it was never started) and wait. */
static int ctl_run(sfs_store *s, struct ctl_job *c, struct sfs_store_evicted *out)
{
	if (!s->writer_started) {
		run_ctl(s, c);
	} else {
		pthread_mutex_lock(&s->lock);
		c->next = s->ctl;
		s->ctl = c;
		pthread_cond_signal(&s->work);
		while (!c->done)
			pthread_cond_wait(&s->ctl_done, &s->lock);
		pthread_mutex_unlock(&s->lock);
	}
	*out = c->result;
	return c->rc;
}

int sfs_store_evict(sfs_store *s, const char *prefix, struct sfs_store_evicted *out)
{
	struct ctl_job c = {.prefix = prefix};

	return ctl_run(s, &c, out);
}

int sfs_store_evict_keys(sfs_store *s, const uint8_t (*keys)[16], size_t n,
			 struct sfs_store_evicted *out)
{
	uint8_t(*sorted)[16] = malloc((n ? n : 1) * sizeof(*sorted));

	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, keys, n * sizeof(*sorted));
	qsort(sorted, n, sizeof(*sorted), cmp_key);
	struct ctl_job c = {.keys = (const uint8_t(*)[16])sorted, .n_keys = n};
	int rc = ctl_run(s, &c, out);
	free(sorted);
	return rc;
}

void sfs_store_key(const struct sfs_file_version *v, uint8_t key[16]) { key_for(v, key); }
