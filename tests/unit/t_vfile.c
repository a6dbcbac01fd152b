/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for virtual files: segment appends and merging, segment lookup
 * at every offset, reads of every range against a flat reference, dtype
 * conversion in TENSOR segments, generator errors, computed segments, empty
 * files.
 */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/server/vfile.h"
#include "tap.h"

#define SRC_SIZE 4096

static char tmpdir[] = "/tmp/gfs-t-vfile-XXXXXX";
static char srcpath[512];
static uint8_t srcbytes[SRC_SIZE];

/* A source file of pseudo-random bytes (floats, mostly finite). */
static void make_source(void)
{
	uint32_t x = 12345;
	FILE *f;

	for (size_t i = 0; i < SRC_SIZE; i++) {
		x = x * 1103515245u + 12345u;
		srcbytes[i] = (uint8_t)(x >> 16);
		if (i % 4 == 3)
			srcbytes[i] &= 0x3f; /* keep exponents moderate */
	}
	if (!mkdtemp(tmpdir))
		abort();
	snprintf(srcpath, sizeof(srcpath), "%s/src.bin", tmpdir);
	f = fopen(srcpath, "wb");
	if (!f || fwrite(srcbytes, 1, SRC_SIZE, f) != SRC_SIZE || fclose(f) != 0)
		abort();
}

/* A layout: "a" float32 [10, 10] from two pieces, "e" float32 [0, 3]. */
static gfs_layout *build_layout(void)
{
	const uint64_t s10[2] = { 10, 10 }, s03[2] = { 0, 3 };
	gfs_layout *l;
	uint32_t src;
	size_t a, e;

	if (gfs_layout_new("test", tmpdir, &l) ||
	    gfs_layout_add_source(l, "src.bin", SRC_SIZE, &src) ||
	    gfs_layout_add_tensor(l, "a", GFS_DT_F32, 2, s10, &a) ||
	    gfs_layout_add_piece(l, a, src, 1000, 200) ||
	    gfs_layout_add_piece(l, a, src, 0, 200) ||
	    gfs_layout_add_tensor(l, "e", GFS_DT_F32, 2, s03, &e) ||
	    gfs_layout_finish(l, "test")) {
		fprintf(stderr, "layout: %s\n", gfs_errmsg());
		abort();
	}
	return l;
}

/* gen_bytes(): byte off of generated segment arg is arg + off; arg 99 fails. */
static gfs_err gen_bytes(void *ctx, uint64_t arg, uint64_t off, uint8_t *buf,
			 size_t len)
{
	(void)ctx;
	if (arg == 99)
		return gfs_fail(GFS_ERR_IO, "generator %llu failed", (unsigned long long)arg);
	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(arg + off + i);
	return GFS_OK;
}

static const gfs_vgen gen = { .fn = gen_bytes, .ctx = NULL };

/* Reference bytes of the test file, appended as the vfile is built. */
static uint8_t ref[4096];
static size_t nref;

static void ref_add(const void *p, size_t n)
{
	memcpy(ref + nref, p, n);
	nref += n;
}

/* check_reads(): every offset and a spread of lengths, against ref. */
static void check_reads(const gfs_vfile *vf, const char *what)
{
	static const size_t lens[] = { 0, 1, 2, 3, 4, 5, 17, 64, 399, 4096 };
	uint8_t buf[4096 + 8];
	int bad = 0;

	for (size_t off = 0; off <= nref + 2; off++) {
		for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
			const size_t want = off >= nref ? 0
					    : lens[k] < nref - off ? lens[k] : nref - off;
			size_t got = 12345;

			if (gfs_vfile_read(vf, off, buf, lens[k], &got) != GFS_OK || got != want ||
			    memcmp(buf, ref + (off < nref ? off : 0), got) != 0)
				bad++;
		}
	}
	tap_ok(bad == 0, "%s: every range reads as the reference (%d bad)", what, bad);
}

