/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the layout index, its JSON form and the tensor byte server:
 * piece merging, validation errors, alias resolution, JSON round trip, reads
 * at every offset with and without dtype conversion, checksummed records and
 * their checks, declarations (gfs_layout_declare()) and their check.
 */
#include "config.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zlib.h>

#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/util/json.h"
#include "gatherfs/index/layout.h"
#include "gatherfs/server/server.h"
#include "tap.h"

static char tmpdir[] = "/tmp/gfs-t-layout-XXXXXX";
static char srcpath[512];

/* A source file of 256 bytes: byte i holds i. */
static void make_source(void)
{
	uint8_t buf[256];
	FILE *f;

	for (int i = 0; i < 256; i++)
		buf[i] = (uint8_t)i;
	if (!mkdtemp(tmpdir))
		abort();
	snprintf(srcpath, sizeof(srcpath), "%s/src.bin", tmpdir);
	f = fopen(srcpath, "wb");
	if (!f || fwrite(buf, 1, sizeof(buf), f) != sizeof(buf) || fclose(f) != 0)
		abort();
}

/* build(): a layout with a float32 [2,3] from two pieces and a zero piece,
 * an int64 [2], a forward alias, and a bf16 [4]. */
static gfs_err build(gfs_layout **out)
{
	const uint64_t s23[2] = { 2, 3 }, s2[1] = { 2 }, s4[1] = { 4 };
	gfs_layout *l;
	uint32_t src;
	size_t a, b, c;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	if (err)
		return err;
	if ((err = gfs_layout_add_source(l, "src.bin", 256, &src)) ||
	    (err = gfs_layout_add_alias(l, "tied", "w")) ||
	    (err = gfs_layout_add_tensor(l, "w", GFS_DT_F32, 2, s23, &a)) ||
	    (err = gfs_layout_add_piece(l, a, src, 0, 8)) ||
	    (err = gfs_layout_add_piece(l, a, src, 8, 4)) ||
	    (err = gfs_layout_add_zero(l, a, 4)) ||
	    (err = gfs_layout_add_piece(l, a, src, 100, 8)) ||
	    (err = gfs_layout_add_tensor(l, "i", GFS_DT_I64, 1, s2, &b)) ||
	    (err = gfs_layout_add_piece(l, b, src, 200, 16)) ||
	    (err = gfs_layout_add_tensor(l, "h", GFS_DT_BF16, 1, s4, &c)) ||
	    (err = gfs_layout_add_piece(l, c, src, 64, 8)) ||
	    (err = gfs_layout_finish(l, "test"))) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

static void test_build_and_read(void)
{
	gfs_layout *l = NULL;
	gfs_srcset *s = NULL;
	uint8_t buf[64];
	bool every = true;

	if (!tap_ok(build(&l) == GFS_OK, "build a layout: %s", gfs_errmsg()))
		return;
	tap_ok(l->ntensors == 4 && l->tensors[0].alias_of == 1, "forward alias resolved");
	tap_ok(l->tensors[1].npieces == 3, "adjacent pieces merged (3 pieces, not 4)");
	tap_ok(gfs_layout_find(l, "h") == 3 && gfs_layout_find(l, "x") == -1, "lookup by name");
	tap_ok(gfs_srcset_open(l, &s) == GFS_OK, "open the sources");
	/* every sub-range of w equals the expected bytes */
	{
		uint8_t want[24];

		for (int i = 0; i < 12; i++)
			want[i] = (uint8_t)i;
		memset(want + 12, 0, 4);
		for (int i = 0; i < 8; i++)
			want[16 + i] = (uint8_t)(100 + i);
		for (uint64_t off = 0; off < 24; off++)
			for (uint64_t n = 0; off + n <= 24; n++) {
				memset(buf, 0xee, sizeof(buf));
				if (gfs_tensor_read(l, s, 0, GFS_DT_INVALID, off, buf, n) ||
				    memcmp(buf, want + off, n) != 0)
					every = false;
			}
	}
	tap_ok(every, "alias reads its target; every (offset, length) of a 3-piece tensor");
	/* int64 never converts; bf16 -> f32 and f32 -> bf16 at odd offsets */
	tap_ok(gfs_tensor_out_nbytes(l, 2, GFS_DT_BF16) == 16, "int64 keeps its size under dtype=bf16");
	tap_ok(gfs_tensor_out_nbytes(l, 1, GFS_DT_BF16) == 12, "float32 [2,3] is 12 bytes as bf16");
	{
		uint8_t all[12], part[12];
		bool ok = gfs_tensor_read(l, s, 1, GFS_DT_BF16, 0, all, 12) == GFS_OK;

		for (uint64_t off = 0; ok && off < 12; off++)
			for (uint64_t n = 1; ok && off + n <= 12; n++)
				ok = gfs_tensor_read(l, s, 1, GFS_DT_BF16, off, part, n) == GFS_OK &&
				     memcmp(part, all + off, n) == 0;
		tap_ok(ok, "converted reads agree at every (offset, length)");
	}
	{
		uint8_t f[16];
		float v;
		const uint8_t h0[2] = { 64, 65 };

		gfs_dtype_convert(GFS_DT_BF16, GFS_DT_F32, h0, &v, 1);
		tap_ok(gfs_tensor_read(l, s, 3, GFS_DT_F32, 0, f, 16) == GFS_OK &&
		       memcmp(f, &v, 4) == 0, "bf16 tensor widened to float32");
	}
	gfs_srcset_close(s);
	gfs_layout_free(l);
}

static void test_json_roundtrip(void)
{
	gfs_layout *l = NULL, *l2 = NULL;
	char *a = NULL, *b = NULL;

	if (build(&l))
		return;
	tap_ok(gfs_layout_to_json(l, &a) == GFS_OK, "layout to JSON");
	tap_ok(gfs_layout_from_json(a, strlen(a), "mem", "/nonexistent", &l2) == GFS_OK,
	       "JSON back to a layout: %s", gfs_errmsg());
	if (l2)
		tap_ok(gfs_layout_to_json(l2, &b) == GFS_OK && strcmp(a, b) == 0,
		       "round trip is exact");
	free(a);
	free(b);
	gfs_layout_free(l);
	gfs_layout_free(l2);
}

/*
 * strided(): a float32 [4, 4] from two column pieces (columns 0-1 at source
 * byte 0, columns 2-3 at source byte 32, 8-byte runs, rows 16 bytes apart);
 * second_at/second_len vary the second piece.  @return finish's result.
 */
static gfs_err strided(uint64_t second_at, uint64_t second_len, gfs_layout **out)
{
	const uint64_t s44[2] = { 4, 4 };
	gfs_layout *l;
	uint32_t src = 0;
	size_t t;
	gfs_piece a = { .toff = 0, .len = 8, .count = 4, .dst_stride = 16, .src_stride = 8 };
	gfs_piece b = { .toff = second_at, .len = second_len, .src_off = 32, .count = 4,
			.dst_stride = 16, .src_stride = 8 };
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	if (!err)
		err = gfs_layout_add_source(l, "src.bin", 256, &src);
	if (!err)
		err = gfs_layout_add_tensor(l, "m", GFS_DT_F32, 2, s44, &t);
	a.src = b.src = src;
	if (!err) /* added out of order on purpose */
		err = gfs_layout_add_general(l, t, &b);
	if (!err)
		err = gfs_layout_add_general(l, t, &a);
	if (!err)
		err = gfs_layout_finish(l, "test");
	if (err || !out)
		gfs_layout_free(l);
	else
		*out = l;
	return err;
}

static void test_strided(void)
{
	gfs_layout *l = NULL, *l2 = NULL;
	gfs_srcset *s = NULL;
	uint8_t buf[65], want[64];
	char *json = NULL;
	bool same = true;

	tap_ok(strided(8, 8, &l) == GFS_OK, "column pieces tile a [4, 4]: %s", gfs_errmsg());
	if (!l)
		return;
	tap_ok(gfs_tensor_piece(&l->tensors[0], 0).toff == 0 && l->tensors[0].strided, "pieces sorted, strided");
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 16; c++)
			want[r * 16 + c] = (uint8_t)(c < 8 ? r * 8 + c : 32 + r * 8 + c - 8);
	tap_ok(gfs_srcset_open(l, &s) == GFS_OK, "strided: open sources");
	for (size_t off = 0; s && off < 64; off++)
		for (size_t len = 1; off + len <= 64; len++) {
			memset(buf, 0xee, sizeof(buf));
			if (gfs_tensor_read(l, s, 0, GFS_DT_INVALID, off, buf, len) != GFS_OK ||
			    memcmp(buf, want + off, len) != 0 || buf[len] != 0xee)
				same = false;
		}
	tap_ok(same, "strided: every (offset, length) read is exact");
	gfs_srcset_close(s);
	tap_ok(gfs_layout_to_json(l, &json) == GFS_OK && strstr(json, "\"gatherfs_layout\":\t2") &&
	       strstr(json, "\"dst_stride\":\t16"), "strided: JSON version 2 with strides");
	tap_ok(json && gfs_layout_from_json(json, strlen(json), "s.json", tmpdir, &l2) == GFS_OK &&
	       l2->tensors[0].npieces == 2 && gfs_tensor_piece(&l2->tensors[0], 1).count == 4,
	       "strided: JSON round trip: %s", gfs_errmsg());
	free(json);
	gfs_layout_free(l2);
	gfs_layout_free(l);
	tap_ok(strided(4, 8, NULL) == GFS_ERR_FORMAT && strstr(gfs_errmsg(), "overlap"),
	       "overlapping strided pieces are refused: %s", gfs_errmsg());
	tap_ok(strided(8, 4, NULL) == GFS_ERR_FORMAT && strstr(gfs_errmsg(), "gap"),
	       "strided pieces with a gap are refused: %s", gfs_errmsg());
	tap_ok(strided(8, 16, NULL) == GFS_ERR_FORMAT && strstr(gfs_errmsg(), "strides"),
	       "a stride not past its run is refused: %s", gfs_errmsg());
}

