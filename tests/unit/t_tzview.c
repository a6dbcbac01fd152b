/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the torch zip view: compose pytorch_model.bin from a small
 * hand-built layout over a temporary source file, write it out, and check it
 * with the project's own readers (torchzip, pickle): record names and order,
 * 64-byte alignment, data bytes, CRC-32s in the central directory and the
 * data descriptors, the pickle's keys, storages, shapes and strides, a tied
 * alias sharing its target's storage, empty and scalar tensors, dtype
 * conversion, a subset of the entries, and ZIP64 fields for a record larger
 * than 4 GiB.  And the safetensors view of the same layout: its header
 * (written when read) byte for byte, and every read of it at every offset.
 */
#include "config.h"

#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"
#include "gatherfs/views/view_safetensors.h"
#include "gatherfs/views/view_torchzip.h"
#include "tap.h"

#define SRC_SIZE 8192

static char tmpdir[] = "/tmp/gfs-t-tzview-XXXXXX";
static char srcpath[512];
static char zippath[512];

static void make_source(void)
{
	uint8_t buf[SRC_SIZE];
	uint32_t x = 777;
	FILE *f;

	for (size_t i = 0; i < SRC_SIZE; i++) {
		x = x * 1103515245u + 12345u;
		buf[i] = (uint8_t)(x >> 16);
		if (i % 4 == 3)
			buf[i] &= 0x3f;
	}
	if (!mkdtemp(tmpdir))
		abort();
	snprintf(srcpath, sizeof(srcpath), "%s/src.bin", tmpdir);
	snprintf(zippath, sizeof(zippath), "%s/out.zip", tmpdir);
	f = fopen(srcpath, "wb");
	if (!f || fwrite(buf, 1, SRC_SIZE, f) != SRC_SIZE || fclose(f) != 0)
		abort();
}

/*
 * The layout, in output order: "head" (alias of "w", before its target),
 * "w" float32 [2, 5], "ids" int64 [7], "empty" float32 [0, 4], "s" float32
 * [] (a scalar), "cube" float32 [3, 4, 5] from two pieces and zeros, "flags"
 * bool [3], "name/with%" float16 [4].
 */
static gfs_layout *build_layout(void)
{
	const uint64_t s25[] = { 2, 5 }, s7[] = { 7 }, s04[] = { 0, 4 },
		       s345[] = { 3, 4, 5 }, s3[] = { 3 }, s4[] = { 4 };
	gfs_layout *l;
	uint32_t src;
	size_t i;

	if (gfs_layout_new("test", tmpdir, &l) ||
	    gfs_layout_add_source(l, "src.bin", SRC_SIZE, &src) ||
	    gfs_layout_add_alias(l, "head", "w") ||
	    gfs_layout_add_tensor(l, "w", GFS_DT_F32, 2, s25, &i) ||
	    gfs_layout_add_piece(l, i, src, 40, 40) ||
	    gfs_layout_add_tensor(l, "ids", GFS_DT_I64, 1, s7, &i) ||
	    gfs_layout_add_piece(l, i, src, 1000, 56) ||
	    gfs_layout_add_tensor(l, "empty", GFS_DT_F32, 2, s04, &i) ||
	    gfs_layout_add_tensor(l, "s", GFS_DT_F32, 0, NULL, &i) ||
	    gfs_layout_add_piece(l, i, src, 8, 4) ||
	    gfs_layout_add_tensor(l, "cube", GFS_DT_F32, 3, s345, &i) ||
	    gfs_layout_add_piece(l, i, src, 4000, 100) ||
	    gfs_layout_add_zero(l, i, 40) ||
	    gfs_layout_add_piece(l, i, src, 2000, 100) ||
	    gfs_layout_add_tensor(l, "flags", GFS_DT_BOOL, 1, s3, &i) ||
	    gfs_layout_add_piece(l, i, src, 3, 3) ||
	    gfs_layout_add_tensor(l, "name/with%", GFS_DT_F16, 1, s4, &i) ||
	    gfs_layout_add_piece(l, i, src, 500, 8) ||
	    gfs_layout_finish(l, "test")) {
		fprintf(stderr, "layout: %s\n", gfs_errmsg());
		abort();
	}
	return l;
}

