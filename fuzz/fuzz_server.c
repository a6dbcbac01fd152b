/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the byte server (src/server/server.c).
 *
 * The input bytes describe a layout over two temporary source files: up to
 * 8 tensors of any dtype and a small shape, each tiled by random FILE and
 * ZERO pieces, plus aliases (tied weights) of random entries.  The rest of
 * the input is a list of reads (entry, output dtype, offset, length).
 * Every read through gfs_tensor_read() must equal the same bytes taken
 * from a naive reference: the whole tensor assembled byte by byte from the
 * pieces, converted as a whole with gfs_dtype_convert().  Then the views of
 * the layout in an input-chosen dtype: the torch zip (its headers written
 * when read) must open with the project's zip reader, every record's data
 * must match its CRC-32, and short reads of a fresh view at input-chosen
 * offsets must equal the whole; the same reads of the safetensors file.
 */
#include "config.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fcntl.h>
#include <zlib.h>

#include "gatherfs/index/layout.h"
#include "gatherfs/readers/torchzip.h"
#include "gatherfs/server/server.h"
#include "gatherfs/views/view_safetensors.h"
#include "gatherfs/views/view_torchzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

enum { NSRC = 2, SRC_SIZE = 1 << 18, MAX_TENSORS = 8, MAX_READS = 64 };

static char g_dir[] = "/tmp/gfs-fuzz-server.XXXXXX";
static char g_path[NSRC][64];
static char g_zip[64]; /* a view written out, for the zip reader */
static uint8_t *g_src[NSRC]; /* the source files' contents */

/* A cursor over the input: reads past the end give zeros. */
typedef struct cursor {
	const uint8_t *p;
	size_t n;
} cursor;

static unsigned take8(cursor *c)
{
	if (c->n == 0)
		return 0;
	c->n--;
	return *c->p++;
}

static unsigned take16(cursor *c)
{
	const unsigned lo = take8(c);

	return lo | take8(c) << 8;
}

static uint32_t take32(cursor *c)
{
	const uint32_t lo = take16(c);

	return lo | (uint32_t)take16(c) << 16;
}

static void cleanup(void)
{
	for (int i = 0; i < NSRC; i++)
		unlink(g_path[i]);
	unlink(g_zip);
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	uint32_t x = 0x9e3779b9u;

	(void)argc;
	(void)argv;
	if (!mkdtemp(g_dir))
		abort();
	snprintf(g_zip, sizeof(g_zip), "%s/view.zip", g_dir);
	for (int i = 0; i < NSRC; i++) {
		FILE *f;

		snprintf(g_path[i], sizeof(g_path[i]), "%s/src%d.bin", g_dir, i);
		g_src[i] = malloc(SRC_SIZE);
		if (!g_src[i])
			abort();
		for (size_t k = 0; k < SRC_SIZE; k++) { /* xorshift: every byte value */
			x ^= x << 13;
			x ^= x >> 17;
			x ^= x << 5;
			g_src[i][k] = (uint8_t)x;
		}
		f = fopen(g_path[i], "wb");
		if (!f || fwrite(g_src[i], 1, SRC_SIZE, f) != SRC_SIZE || fclose(f) != 0)
			abort();
	}
	atexit(cleanup);
	return 0;
}

/*
 * reference(): the bytes of tensor t presented in dtype out, assembled
 * naively byte by byte.  The caller frees the result.
 */
static uint8_t *reference(const gfs_tensor *t, gfs_dtype out)
{
	uint8_t *native = malloc(t->nbytes + 1);
	uint8_t *conv = malloc(t->numel * gfs_dtype_size(out) + 1);

	if (!native || !conv)
		abort();
	memset(native, 0xA5, t->nbytes); /* a byte no piece wrote stays visible */
	for (size_t p = 0; p < t->npieces; p++) {
		const gfs_piece pcv = gfs_tensor_piece(t, p), *pc = &pcv;

		for (uint64_t k = 0; k < pc->len; k++)
			native[pc->toff + k] = pc->kind == GFS_PIECE_ZERO ? 0 :
				g_src[pc->src][pc->src_off + k];
	}
	if (out == t->dtype) {
		free(conv);
		return native;
	}
	gfs_dtype_convert(t->dtype, out, native, conv, (size_t)t->numel);
	free(native);
	return conv;
}