/*
 * tiling_case(): a u8 tensor of n bytes from npc pieces, finished; the
 * verdict must be "every byte covered exactly once".  @return agreement.
 */
static bool tiling_case(uint64_t n, const gfs_piece *pcs, size_t npc, unsigned *accepted)
{
	uint8_t cover[256] = { 0 };
	bool once = true;
	gfs_layout *l = NULL;
	uint32_t src = 0;
	size_t t;
	gfs_err err;

	assert(n <= sizeof(cover));
	for (size_t i = 0; i < npc; i++)
		for (uint64_t k = 0; k < pcs[i].count; k++)
			for (uint64_t b = 0; b < pcs[i].len; b++) {
				const uint64_t at = pcs[i].toff + k * pcs[i].dst_stride + b;

				if (at >= n || cover[at]++)
					once = false;
			}
	for (uint64_t b = 0; b < n; b++)
		once = once && cover[b] == 1;
	err = gfs_layout_new("test", tmpdir, &l);
	if (!err)
		err = gfs_layout_add_source(l, "src.bin", 1 << 20, &src);
	if (!err)
		err = gfs_layout_add_tensor(l, "m", GFS_DT_U8, 1, &n, &t);
	for (size_t i = 0; i < npc && !err; i++) {
		gfs_piece p = pcs[i];

		p.src = src;
		p.src_off = i * 4096;
		p.src_stride = p.len;
		err = gfs_layout_add_general(l, t, &p);
	}
	if (!err)
		err = gfs_layout_finish(l, "test");
	gfs_layout_free(l);
	*accepted += err == GFS_OK;
	return (err == GFS_OK) == once;
}

