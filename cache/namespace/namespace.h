/* SPDX-License-Identifier: Apache-2.0 */
/*
 * namespace — the names and attributes seen on an immutable export, kept in
 * memory and in an append-only log under the cache directory, so that a
 * remount (or a restart after SIGKILL, or a mount with every node down)
 * answers lookup, getattr and readdir of the seen dataset without NFS.
 *
 * Owns: the log file DIR/<XXH3-64 of the export path>.log (a header naming
 * the export, the host list and the export's root file handle, then records
 * of {parent fileid, name, child handle, attributes} and "directory
 * complete" marks, each with an XXH3-64 checksum), its replay at open (a torn
 * or damaged tail is cut off: whatever follows it is read from NFS again),
 * compaction at open, and the in-memory index that answers from it.
 * Does not own: FUSE inodes, NFS calls, deciding when a mount is immutable.
 * Only the caller knows a directory's key: the export root is SFS_NS_ROOT,
 * any other directory its fileid.
 *
 * Bounds: at most max_entries entries are held (memory and disk); beyond
 * that, new names are not recorded and the caller falls back to NFS.
 *
 * Listings mode (conf.ttl_ms > 0, memory only; for mounts that are not
 * immutable): names come only from whole directory listings the caller
 * makes when sfs_ns_listing_wanted() says so, and a listing answers lookups
 * for ttl_ms from the moment it was started (so an answer is never older
 * than ttl_ms, as the kernel's own caching of names for actimeo). Expired
 * listings are dropped by sfs_ns_expire(); memory is held only for
 * directories listed within the last ttl_ms.
 *
 * Threading: every function may be called from any thread once open;
 * one mutex protects the index, a second serialises writes to the file
 * (order: io lock, then index lock). sfs_ns_add and sfs_ns_dir_complete
 * never block on I/O (a flusher thread started by sfs_ns_start writes and
 * fdatasyncs the log about every second), so origin I/O threads may call them.
 */
#ifndef SFS_NAMESPACE_H
#define SFS_NAMESPACE_H

#include "../nfs/origin.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SFS_NS_ROOT	   0 /* the key of the export's root directory */
#define SFS_NS_DEFAULT_MAX 2000000
#define SFS_NS_FLUSH_MS	   1000
#define SFS_NS_RECORD_MAX  512 /* bytes: 8-byte header+parent, 64 fh, 92 attrs, 255 name, sum */
#define SFS_NS_INDEX_FIRST 3   /* readdir offsets: 1 ".", 2 "..", 3 the first entry */

typedef struct sfs_ns sfs_ns;

struct sfs_ns_conf {
	const char *dir;	 /* folder for the log (created 0700); NULL: memory only */
	const char *export_path; /* identity of the export: part of the header */
	const char *hosts;	 /* the host list as given: part of the header */
	uint64_t max_entries;	 /* 0: SFS_NS_DEFAULT_MAX */
	uint64_t ttl_ms;	 /* 0: names stay; else listings mode (dir ignored) */
};

/* Listings mode: lookups a directory misses within ttl_ms before it is
 * listed (a directory listed before is listed again at its first miss). */
#define SFS_NS_LIST_AFTER 2
/* Listings mode: names a first listing of a directory may read per lookup
 * missed in it (those that started it, and those that miss while it runs),
 * so that a huge folder with a few lookups is not read whole: the reads a
 * listing may cost stay proportional to the lookups that asked for it. */
#define SFS_NS_NAMES_PER_MISS 8192

struct sfs_ns_stats {
	uint64_t entries;	  /* names held */
	uint64_t dirs_complete;	  /* directories whose whole listing is held */
	uint64_t file_bytes;	  /* bytes of the log on disk (written or pending) */
	uint64_t mem_bytes;	  /* bytes of memory held by the index */
	uint64_t hits, misses;	  /* lookups and readdirs answered / not answered */
	uint64_t not_recorded;	  /* names not kept: max_entries reached */
	uint64_t discarded_bytes; /* bytes of damaged log cut off at open */
	uint64_t listings;	  /* listings mode: listings started */
	uint64_t listings_failed; /* ... of those, failed or over max_entries */
	uint64_t listing_absent;  /* listings mode: names a fresh listing lacked */
	bool loaded;		  /* a namespace for this export was read at open */
};

/*
 * Open (creating the folder) and replay the log of conf->export_path. A log
 * with a damaged header, or one naming another export or host list, is
 * ignored and replaced at sfs_ns_bind. Returns 0 and *out, or -errno with a
 * one-line reason in err (-EBUSY: another daemon holds the log). With a
 * folder that cannot be used, callers may retry with dir = NULL.
 * No thread is started. Single-threaded (startup).
 */
int sfs_ns_open(const struct sfs_ns_conf *conf, sfs_ns **out, char *err, size_t err_len);

/* The export root's handle recorded in the log, if a namespace was loaded.
 * Returns true and fills *root. */
bool sfs_ns_saved_root(sfs_ns *ns, struct sfs_fh *root);