/* write_out(): the whole vfile into zippath, read in odd-sized chunks. */
static uint8_t *write_out(const gfs_vfile *vf, size_t *len)
{
	const size_t n = (size_t)gfs_vfile_size(vf);
	uint8_t *buf = malloc(n);
	size_t off = 0, got;
	FILE *f;

	if (!buf)
		abort();
	while (off < n) {
		if (gfs_vfile_read(vf, off, buf + off, 777, &got) || got == 0)
			abort();
		off += got;
	}
	f = fopen(zippath, "wb");
	if (!f || fwrite(buf, 1, n, f) != n || fclose(f) != 0)
		abort();
	*len = n;
	return buf;
}

/*
 * same_bytes(): a fresh view of ctx reads as `bytes` when its CRC-32s come
 * from the parallel pass, triggered by reading the end of the central
 * directory first (tail) or called up front.
 */
static bool same_bytes(const gfs_vctx *ctx, const uint8_t *bytes, size_t len, bool tail)
{
	uint8_t *buf = malloc(len);
	gfs_tzview *z;
	size_t off = 0, got = 0;
	bool ok;

	if (!buf || gfs_tzview_new(ctx, "pytorch_model", NULL, 0, &z))
		abort();
	ok = tail ? gfs_vfile_read(gfs_tzview_vfile(z), len - 100, buf, 100, &got) == GFS_OK
		  : gfs_tzview_compute_crcs(z, 3) == GFS_OK;
	while (ok && off < len) {
		ok = gfs_vfile_read(gfs_tzview_vfile(z), off, buf + off, 4096, &got) == GFS_OK;
		off += got;
	}
	ok = ok && memcmp(buf, bytes, len) == 0;
	gfs_tzview_free(z);
	free(buf);
	return ok;
}

/*
 * short_reads(): reads of 1, 2, 3, 7, 64 and 4099 bytes at every offset of
 * a fresh view (headers and CRC fields written piece by piece, CRC-32s
 * computed as their bytes are asked for) that differ from `bytes`.
 */
static size_t short_reads(const gfs_vctx *ctx, const uint8_t *bytes, size_t len)
{
	static const size_t sizes[] = { 1, 2, 3, 7, 64, 4099 };
	uint8_t buf[4099];
	size_t bad = 0;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		gfs_tzview *z;

		if (gfs_tzview_new(ctx, "pytorch_model", NULL, 0, &z))
			abort();
		for (size_t off = 0; off < len; off++) {
			const size_t want = sizes[k] < len - off ? sizes[k] : len - off;
			size_t got = 0;

			if (gfs_vfile_read(gfs_tzview_vfile(z), off, buf, sizes[k], &got) != GFS_OK ||
			    got != want || memcmp(buf, bytes + off, want) != 0)
				bad++;
		}
		gfs_tzview_free(z);
	}
	return bad;
}

/* expect_tensor(): the pickled tensor under key matches the layout entry. */
static void expect_tensor(const gfs_pv *root, const gfs_layout *l, const char *name,
			  const char *cls, const char *key, const int64_t *stride)
{
	const gfs_pv *v = gfs_pv_dict_get(root, name);
	const gfs_tensor *t = gfs_layout_target(l, (size_t)gfs_layout_find(l, name));
	const gfs_pv_tensor *pt = v && v->kind == GFS_PV_TENSOR ? v->u.tensor : NULL;
	int ok = pt && strcmp(pt->storage.cls, cls) == 0 && strcmp(pt->storage.key, key) == 0 &&
		 strcmp(pt->storage.location, "cpu") == 0 &&
		 pt->storage.numel == (int64_t)t->numel && pt->offset == 0 &&
		 pt->ndim == t->ndim && !pt->requires_grad;

	for (uint32_t d = 0; ok && d < t->ndim; d++)
		ok = pt->size[d] == (int64_t)t->shape[d] && pt->stride[d] == stride[d];
	tap_ok(ok, "data.pkl: %s is %s key %s with the layout's shape and strides", name,
	       cls, key);
}