/*
 * test_tiling(): random column splits of random matrices (the regular
 * tilings tensor parallelism makes, checked by arithmetic), then each one
 * spoiled at random (the walk of the runs decides): finish accepts exactly
 * the piece sets that cover every byte once.
 */
static void test_tiling(void)
{
	unsigned seed = 12345, bad = 0, accepted = 0;

	for (int round = 0; round < 4000; round++) {
		gfs_piece pcs[16];
		size_t npc = 0;
		uint64_t pos = 0;
		const uint64_t n = 8 + rand_r(&seed) % 249;

		while (pos < n && npc < 12) {
			const uint64_t rows = 1 + rand_r(&seed) % 8;
			const uint64_t width = 1 + rand_r(&seed) % 16;
			const unsigned parts = 1 + rand_r(&seed) % 4;
			uint64_t col = 0;

			if (pos + rows * width > n || rand_r(&seed) % 4 == 0) {
				pcs[npc++] = (gfs_piece){ .toff = pos, .len = n - pos < width ? n - pos : width,
							  .count = 1 };
				pos += pcs[npc - 1].len;
				continue;
			}
			for (unsigned k = 0; k < parts && col < width && npc < 15; k++) {
				const uint64_t w = k + 1 == parts ? width - col
								  : 1 + rand_r(&seed) % (width - col);

				if (w == width) /* one part: a contiguous piece */
					pcs[npc++] = (gfs_piece){ .toff = pos, .len = rows * width,
								  .count = 1 };
				else
					pcs[npc++] = (gfs_piece){ .toff = pos + col, .len = w,
								  .count = rows, .dst_stride = width };
				col += w;
			}
			pos += col < width ? col : rows * width;
		}
		if (npc > 0 && rand_r(&seed) % 2) {
			gfs_piece *v = &pcs[rand_r(&seed) % npc];
			const int d = rand_r(&seed) % 2 ? 1 : -1;

			switch (rand_r(&seed) % 4) {
			case 0: v->toff = v->toff + d; break;
			case 1: v->len = v->len + d > 0 ? v->len + d : 1; break;
			case 2: v->count = v->count + d > 0 ? v->count + d : 1; break;
			default: v->dst_stride = v->dst_stride + d; break;
			}
			if (v->count > 1 && v->dst_stride <= v->len)
				v->dst_stride = v->len + 1;
			if (v->count == 1)
				v->dst_stride = 0;
		}
		if (!tiling_case(n, pcs, npc, &accepted))
			bad++;
	}
	tap_ok(bad == 0 && accepted > 1000 && accepted < 3000,
	       "4,000 random piece sets: finish accepts exactly those covering every byte once "
	       "(%u accepted, %u disagree)", accepted, bad);
}

static void expect_finish_error(const char *what, int variant, const char *word)
{
	const uint64_t s2[1] = { 2 };
	gfs_layout *l;
	uint32_t src;
	size_t t;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	if (!err)
		err = gfs_layout_add_source(l, "src.bin", 256, &src);
	if (!err)
		err = gfs_layout_add_tensor(l, "t", GFS_DT_F32, 1, s2, &t);
	switch (variant) {
	case 0: /* gap: pieces cover 4 of 8 bytes */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 4);
		break;
	case 1: /* too many bytes */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 12);
		break;
	case 2: /* past the end of the source */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 252, 8);
		break;
	case 3: /* duplicate name */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 8);
		if (!err)
			err = gfs_layout_add_tensor(l, "t", GFS_DT_F32, 1, s2, &t);
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 8);
		break;
	case 4: /* alias of an alias */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 8);
		if (!err)
			err = gfs_layout_add_alias(l, "a", "t");
		if (!err)
			err = gfs_layout_add_alias(l, "b", "a");
		break;
	case 5: /* alias of nothing */
		if (!err)
			err = gfs_layout_add_piece(l, t, src, 0, 8);
		if (!err)
			err = gfs_layout_add_alias(l, "a", "zz");
		break;
	}
	if (!err)
		err = gfs_layout_finish(l, "test");
	tap_ok(err != GFS_OK && strstr(gfs_errmsg(), word) != NULL, "%s is refused: %s", what,
	       gfs_errmsg());
	gfs_layout_free(l);
}

/* crc_of(): CRC-32 of source bytes [off, off + len) (byte i holds i). */
static uint32_t crc_of(unsigned off, unsigned len)
{
	uint8_t b[256];

	for (unsigned i = 0; i < len; i++)
		b[i] = (uint8_t)(off + i);
	return (uint32_t)crc32(crc32(0, Z_NULL, 0), b, len);
}

/*
 * Records: r1 = [0, 64) with its true CRC (registered twice), r2 = [64, 128)
 * with a wrong one, r3 = [128, 192) that no piece reads.  Tensor a reads
 * [0, 16) and [100, 116), b [64, 72), c [120, 136) (across r2's end: in no
 * record); t is an alias of a.
 */
