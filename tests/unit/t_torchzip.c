/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — unit test of the torch zip reader (src/readers/torchzip.c).
 *
 * Real torch.save files (torch 1.13 and 2.x) and crafted zips live in
 * $top_srcdir/tests/data/zips; their expected records were computed with
 * Python's zipfile by tests/data/zips/make_zips.py.  Malformed archives are
 * made here by patching copies of those files.  Prints "ok N - ..." /
 * "not ok N - ..." lines and exits 0 when every check passes.
 */
#include "config.h"

#include <assert.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/readers/torchzip.h"

#define LOCATOR_SIG 0x07064b50u

static int n_tests;
static int n_failed;

static bool ok(bool cond, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static bool ok(bool cond, const char *fmt, ...)
{
	va_list ap;

	n_tests++;
	if (!cond)
		n_failed++;
	printf("%s %d - ", cond ? "ok" : "not ok", n_tests);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	if (!cond && gfs_errmsg()[0])
		printf("# last error: %s\n", gfs_errmsg());
	return cond;
}

static void die(const char *what, const char *name)
{
	fprintf(stderr, "t_torchzip: %s %s\n", what, name);
	exit(99);
}

/* ---------------------------------------------------------------- files */

typedef struct blob {
	uint8_t *p;
	size_t n;
} blob;

static const char *data_path(const char *name)
{
	static char path[4096];
	const char *const top = getenv("top_srcdir");

	snprintf(path, sizeof(path), "%s/tests/data/zips/%s",
		 top && top[0] ? top : ".", name);
	return path;
}

static blob load(const char *name)
{
	const char *const path = data_path(name);
	const int fd = open(path, O_RDONLY);
	struct stat st;
	blob b;

	if (fd < 0 || fstat(fd, &st) != 0)
		die("cannot open", path);
	b.n = (size_t)st.st_size;
	b.p = malloc(b.n ? b.n : 1);
	if (!b.p || gfs_pread_full(fd, b.p, b.n, 0, path) != GFS_OK)
		die("cannot read", path);
	close(fd);
	return b;
}

static blob copy(const blob *b)
{
	blob c = { malloc(b->n), b->n };

	if (!c.p)
		die("out of memory", "");
	memcpy(c.p, b->p, b->n);
	return c;
}

/* mem_fd(): an unlinked temporary file holding n bytes of p. */
static int mem_fd(const void *p, size_t n)
{
	const char *const tmp = getenv("TMPDIR");
	char path[4096];
	int fd;

	snprintf(path, sizeof(path), "%s/t_torchzip.XXXXXX",
		 tmp && tmp[0] ? tmp : "/tmp");
	fd = mkstemp(path);
	if (fd < 0)
		die("cannot create a temporary file in", path);
	unlink(path);
	if (n > 0 && pwrite(fd, p, n, 0) != (ssize_t)n)
		die("cannot write", path);
	return fd;
}

/* try_blob(): open b at base 0 and close it; the message stays set. */
static gfs_err try_blob(const blob *b, const gfs_tzip_limits *lim)
{
	const int fd = mem_fd(b->p, b->n);
	gfs_tzip *z = NULL;
	const gfs_err err = gfs_tzip_open(fd, 0, b->n, "bad.pt", lim, &z);

	gfs_tzip_close(z);
	close(fd);
	return err;
}

/* fails(): try_blob() gives err and a one-line message containing what. */
static bool fails(const blob *b, gfs_err err, const char *what)
{
	const gfs_err got = try_blob(b, NULL);
	const char *const msg = gfs_errmsg();

	return got == err && strncmp(msg, "bad.pt: ", 8) == 0 &&
	       strstr(msg, what) != NULL && strchr(msg, '\n') == NULL;
}

/* ----------------------------------------------- zip structure helpers */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* The test files have no comment: the classic EOCD is the last 22 bytes. */
static uint8_t *eocd(const blob *b)
{
	return b->p + b->n - 22;
}

/* The ZIP64 end record, or NULL without a locator. */
static uint8_t *eocd64(const blob *b)
{
	const uint8_t *const loc = eocd(b) - 20;

	if (gfs_le32(loc) != LOCATOR_SIG)
		return NULL;
	return b->p + gfs_le64(loc + 8);
}

/*
 * locate(): offsets of the central directory entry and the local header
 * of the record "<prefix>/<rel>" of a well-formed test file.
 */
static void locate(const blob *b, const char *rel, size_t *cd_pos,
		   size_t *lh_pos)
{
	const uint8_t *const e64 = eocd64(b);
	const uint64_t count = e64 ? gfs_le64(e64 + 32) : gfs_le16(eocd(b) + 10);
	size_t pos = e64 ? gfs_le64(e64 + 48) : gfs_le32(eocd(b) + 16);

	for (uint64_t i = 0; i < count; i++) {
		const uint8_t *const c = b->p + pos;
		const size_t nlen = gfs_le16(c + 28);
		const char *const name = (const char *)c + 46;
		const char *const slash = memchr(name, '/', nlen);

		if (slash && (size_t)(name + nlen - slash - 1) == strlen(rel) &&
		    memcmp(slash + 1, rel, strlen(rel)) == 0) {
			*cd_pos = pos;
			*lh_pos = gfs_le32(c + 42);
			return;
		}
		pos += 46 + nlen + gfs_le16(c + 30) + gfs_le16(c + 32);
	}
	die("no record", rel);
}

/* rename_rec(): overwrite the name of rel from its first slash on, in the
 * central directory and/or the local header (same length). */
static void rename_rec(blob *b, const char *rel, const char *to, bool in_cd,
		       bool in_lh)
{
	size_t cd, lh;
	uint8_t *name;

	locate(b, rel, &cd, &lh);
	assert(strlen(rel) == strlen(to));
	if (in_cd) {
		name = memchr(b->p + cd + 46, '/', gfs_le16(b->p + cd + 28));
		memcpy(name + 1, to, strlen(to));
	}
	if (in_lh) {
		name = memchr(b->p + lh + 30, '/', gfs_le16(b->p + lh + 26));
		memcpy(name + 1, to, strlen(to));
	}
}

static uint64_t fnv1a64(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

/* ------------------------------------------------- expected contents */

typedef struct expect_rec {
	const char *rel;
	uint64_t data_off;
	uint64_t size;
	uint16_t method;
	uint64_t fnv; /* FNV-1a 64 of the uncompressed content */
} expect_rec;

typedef struct expect_zip {
	const char *file;
	const char *prefix;
	size_t count;
	size_t n_recs;
	expect_rec recs[5];
} expect_zip;

/* Output of tests/data/zips/make_zips.py (Python's zipfile). */
static const expect_zip expected[] = {
	{ "torch113.pt", "zero_pp_rank_1_mp_rank_00_model_states", 38, 4, {
		{ "data.pkl", 128, 6405, 0, 0x91ce657fc3ba051aull },
		{ "version", 13248, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/35", 10752, 1580, 0, 0x327d8734cefef6b8ull },
		{ "data/2", 8192, 296, 0, 0xb428ac0db1b91361ull },
	} },
	{ "torch2.pt", "zero_pp_rank_1_mp_rank_00_model_states", 26, 5, {
		{ "data.pkl", 128, 5910, 0, 0xe6ef2e789d86d7d1ull },
		{ "byteorder", 6400, 6, 0, 0x12a71418cf8e1921ull },
		{ "version", 9088, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/0", 6528, 0, 0, 0xcbf29ce484222325ull },
		{ "data/1", 6656, 0, 0, 0xcbf29ce484222325ull },
	} },
	{ "torch2_input_ids.pt", "input_ids", 7, 4, {
		{ "data.pkl", 64, 153, 0, 0x9ae6100724febb1cull },
		{ "byteorder", 576, 6, 0, 0x12a71418cf8e1921ull },
		{ "version", 1088, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/0", 704, 256, 0, 0x2da811133cd374efull },
	} },
	{ "py_zip64.pt", "input_ids", 7, 4, {
		{ "data.pkl", 68, 153, 0, 0x9ae6100724febb1cull },
		{ "byteorder", 446, 6, 0, 0x12a71418cf8e1921ull },
		{ "version", 841, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/0", 518, 256, 0, 0x2da811133cd374efull },
	} },
	{ "zip64_cd.pt", "archive", 7, 4, {
		{ "data.pkl", 64, 153, 0, 0x9ae6100724febb1cull },
		{ "byteorder", 576, 6, 0, 0x12a71418cf8e1921ull },
		{ "version", 1088, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/0", 704, 256, 0, 0x2da811133cd374efull },
	} },
	{ "deflate.pt", "input_ids", 7, 4, {
		{ "data.pkl", 48, 153, 8, 0x9ae6100724febb1cull },
		{ "byteorder", 356, 6, 8, 0x12a71418cf8e1921ull },
		{ "version", 550, 2, 8, 0x07ff9407b4c02ab8ull },
		{ "data/0", 410, 256, 8, 0x2da811133cd374efull },
	} },
	{ "comment.pt", "input_ids", 7, 4, {
		{ "data.pkl", 48, 153, 0, 0x9ae6100724febb1cull },
		{ "byteorder", 366, 6, 0, 0x12a71418cf8e1921ull },
		{ "version", 721, 2, 0, 0x07ff9407b4c02ab8ull },
		{ "data/0", 418, 256, 0, 0x2da811133cd374efull },
	} },
};

#define N_EXPECTED (sizeof(expected) / sizeof(expected[0]))

/* records_ok(): every record lies in [base, base + len) and is found. */
static bool records_ok(const gfs_tzip *z, uint64_t base, uint64_t len)
{
	const size_t plen = strlen(gfs_tzip_prefix(z));

	for (size_t i = 0; i < gfs_tzip_count(z); i++) {
		const gfs_tzip_record *const r = gfs_tzip_at(z, i);

		if (r->data_off < base || r->data_off - base > len ||
		    r->size > len - (r->data_off - base) ||
		    gfs_tzip_find(z, r->name + plen + 1) != r)
			return false;
	}
	return gfs_tzip_at(z, gfs_tzip_count(z)) == NULL;
}

/* check_expected(): z (opened at base) holds what e says. */
static void check_expected(const gfs_tzip *z, const expect_zip *e,
			   uint64_t base, const char *what)
{
	ok(strcmp(gfs_tzip_prefix(z), e->prefix) == 0, "%s: prefix %s", what,
	   gfs_tzip_prefix(z));
	ok(gfs_tzip_count(z) == e->count, "%s: %zu records", what, e->count);
	ok(strcmp(gfs_tzip_at(z, 0)->name + strlen(e->prefix), "/data.pkl") ==
		   0,
	   "%s: central directory order starts with data.pkl", what);
	for (size_t i = 0; i < e->n_recs; i++) {
		const expect_rec *const x = &e->recs[i];
		const gfs_tzip_record *const r = gfs_tzip_find(z, x->rel);
		uint8_t *buf = NULL;
		size_t len = 0;
		uint64_t off = 0, size = 0;
		gfs_err err;

		if (!ok(r != NULL, "%s: find %s", what, x->rel))
			continue;
		ok(r->data_off == base + x->data_off && r->size == x->size &&
			   r->method == x->method,
		   "%s: %s at %llu, %llu bytes, method %u", what, x->rel,
		   (unsigned long long)x->data_off, (unsigned long long)x->size,
		   (unsigned)x->method);
		err = gfs_tzip_read_record(z, r, 1 << 20, &buf, &len);
		if (x->method == 0)
			ok(err == GFS_OK && len == x->size &&
				   fnv1a64(buf, len) == x->fnv,
			   "%s: %s content equals Python's zipfile read", what,
			   x->rel);
		else
			ok(err == GFS_ERR_UNSUPPORTED &&
				   strstr(gfs_errmsg(), "STORED"),
			   "%s: reading compressed %s is unsupported", what,
			   x->rel);
		free(buf);
		if (strncmp(x->rel, "data/", 5) != 0)
			continue;
		err = gfs_tzip_storage(z, x->rel + 5, &off, &size);
		if (x->method == 0)
			ok(err == GFS_OK && off == r->data_off && size == r->size,
			   "%s: storage %s", what, x->rel + 5);
		else
			ok(err == GFS_ERR_UNSUPPORTED &&
				   strstr(gfs_errmsg(), "only STORED"),
			   "%s: compressed storage %s is unsupported", what,
			   x->rel + 5);
	}
	ok(records_ok(z, base, UINT64_MAX - base),
	   "%s: every record found by its own name", what);
	ok(gfs_tzip_find(z, "data") == NULL &&
		   gfs_tzip_find(z, "data.pk") == NULL &&
		   gfs_tzip_find(z, "") == NULL &&
		   gfs_tzip_find(z, "zzz") == NULL,
	   "%s: absent names are not found", what);
	ok(gfs_tzip_storage(z, "999", &(uint64_t){ 0 }, &(uint64_t){ 0 }) ==
			   GFS_ERR_NOTFOUND &&
		   strstr(gfs_errmsg(), "/data/999"),
	   "%s: absent storage is GFS_ERR_NOTFOUND", what);
}

static void test_expected(const gfs_tzip_limits *lim)
{
	for (size_t i = 0; i < N_EXPECTED; i++) {
		const expect_zip *const e = &expected[i];
		const char *const path = data_path(e->file);
		const int fd = open(path, O_RDONLY);
		struct stat st;
		gfs_tzip *z = NULL;
		gfs_err err;

		if (fd < 0 || fstat(fd, &st) != 0)
			die("cannot open", path);
		err = gfs_tzip_open(fd, 0, (uint64_t)st.st_size, e->file,
				    lim, &z);
		if (ok(err == GFS_OK, "%s: opens", e->file)) {
			ok(strcmp(gfs_tzip_label(z), e->file) == 0,
			   "%s: label", e->file);
			check_expected(z, e, 0, e->file);
			ok(records_ok(z, 0, (uint64_t)st.st_size),
			   "%s: every record inside the file", e->file);
		}
		gfs_tzip_close(z);
		close(fd);
	}
}

static void test_order_and_limits(void)
{
	const blob b = load("torch113.pt");
	const int fd = mem_fd(b.p, b.n);
	const gfs_tzip_limits few = { .max_records = 10 };
	const gfs_tzip_limits small_cd = { .max_cd_bytes = 100 };
	gfs_tzip *z = NULL;
	uint8_t *buf = NULL;
	size_t len;

	if (gfs_tzip_open(fd, 0, b.n, "t113", NULL, &z) == GFS_OK) {
		ok(strcmp(gfs_tzip_at(z, 3)->name + strlen(gfs_tzip_prefix(z)),
			  "/data/10") == 0 &&
			   strcmp(gfs_tzip_at(z, 37)->name +
					  strlen(gfs_tzip_prefix(z)),
				  "/version") == 0,
		   "gfs_tzip_at() keeps central directory order");
		ok(gfs_tzip_read_record(z, gfs_tzip_find(z, "data/35"), 1579,
					&buf, &len) == GFS_ERR_LIMIT &&
			   buf == NULL,
		   "read_record() honours max_size");
		ok(gfs_tzip_read_record(z, gfs_tzip_find(z, "data/0"), 0, &buf,
					&len) == GFS_OK &&
			   len == 0,
		   "read_record() of an empty record");
		free(buf);
	} else {
		ok(false, "torch113.pt opens");
	}
	gfs_tzip_close(z);
	z = NULL;
	ok(gfs_tzip_open(fd, 0, b.n, "t113", &few, &z) == GFS_ERR_LIMIT &&
		   z == NULL,
	   "max_records limit");
	ok(gfs_tzip_open(fd, 0, b.n, "t113", &small_cd, &z) == GFS_ERR_LIMIT,
	   "max_cd_bytes limit");
	ok(gfs_tzip_open(-1, 0, b.n, "t113", NULL, &z) == GFS_ERR_INVAL,
	   "bad fd is GFS_ERR_INVAL");
	ok(gfs_tzip_open(fd, UINT64_MAX - 10, 100, "t113", NULL, &z) ==
		   GFS_ERR_INVAL,
	   "overflowing range is GFS_ERR_INVAL");
	ok(gfs_tzip_open(fd, 0, 21, "t113", NULL, &z) == GFS_ERR_FORMAT,
	   "21 bytes is too small");
	ok(gfs_tzip_open(fd, 0, b.n + 1000, "t113", NULL, &z) ==
			   GFS_ERR_FORMAT &&
		   strstr(gfs_errmsg(), "truncated"),
	   "a range past the end of the file fails cleanly");
	close(fd);
	free(b.p);
}

/* An archive at an offset inside a larger file, as DCP embeds them. */
static void test_embedded(const gfs_tzip_limits *lim)
{
	const blob b = load("torch113.pt");
	const size_t pre = 1000, post = 500;
	blob big = { malloc(pre + b.n + post), pre + b.n + post };
	gfs_tzip *z = NULL;
	int fd;

	if (!big.p)
		die("out of memory", "");
	memset(big.p, 'J', big.n);
	memcpy(big.p + 10, "PK\x03\x04PK\x05\x06", 8); /* decoys */
	memcpy(big.p + pre, b.p, b.n);
	fd = mem_fd(big.p, big.n);
	if (ok(gfs_tzip_open(fd, pre, b.n, "embedded", lim, &z) == GFS_OK,
	       "embedded at offset %zu opens", pre)) {
		check_expected(z, &expected[0], pre, "embedded");
		ok(records_ok(z, pre, b.n), "embedded: records inside the range");
	}
	gfs_tzip_close(z);
	z = NULL;
	if (ok(gfs_tzip_open(fd, pre, b.n + post, "trailing", lim, &z) ==
		       GFS_OK,
	       "embedded with trailing bytes in the range opens"))
		check_expected(z, &expected[0], pre, "trailing");
	gfs_tzip_close(z);
	z = NULL;
	ok(gfs_tzip_open(fd, 0, pre + b.n, "whole", lim, &z) ==
		   GFS_ERR_FORMAT,
	   "embedded archive opened at base 0 fails");
	gfs_tzip_close(z);
	close(fd);
	free(big.p);
	free(b.p);
}

/*
 * Truncation at many lengths: within the full file (len limits the view),
 * and of the file itself (opened with its real and its original length).
 */
static void test_truncation(const char *name, const gfs_tzip_limits *lim)
{
	const blob b = load(name);
	const int full = mem_fd(b.p, b.n);
	const int cut = mem_fd(b.p, b.n);
	size_t tried = 0, bad = 0;

	for (size_t l = b.n; l-- > 0;) {
		gfs_tzip *z = NULL;
		gfs_err err;

		if (l + 200 < b.n && l % 7 != 0)
			continue;
		tried++;
		if (ftruncate(cut, (off_t)l) != 0)
			die("cannot truncate", name);
		err = gfs_tzip_open(full, 0, l, name, lim, &z);
		if (err == GFS_OK ? !records_ok(z, 0, l) :
				    !gfs_errmsg()[0] || strchr(gfs_errmsg(), '\n'))
			bad++;
		gfs_tzip_close(z);
		z = NULL;
		err = gfs_tzip_open(cut, 0, l, name, lim, &z);
		if (err == GFS_OK ? !records_ok(z, 0, l) : !gfs_errmsg()[0])
			bad++;
		gfs_tzip_close(z);
		z = NULL;
		if (gfs_tzip_open(cut, 0, b.n, name, lim, &z) == GFS_OK)
			bad++;
		gfs_tzip_close(z);
	}
	ok(bad == 0, "%s: %zu truncations fail cleanly or stay in bounds",
	   name, tried);
	close(full);
	close(cut);
	free(b.p);
}

/* Malformed archives made from torch113.pt (ZIP64 end records). */
static void test_malformed_zip64(void)
{
	const blob orig = load("torch113.pt");
	blob b;
	size_t cd, lh;

	b = copy(&orig);
	put64(eocd64(&b) + 24, 39);
	put64(eocd64(&b) + 32, 39);
	ok(fails(&b, GFS_ERR_FORMAT, "entry 38 is truncated"),
	   "entry count one too high");
	put64(eocd64(&b) + 24, 37);
	put64(eocd64(&b) + 32, 37);
	ok(fails(&b, GFS_ERR_FORMAT, "bytes after its 37 entries"),
	   "entry count one too low");
	put64(eocd64(&b) + 24, UINT64_MAX / 8);
	put64(eocd64(&b) + 32, UINT64_MAX / 8);
	ok(fails(&b, GFS_ERR_FORMAT, "cannot fit in a central directory"),
	   "huge entry count rejected before allocation");
	free(b.p);

	b = copy(&orig);
	put64(eocd64(&b) + 48, b.n + 100);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end records"),
	   "central directory offset past the end");
	put64(eocd64(&b) + 48, UINT64_MAX - 10);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end records"),
	   "central directory offset overflowing");
	free(b.p);

	b = copy(&orig);
	put64(eocd64(&b) + 40, UINT64_MAX);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end records"),
	   "central directory size overflowing");
	free(b.p);

	b = copy(&orig);
	put64(eocd(&b) - 20 + 8, b.n);
	ok(fails(&b, GFS_ERR_FORMAT, "does not fit before its locator"),
	   "ZIP64 end record offset past the end");
	free(b.p);

	b = copy(&orig);
	put32(eocd(&b) - 20 + 16, 2);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "multi-disk"),
	   "multi-disk ZIP64 locator");
	free(b.p);

	b = copy(&orig);
	put32(eocd64(&b) + 16, 1);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "multi-disk"),
	   "multi-disk ZIP64 end record");
	free(b.p);

	b = copy(&orig);
	put64(eocd64(&b) + 4, 40);
	ok(fails(&b, GFS_ERR_FORMAT, "record has a bad size 40"),
	   "ZIP64 end record size field too small");
	put64(eocd64(&b) + 4, 45);
	ok(fails(&b, GFS_ERR_FORMAT, "record has a bad size 45"),
	   "ZIP64 end record overlapping its locator");
	free(b.p);

	b = copy(&orig);
	eocd64(&b)[0] = 'X';
	ok(fails(&b, GFS_ERR_FORMAT, "no ZIP64 end of central directory"),
	   "bad ZIP64 end record signature");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put32(b.p + cd + 42, (uint32_t)b.n);
	ok(fails(&b, GFS_ERR_FORMAT,
		 "entry 37 (zero_pp_rank_1_mp_rank_00_model_states/version) points past the end of the archive"),
	   "local header offset past the end");
	put32(b.p + cd + 42, (uint32_t)b.n - 29);
	ok(fails(&b, GFS_ERR_FORMAT, "points past the end of the archive"),
	   "local header offset 29 bytes before the end");
	put32(b.p + cd + 42, (uint32_t)b.n - 40);
	ok(fails(&b, GFS_ERR_FORMAT, "local header at offset"),
	   "local header name past the end");
	put32(b.p + cd + 42, 1);
	ok(fails(&b, GFS_ERR_FORMAT, "no local header signature"),
	   "local header offset not at a local header");
	free(b.p);

	b = copy(&orig);
	rename_rec(&b, "data/1", "data/0", true, true);
	ok(fails(&b, GFS_ERR_FORMAT, "data/0 appears more than once"),
	   "duplicate names");
	free(b.p);

	b = copy(&orig);
	rename_rec(&b, "data/2", "data/X", false, true);
	ok(fails(&b, GFS_ERR_FORMAT,
		 "data/2: local header name differs from the central directory"),
	   "local header name mismatch");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	b.p[cd + 46] = 'Z';
	b.p[lh + 30] = 'Z';
	ok(fails(&b, GFS_ERR_FORMAT,
		 "record Zero_pp_rank_1_mp_rank_00_model_states/version is not under the archive prefix zero_pp_rank_1_mp_rank_00_model_states/"),
	   "record not under the prefix");
	free(b.p);

	b = copy(&orig);
	rename_rec(&b, "data.pkl", "data.pkX", true, true);
	ok(fails(&b, GFS_ERR_FORMAT, "no <prefix>/data.pkl record"),
	   "no data.pkl");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put16(b.p + cd + 8, gfs_le16(b.p + cd + 8) | 1);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "version is encrypted"),
	   "encrypted record");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put32(b.p + cd + 20, 3);
	ok(fails(&b, GFS_ERR_FORMAT, "is STORED but its compressed size 3"),
	   "STORED record with different sizes");
	put32(b.p + cd + 20, 0x7fffffff);
	put32(b.p + cd + 24, 0x7fffffff);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end of the archive"),
	   "record data past the end");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put16(b.p + cd + 28, 0);
	ok(fails(&b, GFS_ERR_FORMAT, "entry 37 has an empty name"),
	   "empty name");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	b.p[cd + 50] = '\0';
	ok(fails(&b, GFS_ERR_FORMAT, "name contains a NUL byte"),
	   "NUL in a name");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	b.p[cd] = 'X';
	ok(fails(&b, GFS_ERR_FORMAT, "entry 37 has a bad signature"),
	   "bad central directory entry signature");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put16(b.p + cd + 32, 200);
	ok(fails(&b, GFS_ERR_FORMAT,
		 "entry 37 runs past the end of the central directory"),
	   "central directory entry longer than the directory");
	free(b.p);

	/* Fuzzer finding: control bytes of the prefix reached the message. */
	b = copy(&orig);
	locate(&b, "data.pkl", &cd, &lh);
	b.p[cd + 47] = '\n';
	b.p[lh + 31] = '\n';
	ok(fails(&b, GFS_ERR_FORMAT, "prefix z?ro_pp_rank_1"),
	   "control bytes in the prefix are not printed");
	free(b.p);

	free(orig.p);
}