/* check_zip(): the composed file read back with the torchzip and pickle readers. */
static void check_zip(const gfs_layout *l, const gfs_srcset *s, gfs_dtype want)
{
	static const char *const order[] = { "head", "w", "ids", "empty", "s", "cube",
					     "flags", "name/with%" };
	const gfs_vctx ctx = { .layout = l, .src = s, .want = want };
	const char *fcls = want == GFS_DT_BF16 ? "BFloat16Storage" : "FloatStorage";
	const char *what = want == GFS_DT_BF16 ? "bf16" : "native";
	gfs_tzview *z;
	gfs_tzip *tz;
	gfs_pickle *pk;
	uint8_t *bytes, *pkl;
	size_t len, pkl_len;
	int fd, bad = 0;

	if (gfs_tzview_new(&ctx, "pytorch_model", NULL, 0, &z))
		abort();
	bytes = write_out(gfs_tzview_vfile(z), &len);
	tap_ok(same_bytes(&ctx, bytes, len, true) && same_bytes(&ctx, bytes, len, false),
	       "%s: CRC-32s computed record by record, by a read of the central "
	       "directory, or up front on 3 threads give the same file", what);
	tap_ok(short_reads(&ctx, bytes, len) == 0,
	       "%s: reads of 1 to 4099 bytes at every offset of fresh views read as the whole", what);
	fd = open(zippath, O_RDONLY | O_CLOEXEC);
	tap_ok(fd >= 0 && gfs_tzip_open(fd, 0, len, zippath, NULL, &tz) == GFS_OK,
	       "%s: the torchzip reader opens the composed archive", what);
	if (fd < 0 || !tz) {
		fprintf(stderr, "%s\n", gfs_errmsg());
		abort();
	}
	tap_ok(strcmp(gfs_tzip_prefix(tz), "pytorch_model") == 0 && gfs_tzip_count(tz) == 10,
	       "%s: prefix pytorch_model, 10 records", what);
	tap_ok(strcmp(gfs_tzip_at(tz, 0)->name, "pytorch_model/data.pkl") == 0 &&
	       strcmp(gfs_tzip_at(tz, 1)->name, "pytorch_model/byteorder") == 0 &&
	       strcmp(gfs_tzip_at(tz, 2)->name, "pytorch_model/data/0") == 0 &&
	       strcmp(gfs_tzip_at(tz, 8)->name, "pytorch_model/data/6") == 0 &&
	       strcmp(gfs_tzip_at(tz, 9)->name, "pytorch_model/version") == 0 &&
	       !gfs_tzip_find(tz, ".format_version"),
	       "%s: records data.pkl, byteorder, data/0..6, version", what);
	for (size_t r = 0; r < gfs_tzip_count(tz); r++) {
		const gfs_tzip_record *rec = gfs_tzip_at(tz, r);
		const uint8_t *d = bytes + rec->data_off;
		const uint8_t *dd = d + rec->size;

		if (rec->data_off % 64 || rec->method != 0 ||
		    rec->crc32 != (uint32_t)crc32_z(0, d, rec->size) ||
		    memcmp(dd, "PK\x07\x08", 4) != 0 || gfs_le32(dd + 4) != rec->crc32 ||
		    gfs_le32(dd + 8) != rec->size || gfs_le32(dd + 12) != rec->size)
			bad++;
	}
	tap_ok(bad == 0, "%s: every record STORED, 64-byte aligned, CRC-32 right in "
	       "the central directory and the data descriptor", what);
	tap_ok(gfs_tzip_read_record(tz, gfs_tzip_find(tz, "version"), 16, &pkl, &pkl_len) ==
		       GFS_OK && pkl_len == 2 && memcmp(pkl, "3\n", 2) == 0,
	       "%s: version is \"3\\n\"", what);
	free(pkl);
	tap_ok(gfs_tzip_read_record(tz, gfs_tzip_find(tz, "byteorder"), 16, &pkl, &pkl_len) ==
		       GFS_OK && pkl_len == 6 && memcmp(pkl, "little", 6) == 0,
	       "%s: byteorder is \"little\"", what);
	free(pkl);

	/* Storage k holds the bytes of the k-th distinct target, converted. */
	bad = 0;
	for (size_t k = 0, e = 0; e < l->ntensors; e++) {
		const size_t n = (size_t)gfs_tensor_out_nbytes(l, e, want);
		char key[16];
		uint64_t off, size;
		uint8_t *exp;

		if (l->tensors[e].alias_of >= 0 || strcmp(l->tensors[e].name, "w") == 0)
			continue; /* "head" took w's storage as key 0 */
		snprintf(key, sizeof(key), "%zu", ++k);
		exp = malloc(n + 1);
		if (!exp || gfs_tensor_read(l, s, e, want, 0, exp, n) ||
		    gfs_tzip_storage(tz, key, &off, &size) || size != n ||
		    memcmp(bytes + off, exp, n) != 0)
			bad++;
		free(exp);
	}
	tap_ok(bad == 0, "%s: data/1..6 hold the tensors' bytes in model order", what);

	if (gfs_tzip_read_record(tz, gfs_tzip_find(tz, "data.pkl"), 1 << 20, &pkl, &pkl_len) ||
	    gfs_pickle_load(pkl, pkl_len, "data.pkl", NULL, &pk)) {
		fprintf(stderr, "%s\n", gfs_errmsg());
		abort();
	}
	{
		const gfs_pv *root = gfs_pickle_root(pk);
		const int64_t st25[] = { 5, 1 }, st7[] = { 1 }, st04[] = { 4, 1 },
			      st345[] = { 20, 5, 1 }, st3[] = { 1 }, st4[] = { 1 };

		bad = root->kind != GFS_PV_DICT || root->u.dict.len != 8;
		for (size_t i = 0; !bad && i < 8; i++)
			bad = strcmp(gfs_pv_str(root->u.dict.items[i].key), order[i]) != 0;
		tap_ok(!bad, "%s: data.pkl is a dict with the 8 keys in model order", what);
		expect_tensor(root, l, "head", fcls, "0", st25);
		expect_tensor(root, l, "w", fcls, "0", st25);
		expect_tensor(root, l, "ids", "LongStorage", "1", st7);
		expect_tensor(root, l, "empty", fcls, "2", st04);
		expect_tensor(root, l, "s", fcls, "3", NULL);
		expect_tensor(root, l, "cube", fcls, "4", st345);
		expect_tensor(root, l, "flags", "BoolStorage", "5", st3);
		expect_tensor(root, l, "name/with%",
			      want == GFS_DT_BF16 ? "BFloat16Storage" : "HalfStorage", "6", st4);
	}
	gfs_pickle_free(pk);
	free(pkl);
	gfs_tzip_close(tz);
	close(fd);
	free(bytes);
	gfs_tzview_free(z);
}