/* build(): a finished layout from the input, or NULL if it describes none. */
static gfs_layout *build(cursor *c)
{
	gfs_layout *l = NULL;
	uint32_t src[NSRC];
	const unsigned nt = 1 + take8(c) % MAX_TENSORS;
	char name[32];

	if (gfs_layout_new("fuzz", g_dir, &l) != GFS_OK)
		abort();
	for (int i = 0; i < NSRC; i++)
		if (gfs_layout_add_source(l, g_path[i] + strlen(g_dir) + 1, SRC_SIZE, &src[i]) != GFS_OK)
			abort();
	for (unsigned k = 0; k < nt; k++) {
		const unsigned kind = take8(c);

		if (kind % 5 == 4 && k > 0) { /* an alias of an earlier or later entry */
			char target[32];

			snprintf(name, sizeof(name), "alias%u", k);
			snprintf(target, sizeof(target), "t%u", take8(c) % nt);
			if (gfs_layout_add_alias(l, name, target) != GFS_OK)
				abort();
			continue;
		}
		const gfs_dtype dt = (gfs_dtype)(1 + take8(c) % (GFS_DT_COUNT_ - 1));
		const uint32_t ndim = take8(c) % 4;
		uint64_t shape[3];
		size_t ti;

		for (uint32_t d = 0; d < ndim; d++)
			shape[d] = take8(c) % (d == 0 ? 200 : 12);
		snprintf(name, sizeof(name), "t%u", k);
		if (gfs_layout_add_tensor(l, name, dt, ndim, shape, &ti) != GFS_OK)
			abort();
		const uint64_t nbytes = l->tensors[ti].nbytes;
		uint64_t done = 0;

		while (done < nbytes) {
			const unsigned how = take8(c);
			uint64_t len = 1 + take16(c) % 4096;

			if (how & 0x80 || c->n == 0) /* one piece for the rest */
				len = nbytes - done;
			if (len > nbytes - done)
				len = nbytes - done;
			if (how % 4 == 0 || len > SRC_SIZE) {
				if (gfs_layout_add_zero(l, ti, len) != GFS_OK)
					abort();
			} else {
				const uint64_t off = take32(c) % (SRC_SIZE - len + 1);

				if (gfs_layout_add_piece(l, ti, src[how % 3 == 1], off, len) != GFS_OK)
					abort();
			}
			done += len;
		}
	}
	if (gfs_layout_finish(l, "fuzz") != GFS_OK) {
		/* only an alias of an alias or of a missing name may be refused */
		gfs_layout_free(l);
		return NULL;
	}
	return l;
}

/* read_whole(): all of vf in 4 KiB reads (the caller frees), or abort. */
static uint8_t *read_whole(const gfs_vfile *vf, size_t *len)
{
	const size_t n = (size_t)gfs_vfile_size(vf);
	uint8_t *all = malloc(n + 1);
	size_t off = 0, got = 0;

	if (!all)
		abort();
	while (off < n) {
		if (gfs_vfile_read(vf, off, all + off, 4096, &got) != GFS_OK || got == 0) {
			fprintf(stderr, "view read failed at %zu: %s\n", off, gfs_errmsg());
			abort();
		}
		off += got;
	}
	*len = n;
	return all;
}

/* short_reads(): reads of vf at offsets and lengths from the input equal all[0..len). */
static void short_reads(const gfs_vfile *vf, const uint8_t *all, size_t len, cursor *c)
{
	uint8_t buf[5000];

	for (int r = 0; r < 32 && c->n > 0; r++) {
		const size_t off = take32(c) % (len + 1), n = take16(c) % sizeof(buf);
		const size_t want = n < len - off ? n : len - off;
		size_t got = 0;

		if (gfs_vfile_read(vf, off, buf, n, &got) != GFS_OK || got != want ||
		    memcmp(buf, all + off, want) != 0) {
			fprintf(stderr, "view: read of %zu at %zu differs\n", n, off);
			abort();
		}
	}
}