/*
 * Tie the namespace to the export's root handle as the cluster reports it
 * (or as saved, when no node answers). A loaded namespace with another root
 * handle belongs to another cluster or export: it is dropped and the log
 * rewritten empty. Returns 0 (the namespace is kept), 1 (it was dropped), or
 * -errno when the log cannot be rewritten (the namespace then lives in
 * memory only). Single-threaded (startup).
 */
int sfs_ns_bind(sfs_ns *ns, const struct sfs_fh *root);

/* Start the flusher thread (after any fork). Returns 0 or -errno. */
int sfs_ns_start(sfs_ns *ns);

/* Stop the flusher, write and fdatasync what is pending, free everything. */
void sfs_ns_close(sfs_ns *ns);

/*
 * Look name up in directory parent. Returns 0 and fills fh/attr (either may
 * be NULL) when the name is held, -ENOENT when the directory's whole listing
 * is held and has no such name, -ENODATA when the namespace does not know.
 */
int sfs_ns_lookup(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
		  struct sfs_attr *attr);

/*
 * Listings mode: look name up in parent's listing if one younger than ttl_ms
 * is held. Returns 0 (fh/attr filled, *listed_ms the sfs_now_ms() at which
 * the listing started), -ENOENT when the listing lacks the name, or -ENODATA
 * when no such listing is held. A listing proves only the names it holds: a
 * name it lacks may have been created since, so -ENOENT is no answer for a
 * lookup (the caller asks NFS) and is counted apart (stats' listing_absent).
 */
int sfs_ns_lookup_listed(sfs_ns *ns, uint64_t parent, const char *name, struct sfs_fh *fh,
			 struct sfs_attr *attr, uint64_t *listed_ms);

/*
 * Listings mode: a lookup in dir was not answered (-ENODATA above). Counts it
 * and returns true when the caller should list dir now: its names from an
 * expired listing are dropped and it is marked as being listed (no second
 * listing starts meanwhile). The caller then records every name with
 * sfs_ns_add() and ends with sfs_ns_dir_complete(), or with
 * sfs_ns_listing_failed(): no listing of dir is tried again for ttl_ms << k
 * after its k-th failure in a row (k <= 6), so that a directory larger
 * than max_entries is not read whole every ttl_ms for nothing.
 * A directory whose listing failed or did not fit max_entries, or one a
 * listing is running for, returns false, as does any while max_entries
 * names are held (a listing would fail at its first name).
 */
bool sfs_ns_listing_wanted(sfs_ns *ns, uint64_t dir);
void sfs_ns_listing_failed(sfs_ns *ns, uint64_t dir);

/* Listings mode: whether dir's listing, names read so far, may read on
 * (SFS_NS_NAMES_PER_MISS; no bound for a directory listed before). When
 * not, the caller ends it with sfs_ns_listing_failed(). */
bool sfs_ns_listing_may_go_on(sfs_ns *ns, uint64_t dir, uint64_t names);

/* Listings mode: drop the listings (and miss counts) older than ttl_ms.
 * Returns the names dropped. */
uint64_t sfs_ns_expire(sfs_ns *ns);

/*
 * Record name in parent -> (fh, attr). A name already held with the same
 * handle and attributes (atime aside) is not written again; a changed one
 * replaces it. Returns 0, -ENOSPC (max_entries reached: not recorded),
 * -EINVAL (a name longer than 255 bytes, empty, "." or "..") or -ENOMEM.
 * The empty name under SFS_NS_ROOT is allowed: it holds the root's own
 * attributes and is never listed.
 */
int sfs_ns_add(sfs_ns *ns, uint64_t parent, const char *name, const struct sfs_fh *fh,
	       const struct sfs_attr *attr);

/*
 * The whole listing of dir has been seen: n_entries names (without "." and
 * ".."), each recorded with sfs_ns_add. Marks it complete when the index
 * holds exactly that many names under dir. Returns 0, or -ESTALE when the
 * counts differ (then nothing is marked; in listings mode the listing
 * failed, as with sfs_ns_listing_failed).
 */
int sfs_ns_dir_complete(sfs_ns *ns, uint64_t dir, uint64_t n_entries);

/*
 * Called by sfs_ns_readdir for each entry, with the index lock held: it must
 * not call back into the namespace nor block. next is the offset that
 * resumes after this entry. Return non-zero to stop.
 */
typedef int (*sfs_ns_dirent_fn)(void *arg, const char *name, uint64_t next, const struct sfs_fh *fh,
				const struct sfs_attr *attr);

/*
 * List a complete directory from offset index (offsets start at
 * SFS_NS_INDEX_FIRST; "." and ".." are the caller's). Returns the number of
 * entries delivered (0 at the end), or -ENODATA when its listing is not held.
 */
int sfs_ns_readdir(sfs_ns *ns, uint64_t dir, uint64_t index, sfs_ns_dirent_fn fn, void *arg);

/* Write what is pending and fdatasync the log. Returns 0 or -errno. */
int sfs_ns_flush(sfs_ns *ns);

void sfs_ns_get_stats(sfs_ns *ns, struct sfs_ns_stats *out);

#endif
