// SPDX-License-Identifier: Apache-2.0
/*
 * store/index — the in-memory index of per-file objects (hash by key, LRU list)
 * and the capacity rule that makes room (lru) or admits nothing (pin). Not
 * here: the per-dataset rule (auto, policy.c), the files themselves
 * (writer.c, load.c). The caller holds s->lock where a function says so;
 * see store_int.h for the structures.
 */
#include "store_int.h"

/* --- index (caller holds s->lock) ----------------------------------------- */

static uint64_t obj_mem_bytes(const sfs_store_obj *o)
{
	return sizeof(*o) + (o->n_chunks > INLINE_STATES ? o->n_chunks : 0);
}

static void lru_unlink(sfs_store *s, sfs_store_obj *o)
{
	if (o->lru_prev)
		o->lru_prev->lru_next = o->lru_next;
	else if (s->lru_head == o)
		s->lru_head = o->lru_next;
	if (o->lru_next)
		o->lru_next->lru_prev = o->lru_prev;
	else if (s->lru_tail == o)
		s->lru_tail = o->lru_prev;
	o->lru_prev = o->lru_next = NULL;
}

/* Packed versions are not in the list: their segment keeps their last use. */
void lru_touch(sfs_store *s, sfs_store_obj *o)
{
	if (o->packed)
		return;
	o->last_use_ms = sfs_now_ms();
	lru_unlink(s, o);
	o->lru_prev = s->lru_tail;
	if (s->lru_tail)
		s->lru_tail->lru_next = o;
	else
		s->lru_head = o;
	s->lru_tail = o;
}

sfs_store_obj *index_find(sfs_store *s, const uint8_t key[16])
{
	for (sfs_store_obj *o = *store_index_head(&s->index, key_hash(key)); o; o = o->hnext)
		if (!memcmp(o->key, key, 16))
			return o;
	return NULL;
}

void index_add(sfs_store *s, sfs_store_obj *o)
{
	store_index_insert(&s->index, o);
	o->in_index = true;
	s->n_objects += !o->packed;
	s->mem_bytes += obj_mem_bytes(o);
	lru_touch(s, o);
}

void index_remove(sfs_store *s, sfs_store_obj *o)
{
	store_index_remove(&s->index, o);
	o->in_index = false;
	s->n_objects -= !o->packed;
	s->mem_bytes -= obj_mem_bytes(o);
	lru_unlink(s, o);
}

sfs_store_obj *obj_new(sfs_store *s, const uint8_t key[16], uint64_t size)
{
	sfs_store_obj *o = calloc(1, sizeof(*o));
	uint64_t n = (size + (1ull << s->chunk_shift) - 1) >> s->chunk_shift;

	if (!o || n > UINT32_MAX)
		goto err;
	o->store = s;
	memcpy(o->key, key, 16);
	o->size = size;
	o->n_chunks = (uint32_t)n;
	o->packed = size_packed(s, size);
	o->fd = -1;
	o->dfd = -1;
	o->rfd = -1;
	o->state = n > INLINE_STATES ? calloc(n, 1) : o->state_inline;
	if (!o->state)
		goto err;
	return o;
err:
	free(o);
	return NULL;
}

void obj_free(sfs_store_obj *o)
{
	if (o->dfd >= 0)
		close(o->dfd);
	if (o->fd >= 0)
		close(o->fd);
	if (o->rfd >= 0)
		close(o->rfd);
	if (o->state != o->state_inline)
		free(o->state);
	free(o->recs);
	free(o);
}

void obj_path(const sfs_store *s, const uint8_t key[16], char *buf, size_t len, enum obj_file f)
{
	char name[33];

	key_hex(key, name);
	if (f == OBJ_DIR)
		snprintf(buf, len, "%s/objects/%.2s", s->conf.dir, name);
	else
		snprintf(buf, len, "%s/objects/%.2s/%s%s", s->conf.dir, name, name,
			 f == OBJ_SUMS ? ".sums" : "");
}