static void test_records(void)
{
	const uint64_t s8[1] = { 8 }, s4[1] = { 4 }, s16[1] = { 16 };
	gfs_record r = { .kind = GFS_PIECE_FILE };
	gfs_layout *l = NULL;
	gfs_srcset *s = NULL;
	uint8_t buf[32];
	uint32_t src = 0, crc = 0;
	size_t a, b, c, idx[4], nbad = 0;
	const gfs_tensor *ta;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	err = err ? err : gfs_layout_add_source(l, "src.bin", 256, &src);
	r.src = src;
	err = err ? err : gfs_layout_add_tensor(l, "a", GFS_DT_F32, 1, s8, &a);
	err = err ? err : gfs_layout_add_piece(l, a, src, 0, 16);
	err = err ? err : gfs_layout_add_piece(l, a, src, 100, 16);
	err = err ? err : gfs_layout_add_tensor(l, "b", GFS_DT_BF16, 1, s4, &b);
	err = err ? err : gfs_layout_add_piece(l, b, src, 64, 8);
	err = err ? err : gfs_layout_add_tensor(l, "c", GFS_DT_U8, 1, s16, &c);
	err = err ? err : gfs_layout_add_piece(l, c, src, 120, 16);
	err = err ? err : gfs_layout_add_alias(l, "t", "a");
	r.off = 0, r.len = 64, r.crc32 = crc_of(0, 64);
	err = err ? err : gfs_layout_add_record(l, &r, "arch/data/0");
	err = err ? err : gfs_layout_add_record(l, &r, "arch/data/0");
	r.off = 64, r.len = 64, r.crc32 = crc_of(64, 64) ^ 1;
	err = err ? err : gfs_layout_add_record(l, &r, "arch/data/1");
	r.off = 128, r.len = 64, r.crc32 = crc_of(128, 64);
	err = err ? err : gfs_layout_add_record(l, &r, "arch/data/2");
	err = err ? err : gfs_layout_finish(l, "test");
	tap_ok(err == GFS_OK, "a layout with records: %s", err ? gfs_errmsg() : "ok");
	if (err) {
		gfs_layout_free(l);
		return;
	}
	ta = &l->tensors[a];
	tap_ok(l->nrecords == 2 && strcmp(l->records[0].name, "arch/data/0") == 0 &&
		       strcmp(l->records[1].name, "arch/data/1") == 0,
	       "duplicates merged, the record no piece reads dropped (%zu left)", l->nrecords);
	tap_ok(ta->slots[0].rec == 0 && ta->slots[1].rec == 1 && l->tensors[b].slots[0].rec == 1 &&
		       l->tensors[c].slots[0].rec == GFS_NO_RECORD,
	       "each piece knows its record; a piece across a record's end has none");
	tap_ok(gfs_record_tensors(l, 1, idx, 4) == 3 && idx[0] == a && idx[1] == b &&
		       l->tensors[idx[2]].alias_of == (int64_t)a,
	       "the tensors of a record: a, b and a's alias");
	err = gfs_srcset_open(l, &s);
	err = err ? err : gfs_integrity_check(l, s, NULL, 0, 2, &nbad, NULL);
	tap_ok(err == GFS_OK && nbad == 1 && gfs_srcset_rec_state(s, 0) == GFS_REC_OK &&
		       gfs_srcset_rec_state(s, 1) == GFS_REC_BAD,
	       "the check finds the record with the wrong CRC-32, and only it");
	tap_ok(gfs_srcset_piece_crc(s, a, 0, &crc) && crc == crc_of(0, 16) &&
		       !gfs_srcset_piece_crc(s, a, 1, &crc),
	       "a piece of a good record has its CRC-32, a piece of a bad one none");
	tap_ok(gfs_tensor_read(l, s, a, GFS_DT_INVALID, 0, buf, 16) == GFS_OK && buf[15] == 15,
	       "bytes of a from the good record are served");
	err = gfs_tensor_read(l, s, a, GFS_DT_INVALID, 0, buf, 32);
	tap_ok(err == GFS_ERR_IO && strstr(gfs_errmsg(), "arch/data/1") &&
		       strstr(gfs_errmsg(), "tensors a, b, t"),
	       "bytes of a from the bad record are refused: %s", gfs_errmsg());
	tap_ok(gfs_tensor_read(l, s, c, GFS_DT_INVALID, 0, buf, 16) == GFS_OK && buf[0] == 120,
	       "bytes in no record are served (unverifiable)");
	gfs_srcset_close(s);
	gfs_layout_free(l);
}

/* A second source of 256 bytes, byte i holding 255 - i; @return its path. */
static const char *make_source2(void)
{
	static char path[600];
	uint8_t buf[256];
	FILE *f;

	for (int i = 0; i < 256; i++)
		buf[i] = (uint8_t)(255 - i);
	snprintf(path, sizeof(path), "%s/src2.bin", tmpdir);
	f = fopen(path, "wb");
	if (!f || fwrite(buf, 1, sizeof(buf), f) != sizeof(buf) || fclose(f) != 0)
		abort();
	return path;
}

/* crc_of2(): CRC-32 of bytes [off, off + len) of make_source2()'s file. */
static uint32_t crc_of2(unsigned off, unsigned len)
{
	uint8_t b[256];

	for (unsigned i = 0; i < len; i++)
		b[i] = (uint8_t)(255 - (off + i));
	return (uint32_t)crc32(crc32(0, Z_NULL, 0), b, len);
}

/*
 * test_records_order(): records added as a DCP import adds them (a
 * tensor's pieces from several sources, a source's records in tensor
 * order), one source's in reverse and one duplicated, are sorted by
 * source and offset and each piece finds its own.
 */