/* check_zip(): the archive all[0..len) opens, and each record's data has its CRC-32. */
static void check_zip(const uint8_t *all, size_t len)
{
	const int fd = open(g_zip, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	gfs_tzip *tz = NULL;

	if (fd < 0 || write(fd, all, len) != (ssize_t)len)
		abort();
	if (gfs_tzip_open(fd, 0, len, g_zip, NULL, &tz) != GFS_OK) {
		fprintf(stderr, "the zip view does not open: %s\n", gfs_errmsg());
		abort();
	}
	for (size_t i = 0; i < gfs_tzip_count(tz); i++) {
		const gfs_tzip_record *r = gfs_tzip_at(tz, i);

		if (r->data_off > len || r->size > len - r->data_off ||
		    (uint32_t)crc32_z(0, all + r->data_off, (z_size_t)r->size) != r->crc32) {
			fprintf(stderr, "zip view record %s: bad data or CRC-32\n", r->name);
			abort();
		}
	}
	gfs_tzip_close(tz);
	close(fd);
}

/* check_views(): the torch zip and safetensors views of l, in a dtype from the input. */
static void check_views(const gfs_layout *l, const gfs_srcset *s, gfs_dtype want, cursor *c)
{
	const gfs_vctx ctx = { .layout = l, .src = s, .want = want };
	gfs_tzview *z = NULL;
	gfs_vfile *st = NULL;
	uint8_t *all;
	size_t len;

	if (gfs_tzview_new(&ctx, "archive", NULL, 0, &z) != GFS_OK)
		abort();
	all = read_whole(gfs_tzview_vfile(z), &len);
	gfs_tzview_free(z);
	check_zip(all, len);
	if (gfs_tzview_new(&ctx, "archive", NULL, 0, &z) != GFS_OK) /* CRC-32s unknown again */
		abort();
	short_reads(gfs_tzview_vfile(z), all, len, c);
	gfs_tzview_free(z);
	free(all);
	if (gfs_stview_new(&ctx, NULL, 0, &st) != GFS_OK)
		abort();
	all = read_whole(st, &len);
	short_reads(st, all, len, c);
	gfs_vfile_free(st);
	free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const gfs_dtype wants[] = { GFS_DT_INVALID, GFS_DT_BF16, GFS_DT_F16, GFS_DT_F32 };
	cursor c = { data, size };
	gfs_layout *l = build(&c);
	gfs_srcset *s = NULL;

	if (!l)
		return 0;
	if (gfs_srcset_open(l, &s) != GFS_OK)
		abort();
	uint8_t *refs[MAX_TENSORS][4] = { { NULL } }; /* reference per entry and dtype */

	for (int r = 0; r < MAX_READS && c.n > 0; r++) {
		const size_t i = take8(&c) % l->ntensors;
		const unsigned w = take8(&c) % 4;
		const gfs_dtype want = wants[w];
		const gfs_tensor *t = gfs_layout_target(l, i);
		const gfs_dtype out = gfs_dtype_out(t->dtype, want);
		const uint64_t total = gfs_tensor_out_nbytes(l, i, want);
		const uint64_t off = total ? take32(&c) % (total + 1) : 0;
		const uint64_t len = take32(&c) % (total - off + 1);
		uint8_t *ref = refs[i][w] ? refs[i][w] : (refs[i][w] = reference(t, out));
		uint8_t *buf = malloc(len + 1);

		assert(t->alias_of < 0);
		if (!buf)
			abort();
		if (total != t->numel * gfs_dtype_size(out))
			abort();
		if (gfs_tensor_read(l, s, i, want, off, buf, (size_t)len) != GFS_OK) {
			fprintf(stderr, "read failed: %s\n", gfs_errmsg());
			abort();
		}
		if (memcmp(buf, ref + off, (size_t)len) != 0) {
			fprintf(stderr, "mismatch: entry %zu want %d off %llu len %llu\n", i,
				(int)want, (unsigned long long)off, (unsigned long long)len);
			abort();
		}
		free(buf);
	}
	for (size_t i = 0; i < MAX_TENSORS; i++)
		for (size_t w = 0; w < 4; w++)
			free(refs[i][w]);
	check_views(l, s, wants[take8(&c) % 4], &c);
	gfs_srcset_close(s);
	gfs_layout_free(l);
	return 0;
}
