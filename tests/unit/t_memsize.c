/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Memory per tensor and per piece, measured: the heap in use (mallinfo2:
 * arena and mmap'ed blocks) before and after building real layouts through
 * the importers' API, then the namespace over them (every view), fails if
 * either regresses past a bound (issue 16: O(tensors + pieces) with small
 * constants).  Two layouts of N tensors, one piece and PIECES pieces each,
 * from alternating sources so that no pieces merge: the difference is
 * per piece, the rest per tensor.  A third layout partitions N tensors
 * over RANKS ranks of a regular flat (ZeRO-3): RANKS pieces each, stored
 * once per tensor, so its entry costs what an entry of one piece does.
 *
 * Bounds, from the measurements of this tree (bench/RESULTS.md, "Scale:
 * memory"): a layout entry and a piece as stored, and the namespace's
 * share of a tensor (its tensors/ file, its records in the torch zip and
 * safetensors views, its INDEX line).
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "gatherfs/fs/fs.h"
#include "gatherfs/index/layout.h"
#include "gatherfs/server/server.h"
#include "tap.h"

enum { N = 20000, PIECES = 9, ELEMS = 64, RANKS = 256 };

#define MAX_TENSOR_BYTES 220.0 /* layout, per entry (200.9 measured) */
#define MAX_PIECE_BYTES 26.0   /* layout, per piece */
#define MAX_FS_BYTES 350.0     /* namespace with every view, per tensor (284.4 measured) */

#ifdef __GLIBC__
static double heap_used(void)
{
	const struct mallinfo2 m = mallinfo2();

	return (double)m.uordblks + (double)m.hblkhd;
}

/* finished(): l finished (gfs_layout_finish()) if err is GFS_OK, else freed: NULL. */
static gfs_layout *finished(gfs_layout *l, gfs_err err)
{
	if (!err)
		err = gfs_layout_finish(l, "t_memsize");
	if (err) {
		printf("# %s\n", gfs_errmsg());
		gfs_layout_free(l);
		return NULL;
	}
	return l;
}

/*
 * build(): a finished layout of N float32 tensors [PIECES * ELEMS] with
 * npieces pieces each, alternating between two sources in dir.
 */
static gfs_layout *build(const char *dir, size_t npieces)
{
	const uint64_t plen = (uint64_t)ELEMS * PIECES / npieces * 4;
	const uint64_t size = (uint64_t)N * PIECES * ELEMS * 4;
	const uint64_t shape[2] = { PIECES, ELEMS };
	gfs_layout *l = NULL;
	uint32_t src[2];
	uint64_t off[2] = { 0, 0 };
	gfs_err err = gfs_layout_new("json", dir, &l);

	if (!err)
		err = gfs_layout_add_source(l, "a.bin", size, &src[0]);
	if (!err)
		err = gfs_layout_add_source(l, "b.bin", size, &src[1]);
	for (size_t i = 0; i < N && !err; i++) {
		char name[64];
		size_t ti;

		snprintf(name, sizeof(name), "model.layers.%zu.mlp.down_proj.weight", i);
		err = gfs_layout_add_tensor(l, name, GFS_DT_F32, 2, shape, &ti);
		for (size_t p = 0; p < npieces && !err; p++) {
			err = gfs_layout_add_piece(l, ti, src[p & 1], off[p & 1], plen);
			off[p & 1] += plen;
		}
	}
	return finished(l, err);
}

/*
 * build_rflat(): a finished layout of N float32 tensors [PIECES * ELEMS],
 * each partitioned over the RANKS ranks of one regular flat (ranks
 * alternating between two sources in dir).
 */
static gfs_layout *build_rflat(const char *dir)
{
	const uint64_t nbytes = (uint64_t)ELEMS * PIECES * 4;
	const uint64_t plen = (nbytes + RANKS - 1) / RANKS;
	const uint64_t size = (uint64_t)N * PIECES * ELEMS * 4;
	const uint64_t shape[2] = { PIECES, ELEMS };
	uint32_t srcs[RANKS], src[2], f = 0;
	uint64_t offs[RANKS] = { 0 };
	gfs_layout *l = NULL;
	gfs_err err = gfs_layout_new("json", dir, &l);

	if (!err)
		err = gfs_layout_add_source(l, "a.bin", size, &src[0]);
	if (!err)
		err = gfs_layout_add_source(l, "b.bin", size, &src[1]);
	for (size_t k = 0; k < RANKS; k++)
		srcs[k] = src[k & 1];
	if (!err)
		err = gfs_layout_add_rflat(l, RANKS, srcs, offs, N * plen, &f);
	for (size_t i = 0; i < N && !err; i++) {
		char name[64];
		size_t ti;

		snprintf(name, sizeof(name), "model.layers.%zu.mlp.down_proj.weight", i);
		err = gfs_layout_add_tensor(l, name, GFS_DT_F32, 2, shape, &ti);
		if (!err)
			err = gfs_layout_add_partition(l, ti, f, i * plen, plen);
	}
	return finished(l, err);
}

/* source_file(): a sparse file dir/name of size bytes. */
static int source_file(const char *dir, const char *name, uint64_t size)
{
	char path[4096];
	int fd, rc;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	rc = ftruncate(fd, (off_t)size);
	close(fd);
	return rc;
}

int main(void)
{
	char dir[] = "/tmp/gatherfs-t_memsize.XXXXXX";
	const uint64_t size = (uint64_t)N * PIECES * ELEMS * 4;
	double h0, one, many, fs_bytes = 0, per_piece, per_tensor, per_part;
	gfs_layout *l1, *l9, *lr;
	gfs_srcset *src = NULL;
	gfs_fs *fs = NULL;
	const gfs_fs_opts o = { .want = GFS_DT_INVALID, .views = GFS_VIEW_ALL };
	char path[sizeof(dir) + 8];

	if (!mkdtemp(dir) || source_file(dir, "a.bin", size) || source_file(dir, "b.bin", size)) {
		perror("t_memsize: temporary sources");
		return 1;
	}
	h0 = heap_used();
	l1 = build(dir, 1);
	one = heap_used() - h0;
	h0 = heap_used();
	l9 = build(dir, PIECES);
	many = heap_used() - h0;
	tap_ok(l1 && l9, "layouts of %d tensors x 1 and x %d pieces", N, PIECES);
	per_piece = (many - one) / ((double)N * (PIECES - 1));
	per_tensor = one / N - per_piece;
	printf("# layout: %.1f bytes per entry, %.1f bytes per piece (sizeof gfs_tensor %zu, gfs_piece %zu)\n",
	       per_tensor, per_piece, sizeof(gfs_tensor), sizeof(gfs_piece));
	tap_ok(per_tensor <= MAX_TENSOR_BYTES, "layout entry: %.1f bytes <= %.0f", per_tensor,
	       MAX_TENSOR_BYTES);
	tap_ok(per_piece <= MAX_PIECE_BYTES, "piece: %.1f bytes <= %.0f", per_piece,
	       MAX_PIECE_BYTES);
	h0 = heap_used();
	lr = build_rflat(dir);
	per_part = (heap_used() - h0) / N;
	printf("# layout: %.1f bytes per entry partitioned over %d ranks\n", per_part, RANKS);
	tap_ok(lr && lr->tensors[0].npieces == RANKS && per_part <= MAX_TENSOR_BYTES,
	       "an entry of %d pieces on a regular flat: %.1f bytes <= %.0f", RANKS, per_part,
	       MAX_TENSOR_BYTES);
	gfs_layout_free(lr);
	if (l9 && gfs_srcset_open(l9, &src) == GFS_OK) {
		h0 = heap_used();
		if (gfs_fs_new(l9, src, &o, &fs) == GFS_OK)
			fs_bytes = (heap_used() - h0) / N;
		else
			printf("# %s\n", gfs_errmsg());
	}
	printf("# namespace: %.1f bytes per tensor\n", fs_bytes);
	tap_ok(fs && fs_bytes <= MAX_FS_BYTES, "namespace: %.1f bytes per tensor <= %.0f",
	       fs_bytes, MAX_FS_BYTES);
	gfs_fs_free(fs);
	gfs_srcset_close(src);
	gfs_layout_free(l1);
	gfs_layout_free(l9);
	snprintf(path, sizeof(path), "%s/a.bin", dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/b.bin", dir);
	unlink(path);
	rmdir(dir);
	return tap_done();
}
#else
int main(void)
{
	puts("1..0 # SKIP mallinfo2() is glibc's");
	return 0;
}
#endif