static void test_records_order(void)
{
	const uint64_t s16[1] = { 16 };
	gfs_record r = { .kind = GFS_PIECE_FILE };
	gfs_layout *l = NULL;
	uint32_t sa = 0, sb = 0;
	size_t t[4];
	bool sorted = true, found = true;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	err = err ? err : gfs_layout_add_source(l, "src.bin", 256, &sa);
	err = err ? err : gfs_layout_add_source(l, make_source2(), 256, &sb);
	for (unsigned i = 0; i < 4 && !err; i++) {
		char name[8];

		snprintf(name, sizeof(name), "u%u", i);
		err = gfs_layout_add_tensor(l, name, GFS_DT_U8, 1, s16, &t[i]);
		err = err ? err : gfs_layout_add_piece(l, t[i], sa, 32 * i, 8);
		err = err ? err : gfs_layout_add_piece(l, t[i], sb, 32 * i + 4, 8);
		r.src = sa, r.off = 32 * i, r.len = 16;
		err = err ? err : gfs_layout_add_record(l, &r, "a/data/0");
		if (!err && i == 1)
			err = gfs_layout_add_record(l, &r, "a/data/0");
	}
	for (unsigned i = 4; i-- > 0 && !err;) {
		r.src = sb, r.off = 32 * i, r.len = 16;
		err = gfs_layout_add_record(l, &r, "b/data/0");
	}
	err = err ? err : gfs_layout_finish(l, "test");
	tap_ok(err == GFS_OK && l->nrecords == 8, "records of two sources, one run reversed: %s (%zu)",
	       err ? gfs_errmsg() : "ok", l ? l->nrecords : 0);
	if (err) {
		gfs_layout_free(l);
		return;
	}
	for (size_t k = 0; k < 8; k++)
		sorted = sorted && l->records[k].src == (k < 4 ? sa : sb) &&
			 l->records[k].off == 32 * (k % 4);
	for (unsigned i = 0; i < 4; i++)
		found = found && l->tensors[t[i]].slots[0].rec == i &&
			l->tensors[t[i]].slots[1].rec == 4 + i;
	tap_ok(sorted, "sorted by source, then offset; the duplicate merged");
	tap_ok(found, "every piece has its own source's record");
	gfs_layout_free(l);
}

/*
 * rflat_layout(): a float32 [10] x and a uint8 [5] y partitioned over 3
 * ranks (sources src, src2, src; flats of 48 bytes at 32, 64, 160): x's
 * partitions are 16 bytes at 8, y's 2 at 40; a uint8 [0] z.  Regular:
 * gfs_layout_add_partition(); else the same pieces one by one.  Records:
 * rank 0's flat [32, 80) of src with its CRC-32, rank 1's [64, 112) of
 * src2 with a wrong one; rank 2's in none.
 */