/* Malformed archives made from comment.pt (classic end record only). */
static void test_malformed_classic(void)
{
	const blob orig = load("comment.pt");
	size_t clen = 0;
	blob b;

	/* Its end record is followed by its comment. */
	while (clen + 22 < orig.n &&
	       gfs_le32(orig.p + orig.n - 22 - clen) != 0x06054b50)
		clen++;
	ok(clen > 0 && gfs_le16(orig.p + orig.n - 2 - clen) == clen,
	   "comment.pt has a %zu-byte comment", clen);

	b = copy(&orig);
	b.n -= clen;
	put16(b.p + b.n - 2, 0);
	ok(try_blob(&b, NULL) == GFS_OK, "comment.pt without its comment");
	put16(eocd(&b) + 8, 0xfffe);
	put16(eocd(&b) + 10, 0xfffe);
	ok(fails(&b, GFS_ERR_FORMAT, "entry count 65534 cannot fit"),
	   "classic: huge entry count");
	put16(eocd(&b) + 8, 7);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "multi-disk"),
	   "classic: entries on this disk differ from total");
	put16(eocd(&b) + 8, 0xffff);
	put16(eocd(&b) + 10, 0xffff);
	ok(fails(&b, GFS_ERR_FORMAT, "needs ZIP64"),
	   "classic: saturated count without ZIP64");
	put16(eocd(&b) + 8, 7);
	put16(eocd(&b) + 10, 7);
	put32(eocd(&b) + 16, 0xfffffff0);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end records"),
	   "classic: central directory offset past the end");
	put32(eocd(&b) + 16, 0xffffffff);
	ok(fails(&b, GFS_ERR_FORMAT, "needs ZIP64"),
	   "classic: saturated offset without ZIP64");
	free(b.p);

	b = copy(&orig);
	b.n -= clen;
	put16(b.p + b.n - 2, 0);
	put16(eocd(&b) + 4, 1);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "multi-disk"), "classic: disk 1");
	free(b.p);

	/* A comment holding a fake end record signature. */
	b.n = orig.n - clen + 40;
	b.p = calloc(1, b.n);
	if (!b.p)
		die("out of memory", "");
	memcpy(b.p, orig.p, orig.n - clen);
	put16(b.p + orig.n - clen - 2, 40);
	memset(b.p + b.n - 40, 'c', 40);
	memcpy(b.p + b.n - 36, "PK\x05\x06", 4);
	put16(b.p + b.n - 36 + 20, 0); /* it would fit, but not end the file */
	ok(try_blob(&b, NULL) == GFS_OK,
	   "a fake signature inside the comment is skipped");
	free(b.p);

	/* Fuzzer finding: no end record at all (double free in the search). */
	b.n = 70000;
	b.p = malloc(b.n);
	if (!b.p)
		die("out of memory", "");
	memset(b.p, 'P', b.n);
	ok(fails(&b, GFS_ERR_FORMAT, "no end of central directory record"),
	   "no end record in 70000 bytes");
	b.n = 100;
	ok(fails(&b, GFS_ERR_FORMAT, "no end of central directory record"),
	   "no end record in 100 bytes");
	free(b.p);

	free(orig.p);
}