/* check_find(): gfs_vfile_find() agrees with a linear scan at every offset. */
static void check_find(const gfs_vfile *vf, const char *what)
{
	int bad = 0;
	uint64_t pos = 0;

	for (size_t i = 0; i < gfs_vfile_nsegs(vf); i++) {
		gfs_seg s;

		gfs_vfile_seg(vf, i, &s);
		if (s.voff != pos || s.len == 0)
			bad++;
		pos += s.len;
	}
	tap_ok(bad == 0 && pos == gfs_vfile_size(vf), "%s: segments tile the file", what);
	bad = 0;
	for (uint64_t off = 0; off < gfs_vfile_size(vf); off++) {
		gfs_seg s;

		gfs_vfile_seg(vf, gfs_vfile_find(vf, off), &s);
		if (off < s.voff || off - s.voff >= s.len)
			bad++;
	}
	tap_ok(bad == 0, "%s: find() lands in the right segment at every offset", what);
}

static void test_mixed(const gfs_layout *l, const gfs_srcset *s, gfs_dtype want)
{
	const gfs_vctx ctx = { .layout = l, .src = s, .want = want };
	const uint64_t na = gfs_tensor_out_nbytes(l, 0, want);
	const int fd = open(srcpath, O_RDONLY | O_CLOEXEC);
	const char *what = want == GFS_DT_INVALID ? "native" : "bf16";
	uint8_t tbytes[400], gbytes[10];
	gfs_vfile *vf;
	size_t got;

	nref = 0;
	if (fd < 0 || gfs_vfile_new(&ctx, &vf) ||
	    gfs_tensor_read(l, s, 0, want, 0, tbytes, (size_t)na))
		abort();
	gen_bytes(NULL, 7, 0, gbytes, sizeof(gbytes));
	tap_ok(gfs_vfile_add_mem(vf, "hel", 3) == GFS_OK &&
	       gfs_vfile_add_mem(vf, "lo", 2) == GFS_OK &&
	       gfs_vfile_add_mem(vf, "", 0) == GFS_OK && gfs_vfile_nsegs(vf) == 1,
	       "%s: consecutive MEM appends merge", what);
	ref_add("hello", 5);
	gfs_vfile_add_tensor(vf, 0, 0, na);
	ref_add(tbytes, (size_t)na);
	gfs_vfile_add_tensor(vf, 1, 0, 0); /* the empty tensor: no segment */
	gfs_vfile_add_mem(vf, " world", 6);
	ref_add(" world", 6);
	gfs_vfile_add_fd(vf, fd, 100, 50, srcpath);
	ref_add(srcbytes + 100, 50);
	gfs_vfile_add_gen(vf, &gen, 7, sizeof(gbytes));
	ref_add(gbytes, sizeof(gbytes));
	gfs_vfile_add_tensor(vf, 0, 10, 21);
	ref_add(tbytes + 10, 21);
	gfs_vfile_add_mem(vf, "!", 1);
	ref_add("!", 1);
	tap_ok(gfs_vfile_nsegs(vf) == 7 && gfs_vfile_size(vf) == nref,
	       "%s: 7 segments, %zu bytes", what, nref);
	check_find(vf, what);
	check_reads(vf, what);

	/* A failing generator fails the read, with its message. */
	gfs_vfile_add_gen(vf, &gen, 99, 4);
	tap_ok(gfs_vfile_read(vf, nref - 1, tbytes, 3, &got) == GFS_ERR_IO &&
	       strstr(gfs_errmsg(), "generator 99") != NULL,
	       "%s: a generator error reaches the reader", what);
	gfs_vfile_free(vf);
	close(fd);
}

/* The segments of test_computed(), and their lookup (gfs_vsegs). */
typedef struct seg_table {
	gfs_seg s[8];
	size_t n;
} seg_table;

static void table_seg(const void *ctx, size_t i, gfs_seg *out)
{
	*out = ((const seg_table *)ctx)->s[i];
}

static size_t table_find(const void *ctx, uint64_t off)
{
	const seg_table *t = ctx;
	size_t i = 0;

	while (off - t->s[i].voff >= t->s[i].len)
		i++;
	return i;
}

/* table_add(): append segment s (its voff set here) to t and its bytes to ref. */
static void table_add(seg_table *t, gfs_seg s, const void *bytes)
{
	s.voff = nref;
	t->s[t->n++] = s;
	ref_add(bytes, (size_t)s.len);
}