static gfs_err rflat_layout(bool regular, gfs_layout **out)
{
	const uint64_t s10[1] = { 10 }, s5[1] = { 5 }, s0[1] = { 0 };
	const uint64_t offs[3] = { 32, 64, 160 };
	uint32_t srcs[3], f = 0;
	gfs_record r = { .kind = GFS_PIECE_FILE };
	gfs_layout *l;
	size_t x, y, z;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	err = err ? err : gfs_layout_add_source(l, "src.bin", 256, &srcs[0]);
	err = err ? err : gfs_layout_add_source(l, "src2.bin", 256, &srcs[1]);
	srcs[2] = srcs[0];
	err = err ? err : gfs_layout_add_tensor(l, "x", GFS_DT_F32, 1, s10, &x);
	err = err ? err : gfs_layout_add_tensor(l, "y", GFS_DT_U8, 1, s5, &y);
	err = err ? err : gfs_layout_add_tensor(l, "z", GFS_DT_U8, 1, s0, &z);
	if (!err && regular) {
		err = gfs_layout_add_rflat(l, 3, srcs, offs, 48, &f);
		err = err ? err : gfs_layout_add_partition(l, x, f, 8, 16);
		err = err ? err : gfs_layout_add_partition(l, y, f, 40, 2);
		err = err ? err : gfs_layout_add_partition(l, z, f, 0, 1);
	} else if (!err) {
		for (int k = 0; k < 3 && !err; k++)
			err = gfs_layout_add_piece(l, x, srcs[k], offs[k] + 8, k < 2 ? 16 : 8);
		for (int k = 0; k < 3 && !err; k++)
			err = gfs_layout_add_piece(l, y, srcs[k], offs[k] + 40, k < 2 ? 2 : 1);
	}
	r.src = srcs[0], r.off = 32, r.len = 48, r.crc32 = crc_of(32, 48);
	err = err ? err : gfs_layout_add_record(l, &r, "r0/data/0");
	r.src = srcs[1], r.off = 64, r.len = 48, r.crc32 = crc_of2(64, 48) ^ 1;
	err = err ? err : gfs_layout_add_record(l, &r, "r1/data/0");
	err = err ? err : gfs_layout_finish(l, "test");
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

/* rflat_error(): what gfs_layout_add_*() or finish say of a bad regular flat (variant). */
static void rflat_error(int variant, const char *what, const char *word)
{
	const uint64_t s10[1] = { 10 };
	const uint64_t offs[2] = { 0, 220 };
	uint32_t srcs[2], f = 0;
	gfs_layout *l;
	size_t x;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	err = err ? err : gfs_layout_add_source(l, "src.bin", 256, &srcs[0]);
	err = err ? err : gfs_layout_add_source(l, "src2.bin", 256, &srcs[1]);
	if (variant == 0)
		srcs[1] = srcs[0];
	err = err ? err : gfs_layout_add_tensor(l, "x", GFS_DT_F32, 1, s10, &x);
	err = err ? err : gfs_layout_add_rflat(l, 2, srcs, offs, variant == 4 ? 48 : 32, &f);
	err = err ? err : gfs_layout_add_partition(l, x, f, variant == 2 ? 24 : 0,
						   variant == 1 ? 16 : 20);
	if (!err && variant == 3)
		err = gfs_layout_add_piece(l, x, srcs[0], 0, 4);
	err = err ? err : gfs_layout_finish(l, "test");
	tap_ok(err != GFS_OK && strstr(gfs_errmsg(), word), "regular flat: %s is refused: %s", what,
	       gfs_errmsg());
	gfs_layout_free(l);
}

/* test_rflat(): a partitioned tensor has exactly the pieces it would have piece by piece. */
static void test_rflat(void)
{
	gfs_layout *lr = NULL, *le = NULL;
	gfs_srcset *s = NULL, *se = NULL;
	char *jr = NULL, *je = NULL;
	const char *p2 = make_source2();
	bool same = true;
	size_t idx[4], nbad = 0;
	uint32_t crc = 0;
	uint8_t a[40], b[40];
	gfs_err err = rflat_layout(true, &lr);

	tap_ok(err == GFS_OK, "a layout of partitions on a regular flat: %s",
	       err ? gfs_errmsg() : "ok");
	err = err ? err : rflat_layout(false, &le);
	if (err) {
		gfs_layout_free(lr);
		unlink(p2);
		return;
	}
	tap_ok(lr->tensors[0].npieces == 3 && lr->tensors[1].npieces == 3 &&
		       lr->tensors[2].npieces == 0 && !lr->tensors[0].slots,
	       "x and y have 3 pieces each, stored as partitions; z none");
	for (size_t t = 0; t < 2; t++)
		for (size_t p = 0; p < 3; p++) {
			const gfs_piece x = gfs_tensor_piece(&lr->tensors[t], p);
			const gfs_piece y = gfs_tensor_piece(&le->tensors[t], p);

			same = same && x.toff == y.toff && x.len == y.len && x.src_off == y.src_off &&
			       x.src == y.src && x.rec == y.rec && x.reach == y.reach &&
			       x.kind == y.kind && x.count == y.count;
		}
	tap_ok(same, "every piece (offsets, length, source, record, reach) as added one by one");
	for (uint64_t off = 0; off <= 40; off++)
		for (uint64_t end = off; end <= 40; end++) {
			const gfs_piece_span x = gfs_piece_candidates(&lr->tensors[0], off, end);
			const gfs_piece_span y = gfs_piece_candidates(&le->tensors[0], off, end);

			same = same && x.first == y.first && x.last == y.last;
		}
	tap_ok(same, "the candidate pieces of every range are the same");
	tap_ok(gfs_layout_to_json(lr, &jr) == GFS_OK && gfs_layout_to_json(le, &je) == GFS_OK &&
		       strcmp(jr, je) == 0, "the same layout JSON");
	tap_ok(lr->nrecords == 2 && gfs_record_tensors(lr, 1, idx, 4) == 2 && idx[0] == 0 &&
		       idx[1] == 1, "the tensors of rank 1's record: x and y");
	err = gfs_srcset_open(lr, &s);
	err = err ? err : gfs_srcset_open(le, &se);
	tap_ok(!err && gfs_tensor_read(lr, s, 0, GFS_DT_INVALID, 0, a, 16) == GFS_OK &&
		       gfs_tensor_read(le, se, 0, GFS_DT_INVALID, 0, b, 16) == GFS_OK &&
		       memcmp(a, b, 16) == 0 && a[0] == 40,
	       "partition bytes read as the pieces'");
	err = err ? err : gfs_integrity_check(lr, s, NULL, 0, 2, &nbad, NULL);
	tap_ok(err == GFS_OK && nbad == 1 && gfs_srcset_rec_state(s, 0) == GFS_REC_OK &&
		       gfs_srcset_rec_state(s, 1) == GFS_REC_BAD,
	       "the check finds rank 1's record bad, rank 0's good");
	tap_ok(gfs_srcset_piece_crc(s, 0, 0, &crc) && crc == crc_of(40, 16) &&
		       gfs_srcset_piece_crc(s, 1, 0, &crc) && crc == crc_of(72, 2),
	       "the pieces of rank 0's record have their CRC-32s");
	err = gfs_tensor_read(lr, s, 0, GFS_DT_INVALID, 0, a, 40);
	tap_ok(err == GFS_ERR_IO && strstr(gfs_errmsg(), "r1/data/0") &&
		       strstr(gfs_errmsg(), "tensors x, y"),
	       "bytes from the bad record are refused: %s", gfs_errmsg());
	tap_ok(gfs_tensor_read(lr, s, 0, GFS_DT_INVALID, 32, a, 8) == GFS_OK &&
		       gfs_tensor_read(le, se, 0, GFS_DT_INVALID, 32, b, 8) == GFS_OK &&
		       memcmp(a, b, 8) == 0 && a[0] == 168,
	       "bytes of rank 2 (in no record) are served");
	gfs_srcset_close(s);
	gfs_srcset_close(se);
	free(jr);
	free(je);
	gfs_layout_free(lr);
	gfs_layout_free(le);
	rflat_error(0, "neighbouring ranks in one source", "same source");
	rflat_error(1, "more partitions than ranks", "has 2 ranks");
	rflat_error(2, "a partition past the flat's end", "outside a flat");
	rflat_error(3, "a piece added to a partitioned tensor", "no other pieces");
	rflat_error(4, "a flat past its source's end", "past its end");
	unlink(p2);
}

/*
 * derive_read(): tensor 0 of a layout derived from src whose one uint8
 * tensor is src's tensor 0's bytes [b, c) then [a, b) (two extents, out of
 * order), read back; false if any step fails.
 */
static bool derive_read(const gfs_layout *src, uint64_t a, uint64_t b, uint64_t c, uint8_t *out)
{
	const uint64_t n[1] = { c - a };
	gfs_layout *d = NULL;
	gfs_srcset *s = NULL;
	size_t t;
	bool ok = gfs_layout_derive(src, "derived", &d) == GFS_OK &&
		  gfs_layout_add_tensor(d, "x", GFS_DT_U8, 1, n, &t) == GFS_OK &&
		  (c == b || gfs_layout_add_extent(d, t, 0, src, 0, b, c - b) == GFS_OK) &&
		  (b == a || gfs_layout_add_extent(d, t, c - b, src, 0, a, b - a) == GFS_OK) &&
		  gfs_layout_finish(d, "derived") == GFS_OK && gfs_srcset_open(d, &s) == GFS_OK &&
		  gfs_tensor_read(d, s, 0, GFS_DT_INVALID, 0, out, c - a) == GFS_OK;

	gfs_srcset_close(s);
	gfs_layout_free(d);
	return ok;
}

/* test_derive(): every byte range of a strided and of a zero-holding tensor, re-arranged. */
static void test_derive(void)
{
	gfs_layout *l = NULL, *z = NULL;
	gfs_srcset *s = NULL;
	uint8_t want[64], got[64], zw[24];
	bool same = true;

	tap_ok(strided(8, 8, &l) == GFS_OK && build(&z) == GFS_OK, "derive: sources");
	if (!l || !z)
		return;
	for (int r = 0; r < 4; r++)
		for (int c = 0; c < 16; c++)
			want[r * 16 + c] = (uint8_t)(c < 8 ? r * 8 + c : 32 + r * 8 + c - 8);
	for (uint64_t a = 0; a < 64; a++)
		for (uint64_t c = a + 1; c <= 64; c++)
			for (uint64_t b = a; b <= c; b += (c - a + 2) / 3) {
				memset(got, 0xee, sizeof(got));
				if (!derive_read(l, a, b, c, got) ||
				    memcmp(got, want + b, c - b) != 0 ||
				    memcmp(got + (c - b), want + a, b - a) != 0)
					same = false;
			}
	tap_ok(same, "derive: every extent pair of a strided tensor reads exact: %s", gfs_errmsg());
	tap_ok(gfs_srcset_open(z, &s) == GFS_OK &&
	       gfs_tensor_read(z, s, gfs_layout_find(z, "w"), GFS_DT_INVALID, 0, zw, 24) == GFS_OK,
	       "derive: read the zero-holding tensor");
	gfs_srcset_close(s);
	same = true;
	for (uint64_t a = 0; a < 24; a++)
		for (uint64_t c = a + 1; c <= 24; c++) {
			const uint64_t b = a + (c - a) / 2;

			if (!derive_read(z, a, b, c, got) || memcmp(got, zw + b, c - b) != 0 ||
			    memcmp(got + (c - b), zw + a, b - a) != 0)
				same = false;
		}
	tap_ok(same, "derive: extents across file and zero pieces, through an alias, read exact: %s",
	       gfs_errmsg());
	gfs_layout_free(l);
	gfs_layout_free(z);
}

/*
 * decl_case(): a layout of one U8 [2, 4] tensor "t" (pieces: src bytes
 * a0.. for row 0's halves, a1.. for row 1's; a < 0: zeros) and an
 * ungoverned "u", declared; t governed with claim sc (NULL: none) and
 * the replica rep (NULL: none).  Returns what gfs_decl_check() says (1
 * wrong, 0 right, -1 an error), its line in why (freed by the caller).
 */
static int decl_case(const int *a, const gfs_split_claim *sc, const gfs_piece *rep, char **why)
{
	const uint64_t s24[2] = { 2, 4 }, s4[1] = { 4 };
	gfs_layout *l = NULL;
	gfs_srcset *s = NULL;
	uint32_t src;
	size_t t, u;
	int got = -1;
	gfs_err err = gfs_layout_new("test", tmpdir, &l);

	*why = NULL;
	err = err ? err : gfs_layout_add_source(l, "src.bin", 256, &src);
	err = err ? err : gfs_layout_add_tensor(l, "t", GFS_DT_U8, 2, s24, &t);
	for (int k = 0; !err && k < 4; k++)
		err = a[k] < 0 ? gfs_layout_add_zero(l, t, 2)
			       : gfs_layout_add_piece(l, t, src, (uint64_t)a[k], 2);
	err = err ? err : gfs_layout_add_tensor(l, "u", GFS_DT_U8, 1, s4, &u);
	err = err ? err : gfs_layout_add_piece(l, u, src, 0, 4);
	err = err ? err : gfs_layout_add_alias(l, "tied", "t");
	err = err ? err : gfs_layout_declare(l, "the test split", "rank");
	if (!err && sc) {
		gfs_split_claim c = *sc;

		c.ti = t;
		err = gfs_layout_govern(l, t, &c);
	} else if (!err) {
		err = gfs_layout_govern(l, t, NULL);
	}
	err = err ? err : (rep ? gfs_layout_add_replica(l, t, rep) : GFS_OK);
	err = err ? err : gfs_layout_finish(l, "test");
	err = err ? err : gfs_srcset_open(l, &s);
	if (!err) {
		tap_ok(gfs_layout_governed(l, t) && !gfs_layout_governed(l, u) &&
			       gfs_layout_governed(l, (size_t)gfs_layout_find(l, "tied")),
		       "governed: t and its alias, not u");
		err = gfs_decl_check(l, s, why, NULL);
		got = err ? -1 : *why != NULL;
	}
	if (!err) {
		uint8_t b[8];
		const gfs_err rt = gfs_tensor_read(l, s, t, GFS_DT_INVALID, 0, b, 8);
		const gfs_err ru = gfs_tensor_read(l, s, u, GFS_DT_INVALID, 0, b, 4);

		tap_ok(got ? rt == GFS_ERR_IO && strstr(gfs_errmsg(), "tensor t: not served: the test split is wrong")
			   : rt == GFS_OK,
		       "a read of t: %s", got ? "EIO naming the proof" : "served");
		tap_ok(ru == GFS_OK && gfs_srcset_decls_wrong(s) == (got == 1),
		       "u, governed by nothing, is served");
	}
	gfs_srcset_close(s);
	if (!err && got == 1) { /* without verification, nothing is checked or refused */
		uint8_t b[8];

		err = gfs_srcset_open(l, &s);
		if (!err) {
			gfs_srcset_set_verify(s, false, NULL);
			tap_ok(gfs_tensor_read(l, s, t, GFS_DT_INVALID, 0, b, 8) == GFS_OK,
			       "verification off: t is served unchecked");
		}
		gfs_srcset_close(s);
	}
	gfs_layout_free(l);
	return err ? -1 : got;
}

static void test_decls(void)
{
	/* split on dim 0: ranks hold rows 0 and 1 (4 bytes each) */
	const gfs_split_claim d0 = { .nparts = 2, .step = 4, .len = 4, .count = 1 };
	/* split on dim 1: rank y holds run y (2 bytes) of each row */
	const gfs_split_claim d1 = { .nparts = 2, .step = 2, .len = 2, .count = 2, .stride = 4 };
	const int same_rows[4] = { 10, 12, 10, 12 }, other_rows[4] = { 10, 12, 20, 22 };
	const int same_cols[4] = { 10, 10, 12, 12 }, zeros[4] = { -1, -1, -1, -1 };
	const gfs_piece equal = { .kind = GFS_PIECE_FILE, .src_off = 10, .toff = 0, .len = 4, .count = 1 };
	const gfs_piece other = { .kind = GFS_PIECE_FILE, .src_off = 11, .toff = 0, .len = 4, .count = 1 };
	char *why = NULL;
	gfs_layout *l = NULL;
	gfs_split_claim bad = d0;
	const uint64_t s4[1] = { 4 };
	size_t t;
	uint32_t src;
	int got;

	got = decl_case(same_rows, &d0, NULL, &why);
	tap_ok(got == 1 && strstr(why, "t is declared split between 2 ranks, but ranks 0 to 1 hold byte-identical slices"),
	       "identical rows declared split on dim 0: wrong (%s)", why ? why : "");
	free(why);
	tap_ok(decl_case(other_rows, &d0, NULL, &why) == 0, "different rows declared split on dim 0: right");
	free(why);
	tap_ok(decl_case(same_cols, &d1, NULL, &why) == 1, "identical columns declared split on dim 1: wrong");
	free(why);
	tap_ok(decl_case(same_rows, &d1, NULL, &why) == 0, "different columns declared split on dim 1: right");
	free(why);
	tap_ok(decl_case(zeros, &d0, NULL, &why) == 0, "identical but constant slices: right");
	free(why);
	tap_ok(decl_case(other_rows, NULL, &equal, &why) == 0, "a replica equal to the bytes served: right");
	free(why);
	got = decl_case(other_rows, NULL, &other, &why);
	tap_ok(got == 1 && strstr(why, "the copies of t differ (src.bin at offset 11"),
	       "a replica that differs: wrong (%s)", why ? why : "");
	free(why);
	/* malformed claims are refused */
	if (gfs_layout_new("test", tmpdir, &l) || gfs_layout_add_source(l, "src.bin", 256, &src) ||
	    gfs_layout_add_tensor(l, "t", GFS_DT_F32, 1, s4, &t) || gfs_layout_declare(l, "d", "rank"))
		abort();
	bad.ti = t;
	bad.nparts = 1;
	tap_ok(gfs_layout_govern(l, t, &bad) == GFS_ERR_FORMAT, "one part: refused");
	bad = (gfs_split_claim){ .ti = t, .nparts = 2, .step = 12, .len = 8, .count = 1 };
	tap_ok(gfs_layout_govern(l, t, &bad) == GFS_ERR_FORMAT, "a slice past the tensor: refused");
	bad = (gfs_split_claim){ .ti = t, .nparts = 2, .step = 6, .len = 6, .count = 1 };
	tap_ok(gfs_layout_govern(l, t, &bad) == GFS_ERR_FORMAT, "runs of part elements: refused");
	bad = (gfs_split_claim){ .ti = t, .nparts = UINT32_MAX, .step = UINT64_MAX / 2, .len = 4, .count = 1 };
	tap_ok(gfs_layout_govern(l, t, &bad) == GFS_ERR_FORMAT, "an overflowing claim: refused");
	gfs_layout_free(l);
}

int main(void)
{
	make_source();
	test_build_and_read();
	test_json_roundtrip();
	test_strided();
	test_tiling();
	test_records();
	test_records_order();
	test_rflat();
	test_derive();
	test_decls();
	expect_finish_error("a gap in the pieces", 0, "cover 4 of its 8");
	expect_finish_error("pieces beyond the tensor", 1, "exceed");
	expect_finish_error("a piece past the end of its source", 2, "past its end");
	expect_finish_error("a duplicate name", 3, "twice");
	expect_finish_error("an alias of an alias", 4, "itself an alias");
	expect_finish_error("an alias of nothing", 5, "does not exist");
	{
		gfs_layout *l = NULL;
		const char *j = "{\"gatherfs_layout\": 4, \"sources\": [], \"tensors\": []}";

		tap_ok(gfs_layout_from_json(j, strlen(j), "v4.json", "/", &l) == GFS_ERR_UNSUPPORTED,
		       "a newer layout version is refused: %s", gfs_errmsg());
	}
	unlink(srcpath);
	rmdir(tmpdir);
	return tap_done();
}
