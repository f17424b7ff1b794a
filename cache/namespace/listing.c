// SPDX-License-Identifier: Apache-2.0
/* listing — whole directory listings into a namespace (listing.h). */
#include "listing.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define LISTING_REPLY_BYTES 65536 /* READDIRPLUS maxcount */

/* One running listing: owned by the origin request in flight. */
struct listing_call {
	struct sfs_origin_req r;
	sfs_ns *ls;	      /* the listings it fills */
	sfs_origin *origin;   /* where its READDIRPLUS calls go */
	struct sfs_fh fh;     /* the directory */
	uint64_t dir;	      /* its listings key */
	uint64_t names;	      /* recorded so far */
	uint64_t last_cookie; /* where the next READDIRPLUS resumes */
	unsigned in_reply;    /* entries in the current reply */
	bool bad;	      /* a name could not be recorded: the listing fails */
};

static void listing_done(struct sfs_origin_req *r);

/* Runs on the origin I/O thread (sfs_origin_dirent_fn); never blocks. */
static int listing_dirent(struct sfs_origin_req *r, const char *name, uint64_t cookie,
			  const struct sfs_attr *attr, const struct sfs_fh *fh)
{
	struct listing_call *c = r->arg;

	c->last_cookie = cookie;
	c->in_reply++;
	if (!strcmp(name, ".") || !strcmp(name, ".."))
		return 0;
	if (!attr || !fh || sfs_ns_add(c->ls, c->dir, name, fh, attr) < 0) {
		c->bad = true; /* no handle or attributes, or over listing_max */
		return 1;
	}
	c->names++;
	return 0;
}

static void listing_send(struct listing_call *c, const uint8_t *verf)
{
	c->in_reply = 0;
	c->r = (struct sfs_origin_req){.op = SFS_ORIGIN_READDIRPLUS,
				       .fh = c->fh,
				       .cookie = c->last_cookie,
				       .dir_max_bytes = LISTING_REPLY_BYTES,
				       .dirent = listing_dirent,
				       .done = listing_done,
				       .arg = c};
	if (verf)
		memcpy(c->r.dir_verf, verf, sizeof(c->r.dir_verf));
	sfs_origin_submit(c->origin, &c->r);
}

/* Runs on an I/O thread (or in sfs_origin_submit when the pool is
 * closing); owns c and frees it, unless it sends the next READDIRPLUS. */
static void listing_done(struct sfs_origin_req *r)
{
	struct listing_call *c = r->arg;
	sfs_ns *ls = c->ls;

	if (r->result < 0 || c->bad ||
	    (!r->eof && (!c->in_reply || !sfs_ns_listing_may_go_on(ls, c->dir, c->names)))) {
		sfs_ns_listing_failed(ls, c->dir); /* or a huge folder, few lookups */
	} else if (!r->eof) {
		uint8_t verf[SFS_DIR_VERF_BYTES];
		memcpy(verf, r->dir_verf, sizeof(verf));
		listing_send(c, verf);
		return;
	} else {
		sfs_ns_dir_complete(ls, c->dir, c->names); /* a miscount fails it */
	}
	free(c);
}

void sfs_listing_missed(sfs_ns *ls, sfs_origin *origin, const struct sfs_fh *dir, uint64_t key)
{
	if (!sfs_ns_listing_wanted(ls, key))
		return;
	struct listing_call *c = calloc(1, sizeof(*c));
	if (!c) {
		sfs_ns_listing_failed(ls, key);
		return;
	}
	c->ls = ls;
	c->origin = origin;
	c->fh = *dir;
	c->dir = key;
	listing_send(c, NULL);
}