void obj_unlink(const sfs_store *s, const uint8_t key[16])
{
	char path[4096];

	/* The records first: a data file left alone is deleted at load. */
	obj_path(s, key, path, sizeof(path), OBJ_SUMS);
	unlink(path);
	obj_path(s, key, path, sizeof(path), OBJ_DATA);
	unlink(path);
}

/* --- capacity (writer thread) ------------------------------------------------ */

/* The disk bytes of the segments, for capacity. Caller holds lock. */
void seg_refresh(sfs_store *s)
{
	struct sfs_seg_stats st;
	sfs_seg *sg = seg_of(s);

	if (!sg)
		return;
	sfs_seg_get_stats(sg, &st);
	s->seg_disk_bytes = st.disk_bytes;
	policy_seg_recount(s);
}

/* The coldest per-file object nobody holds that has bytes, or NULL. Caller
 * holds lock. */
static sfs_store_obj *coldest_object(sfs_store *s)
{
	for (sfs_store_obj *o = s->lru_head; o; o = o->lru_next)
		if (o->refs == 0 && o->used_bytes)
			return o;
	return NULL;
}

/*
 * Make room for `need` more bytes under capacity and the free-space floor
 * (*fs_avail: what statvfs said before the batch, plus what was freed since;
 * in_batch: bytes admitted earlier in this batch, not yet written). lru:
 * evict whichever is colder, an object nobody holds (taken out of the index
 * and chained on *victims through hnext: the caller unlinks and frees them
 * after unlocking) or a whole segment (evicted with the lock dropped).
 * Returns true if there is room. Writer thread; caller holds lock.
 */
bool make_room(sfs_store *s, const sfs_store_obj *for_obj, uint64_t need, uint64_t in_batch,
	       uint64_t *fs_avail, sfs_store_obj **victims)
{
	struct pol_allow allow, *a = s->conf.policy == SFS_STORE_AUTO ? &allow : NULL;

	if (s->held_bytes + need > s->capacity_bytes)
		return false; /* no eviction can make room: admit nothing */
	for (;;) {
		bool fits = used_total(s) + need <= s->capacity_bytes &&
			    *fs_avail >= need + in_batch + s->min_free_bytes;
		if (fits)
			return true;
		if (s->conf.policy == SFS_STORE_PIN)
			return false;
		/* auto: only what for_obj's dataset may take, recomputed after
		 * each eviction (a share shrinks as it is taken) */
		if (a && !policy_allow(s, for_obj->dataset, a))
			return false;
		sfs_store_obj *victim = a ? policy_coldest_object(s, a) : coldest_object(s);
		uint64_t seg_ms = 0, seg_bytes, freed;
		uint32_t seq = 0;
		sfs_seg *sg = seg_of(s);
		bool seg = sg && (a ? policy_coldest_segment(s, a, &seg_ms, &seq)
				    : sfs_seg_coldest(sg, &seg_ms, &seg_bytes));
		if (seg && (!victim || seg_ms < victim->last_use_ms)) {
			pthread_mutex_unlock(&s->lock);
			freed = a ? sfs_seg_evict_seq(sg, seq) : sfs_seg_evict_coldest(sg);
			pthread_mutex_lock(&s->lock);
			seg_refresh(s);
			if (!freed && !victim)
				return false;
		} else if (victim) {
			freed = victim->used_bytes;
			obj_bytes_add(s, victim, -(int64_t)freed);
			policy_evicted(s, victim);
			index_remove(s, victim);
			victim->hnext = *victims;
			*victims = victim;
		} else {
			return false;
		}
		count(&s->stats.evicted_bytes, freed);
		if (*fs_avail != UINT64_MAX)
			*fs_avail += freed;
	}
}

/* Unlink and free evicted objects (refs 0, out of the index). No lock. */
void victims_free(sfs_store *s, sfs_store_obj *victims)
{
	for (sfs_store_obj *o = victims, *next; o; o = next) {
		next = o->hnext;
		obj_unlink(s, o->key);
		obj_free(o);
	}
}
