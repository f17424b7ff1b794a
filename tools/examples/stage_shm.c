/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stage_shm — example of libshardfs: stage a whole file on a shardfs mount
 * into a shared-memory buffer, one buffer-full at a time, and check every
 * byte against pread(2).
 *
 *   stage_shm FILE [PIECE_BYTES [BUFFER_BYTES]]
 *
 * Each pass cuts the next BUFFER_BYTES (default 64 MiB) of the file into
 * ranges of PIECE_BYTES (default 1 MiB; any size, unaligned is fine), stages
 * them with one shardfs_stage call (the library batches the ioctls) and
 * compares. A last range reaching past the end of the file shows the short
 * placement there. Exit status 0 when every byte matched, 1 otherwise, 2 for
 * bad usage; 77 when FILE is not on a shardfs mount with staging (ENOTTY).
 *
 * Build: cc -O2 -I/usr/local/include/shardfs stage_shm.c -lshardfs
 * (in the tree, meson builds it as build/tools/stage_shm).
 *
 * Owns: its shared-memory buffer and region. Does not own: the placement
 * and its checks (the mount's), the ioctls (libshardfs). Threading: one
 * thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shardfs.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s || v == 0)
		return -1;
	if (*end && strchr("kKmMgG", *end)) {
		v <<= *end == 'k' || *end == 'K' ? 10 : *end == 'm' || *end == 'M' ? 20 : 30;
		end++;
	}
	if (*end)
		return -1;
	*out = v;
	return 0;
}