/*
 * check_subset(): entries "ids" and "head" only: the alias, whose target is
 * not among them, gets a storage holding the target's bytes.
 */
static void check_subset(const gfs_layout *l, const gfs_srcset *s)
{
	const gfs_vctx ctx = { .layout = l, .src = s, .want = GFS_DT_INVALID };
	const size_t entries[] = { (size_t)gfs_layout_find(l, "ids"),
				   (size_t)gfs_layout_find(l, "head") };
	const int64_t st25[] = { 5, 1 }, st7[] = { 1 };
	uint8_t w[40], *bytes, *pkl;
	size_t len, pkl_len;
	uint64_t off, size;
	gfs_tzview *z;
	gfs_tzip *tz;
	gfs_pickle *pk;
	int fd;

	if (gfs_tzview_new(&ctx, "part", entries, 2, &z))
		abort();
	bytes = write_out(gfs_tzview_vfile(z), &len);
	fd = open(zippath, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || gfs_tzip_open(fd, 0, len, zippath, NULL, &tz) ||
	    gfs_tzip_read_record(tz, gfs_tzip_find(tz, "data.pkl"), 1 << 20, &pkl, &pkl_len) ||
	    gfs_pickle_load(pkl, pkl_len, "data.pkl", NULL, &pk) ||
	    gfs_tensor_read(l, s, entries[1], GFS_DT_INVALID, 0, w, sizeof(w))) {
		fprintf(stderr, "%s\n", gfs_errmsg());
		abort();
	}
	tap_ok(gfs_tzip_count(tz) == 5 && gfs_pickle_root(pk)->u.dict.len == 2 &&
	       gfs_tzip_storage(tz, "1", &off, &size) == GFS_OK && size == sizeof(w) &&
	       memcmp(bytes + off, w, sizeof(w)) == 0,
	       "subset: 2 entries, 2 storages; the alias's storage holds its target's bytes");
	expect_tensor(gfs_pickle_root(pk), l, "ids", "LongStorage", "0", st7);
	expect_tensor(gfs_pickle_root(pk), l, "head", "FloatStorage", "1", st25);
	gfs_pickle_free(pk);
	free(pkl);
	gfs_tzip_close(tz);
	close(fd);
	free(bytes);
	gfs_tzview_free(z);
}