/* A computed vfile reads, finds and maps as the segments it computes say. */
static void test_computed(const gfs_layout *l, const gfs_srcset *s)
{
	const gfs_vctx ctx = { .layout = l, .src = s, .want = GFS_DT_INVALID };
	const uint64_t na = gfs_tensor_out_nbytes(l, 0, GFS_DT_INVALID);
	const int fd = open(srcpath, O_RDONLY | O_CLOEXEC);
	uint8_t tbytes[400], g3[5], g7[10], out[600], scratch[64];
	seg_table t = { .n = 0 };
	gfs_vext ext[16];
	gfs_vfile *vf;
	size_t got, n;
	gfs_err err;

	nref = 0;
	if (fd < 0 || gfs_tensor_read(l, s, 0, GFS_DT_INVALID, 0, tbytes, (size_t)na))
		abort();
	gen_bytes(NULL, 3, 0, g3, sizeof(g3));
	gen_bytes(NULL, 7, 0, g7, sizeof(g7));
	table_add(&t, (gfs_seg){ .len = 5, .kind = GFS_SEG_GEN, .u.gen = { &gen, 3 } }, g3);
	table_add(&t, (gfs_seg){ .len = na, .kind = GFS_SEG_TENSOR, .u.tensor = { .entry = 0 } },
		  tbytes);
	table_add(&t, (gfs_seg){ .len = 50, .kind = GFS_SEG_FD, .u.fd = { fd, 100, srcpath } },
		  srcbytes + 100);
	table_add(&t, (gfs_seg){ .len = 10, .kind = GFS_SEG_GEN, .u.gen = { &gen, 7 } }, g7);
	table_add(&t, (gfs_seg){ .len = 21, .kind = GFS_SEG_TENSOR,
				 .u.tensor = { .entry = 0, .off = 10 } },
		  tbytes + 10);
	err = gfs_vfile_new_computed(&ctx, &(gfs_vsegs){ .seg = table_seg, .find = table_find,
							  .ctx = &t, .n = t.n, .size = nref },
				     &vf);
	tap_ok(!err && gfs_vfile_nsegs(vf) == 5 && gfs_vfile_size(vf) == nref,
	       "computed: 5 segments, %zu bytes", nref);
	if (err)
		abort();
	check_find(vf, "computed");
	check_reads(vf, "computed");
	n = 0;
	err = gfs_vfile_map(vf, 0, nref, ext, 16, scratch, sizeof(scratch), &n, &got);
	for (size_t i = 0, pos = 0; !err && i < n; pos += ext[i++].len)
		if (ext[i].mem ? memcmp(ext[i].mem, ref + pos, ext[i].len) != 0
			       : pread(ext[i].fd, out, ext[i].len, (off_t)ext[i].off) !=
					 (ssize_t)ext[i].len || memcmp(out, ref + pos, ext[i].len))
			err = GFS_ERR_IO;
	tap_ok(!err && got == nref, "computed: a map of the whole file gives its bytes");
	tap_ok(gfs_vfile_map(vf, 0, nref, ext, 16, scratch, 10, &n, &got) == GFS_ERR_LIMIT,
	       "computed: generated bytes beyond the scratch space are GFS_ERR_LIMIT");
	tap_ok(gfs_vfile_new_computed(&ctx, &(gfs_vsegs){ .seg = table_seg, .find = table_find,
							  .ctx = &t, .n = 1,
							  .size = UINT64_C(1) << 63 },
				      &(gfs_vfile *){ NULL }) == GFS_ERR_LIMIT,
	       "computed: a size of 2^63 is refused");
	gfs_vfile_free(vf);
	close(fd);
}

static void test_empty(void)
{
	gfs_vfile *vf;
	uint8_t b[4];
	size_t got = 1;

	if (gfs_vfile_new(NULL, &vf))
		abort();
	tap_ok(gfs_vfile_size(vf) == 0 && gfs_vfile_nsegs(vf) == 0 &&
	       gfs_vfile_read(vf, 0, b, sizeof(b), &got) == GFS_OK && got == 0,
	       "an empty vfile reads as end of file");
	gfs_vfile_free(vf);
}

int main(void)
{
	gfs_layout *l;
	gfs_srcset *s;

	make_source();
	l = build_layout();
	if (gfs_srcset_open(l, &s))
		abort();
	test_mixed(l, s, GFS_DT_INVALID);
	test_mixed(l, s, GFS_DT_BF16);
	test_computed(l, s);
	test_empty();
	gfs_srcset_close(s);
	gfs_layout_free(l);
	unlink(srcpath);
	rmdir(tmpdir);
	return tap_done();
}