/* Compare `len` bytes of the buffer with the file at `off`. Returns 0 or -1. */
static int verify(int fd, const uint8_t *buf, uint64_t off, uint64_t len, uint8_t *tmp)
{
	while (len > 0) {
		size_t n = len > (4u << 20) ? (4u << 20) : (size_t)len;
		ssize_t got = pread(fd, tmp, n, (off_t)off);

		if (got != (ssize_t)n) {
			fprintf(stderr, "stage_shm: pread at %" PRIu64 ": %s\n", off,
				got < 0 ? strerror(errno) : "short read");
			return -1;
		}
		if (memcmp(buf, tmp, n) != 0) {
			size_t k = 0;

			while (buf[k] == tmp[k])
				k++;
			fprintf(stderr, "stage_shm: MISMATCH at file offset %" PRIu64 "\n",
				off + k);
			return -1;
		}
		buf += n;
		off += n;
		len -= n;
	}
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t piece = 1 << 20, buf_bytes = 64 << 20, region_id, total = 0, placed;
	struct shardfs_range *ranges = NULL;
	struct shardfs_query q;
	struct stat stb;
	char name[64];
	uint8_t *map = NULL, *tmp = NULL;
	uint32_t path, all_paths = 0;
	double t_stage = 0, t0;
	int fd, err, rc = 1;

	if (argc < 2 || argc > 4 || (argc > 2 && parse_size(argv[2], &piece)) ||
	    (argc > 3 && parse_size(argv[3], &buf_bytes))) {
		fprintf(stderr, "usage: stage_shm FILE [PIECE_BYTES [BUFFER_BYTES]]\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &stb) < 0) {
		fprintf(stderr, "stage_shm: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	err = shardfs_query(fd, &q);
	if (err) {
		fprintf(stderr, "stage_shm: %s: query: %s\n", argv[1], strerror(-err));
		return err == -ENOTTY ? 77 : 1;
	}
	printf("abi %u, caps 0x%x%s%s%s, %u GPUs, %u ranges / %" PRIu64 " bytes per call, "
	       "%u regions per file\n",
	       q.abi_version, q.caps, q.caps & SHARDFS_CAP_SHM ? " shm" : "",
	       q.caps & SHARDFS_CAP_CUDA_IPC ? " cuda" : "",
	       q.caps & SHARDFS_CAP_WARM ? " warm" : "", q.n_gpus, q.max_ranges, q.max_stage_bytes,
	       q.max_regions);
	if (!(q.caps & SHARDFS_CAP_SHM)) {
		fprintf(stderr, "stage_shm: the mount cannot stage into shared memory\n");
		return 77;
	}
	if (buf_bytes < 4096)
		buf_bytes = 4096;
	if ((uint64_t)stb.st_size < buf_bytes)
		buf_bytes = (uint64_t)stb.st_size + 4096; /* room for the end-of-file range */
	if (piece > buf_bytes)
		piece = buf_bytes;

	snprintf(name, sizeof(name), "/shardfs-stage-shm-%d", (int)getpid());
	err = shardfs_shm_create(name, buf_bytes, (void **)&map);
	if (err) {
		fprintf(stderr, "stage_shm: shm %s: %s\n", name, strerror(-err));
		return 1;
	}
	ranges = calloc(buf_bytes / piece + 1, sizeof(*ranges));
	tmp = malloc(4u << 20);
	if (!ranges || !tmp) {
		fprintf(stderr, "stage_shm: out of memory\n");
		goto out_destroy;
	}
	err = shardfs_register_shm(fd, name, 0, buf_bytes, &region_id);
	if (err) {
		fprintf(stderr, "stage_shm: register %s: %s\n", name, strerror(-err));
		goto out_destroy;
	}

	/* The file, one buffer-full per pass. */
	for (uint64_t off = 0; off < (uint64_t)stb.st_size;) {
		uint64_t pass = (uint64_t)stb.st_size - off < buf_bytes
				    ? (uint64_t)stb.st_size - off
				    : buf_bytes;
		unsigned n = 0;

		for (uint64_t o = 0; o < pass; o += piece) {
			ranges[n].region_offset = o;
			ranges[n].file_offset = off + o;
			ranges[n].length = pass - o < piece ? pass - o : piece;
			n++;
		}
		memset(map, 0xa5, pass);
		t0 = now_s();
		err = shardfs_stage(fd, region_id, ranges, n, &placed, &path);
		t_stage += now_s() - t0;
		if (err) {
			fprintf(stderr, "stage_shm: stage at %" PRIu64 ": %s\n", off,
				strerror(-err));
			goto out_unregister;
		}
		if (placed != pass) {
			fprintf(stderr,
				"stage_shm: %" PRIu64 " of %" PRIu64 " bytes placed at %" PRIu64
				"\n",
				placed, pass, off);
			goto out_unregister;
		}
		if (verify(fd, map, off, pass, tmp))
			goto out_unregister;
		all_paths |= path;
		total += placed;
		off += pass;
	}

	/* A range across the end of the file is placed short. */
	{
		uint64_t tail = (uint64_t)stb.st_size < 100 ? (uint64_t)stb.st_size : 100;
		struct shardfs_range r = {.region_offset = 0,
					  .file_offset = (uint64_t)stb.st_size - tail,
					  .length = 4096};

		err = shardfs_stage(fd, region_id, &r, 1, &placed, &path);
		if (err || r.placed != tail || verify(fd, map, r.file_offset, tail, tmp)) {
			fprintf(stderr,
				"stage_shm: end of file: %s, placed %" PRIu64 " (want %" PRIu64
				")\n",
				err ? strerror(-err) : "ok", r.placed, tail);
			goto out_unregister;
		}
	}
	printf("%s: %" PRIu64 " bytes staged in %.3f s (%.0f MB/s), pieces of %" PRIu64
	       ", path%s%s%s%s; every byte verified, end of file placed short\n",
	       argv[1], total, t_stage, t_stage > 0 ? total / 1e6 / t_stage : 0.0, piece,
	       all_paths & SHARDFS_PATH_CACHE ? " cache" : "",
	       all_paths & SHARDFS_PATH_NFS ? " nfs" : "",
	       all_paths & SHARDFS_PATH_SHM_COPY ? " shm_copy" : "",
	       all_paths & SHARDFS_PATH_CUDA_PINNED ? " cuda_pinned" : "");
	rc = 0;

out_unregister:
	err = shardfs_unregister(fd, region_id);
	if (err) {
		fprintf(stderr, "stage_shm: unregister: %s\n", strerror(-err));
		rc = 1;
	}
out_destroy:
	shardfs_shm_destroy(name, map, buf_bytes);
	free(ranges);
	free(tmp);
	close(fd);
	return rc;
}