/*
 * check_zip64(): a 4.5 GiB record of zeros followed by a small one: sizes
 * and the second record's offset need ZIP64 fields.  Reads the first and last
 * 4 KiB only (the big record's data descriptor is in the last: its CRC-32
 * is computed over 4.5 GiB of zeros).
 */
static void check_zip64(void)
{
	const uint64_t big = UINT64_C(4608) << 20;
	const uint64_t sbig[] = { big / 2 }, s2[] = { 2 };
	uint8_t *zeros = calloc(1, 1 << 20);
	gfs_layout *l;
	gfs_srcset *s;
	gfs_tzview *z;
	gfs_tzip *tz = NULL;
	const gfs_vfile *vf;
	uint8_t head[4096], tail[4096];
	size_t i, got;
	uint32_t src;
	uLong crc1m, crc = 0;
	uint64_t base;
	int fd;

	if (!zeros || gfs_layout_new("test", tmpdir, &l) ||
	    gfs_layout_add_source(l, "src.bin", SRC_SIZE, &src) ||
	    gfs_layout_add_tensor(l, "big", GFS_DT_I16, 1, sbig, &i) ||
	    gfs_layout_add_zero(l, i, big) ||
	    gfs_layout_add_tensor(l, "after", GFS_DT_F32, 1, s2, &i) ||
	    gfs_layout_add_piece(l, i, src, 16, 8) ||
	    gfs_layout_finish(l, "test") || gfs_srcset_open(l, &s)) {
		fprintf(stderr, "%s\n", gfs_errmsg());
		abort();
	}
	{
		const gfs_vctx ctx = { .layout = l, .src = s, .want = GFS_DT_INVALID };

		if (gfs_tzview_new(&ctx, "archive", NULL, 0, &z))
			abort();
		vf = gfs_tzview_vfile(z);
		/* A sparse copy: the first and last 4 KiB; the rest is zeros. */
		base = gfs_vfile_size(vf) - sizeof(tail);
		fd = open(zippath, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || gfs_vfile_read(vf, 0, head, sizeof(head), &got) ||
		    pwrite(fd, head, sizeof(head), 0) != (ssize_t)sizeof(head) ||
		    gfs_vfile_read(vf, base, tail, sizeof(tail), &got) ||
		    pwrite(fd, tail, sizeof(tail), (off_t)base) != (ssize_t)sizeof(tail))
			abort();
		tap_ok(gfs_tzip_open(fd, 0, gfs_vfile_size(vf), zippath, NULL, &tz) == GFS_OK,
		       "zip64: the torchzip reader opens a 4.5 GiB archive");
		if (!tz) {
			fprintf(stderr, "%s\n", gfs_errmsg());
			abort();
		}
	}
	crc1m = crc32_z(0, zeros, 1 << 20);
	for (uint64_t n = 0; n < big; n += 1 << 20)
		crc = crc32_combine(crc, crc1m, 1 << 20);
	{
		const gfs_tzip_record *rb = gfs_tzip_find(tz, "data/0");
		const gfs_tzip_record *ra = gfs_tzip_find(tz, "data/1");

		tap_ok(rb && rb->size == big && rb->data_off % 64 == 0 &&
		       rb->crc32 == (uint32_t)crc,
		       "zip64: the big record's size and CRC-32 come from ZIP64 fields");
		tap_ok(ra && ra->size == 8 && ra->data_off > big && ra->data_off % 64 == 0,
		       "zip64: the record after it lies past 4 GiB, aligned");
	}
	gfs_tzip_close(tz);
	close(fd);
	unlink(zippath);
	free(zeros);
	gfs_tzview_free(z);
	gfs_srcset_close(s);
	gfs_layout_free(l);
}