/* Malformed ZIP64 extra fields, from zip64_cd.pt. */
static void test_malformed_extra(void)
{
	const blob orig = load("zip64_cd.pt");
	blob b;
	size_t cd, lh;

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put16(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 2, 20);
	ok(fails(&b, GFS_ERR_FORMAT, "ZIP64 extra field is 20 bytes, needs 28"),
	   "short ZIP64 extra field");
	put16(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 2, 29);
	ok(fails(&b, GFS_ERR_FORMAT, "extra field runs past its end"),
	   "ZIP64 extra field longer than the extra");
	put16(b.p + cd + 46 + gfs_le16(b.p + cd + 28), 0x5455);
	put16(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 2, 28);
	ok(fails(&b, GFS_ERR_FORMAT, "no ZIP64 extra field"),
	   "saturated fields without a ZIP64 extra field");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put32(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 4 + 24, 3);
	ok(fails(&b, GFS_ERR_UNSUPPORTED, "version is on disk 3"),
	   "record on another disk (ZIP64 disk field)");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put64(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 4 + 16, UINT64_MAX);
	ok(fails(&b, GFS_ERR_FORMAT, "points past the end of the archive"),
	   "ZIP64 local header offset past the end");
	free(b.p);

	b = copy(&orig);
	locate(&b, "version", &cd, &lh);
	put64(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 4, UINT64_MAX - 8);
	put64(b.p + cd + 46 + gfs_le16(b.p + cd + 28) + 4 + 8, UINT64_MAX - 8);
	ok(fails(&b, GFS_ERR_FORMAT, "runs past the end of the archive"),
	   "ZIP64 size overflowing the archive");
	free(b.p);

	free(orig.p);
}

