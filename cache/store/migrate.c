// SPDX-License-Identifier: Apache-2.0
/*
 * store/migrate — object files of the previous layout ("SFSOBJS4": header,
 * records and chunk bytes in one file, byte x of the version at data_off +
 * x) turned into today's pair (KEY: byte x at x; KEY.sums: header and
 * records), in place, at load (store_attach: at open, or on the writer
 * thread when an offline cache directory comes back). No lock (file I/O).
 *
 * The steps, each safe to stop after: (1) KEY.sums.tmp written with the
 * new header and the old records, and made durable; (2) the first data_off
 * bytes of KEY cut with fallocate(FALLOC_FL_COLLAPSE_RANGE) (ext4 and XFS;
 * no copy, no second space) and made durable; (3) KEY.sums.tmp renamed to
 * KEY.sums. Stopped after (1), the next load finds KEY still "SFSOBJS4"
 * and starts again (the .tmp is a leftover, deleted). Stopped after (2),
 * KEY has no .sums and does not start with an "SFSOBJS4" header of its own
 * key: it is discarded. No step ever makes a .sums describe bytes at other
 * offsets than the ones it checks, and every chunk is still verified by
 * its checksums before it is served.
 * Not here: finding the files and loading what they hold (load.c), the
 * checks of the bytes (read.c).
 */
#include "store_int.h"

#include <libgen.h>

/* The header of a V4 object file at fd, checked against its name and this
 * store. Returns 0 or -EINVAL (not a V4 object of ours). */
static int v4_header(sfs_store *s, int fd, const char *path, struct obj_header *h)
{
	char hex[33], copy[4096];

	if (pread(fd, h, sizeof(*h), 0) != (ssize_t)sizeof(*h) || h->magic != OBJ_MAGIC_V4 ||
	    h->chunk_shift != s->chunk_shift || h->data_off != v4_data_off(h->n_chunks) ||
	    size_packed(s, h->size) ||
	    h->n_chunks != (h->size + (1ull << s->chunk_shift) - 1) >> s->chunk_shift)
		return -EINVAL;
	snprintf(copy, sizeof(copy), "%s", path);
	key_hex(h->key, hex);
	return strcmp(hex, basename(copy)) == 0 ? 0 : -EINVAL;
}

/* Step 1: tmp holds the new header and the records of fd, durable. */
static int v4_write_sums(int fd, const struct obj_header *old, const char *tmp)
{
	struct obj_header h = *old;
	size_t rec_bytes = (size_t)h.n_chunks * sizeof(struct chunk_rec);
	void *recs = malloc(rec_bytes ? rec_bytes : 1);
	int rc = -EIO;

	if (!recs)
		return -ENOMEM;
	h.magic = OBJ_MAGIC;
	h.data_off = 0;
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (out >= 0 && pread(fd, recs, rec_bytes, rec_off(0)) == (ssize_t)rec_bytes &&
	    pwrite(out, &h, sizeof(h), 0) == (ssize_t)sizeof(h) &&
	    pwrite(out, recs, rec_bytes, rec_off(0)) == (ssize_t)rec_bytes && fdatasync(out) == 0)
		rc = 0;
	if (out >= 0)
		close(out);
	free(recs);
	return rc;
}

/* Step 2: the first data_off bytes of the file cut, durable. A file that
 * holds no chunk bytes yet is truncated to nothing. */
static int v4_cut(int fd, uint64_t data_off)
{
	struct stat st;

	if (fstat(fd, &st) != 0)
		return -errno;
	if ((uint64_t)st.st_size <= data_off) {
		if (ftruncate(fd, 0) != 0)
			return -errno;
	} else if (fallocate(fd, FALLOC_FL_COLLAPSE_RANGE, 0, (off_t)data_off) != 0) {
		return -errno;
	}
	return fdatasync(fd) == 0 ? 0 : -errno;
}

int migrate_v4(sfs_store *s, const char *path, const char *sums)
{
	struct obj_header h;
	char tmp[4096 + 16];
	int fd = open(path, O_RDWR | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	int rc = v4_header(s, fd, path, &h);
	snprintf(tmp, sizeof(tmp), "%s.tmp", sums);
	if (rc == 0)
		rc = v4_write_sums(fd, &h, tmp);
	if (rc == 0)
		rc = v4_cut(fd, h.data_off);
	if (rc == 0 && rename(tmp, sums) != 0)
		rc = -errno;
	close(fd);
	if (rc < 0)
		unlink(tmp);
	if (rc == 0)
		s->migrated++;
	else if (rc != -EINVAL)
		s->migrate_failed++;
	return rc;
}