/*
 * check_safetensors(): model.safetensors of the layout: the exact header
 * (model order; data by decreasing element size; the alias in the
 * metadata), the data bytes, and reads of 1, 2, 3, 7 and 64 bytes at every
 * offset equal to one read of the whole file.
 */
static void check_safetensors(const gfs_layout *l, const gfs_srcset *s)
{
	static const char want[] =
		"{\"__metadata__\": {\"format\": \"pt\", \"gatherfs.aliases\": "
		"\"{\\\"head\\\": \\\"w\\\"}\"}, "
		"\"w\": {\"dtype\": \"F32\", \"shape\": [2, 5], \"data_offsets\": [56, 96]}, "
		"\"ids\": {\"dtype\": \"I64\", \"shape\": [7], \"data_offsets\": [0, 56]}, "
		"\"empty\": {\"dtype\": \"F32\", \"shape\": [0, 4], \"data_offsets\": [96, 96]}, "
		"\"s\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [96, 100]}, "
		"\"cube\": {\"dtype\": \"F32\", \"shape\": [3, 4, 5], "
		"\"data_offsets\": [100, 340]}, "
		"\"flags\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [348, 351]}, "
		"\"name/with%\": {\"dtype\": \"F16\", \"shape\": [4], "
		"\"data_offsets\": [340, 348]}}";
	static const size_t lens[] = { 1, 2, 3, 7, 64 };
	const gfs_vctx ctx = { .layout = l, .src = s, .want = GFS_DT_INVALID };
	const size_t wlen = sizeof(want) - 1, hlen = (wlen + 7) / 8 * 8;
	gfs_vfile *vf;
	uint8_t *all, part[64], src[SRC_SIZE];
	size_t n, got, bad = 0;
	uint64_t h = 0;
	int fd;

	if (gfs_stview_new(&ctx, NULL, 0, &vf))
		abort();
	n = (size_t)gfs_vfile_size(vf);
	all = malloc(n);
	if (!all || gfs_vfile_read(vf, 0, all, n, &got) || got != n)
		abort();
	for (int i = 0; i < 8; i++)
		h |= (uint64_t)all[i] << (8 * i);
	tap_ok(h == hlen && n == 8 + hlen + 351, "safetensors: header of %llu bytes, file of %zu",
	       (unsigned long long)h, n);
	tap_ok(n >= 8 + hlen && memcmp(all + 8, want, wlen) == 0, "safetensors: the header");
	for (size_t i = 8 + wlen; i < 8 + hlen && i < n; i++)
		bad += all[i] != ' ';
	tap_ok(bad == 0, "safetensors: the header padded with spaces");
	fd = open(srcpath, O_RDONLY);
	if (fd < 0 || pread(fd, src, SRC_SIZE, 0) != SRC_SIZE)
		abort();
	close(fd);
	tap_ok(n == 8 + hlen + 351 && memcmp(all + 8 + hlen, src + 1000, 56) == 0 &&
		       memcmp(all + 8 + hlen + 56, src + 40, 40) == 0 &&
		       memcmp(all + 8 + hlen + 348, src + 3, 3) == 0,
	       "safetensors: ids, w and flags at their data offsets");
	bad = 0;
	for (size_t k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		for (size_t off = 0; off < n; off++) {
			const size_t want_got = n - off < lens[k] ? n - off : lens[k];

			if (gfs_vfile_read(vf, off, part, lens[k], &got) || got != want_got ||
			    memcmp(part, all + off, got) != 0)
				bad++;
		}
	}
	tap_ok(bad == 0, "safetensors: %zu of %zu short reads differ from the whole", bad,
	       5 * n);
	free(all);
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
	check_zip(l, s, GFS_DT_INVALID);
	check_zip(l, s, GFS_DT_BF16);
	check_subset(l, s);
	check_zip64();
	check_safetensors(l, s);
	gfs_srcset_close(s);
	gfs_layout_free(l);
	unlink(zippath);
	unlink(srcpath);
	rmdir(tmpdir);
	return tap_done();
}