static void test_names(void)
{
	blob b = load("long_name.pt");

	ok(fails(&b, GFS_ERR_FORMAT, "zip record xxxxxxxxxx") &&
		   strstr(gfs_errmsg(), "xxx... is not under the archive prefix input_ids/"),
	   "a long name is shortened in messages: %s", gfs_errmsg());
	free(b.p);
	b = load("huge_name.pt");
	ok(fails(&b, GFS_ERR_LIMIT, "entry 6 has a 5000-byte name"),
	   "names over the limit are rejected");
	free(b.p);
	b.n = 22;
	b.p = calloc(1, b.n);
	if (!b.p)
		die("out of memory", "");
	memcpy(b.p, "PK\x05\x06", 4);
	ok(fails(&b, GFS_ERR_FORMAT, "has no records"), "an empty zip");
	free(b.p);
}

static void test_deflate(void)
{
	const blob b = load("deflate.pt");
	const int fd = mem_fd(b.p, b.n);
	gfs_tzip *z = NULL;
	uint64_t off, size;

	if (ok(gfs_tzip_open(fd, 0, b.n, "deflate.pt", NULL, &z) == GFS_OK,
	       "a DEFLATE archive opens")) {
		ok(gfs_tzip_find(z, "data/0")->method == 8,
		   "data/0 is DEFLATE");
		ok(gfs_tzip_storage(z, "0", &off, &size) ==
				   GFS_ERR_UNSUPPORTED &&
			   strstr(gfs_errmsg(),
				  "deflate.pt: zip record input_ids/data/0 is compressed (method 8)"),
		   "gfs_tzip_storage() of a DEFLATE record is unsupported: %s",
		   gfs_errmsg());
	}
	gfs_tzip_close(z);
	close(fd);
	free(b.p);
}

/* peek(): gfs_tzip_peek_prefix() of the n bytes at p; "(null)" for NULL. */
static const char *peek(const void *p, size_t n, gfs_err *err)
{
	static char got[128];
	const int fd = mem_fd(p, n);
	char *prefix = NULL;

	*err = gfs_tzip_peek_prefix(fd, n, "peek", &prefix);
	snprintf(got, sizeof(got), "%s", prefix ? prefix : "(null)");
	free(prefix);
	close(fd);
	return got;
}

static void test_peek(void)
{
	blob b = load("torch113.pt");
	gfs_err err;
	const char *got = peek(b.p, b.n, &err);

	ok(!err && strcmp(got, "zero_pp_rank_1_mp_rank_00_model_states") == 0,
	   "peek: the folder of a torch 1.13 file: %s", got);
	got = peek(b.p, 29, &err);
	ok(!err && strcmp(got, "(null)") == 0, "peek: 29 bytes: nothing known");
	got = peek(b.p, 40, &err);
	ok(!err && strcmp(got, "(null)") == 0, "peek: a name cut by the end: nothing known");
	b.p[30 + 3] = '\0';
	got = peek(b.p, b.n, &err);
	ok(!err && strcmp(got, "zer?_pp_rank_1_mp_rank_00_model_states") == 0,
	   "peek: a NUL byte in the folder does not shorten it: %s", got);
	b.p[0] = 'X';
	got = peek(b.p, b.n, &err);
	ok(!err && strcmp(got, "(null)") == 0, "peek: no local header: nothing known");
	free(b.p);
	b = load("torch2.pt");
	got = peek(b.p, b.n, &err);
	ok(!err && strcmp(got, "zero_pp_rank_1_mp_rank_00_model_states") == 0,
	   "peek: the folder of a torch 2.x file: %s", got);
	free(b.p);
	b = load("torch2_input_ids.pt");
	got = peek(b.p, b.n, &err);
	ok(!err && strcmp(got, "input_ids") == 0, "peek: %s", got);
	free(b.p);
}

int main(void)
{
	/* gfs_tzip_limits.windows: the same records and bytes, the same refusals */
	static const gfs_tzip_limits windows = { .windows = true };

	for (const gfs_tzip_limits *lim = NULL;; lim = &windows) {
		printf("# %s\n", lim ? "with read windows" : "without read windows");
		test_expected(lim);
		test_embedded(lim);
		test_truncation("torch113.pt", lim);
		test_truncation("torch2_input_ids.pt", lim);
		test_truncation("zip64_cd.pt", lim);
		test_truncation("comment.pt", lim);
		if (lim)
			break;
	}
	test_order_and_limits();
	test_malformed_zip64();
	test_malformed_classic();
	test_malformed_extra();
	test_names();
	test_deflate();
	test_peek();
	printf("1..%d\n", n_tests);
	if (n_failed)
		printf("# %d of %d tests failed\n", n_failed, n_tests);
	return n_failed ? 1 : 0;
}
