/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — unit tests for the safe pickle reader (src/readers/pickle.c).
 *
 * Prints one "ok N - ..." / "not ok N - ..." line per check and exits
 * non-zero if any check failed.  Real torch pickles are read from
 * $top_srcdir/tests/data/pickles/ (top_srcdir defaults to ".").  The
 * large-dict checks guard against quadratic behaviour, not speed: they
 * allow 30 seconds (a quadratic load takes hours), or $T_PICKLE_TIME_LIMIT.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/readers/pickle.h"

/* A string literal as (buffer, length) arguments, without its NUL. */
#define PK(lit) (const uint8_t *)(lit), sizeof(lit) - 1

static unsigned t_num;
static unsigned t_failed;

static bool check(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool check(bool cond, const char *fmt, ...)
{
	va_list ap;

	t_num++;
	printf("%s %u - ", cond ? "ok" : "not ok", t_num);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	if (!cond) {
		t_failed++;
		printf("#   last error: %s\n", gfs_errmsg());
	}
	return cond;
}

/* ------------------------------------------------------------------ helpers */

static gfs_pickle *load_lim(const uint8_t *buf, size_t len, const gfs_pickle_limits *lim)
{
	gfs_pickle *p = NULL;

	if (gfs_pickle_load(buf, len, "t.pkl", lim, &p) != GFS_OK)
		return NULL;
	return p;
}

static gfs_pickle *load(const uint8_t *buf, size_t len)
{
	return load_lim(buf, len, NULL);
}

/* fails_lim(): loading must fail with want and a message naming "bad.pkl" and containing substr. */
static void fails_lim(const char *desc, const uint8_t *buf, size_t len,
		      const gfs_pickle_limits *lim, gfs_err want, const char *substr)
{
	gfs_pickle *p = NULL;
	const gfs_err err = gfs_pickle_load(buf, len, "bad.pkl", lim, &p);
	const char *const msg = gfs_errmsg();

	check(err == want && !p && strncmp(msg, "bad.pkl: ", 9) == 0 &&
	      (!substr || strstr(msg, substr)), "%s: %s (%s)", desc, gfs_strerror(err), msg);
	gfs_pickle_free(p);
}

static void fails(const char *desc, const uint8_t *buf, size_t len, gfs_err want,
		  const char *substr)
{
	fails_lim(desc, buf, len, NULL, want, substr);
}

static bool is_int(const gfs_pv *v, int64_t want)
{
	return v && v->kind == GFS_PV_INT && v->u.i == want;
}

static bool is_str(const gfs_pv *v, const char *want)
{
	return v && v->kind == GFS_PV_STR && v->u.s.len == strlen(want) &&
	       memcmp(v->u.s.ptr, want, v->u.s.len) == 0 && v->u.s.ptr[v->u.s.len] == '\0';
}

static bool is_blob(const gfs_pv *v, gfs_pv_kind kind, const char *want, size_t len)
{
	return v && v->kind == kind && v->u.s.len == len && memcmp(v->u.s.ptr, want, len) == 0 &&
	       v->u.s.ptr[len] == '\0';
}

static bool is_bool(const gfs_pv *v, bool want)
{
	return v && v->kind == GFS_PV_BOOL && v->u.b == want;
}

static bool is_kind(const gfs_pv *v, gfs_pv_kind kind)
{
	return v && v->kind == kind;
}

static bool dims_are(const int64_t *got, uint32_t n, const int64_t *want, uint32_t wn)
{
	if (n != wn)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (got[i] != want[i])
			return false;
	return true;
}

/* A growable byte buffer to build pickles programmatically. */
typedef struct bbuf {
	uint8_t *p;
	size_t n;
	size_t cap;
} bbuf;

static void bput(bbuf *b, const void *d, size_t n)
{
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		uint8_t *np;

		while (cap < b->n + n)
			cap *= 2;
		np = realloc(b->p, cap);
		if (!np) {
			perror("realloc");
			exit(99);
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->n, d, n);
	b->n += n;
}

/* BPUT(): append a string literal without its NUL. */
#define BPUT(b, lit) bput((b), (lit), sizeof(lit) - 1)

static void bop(bbuf *b, uint8_t op)
{
	bput(b, &op, 1);
}

static void bu32(bbuf *b, uint32_t v)
{
	const uint8_t le[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };

	bput(b, le, 4);
}

/* bstr(): BINUNICODE s. */
static void bstr(bbuf *b, const char *s)
{
	bop(b, 'X');
	bu32(b, (uint32_t)strlen(s));
	bput(b, s, strlen(s));
}

/* bint(): BININT for 32-bit values, else an 8-byte LONG1. */
static void bint(bbuf *b, int64_t v)
{
	if (v >= INT32_MIN && v <= INT32_MAX) {
		bop(b, 'J');
		bu32(b, (uint32_t)(int32_t)v);
		return;
	}
	bop(b, 0x8a);
	bop(b, 8);
	for (int i = 0; i < 8; i++)
		bop(b, (uint8_t)((uint64_t)v >> (8 * i)));
}

/* bglobal(): GLOBAL module name. */
static void bglobal(bbuf *b, const char *module, const char *name)
{
	bop(b, 'c');
	bput(b, module, strlen(module));
	bop(b, '\n');
	bput(b, name, strlen(name));
	bop(b, '\n');
}

static char *read_file(const char *name, size_t *len)
{
	const char *top = getenv("top_srcdir");
	char path[4096];
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/tests/data/pickles/%s", top && *top ? top : ".", name);
	f = fopen(path, "rb");
	if (!f) {
		printf("# cannot open %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (fseek(f, 0, SEEK_END) != 0 || (n = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
		fclose(f);
		return NULL;
	}
	/* Exactly n bytes, so that ASan catches any read past the end. */
	buf = malloc(n ? (size_t)n : 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/*
 * all_prefixes_fail(): every strict prefix of a valid pickle must fail to
 * load, cleanly.  Each prefix is copied into a buffer of exactly its size.
 */
static void all_prefixes_fail(const char *desc, const uint8_t *buf, size_t len)
{
	size_t bad = 0, first_bad = 0;

	for (size_t n = 0; n < len; n++) {
		uint8_t *copy = malloc(n ? n : 1);
		gfs_pickle *p = NULL;
		gfs_err err;

		if (!copy)
			exit(99);
		memcpy(copy, buf, n);
		err = gfs_pickle_load(n ? copy : NULL, n, "prefix.pkl", NULL, &p);
		if (err == GFS_OK || p || strncmp(gfs_errmsg(), "prefix.pkl: ", 12) != 0) {
			if (!bad++)
				first_bad = n;
		}
		gfs_pickle_free(p);
		free(copy);
	}
	check(bad == 0, "%s: all %zu truncated prefixes fail cleanly (first bad: %zu)", desc, len,
	      first_bad);
}

/*
 * pickle.dumps({'int': 7, 'neg': -3, 'big': 2**70, 'f': 1.5, 's': 'x\n\\\u00e9\u20ac',
 *               'l': l, 't': (1, 'two'), 'again': l}, protocol=0)
 * with l = [None, True, False]: MARK DICT PUT UNICODE INT LONG FLOAT LIST
 * APPEND SETITEM TUPLE GET, bools as INT 01 / 00.
 */
static const uint8_t py_proto0[] = {
	0x28, 0x64, 0x70, 0x30, 0x0a, 0x56, 0x69, 0x6e, 0x74, 0x0a, 0x70, 0x31,
	0x0a, 0x49, 0x37, 0x0a, 0x73, 0x56, 0x6e, 0x65, 0x67, 0x0a, 0x70, 0x32,
	0x0a, 0x49, 0x2d, 0x33, 0x0a, 0x73, 0x56, 0x62, 0x69, 0x67, 0x0a, 0x70,
	0x33, 0x0a, 0x4c, 0x31, 0x31, 0x38, 0x30, 0x35, 0x39, 0x31, 0x36, 0x32,
	0x30, 0x37, 0x31, 0x37, 0x34, 0x31, 0x31, 0x33, 0x30, 0x33, 0x34, 0x32,
	0x34, 0x4c, 0x0a, 0x73, 0x56, 0x66, 0x0a, 0x70, 0x34, 0x0a, 0x46, 0x31,
	0x2e, 0x35, 0x0a, 0x73, 0x56, 0x73, 0x0a, 0x70, 0x35, 0x0a, 0x56, 0x78,
	0x5c, 0x75, 0x30, 0x30, 0x30, 0x61, 0x5c, 0x75, 0x30, 0x30, 0x35, 0x63,
	0xe9, 0x5c, 0x75, 0x32, 0x30, 0x61, 0x63, 0x0a, 0x70, 0x36, 0x0a, 0x73,
	0x56, 0x6c, 0x0a, 0x70, 0x37, 0x0a, 0x28, 0x6c, 0x70, 0x38, 0x0a, 0x4e,
	0x61, 0x49, 0x30, 0x31, 0x0a, 0x61, 0x49, 0x30, 0x30, 0x0a, 0x61, 0x73,
	0x56, 0x74, 0x0a, 0x70, 0x39, 0x0a, 0x28, 0x49, 0x31, 0x0a, 0x56, 0x74,
	0x77, 0x6f, 0x0a, 0x70, 0x31, 0x30, 0x0a, 0x74, 0x70, 0x31, 0x31, 0x0a,
	0x73, 0x56, 0x61, 0x67, 0x61, 0x69, 0x6e, 0x0a, 0x70, 0x31, 0x32, 0x0a,
	0x67, 0x38, 0x0a, 0x73, 0x2e,
};

/*
 * pickle.dumps({'s': 'short', 'b': b'\x00\x01', 'set': {1, 2}, 'fs': frozenset([3]),
 *               'cls': collections.OrderedDict,
 *               'od': collections.OrderedDict([('z', 1), ('a', 2)])}, protocol=4):
 * FRAME MEMOIZE SHORT_BINUNICODE SHORT_BINBYTES EMPTY_SET ADDITEMS FROZENSET
 * STACK_GLOBAL REDUCE SETITEMS.
 */
static const uint8_t py_proto4[] = {
	0x80, 0x04, 0x95, 0x6e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x7d,
	0x94, 0x28, 0x8c, 0x01, 0x73, 0x94, 0x8c, 0x05, 0x73, 0x68, 0x6f, 0x72,
	0x74, 0x94, 0x8c, 0x01, 0x62, 0x94, 0x43, 0x02, 0x00, 0x01, 0x94, 0x8c,
	0x03, 0x73, 0x65, 0x74, 0x94, 0x8f, 0x94, 0x28, 0x4b, 0x01, 0x4b, 0x02,
	0x90, 0x8c, 0x02, 0x66, 0x73, 0x94, 0x28, 0x4b, 0x03, 0x91, 0x94, 0x8c,
	0x03, 0x63, 0x6c, 0x73, 0x94, 0x8c, 0x0b, 0x63, 0x6f, 0x6c, 0x6c, 0x65,
	0x63, 0x74, 0x69, 0x6f, 0x6e, 0x73, 0x94, 0x8c, 0x0b, 0x4f, 0x72, 0x64,
	0x65, 0x72, 0x65, 0x64, 0x44, 0x69, 0x63, 0x74, 0x94, 0x93, 0x94, 0x8c,
	0x02, 0x6f, 0x64, 0x94, 0x68, 0x0c, 0x29, 0x52, 0x94, 0x28, 0x8c, 0x01,
	0x7a, 0x94, 0x4b, 0x01, 0x8c, 0x01, 0x61, 0x94, 0x4b, 0x02, 0x75, 0x75,
	0x2e,
};

/* pickle.dumps([bytearray(b'ab'), b'cd'], protocol=5): BYTEARRAY8. */
static const uint8_t py_proto5[] = {
	0x80, 0x05, 0x95, 0x16, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x5d,
	0x94, 0x28, 0x96, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x61,
	0x62, 0x94, 0x43, 0x02, 0x63, 0x64, 0x94, 0x65, 0x2e,
};

/* ------------------------------------------------------------------ opcode families */

static void test_proto0(void)
{
	gfs_pickle *p = load(py_proto0, sizeof(py_proto0));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *f = gfs_pv_dict_get(r, "f");
	const gfs_pv *l = gfs_pv_dict_get(r, "l");
	const gfs_pv *t = gfs_pv_dict_get(r, "t");

	check(p && is_kind(r, GFS_PV_DICT) && r->u.dict.len == 8, "protocol 0: a dict of 8 entries");
	check(is_str(r->u.dict.items[0].key, "int") && is_str(r->u.dict.items[7].key, "again"),
	      "protocol 0: dict keeps insertion order");
	check(is_int(gfs_pv_dict_get(r, "int"), 7) && is_int(gfs_pv_dict_get(r, "neg"), -3),
	      "protocol 0: INT");
	check(is_blob(gfs_pv_dict_get(r, "big"), GFS_PV_BIGINT, "\x00\x00\x00\x00\x00\x00\x00\x00\x40", 9),
	      "protocol 0: LONG 2**70 is a 9-byte BIGINT");
	check(is_kind(f, GFS_PV_FLOAT) && f->u.f == 1.5, "protocol 0: FLOAT");
	check(is_str(gfs_pv_dict_get(r, "s"), "x\n\\\xc3\xa9\xe2\x82\xac"),
	      "protocol 0: UNICODE raw-unicode-escape decoded to UTF-8");
	check(is_kind(l, GFS_PV_LIST) && gfs_pv_seq_len(l) == 3 &&
	      is_kind(gfs_pv_seq_at(l, 0), GFS_PV_NONE) && is_bool(gfs_pv_seq_at(l, 1), true) &&
	      is_bool(gfs_pv_seq_at(l, 2), false), "protocol 0: LIST, APPEND, NONE, INT 01/00 bools");
	check(is_kind(t, GFS_PV_TUPLE) && gfs_pv_seq_len(t) == 2 && is_int(gfs_pv_seq_at(t, 0), 1) &&
	      is_str(gfs_pv_seq_at(t, 1), "two"), "protocol 0: TUPLE");
	check(gfs_pv_dict_get(r, "again") == l, "protocol 0: PUT/GET share the list node");
	gfs_pickle_free(p);
}

static void test_text_forms(void)
{
	gfs_pickle *p;
	const gfs_pv *r;
	bbuf b = { 0 };

	p = load(PK("S'a\\n\\x41\\101\\'\"\\q'\n."));
	check(is_str(gfs_pickle_root(p), "a\nAA'\"\\q"), "STRING: escapes decoded, unknown escape kept");
	gfs_pickle_free(p);
	p = load(PK("S'\\a\\b\\f\\r\\t\\v\\\\'\n."));
	check(is_str(gfs_pickle_root(p), "\a\b\f\r\t\v\\"), "STRING: control escapes");
	gfs_pickle_free(p);
	p = load(PK("S\"dq\"\n."));
	check(is_str(gfs_pickle_root(p), "dq"), "STRING: double quotes");
	gfs_pickle_free(p);
	p = load(PK("S'\\1234\\0'\n."));
	check(is_blob(gfs_pickle_root(p), GFS_PV_STR, "S4\0", 3), "STRING: octal escapes, at most 3 digits, NUL kept");
	gfs_pickle_free(p);
	p = load(PK("Vx\\u0041\\U0001F600\xe9" "\\z\n."));
	check(is_str(gfs_pickle_root(p), "xA\xf0\x9f\x98\x80\xc3\xa9\\z"),
	      "UNICODE: \\u, \\U, latin-1 byte, other backslash kept");
	gfs_pickle_free(p);
	p = load(PK("Vab\\\n."));
	check(is_str(gfs_pickle_root(p), "ab\\"), "UNICODE: trailing backslash kept");
	gfs_pickle_free(p);
	p = load(PK("I01\n."));
	check(is_bool(gfs_pickle_root(p), true), "INT 01 is True");
	gfs_pickle_free(p);
	p = load(PK("I00\n."));
	check(is_bool(gfs_pickle_root(p), false), "INT 00 is False");
	gfs_pickle_free(p);
	p = load(PK("I 42 \n."));
	check(is_int(gfs_pickle_root(p), 42), "INT with blanks");
	gfs_pickle_free(p);
	p = load(PK("I-9223372036854775808\n."));
	check(is_int(gfs_pickle_root(p), INT64_MIN), "INT -2**63 fits");
	gfs_pickle_free(p);
	p = load(PK("I9223372036854775808\n."));
	check(is_blob(gfs_pickle_root(p), GFS_PV_BIGINT, "\x00\x00\x00\x00\x00\x00\x00\x80\x00", 9),
	      "INT 2**63 overflows to BIGINT");
	gfs_pickle_free(p);
	p = load(PK("L-9223372036854775809L\n."));
	check(is_blob(gfs_pickle_root(p), GFS_PV_BIGINT, "\xff\xff\xff\xff\xff\xff\xff\x7f\xff", 9),
	      "LONG -2**63-1 is BIGINT");
	gfs_pickle_free(p);
	p = load(PK("L123456789012345678901234567890L\n."));
	check(is_blob(gfs_pickle_root(p), GFS_PV_BIGINT,
		      "\xd2\x0a\x3f\x4e\xee\xe0\x73\xc3\xf6\x0f\xe9\x8e\x01", 13), "LONG 30 digits");
	gfs_pickle_free(p);
	p = load(PK("L-10000000000000000000000000000000000000000\n."));
	check(is_blob(gfs_pickle_root(p), GFS_PV_BIGINT,
		      "\x00\x00\x00\x00\x00\x9f\x0a\x46\x54\x40\x5b\xa3\x3c\x0e\xd6\x9c\xe2", 17),
	      "LONG -10**40 without L suffix");
	gfs_pickle_free(p);
	p = load(PK("L00012L\n."));
	check(is_int(gfs_pickle_root(p), 12), "LONG with leading zeros that fits is INT");
	gfs_pickle_free(p);
	p = load(PK("F-2.5e-3\n."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_FLOAT) && r->u.f == -0.0025, "FLOAT text");
	gfs_pickle_free(p);
	p = load(PK("Finf\n."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_FLOAT) && r->u.f > 1e308, "FLOAT inf");
	gfs_pickle_free(p);

	bop(&b, 'L');
	for (int i = 0; i < 4300; i++)
		bop(&b, '9');
	BPUT(&b, "\n.");
	p = load(b.p, b.n);
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_BIGINT) && r->u.s.len == 1786 && (uint8_t)r->u.s.ptr[0] == 0xff,
	      "LONG of 4300 digits (the limit) is a 1786-byte BIGINT");
	gfs_pickle_free(p);
	b.n = 1;
	for (int i = 0; i < 4301; i++)
		bop(&b, '9');
	BPUT(&b, "\n.");
	fails("LONG of 4301 digits", b.p, b.n, GFS_ERR_LIMIT, "4301 digits");
	free(b.p);
}

static void test_proto1(void)
{
	gfs_pickle *p = load(PK("]q\x00(J\xff\xff\xff\xffK\xffM\xff\xffU\x03" "abcT\x02\x00\x00\x00"
				"hiX\x02\x00\x00\x00\xc3\xa9G?\xf8\x00\x00\x00\x00\x00\x00N)}"
				"r\x00\x01\x00\x00j\x00\x01\x00\x00h\x00" "e."));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *f = gfs_pv_seq_at(r, 6);

	check(is_kind(r, GFS_PV_LIST) && gfs_pv_seq_len(r) == 12, "protocol 1: APPENDS a list of 12");
	check(is_int(gfs_pv_seq_at(r, 0), -1) && is_int(gfs_pv_seq_at(r, 1), 255) &&
	      is_int(gfs_pv_seq_at(r, 2), 65535), "protocol 1: BININT (signed), BININT1, BININT2");
	check(is_str(gfs_pv_seq_at(r, 3), "abc") && is_str(gfs_pv_seq_at(r, 4), "hi"),
	      "protocol 1: SHORT_BINSTRING and BINSTRING give STR");
	check(is_str(gfs_pv_seq_at(r, 5), "\xc3\xa9"), "protocol 1: BINUNICODE");
	check(is_kind(f, GFS_PV_FLOAT) && f->u.f == 1.5, "protocol 1: BINFLOAT is big-endian");
	check(is_kind(gfs_pv_seq_at(r, 7), GFS_PV_NONE) &&
	      is_kind(gfs_pv_seq_at(r, 8), GFS_PV_TUPLE) && gfs_pv_seq_len(gfs_pv_seq_at(r, 8)) == 0 &&
	      is_kind(gfs_pv_seq_at(r, 9), GFS_PV_DICT), "protocol 1: NONE, EMPTY_TUPLE, EMPTY_DICT");
	check(gfs_pv_seq_at(r, 9) == gfs_pv_seq_at(r, 10), "protocol 1: LONG_BINPUT/LONG_BINGET");
	check(gfs_pv_seq_at(r, 11) == r, "protocol 1: BINPUT/BINGET can make a list contain itself");
	gfs_pickle_free(p);
}

static void test_stack_ops(void)
{
	gfs_pickle *p = load(PK("(K\x01" "0(K\x02" "1K\x03" "2(cmod\nCls\nK\x04" "o(K\x05"
				"imod\nInst\nPpid1\nK\x06" "Ql."));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *o = gfs_pv_seq_at(r, 2), *i = gfs_pv_seq_at(r, 3);
	const gfs_pv *p1 = gfs_pv_seq_at(r, 4), *p2 = gfs_pv_seq_at(r, 5);

	check(is_kind(r, GFS_PV_LIST) && gfs_pv_seq_len(r) == 6 && is_int(gfs_pv_seq_at(r, 0), 3) &&
	      gfs_pv_seq_at(r, 0) == gfs_pv_seq_at(r, 1), "POP, POP_MARK, DUP, LIST");
	check(is_kind(o, GFS_PV_OBJECT) && gfs_pv_is_global(o->u.obj.cls, "mod", "Cls") &&
	      gfs_pv_seq_len(o->u.obj.args) == 1 && is_int(gfs_pv_seq_at(o->u.obj.args, 0), 4) &&
	      !o->u.obj.state, "OBJ gives an OBJECT of the class after the MARK");
	check(is_kind(i, GFS_PV_OBJECT) && gfs_pv_is_global(i->u.obj.cls, "mod", "Inst") &&
	      gfs_pv_seq_len(i->u.obj.args) == 1 && is_int(gfs_pv_seq_at(i->u.obj.args, 0), 5),
	      "INST gives an OBJECT of the inline class");
	check(is_kind(p1, GFS_PV_PERSID) && is_str(p1->u.persid, "pid1"), "PERSID wraps a STR");
	check(is_kind(p2, GFS_PV_PERSID) && is_int(p2->u.persid, 6), "BINPERSID wraps the popped value");
	gfs_pickle_free(p);
	p = load(PK("(0K\x01."));
	check(is_int(gfs_pickle_root(p), 1), "POP with nothing above the MARK pops the MARK");
	gfs_pickle_free(p);
	p = load(PK("N.trailing garbage \xff"));
	check(is_kind(gfs_pickle_root(p), GFS_PV_NONE), "bytes after STOP are ignored");
	gfs_pickle_free(p);
	p = load(PK("K\x01K\x02."));
	check(is_int(gfs_pickle_root(p), 2), "STOP takes the top of the stack");
	gfs_pickle_free(p);
}

static void test_proto2(void)
{
	gfs_pickle *p = load(PK("\x80\x02(cmod\nC\nK\x01K\x02K\x03\x87\x81\x88\x89\x86\x8a\x00\x8a\x09"
				"\x00\x00\x00\x00\x00\x00\x00\x00\x01"
				"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"
				"\x8a\x02\xff\x00\x8a\x02\xff\xff"
				"\x8b\x0a\x00\x00\x00" "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80"
				"K\x07\x85t."));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *o = gfs_pv_seq_at(r, 0), *bools = gfs_pv_seq_at(r, 1);

	check(is_kind(r, GFS_PV_TUPLE) && gfs_pv_seq_len(r) == 9, "protocol 2: a tuple of 9");
	check(is_kind(o, GFS_PV_OBJECT) && gfs_pv_is_global(o->u.obj.cls, "mod", "C") &&
	      gfs_pv_seq_len(o->u.obj.args) == 3 && is_int(gfs_pv_seq_at(o->u.obj.args, 2), 3),
	      "protocol 2: NEWOBJ and TUPLE3");
	check(gfs_pv_seq_len(bools) == 2 && is_bool(gfs_pv_seq_at(bools, 0), true) &&
	      is_bool(gfs_pv_seq_at(bools, 1), false), "protocol 2: NEWTRUE, NEWFALSE, TUPLE2");
	check(is_int(gfs_pv_seq_at(r, 2), 0), "LONG1 of 0 bytes is 0");
	check(is_blob(gfs_pv_seq_at(r, 3), GFS_PV_BIGINT, "\x00\x00\x00\x00\x00\x00\x00\x00\x01", 9),
	      "LONG1 2**64 is a BIGINT");
	check(is_int(gfs_pv_seq_at(r, 4), INT64_MIN), "LONG1 -2**63 is an INT");
	check(is_int(gfs_pv_seq_at(r, 5), 255) && is_int(gfs_pv_seq_at(r, 6), -1),
	      "LONG1 non-minimal encodings");
	check(is_blob(gfs_pv_seq_at(r, 7), GFS_PV_BIGINT, "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80", 10),
	      "LONG4 -2**79 is a BIGINT");
	check(gfs_pv_seq_len(gfs_pv_seq_at(r, 8)) == 1 && is_int(gfs_pv_seq_at(gfs_pv_seq_at(r, 8), 0), 7),
	      "protocol 2: TUPLE1");
	gfs_pickle_free(p);
}

static void test_proto3(void)
{
	gfs_pickle *p = load(PK("\x80\x03(C\x02" "abB\x03\x00\x00\x00" "xyzt."));
	const gfs_pv *r = gfs_pickle_root(p);

	check(gfs_pv_seq_len(r) == 2 && is_blob(gfs_pv_seq_at(r, 0), GFS_PV_BYTES, "ab", 2) &&
	      is_blob(gfs_pv_seq_at(r, 1), GFS_PV_BYTES, "xyz", 3), "protocol 3: SHORT_BINBYTES, BINBYTES");
	check(!gfs_pv_str(gfs_pv_seq_at(r, 0)), "gfs_pv_str() is NULL for BYTES");
	gfs_pickle_free(p);
}

static void test_proto4(void)
{
	gfs_pickle *p = load(py_proto4, sizeof(py_proto4));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *set = gfs_pv_dict_get(r, "set"), *fs = gfs_pv_dict_get(r, "fs");
	const gfs_pv *od = gfs_pv_dict_get(r, "od");

	check(is_kind(r, GFS_PV_DICT) && r->u.dict.len == 6, "protocol 4: FRAME, MEMOIZE, dict of 6");
	check(is_str(gfs_pv_dict_get(r, "s"), "short"), "protocol 4: SHORT_BINUNICODE");
	check(is_blob(gfs_pv_dict_get(r, "b"), GFS_PV_BYTES, "\x00\x01", 2), "protocol 4: SHORT_BINBYTES");
	check(is_kind(set, GFS_PV_SET) && gfs_pv_seq_len(set) == 2 && is_int(gfs_pv_seq_at(set, 0), 1) &&
	      is_int(gfs_pv_seq_at(set, 1), 2), "protocol 4: EMPTY_SET, ADDITEMS");
	check(is_kind(fs, GFS_PV_SET) && gfs_pv_seq_len(fs) == 1 && is_int(gfs_pv_seq_at(fs, 0), 3),
	      "protocol 4: FROZENSET");
	check(gfs_pv_is_global(gfs_pv_dict_get(r, "cls"), "collections", "OrderedDict"),
	      "protocol 4: STACK_GLOBAL");
	check(is_kind(od, GFS_PV_DICT) && od->u.dict.len == 2 && is_str(od->u.dict.items[0].key, "z") &&
	      is_int(od->u.dict.items[1].value, 2), "protocol 4: OrderedDict() REDUCE is an ordered DICT");
	gfs_pickle_free(p);

	p = load(PK("\x80\x04\x95\x00\x00\x00\x00\x00\x00\x00\x00(\x8d\x03\x00\x00\x00\x00\x00\x00\x00"
		    "abc\x8e\x02\x00\x00\x00\x00\x00\x00\x00" "de\x8f(K\x01K\x01\x90\x94h\x00\x94t."));
	r = gfs_pickle_root(p);
	check(gfs_pv_seq_len(r) == 4 && is_str(gfs_pv_seq_at(r, 0), "abc") &&
	      is_blob(gfs_pv_seq_at(r, 1), GFS_PV_BYTES, "de", 2), "protocol 4: BINUNICODE8, BINBYTES8");
	check(gfs_pv_seq_len(gfs_pv_seq_at(r, 2)) == 1 && gfs_pv_seq_at(r, 2) == gfs_pv_seq_at(r, 3),
	      "protocol 4: ADDITEMS drops duplicates; MEMOIZE then BINGET shares the set");
	gfs_pickle_free(p);

	p = load(PK("\x80\x04K\x01\x94K\x02q\x05\x94h\x02."));
	check(is_int(gfs_pickle_root(p), 2), "MEMOIZE uses the number of memo entries as its index");
	gfs_pickle_free(p);
}

static void test_newobj_ex(void)
{
	gfs_pickle *p = load(PK("\x80\x04\x8c\x03mod\x8c\x01K\x93K\x01\x85}\x8c\x01" "bK\x02s\x92."));
	const gfs_pv *r = gfs_pickle_root(p), *a;

	a = r ? r->u.obj.args : NULL;
	check(is_kind(r, GFS_PV_OBJECT) && gfs_pv_is_global(r->u.obj.cls, "copyreg", "__newobj_ex__") &&
	      gfs_pv_seq_len(a) == 3 && gfs_pv_is_global(gfs_pv_seq_at(a, 0), "mod", "K") &&
	      is_int(gfs_pv_seq_at(gfs_pv_seq_at(a, 1), 0), 1) &&
	      is_int(gfs_pv_dict_get(gfs_pv_seq_at(a, 2), "b"), 2),
	      "NEWOBJ_EX with kwargs is copyreg.__newobj_ex__(cls, args, kwargs)");
	gfs_pickle_free(p);
	p = load(PK("\x80\x04\x8c\x03mod\x8c\x01K\x93)}\x92."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_OBJECT) && gfs_pv_is_global(r->u.obj.cls, "mod", "K") &&
	      gfs_pv_seq_len(r->u.obj.args) == 0, "NEWOBJ_EX without kwargs is like NEWOBJ");
	gfs_pickle_free(p);
	fails("NEWOBJ_EX kwargs not a dict", PK("\x80\x04\x8c\x03mod\x8c\x01K\x93))\x92."),
	      GFS_ERR_FORMAT, "not a dict");
	fails("NEWOBJ args not a tuple", PK("\x80\x02" "cmod\nK\n]\x81."), GFS_ERR_FORMAT, "not a tuple");
	p = load(PK("\x80\x02" "ccollections\nOrderedDict\n)\x81."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_DICT), "NEWOBJ of OrderedDict is a DICT");
	gfs_pickle_free(p);
}

static void test_proto5(void)
{
	gfs_pickle *p = load(py_proto5, sizeof(py_proto5));
	const gfs_pv *r = gfs_pickle_root(p);

	check(gfs_pv_seq_len(r) == 2 && is_blob(gfs_pv_seq_at(r, 0), GFS_PV_BYTES, "ab", 2) &&
	      is_blob(gfs_pv_seq_at(r, 1), GFS_PV_BYTES, "cd", 2), "protocol 5: BYTEARRAY8 is BYTES");
	gfs_pickle_free(p);
	fails("bytearray as a dict key", PK("\x80\x05}\x96\x01\x00\x00\x00\x00\x00\x00\x00" "aK\x01s."),
	      GFS_ERR_FORMAT, "unhashable bytes");
	fails("NEXT_BUFFER", PK("\x80\x05\x97."), GFS_ERR_UNSUPPORTED, "out-of-band buffers");
	fails("READONLY_BUFFER", PK("\x80\x05" "C\x01" "a\x98."), GFS_ERR_UNSUPPORTED, "in READONLY_BUFFER");
	fails("EXT1", PK("\x80\x02\x82\x01."), GFS_ERR_UNSUPPORTED, "extension registry");
	fails("EXT2", PK("\x80\x02\x83\x01\x00."), GFS_ERR_UNSUPPORTED, "in EXT2");
	fails("EXT4", PK("\x80\x02\x84\x01\x00\x00\x00."), GFS_ERR_UNSUPPORTED, "in EXT4");
	fails("protocol 6", PK("\x80\x06N."), GFS_ERR_UNSUPPORTED, "protocol 6");
}

/* ------------------------------------------------------------------ torch and interpreted callables */

static bool tensor_is(const gfs_pv *v, const char *cls, const char *key, int64_t numel,
		      int64_t offset, const int64_t *size, const int64_t *stride, uint32_t ndim)
{
	const gfs_pv_tensor *t;

	if (!is_kind(v, GFS_PV_TENSOR))
		return false;
	t = v->u.tensor;
	return strcmp(t->storage.cls, cls) == 0 && strcmp(t->storage.key, key) == 0 &&
	       strcmp(t->storage.location, "cpu") == 0 && t->storage.numel == numel &&
	       t->offset == offset && dims_are(t->size, t->ndim, size, ndim) &&
	       dims_are(t->stride, t->ndim, stride, ndim) && !t->dtype;
}

static bool enum_is(const gfs_pv *v, const char *member, int64_t value)
{
	const char *mod = NULL, *name = NULL, *mem = "unset";
	int64_t val = -1;
	bool has_value = true;

	if (!gfs_pv_enum(v, &mod, &name, &mem, &val, &has_value))
		return false;
	if (strcmp(mod, "deepspeed.runtime.zero.config") != 0 ||
	    strcmp(name, "deepspeed.runtime.zero.config.ZeroStageEnum") != 0)
		return false;
	if (member)
		return !has_value && mem && strcmp(mem, member) == 0;
	return has_value && !mem && val == value;
}

static void test_deepspeed_optim(void)
{
	size_t len = 0;
	char *buf = read_file("ds_z1_optim_states.pkl", &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *osd = gfs_pv_dict_get(r, "optimizer_state_dict");
	const gfs_pv *ls = gfs_pv_dict_get(osd, "loss_scaler");
	const gfs_pv *st = gfs_pv_dict_get(gfs_pv_dict_get(osd, "base_optimizer_state"), "state");
	const gfs_pv *fp32 = gfs_pv_dict_get(osd, "single_partition_of_fp32_groups");
	const gfs_pv *psm = gfs_pv_seq_at(gfs_pv_dict_get(osd, "param_slice_mappings"), 0);
	const gfs_pv *st0 = st && st->u.dict.len == 2 ? st->u.dict.items[0].value : NULL;
	const gfs_pv *mix = gfs_pv_dict_get(psm, "mix");
	const int64_t n60854[] = { 60854 }, n738[] = { 738 }, one[] = { 1 };

	check(p && is_kind(osd, GFS_PV_DICT), "deepspeed optim states: loads");
	check(is_kind(ls, GFS_PV_OBJECT) &&
	      gfs_pv_is_global(ls->u.obj.cls, "deepspeed.runtime.fp16.loss_scaler", "LossScaler") &&
	      gfs_pv_seq_len(ls->u.obj.args) == 0 &&
	      is_bool(gfs_pv_dict_get(ls->u.obj.state, "dynamic"), false),
	      "deepspeed optim states: NEWOBJ + BUILD LossScaler keeps its state");
	check(enum_is(gfs_pv_dict_get(osd, "zero_stage"), "optimizer_states", 0),
	      "deepspeed optim states: zero_stage is getattr(ZeroStageEnum, 'optimizer_states')");
	check(st && is_int(st->u.dict.items[0].key, 0) && is_int(st->u.dict.items[1].key, 1),
	      "deepspeed optim states: int keys");
	check(tensor_is(gfs_pv_dict_get(st0, "exp_avg"), "FloatStorage", "1", 60854, 0, n60854, one, 1),
	      "deepspeed optim states: exp_avg tensor");
	check(tensor_is(gfs_pv_dict_get(st0, "step"), "FloatStorage", "0", 1, 0, NULL, NULL, 0),
	      "deepspeed optim states: 0-d step tensor");
	check(gfs_pv_seq_len(fp32) == 2 &&
	      tensor_is(gfs_pv_seq_at(fp32, 1), "FloatStorage", "7", 738, 0, n738, one, 1),
	      "deepspeed optim states: fp32 partition tensors");
	check(is_kind(mix, GFS_PV_OBJECT) &&
	      gfs_pv_is_global(mix->u.obj.cls, "deepspeed.utils.tensor_fragment", "fragment_address") &&
	      is_int(gfs_pv_dict_get(mix->u.obj.state, "numel"), 105),
	      "deepspeed optim states: fragment_address objects");
	check(is_str(gfs_pv_dict_get(r, "ds_version"), "0.14.5"), "deepspeed optim states: ds_version");
	if (buf)
		all_prefixes_fail("deepspeed optim states", (const uint8_t *)buf, len);
	gfs_pickle_free(p);
	free(buf);
}

static void test_deepspeed_model(void)
{
	size_t len = 0;
	char *buf = read_file("ds_z3_model_states.pkl", &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *mod = gfs_pv_dict_get(r, "module");
	const gfs_pv *shape = gfs_pv_dict_get(gfs_pv_dict_get(r, "frozen_param_shapes"), "pos.weight");
	const gfs_pv *frag = gfs_pv_dict_get(gfs_pv_dict_get(r, "frozen_param_fragments"), "pos.weight");
	const gfs_pv *cfg = gfs_pv_dict_get(r, "ds_config");
	const gfs_pv *clip = gfs_pv_dict_get(cfg, "gradient_clipping");
	const int64_t n37[] = { 37 }, n32[] = { 32 }, n790[] = { 790 }, one[] = { 1 };

	check(p && is_kind(mod, GFS_PV_DICT), "deepspeed model states: loads");
	check(tensor_is(gfs_pv_dict_get(mod, "position_ids"), "LongStorage", "2", 37, 0, n37, one, 1),
	      "deepspeed model states: LongStorage tensor");
	check(tensor_is(gfs_pv_dict_get(mod, "rope_like"), "BFloat16Storage", "3", 32, 0, n32, one, 1),
	      "deepspeed model states: BFloat16Storage tensor");
	check(gfs_pv_seq_len(shape) == 2 && is_kind(shape, GFS_PV_TUPLE) &&
	      is_int(gfs_pv_seq_at(shape, 0), 37) && is_int(gfs_pv_seq_at(shape, 1), 64),
	      "deepspeed model states: torch.Size is a TUPLE");
	check(tensor_is(frag, "BFloat16Storage", "35", 790, 0, n790, one, 1),
	      "deepspeed model states: LONG_BINGET-shared keys, BININT2 sizes");
	check(is_str(gfs_pv_dict_get(gfs_pv_dict_get(r, "shared_params"), "lm_head.weight"), "embed.weight"),
	      "deepspeed model states: shared_params");
	check(is_kind(gfs_pv_dict_get(r, "sparse_tensor_module_names"), GFS_PV_SET) &&
	      gfs_pv_seq_len(gfs_pv_dict_get(r, "sparse_tensor_module_names")) == 0,
	      "deepspeed model states: __builtin__.set([]) is an empty SET");
	check(is_kind(gfs_pv_dict_get(r, "lr_scheduler"), GFS_PV_NONE) &&
	      is_int(gfs_pv_dict_get(r, "global_steps"), 3), "deepspeed model states: scalars");
	check(is_kind(clip, GFS_PV_FLOAT) && clip->u.f == 1.0 &&
	      is_int(gfs_pv_dict_get(gfs_pv_dict_get(cfg, "zero_optimization"), "sub_group_size"), 1000000000),
	      "deepspeed model states: ds_config");
	if (buf)
		all_prefixes_fail("deepspeed model states", (const uint8_t *)buf, len);
	gfs_pickle_free(p);
	free(buf);
}

/*
 * A torch 2.14 / DeepSpeed 0.19 optimizer state: fp32_flat_groups holds
 * tensors pickled as _rebuild_from_type_v2(_rebuild_tensor_v2, Tensor,
 * args, {'ds_id': ...}).
 */
static void test_rebuild_from_type(void)
{
	size_t len = 0;
	char *buf = read_file("ds019_z3_optim_states.pkl", &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *groups = gfs_pv_dict_get(gfs_pv_dict_get(gfs_pickle_root(p),
							      "optimizer_state_dict"),
					       "fp32_flat_groups");
	const int64_t n47104[] = { 47104 }, n160[] = { 160 }, one[] = { 1 };

	check(gfs_pv_seq_len(groups) == 2, "torch 2.x optimizer states: two flat groups");
	check(tensor_is(gfs_pv_seq_at(groups, 0), "FloatStorage", "6", 47104, 0, n47104, one, 1) &&
	      tensor_is(gfs_pv_seq_at(groups, 1), "FloatStorage", "7", 160, 0, n160, one, 1),
	      "_rebuild_from_type_v2(_rebuild_tensor_v2, ...) is a TENSOR");
	gfs_pickle_free(p);
	free(buf);
}

static void test_torch_save(const char *file)
{
	size_t len = 0;
	char *buf = read_file(file, &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *mod = gfs_pv_dict_get(r, "module");
	const gfs_pv *shape = gfs_pv_dict_get(r, "shape");
	const int64_t s23[] = { 2, 3 }, st31[] = { 3, 1 }, s2[] = { 2 }, one[] = { 1 };

	check(p && mod && mod->u.dict.len == 3, "%s: loads", file);
	check(tensor_is(gfs_pv_dict_get(mod, "w"), "FloatStorage", "0", 6, 0, s23, st31, 2),
	      "%s: 2-d tensor size and stride", file);
	check(tensor_is(gfs_pv_dict_get(mod, "b"), "BFloat16Storage", "1", 3, 1, s2, one, 1),
	      "%s: tensor with a storage offset", file);
	check(tensor_is(gfs_pv_dict_get(mod, "p"), "FloatStorage", "2", 2, 0, s2, one, 1),
	      "%s: _rebuild_parameter is its tensor", file);
	check(enum_is(gfs_pv_dict_get(r, "zero_stage"), "gradients", 0), "%s: enum via getattr", file);
	check(is_kind(shape, GFS_PV_TUPLE) && gfs_pv_seq_len(shape) == 2 && is_int(gfs_pv_seq_at(shape, 1), 3),
	      "%s: torch.Size", file);
	if (buf)
		all_prefixes_fail(file, (const uint8_t *)buf, len);
	gfs_pickle_free(p);
	free(buf);
}

static void test_state_dict_metadata(void)
{
	size_t len = 0;
	char *buf = read_file("linear_state_dict.pkl", &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *r = gfs_pickle_root(p);
	const int64_t s32[] = { 3, 2 }, st21[] = { 2, 1 };

	check(is_kind(r, GFS_PV_DICT) && r->u.dict.len == 2 && !gfs_pv_dict_get(r, "_metadata"),
	      "state_dict(): BUILD of _metadata on the OrderedDict adds no item");
	check(tensor_is(gfs_pv_dict_get(r, "weight"), "FloatStorage", "0", 6, 0, s32, st21, 2),
	      "state_dict(): weight tensor");
	gfs_pickle_free(p);
	free(buf);
}

/*
 * Distributed tensors: a real FSDP2 HSDP rank file of torch 2.14
 * (dtensor_hsdp_rank3.pkl: mesh (2, 2) as _MeshLayout axes, rank 3 at
 * (1, 1), (Replicate(), Shard(0))), a real FSDP1 ShardedTensor file
 * (stensor_fsdp1_rank1.pkl), and stand-ins laid out as torch <= 2.8 lays
 * them out (dtensor_old.pkl, tests/tools/make_dtensor_pickle.py).
 */
static void test_dtensors(void)
{
	size_t len = 0;
	char *buf = read_file("dtensor_hsdp_rank3.pkl", &len);
	gfs_pickle *p = buf ? load((const uint8_t *)buf, len) : NULL;
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *e = gfs_pv_dict_get(r, "model.embed_tokens.weight");
	const int64_t g[] = { 512, 64 }, l2[] = { 256, 64 }, m22[] = { 2, 2 }, c11[] = { 1, 1 };
	gfs_pv_dtensor dt;
	gfs_pv_stensor *st = calloc(1, sizeof(*st));
	const char *mod = NULL;

	check(gfs_pv_wrapper_class(e, &mod) && strcmp(gfs_pv_wrapper_class(e, NULL), "DTensor") == 0 &&
	      strcmp(mod, "torch.distributed.tensor") == 0, "DTensor: a wrapper subclass named DTensor");
	check(gfs_pv_read_dtensor(e, "t", &dt) == GFS_OK, "DTensor (torch 2.14, HSDP) reads");
	check(strcmp(dt.dtype, "float32") == 0 && dims_are(dt.shape, dt.ndim, g, 2) &&
	      dims_are(dt.local->size, dt.local->ndim, l2, 2) && dims_are(dt.mesh, dt.mesh_ndim, m22, 2) &&
	      dims_are(dt.coord, dt.mesh_ndim, c11, 2) && dt.rank == 3,
	      "DTensor: dtype, global and local shapes, mesh (2, 2), coordinate (1, 1), rank 3");
	check(dt.pl[0].kind == GFS_PL_REPLICATE && dt.pl[1].kind == GFS_PL_SHARD && dt.pl[1].dim == 0,
	      "DTensor: placements (Replicate(), Shard(0))");
	check(gfs_pv_read_stensor(e, "t", st) == GFS_ERR_FORMAT && strstr(gfs_errmsg(), "t: not a ShardedTensor"),
	      "a DTensor is no ShardedTensor");
	gfs_pickle_free(p);
	free(buf);

	buf = read_file("dtensor_old.pkl", &len);
	p = buf ? load((const uint8_t *)buf, len) : NULL;
	r = gfs_pickle_root(p);
	{
		const int64_t w[] = { 6, 4 }, wl[] = { 3, 4 }, c10[] = { 1, 0 };

		check(gfs_pv_read_dtensor(gfs_pv_dict_get(r, "w"), "w", &dt) == GFS_OK,
		      "DTensor (torch <= 2.8 layout) reads");
		check(dims_are(dt.shape, dt.ndim, w, 2) && dims_are(dt.local->size, dt.local->ndim, wl, 2) &&
		      dims_are(dt.mesh, dt.mesh_ndim, m22, 2) && dims_are(dt.coord, 2, c10, 2) &&
		      dt.rank == -1, "DTensor: mesh shape from its mesh tensor, coordinate from a list, no rank");
		check(dt.pl[0].kind == GFS_PL_REPLICATE && dt.pl[1].kind == GFS_PL_STRIDED &&
		      dt.pl[1].dim == 0 && dt.pl[1].split_factor == 2, "DTensor: a _StridedShard(0, 2) placement");
		check(gfs_pv_read_dtensor(gfs_pv_dict_get(r, "b"), "b", &dt) == GFS_OK &&
		      dt.pl[0].kind == GFS_PL_SHARD && dt.pl[0].dim == 0 && dt.ndim == 1 && dt.shape[0] == 5,
		      "DTensor: Shard(0) with its dim as an argument, no TensorMeta");
	}
	check(gfs_pv_read_dtensor(r, "root", &dt) == GFS_ERR_FORMAT && strstr(gfs_errmsg(), "root: not a DTensor"),
	      "a dict is no DTensor");
	gfs_pickle_free(p);
	free(buf);

	buf = read_file("stensor_fsdp1_rank1.pkl", &len);
	p = buf ? load((const uint8_t *)buf, len) : NULL;
	r = gfs_pickle_root(p);
	{
		const int64_t off[] = { 256, 0 }, sz[] = { 256, 64 };

		check(st && gfs_pv_read_stensor(gfs_pv_dict_get(r, "model.embed_tokens.weight"), "t", st) == GFS_OK,
		      "ShardedTensor (FSDP1) reads");
		check(st && dims_are(st->shape, st->ndim, g, 2) && st->nlocal == 1 &&
		      dims_are(st->local[0].off, 2, off, 2) && dims_are(st->local[0].size, 2, sz, 2) &&
		      st->local[0].rank == 1 && dims_are(st->local[0].t->size, 2, sz, 2),
		      "ShardedTensor: global shape, one local shard at (256, 0) of (256, 64) on rank 1");
	}
	gfs_pickle_free(p);
	free(buf);
	free(st);
}

static void test_enums(void)
{
	gfs_pickle *p = load(PK("\x80\x02" "cdeepspeed.runtime.zero.config\nZeroStageEnum\nq\x00K\x02\x85q\x01Rq\x02."));
	const gfs_pv *r = gfs_pickle_root(p);

	check(is_kind(r, GFS_PV_OBJECT) && enum_is(r, NULL, 2),
	      "enum as ZeroStageEnum(2) (Python <= 3.10) reads as value 2");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "c__builtin__\ngetattr\ncdeepspeed.runtime.zero.config\nZeroStageEnum\n"
		    "X\x09\x00\x00\x00gradients\x86R."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_ENUM) && enum_is(r, "gradients", 0) && strcmp(r->u.enm.member, "gradients") == 0,
	      "enum as getattr(ZeroStageEnum, 'gradients') (protocol 2)");
	gfs_pickle_free(p);
	p = load(PK("\x80\x04\x8c\x08" "builtins\x8c\x07getattr\x93\x8c\x1d" "deepspeed.runtime.zero.config"
		    "\x8c\x0dZeroStageEnum\x93\x8c\x07weights\x86R."));
	check(enum_is(gfs_pickle_root(p), "weights", 0), "enum as getattr via STACK_GLOBAL (protocol 4)");
	check(gfs_pv_enum(gfs_pickle_root(p), NULL, NULL, NULL, NULL, NULL), "gfs_pv_enum(): NULL outputs");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "cbuiltins\ngetattr\ncmod\nC\nK\x01\x86R."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "getattr(cls, int) stays an OBJECT");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "cmod\nE\nK\x01K\x02\x86R."));
	check(!gfs_pv_enum(gfs_pickle_root(p), NULL, NULL, NULL, NULL, NULL), "cls(1, 2) is not an enum");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "cmod\nE\nX\x01\x00\x00\x00" "a\x85R."));
	check(!gfs_pv_enum(gfs_pickle_root(p), NULL, NULL, NULL, NULL, NULL), "cls('a') is not an enum");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "cmod\nE\nK\x01\x85R}b."));
	check(!gfs_pv_enum(gfs_pickle_root(p), NULL, NULL, NULL, NULL, NULL), "cls(1) with state is not an enum");
	gfs_pickle_free(p);
}

static void test_specials(void)
{
	gfs_pickle *p = load(PK("\x80\x02" "c__builtin__\nset\n]q\x00(K\x01K\x02K\x01" "e\x85R."));
	const gfs_pv *r = gfs_pickle_root(p);

	check(is_kind(r, GFS_PV_SET) && gfs_pv_seq_len(r) == 2 && is_int(gfs_pv_seq_at(r, 1), 2),
	      "__builtin__.set(list) is a SET without duplicates");
	gfs_pickle_free(p);
	p = load(PK("cbuiltins\nset\n)R."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_SET) && gfs_pv_seq_len(gfs_pickle_root(p)) == 0,
	      "builtins.set() is an empty SET");
	gfs_pickle_free(p);
	p = load(PK("cbuiltins\nfrozenset\n](K\x03" "e\x85R."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_SET) && gfs_pv_seq_len(gfs_pickle_root(p)) == 1,
	      "builtins.frozenset(list) is a SET");
	gfs_pickle_free(p);
	fails("ADDITEMS on a frozenset", PK("cbuiltins\nfrozenset\n]\x85R(K\x04\x90."), GFS_ERR_FORMAT,
	      "cannot add items to frozen set");
	p = load(PK("cbuiltins\nset\nK\x01K\x02\x86R."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "set(1, 2) stays an OBJECT");
	gfs_pickle_free(p);
	fails("set() of a list of lists", PK("cbuiltins\nset\n]]a\x85R."), GFS_ERR_FORMAT, "unhashable list");
	p = load(PK("\x80\x02" "ctorch\nSize\nK\x02K\x03\x86q\x00\x85R."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_TUPLE) && gfs_pv_seq_len(r) == 2 && is_int(gfs_pv_seq_at(r, 1), 3),
	      "torch.Size(tuple) is that TUPLE");
	gfs_pickle_free(p);
	p = load(PK("\x80\x02" "ctorch\nSize\n]K\x02" "a\x85R."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_TUPLE) && gfs_pv_seq_len(r) == 1 && is_int(gfs_pv_seq_at(r, 0), 2),
	      "torch.Size(list) is a TUPLE");
	gfs_pickle_free(p);
	p = load(PK("ccollections\nOrderedDict\n]\x85R."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "OrderedDict(list) stays an OBJECT");
	gfs_pickle_free(p);
	p = load(PK("ccollections\nOrderedDict\n)R(X\x01\x00\x00\x00" "aK\x01u}X\x09\x00\x00\x00_metadata}sb."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_DICT) && r->u.dict.len == 1 && is_int(gfs_pv_dict_get(r, "a"), 1),
	      "BUILD on a DICT does not add items");
	gfs_pickle_free(p);
}

/* build_tensor(): torch._utils.<fn>(persid, offset, size, stride, requires_grad, hooks[, dtype][, metadata]). */
typedef struct tspec {
	const char *fn;
	const char *smod;
	const char *scls;
	const char *key;
	int64_t numel;
	int64_t offset;
	size_t nsize;
	size_t nstride;
	int64_t size[20];
	int64_t stride[20];
	bool str_in_size;
	int requires_grad; /* 0, 1, or 2 for an int instead of a bool */
	const char *dtype;
	const char *dtype_mod; /* default "torch" */
	bool metadata;
} tspec;

static const tspec tdefault = {
	.fn = "_rebuild_tensor_v2", .smod = "torch", .scls = "HalfStorage", .key = "k0",
	.numel = 30, .offset = 6, .nsize = 3, .nstride = 3,
	.size = { 2, 3, 4 }, .stride = { 12, 4, 1 },
};

static void build_tensor(bbuf *b, const tspec *t)
{
	bglobal(b, "torch._utils", t->fn);
	bop(b, '(');
	bop(b, '(');
	bstr(b, "storage");
	bglobal(b, t->smod, t->scls);
	bstr(b, t->key);
	bstr(b, "cpu");
	bint(b, t->numel);
	bop(b, 't');
	bop(b, 'Q');
	bint(b, t->offset);
	bop(b, '(');
	for (size_t i = 0; i < t->nsize; i++) {
		if (i == 0 && t->str_in_size)
			bstr(b, "2");
		else
			bint(b, t->size[i]);
	}
	bop(b, 't');
	bop(b, '(');
	for (size_t i = 0; i < t->nstride; i++)
		bint(b, t->stride[i]);
	bop(b, 't');
	if (t->requires_grad == 2)
		bint(b, 1);
	else
		bop(b, t->requires_grad ? 0x88 : 0x89);
	bop(b, '}');
	if (t->dtype)
		bglobal(b, t->dtype_mod ? t->dtype_mod : "torch", t->dtype);
	if (t->metadata)
		bop(b, '}');
	bop(b, 't');
	bop(b, 'R');
}

static gfs_pickle *load_tensor(const tspec *t, gfs_err *err)
{
	bbuf b = { 0 };
	gfs_pickle *p = NULL;

	BPUT(&b, "\x80\x02");
	build_tensor(&b, t);
	bop(&b, '.');
	*err = gfs_pickle_load(b.p, b.n, "bad.pkl", NULL, &p);
	free(b.p);
	return p;
}

static void tensor_fails(const char *desc, const tspec *t, const char *substr)
{
	gfs_err err;
	gfs_pickle *p = load_tensor(t, &err);

	check(!p && err == GFS_ERR_FORMAT && strstr(gfs_errmsg(), substr) &&
	      strstr(gfs_errmsg(), "in REDUCE"), "tensor: %s (%s)", desc, gfs_errmsg());
	gfs_pickle_free(p);
}

static void tensor_is_object(const char *desc, const tspec *t)
{
	gfs_err err;
	gfs_pickle *p = load_tensor(t, &err);

	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "tensor: %s gives an OBJECT", desc);
	gfs_pickle_free(p);
}

static void test_tensors(void)
{
	tspec t = tdefault;
	gfs_err err;
	gfs_pickle *p = load_tensor(&t, &err);
	const gfs_pv *r = gfs_pickle_root(p);
	bbuf b = { 0 };

	check(tensor_is(r, "HalfStorage", "k0", 30, 6, t.size, t.stride, 3) && !r->u.tensor->requires_grad,
	      "tensor: _rebuild_tensor_v2 with 3 dims");
	gfs_pickle_free(p);

	t.metadata = true;
	t.requires_grad = 1;
	t.offset = (int64_t)1 << 40;
	p = load_tensor(&t, &err);
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_TENSOR) && r->u.tensor->requires_grad && r->u.tensor->offset == (int64_t)1 << 40,
	      "tensor: v2 with metadata, requires_grad, 64-bit offset");
	gfs_pickle_free(p);

	t = tdefault;
	t.fn = "_rebuild_tensor_v3";
	t.dtype = "bfloat16";
	t.scls = "UntypedStorage";
	p = load_tensor(&t, &err);
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_TENSOR) && r->u.tensor->dtype && strcmp(r->u.tensor->dtype, "bfloat16") == 0 &&
	      strcmp(r->u.tensor->storage.cls, "UntypedStorage") == 0, "tensor: v3 dtype, UntypedStorage");
	gfs_pickle_free(p);
	t.metadata = true;
	p = load_tensor(&t, &err);
	check(is_kind(gfs_pickle_root(p), GFS_PV_TENSOR), "tensor: v3 with metadata");
	gfs_pickle_free(p);
	t.dtype_mod = "numpy";
	tensor_is_object("v3 with a dtype outside torch", &t);
	t.dtype = NULL;
	t.metadata = false;
	tensor_is_object("v3 without a dtype", &t);

	t = tdefault;
	t.nsize = t.nstride = 16;
	p = load_tensor(&t, &err);
	check(is_kind(gfs_pickle_root(p), GFS_PV_TENSOR) && gfs_pickle_root(p)->u.tensor->ndim == 16,
	      "tensor: 16 dimensions");
	gfs_pickle_free(p);
	t.nsize = t.nstride = 17;
	tensor_fails("17 dimensions", &t, "17 dimensions");
	t = tdefault;
	t.nstride = 2;
	tensor_fails("sizes and strides differ", &t, "3 sizes but 2 strides");
	t = tdefault;
	t.size[1] = -3;
	tensor_fails("negative size", &t, "size[1] is negative");
	t = tdefault;
	t.stride[2] = -1;
	tensor_fails("negative stride", &t, "stride[2] is negative");
	t = tdefault;
	t.offset = -1;
	tensor_fails("negative offset", &t, "offset is negative");
	t = tdefault;
	t.numel = -5;
	tensor_fails("negative numel", &t, "numel is negative");
	t = tdefault;
	t.str_in_size = true;
	tensor_fails("str in size", &t, "size[0] is a str");
	t = tdefault;
	t.smod = "numpy";
	tensor_is_object("storage class outside torch", &t);
	t = tdefault;
	t.requires_grad = 2;
	tensor_is_object("requires_grad not a bool", &t);
	t = tdefault;
	t.fn = "_rebuild_qtensor";
	tensor_is_object("another rebuild function", &t);

	fails("tensor: NUL in the storage key",
	      PK("ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
		 "X\x03\x00\x00\x00" "a\x00" "bX\x03\x00\x00\x00" "cpuK\x01tQK\x00))\x89}tR."),
	      GFS_ERR_FORMAT, "NUL");
	p = load(PK("ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\n"
		    "X\x01\x00\x00\x00" "aX\x03\x00\x00\x00" "cputQK\x00))\x89}tR."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "tensor: a persid of 4 fields gives an OBJECT");
	gfs_pickle_free(p);

	BPUT(&b, "\x80\x02");
	bglobal(&b, "torch._utils", "_rebuild_parameter");
	bop(&b, '(');
	build_tensor(&b, &tdefault);
	BPUT(&b, "\x88}t");
	bop(&b, 'R');
	bop(&b, '.');
	p = load(b.p, b.n);
	check(tensor_is(gfs_pickle_root(p), "HalfStorage", "k0", 30, 6, tdefault.size, tdefault.stride, 3),
	      "tensor: _rebuild_parameter(tensor, True, {}) is the tensor");
	gfs_pickle_free(p);
	b.n = 0;
	BPUT(&b, "\x80\x02");
	bglobal(&b, "torch._utils", "_rebuild_parameter_with_state");
	bop(&b, '(');
	build_tensor(&b, &tdefault);
	BPUT(&b, "\x88}}tR.");
	p = load(b.p, b.n);
	check(is_kind(gfs_pickle_root(p), GFS_PV_TENSOR), "tensor: _rebuild_parameter_with_state");
	gfs_pickle_free(p);
	p = load(PK("ctorch._utils\n_rebuild_parameter\n(K\x01\x88}tR."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_OBJECT), "tensor: _rebuild_parameter(int) stays an OBJECT");
	gfs_pickle_free(p);
	free(b.p);
}

/* The classic attack: GLOBAL os.system + REDUCE.  It must stay inert. */
static void test_no_execution(void)
{
	char path[128], cmd[200];
	bbuf b = { 0 };
	gfs_pickle *p;
	const gfs_pv *r, *o;

	snprintf(path, sizeof(path), "/tmp/gfs_t_pickle_pwned.%ld", (long)getpid());
	snprintf(cmd, sizeof(cmd), "echo pwned > %s", path);
	unlink(path);
	BPUT(&b, "\x80\x02(");
	bglobal(&b, "os", "system");
	bstr(&b, cmd);
	BPUT(&b, "\x85R");
	bglobal(&b, "posix", "system");
	bstr(&b, cmd);
	BPUT(&b, "\x85R");
	BPUT(&b, "\x8c\x08" "builtins\x8c\x04" "eval\x93");
	bstr(&b, "__import__('os').system('true')");
	BPUT(&b, "\x85R");
	BPUT(&b, "(X\x04\x00\x00\x00" "trueisubprocess\nPopen\n");
	bglobal(&b, "builtins", "exec");
	BPUT(&b, ")\x81");
	BPUT(&b, "l.");
	p = load(b.p, b.n);
	r = gfs_pickle_root(p);
	o = gfs_pv_seq_at(r, 0);
	check(gfs_pv_seq_len(r) == 5 && is_kind(o, GFS_PV_OBJECT) && gfs_pv_is_global(o->u.obj.cls, "os", "system") &&
	      is_str(gfs_pv_seq_at(o->u.obj.args, 0), cmd), "os.system('echo pwned') loads as an inert OBJECT");
	check(is_kind(gfs_pv_seq_at(r, 1), GFS_PV_OBJECT) && is_kind(gfs_pv_seq_at(r, 2), GFS_PV_OBJECT) &&
	      is_kind(gfs_pv_seq_at(r, 3), GFS_PV_OBJECT) && is_kind(gfs_pv_seq_at(r, 4), GFS_PV_OBJECT),
	      "posix.system, eval, INST subprocess.Popen, NEWOBJ exec are inert OBJECTs");
	check(access(path, F_OK) != 0 && errno == ENOENT, "nothing was executed (%s does not exist)", path);
	gfs_pickle_free(p);
	free(b.p);
}

/* ------------------------------------------------------------------ dicts, sets, objects */

static void test_dict_semantics(void)
{
	gfs_pickle *p = load(PK("}(K\x01X\x01\x00\x00\x00" "aK\x02X\x01\x00\x00\x00" "bK\x01X\x01\x00\x00\x00" "cu."));
	const gfs_pv *r = gfs_pickle_root(p);
	bbuf b = { 0 };

	check(r && r->u.dict.len == 2 && is_int(r->u.dict.items[0].key, 1) &&
	      is_str(r->u.dict.items[0].value, "c") && is_str(r->u.dict.items[1].value, "b"),
	      "dict: assigning an existing key replaces its value in place");
	gfs_pickle_free(p);
	p = load(PK("}(K\x01N\x88N\x89K\x00K\x00K\x05u."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 2 && is_int(r->u.dict.items[0].key, 1) &&
	      is_bool(r->u.dict.items[1].key, false) && is_int(r->u.dict.items[1].value, 5),
	      "dict: True == 1 and False == 0 as keys, first key kept");
	gfs_pickle_free(p);
	p = load(PK("}(K\x01K\x02\x86K\x0aK\x01K\x02\x86K\x0bNK\x01NK\x02u."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 2 && is_int(r->u.dict.items[0].value, 11) && is_int(r->u.dict.items[1].value, 2),
	      "dict: tuple keys and None keys compare by value");
	gfs_pickle_free(p);
	p = load(PK("}(\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01K\x01\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01K\x02u."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 1 && is_int(r->u.dict.items[0].value, 2), "dict: BIGINT keys compare by value");
	gfs_pickle_free(p);
	p = load(PK("}(X\x01\x00\x00\x00" "aK\x01" "C\x01" "aK\x02u."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 2, "dict: str and bytes keys differ");
	gfs_pickle_free(p);
	p = load(PK("}(G?\xf8\x00\x00\x00\x00\x00\x00K\x01G?\xf8\x00\x00\x00\x00\x00\x00K\x02"
		    "G@\x00\x00\x00\x00\x00\x00\x00q\x00K\x03h\x00K\x04u."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 3 && is_int(r->u.dict.items[2].value, 4),
	      "dict: float keys compare by identity (a memoized float is one key)");
	gfs_pickle_free(p);
	p = load(PK("(K\x01K\x02K\x01K\x03" "d."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 1 && is_int(r->u.dict.items[0].value, 3), "DICT opcode with a duplicate key");
	gfs_pickle_free(p);
	p = load(PK("}(K\x01\x91K\x02s."));
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 1 && is_kind(r->u.dict.items[0].key, GFS_PV_SET),
	      "dict: a frozenset is a valid key");
	gfs_pickle_free(p);

	/* Past INDEX_MIN entries the hash index takes over: same semantics. */
	bop(&b, '}');
	bop(&b, '(');
	for (int i = 0; i < 40; i++) {
		bint(&b, i);
		bint(&b, i);
	}
	BPUT(&b, "\x88J\x07\x00\x00\x00" "N\x89" "\x89N" "u.");
	p = load(b.p, b.n);
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 41 && is_int(r->u.dict.items[1].value, 7) &&
	      is_kind(r->u.dict.items[0].value, GFS_PV_NONE) && is_kind(r->u.dict.items[40].key, GFS_PV_NONE),
	      "dict: True == 1 and False == 0 with the hash index");
	gfs_pickle_free(p);
	free(b.p);
}

static void test_objects(void)
{
	gfs_pickle *p = load(PK("\x80\x02" "cmod\nC\n)\x81(K\x01K\x02uK\x03" "a(K\x04K\x05" "e}b."));
	const gfs_pv *r = gfs_pickle_root(p);

	check(is_kind(r, GFS_PV_OBJECT) && r->u.obj.items && r->u.obj.items->u.dict.len == 1 && is_int(r->u.obj.items->u.dict.items[0].value, 2),
	      "SETITEMS on an OBJECT fill obj.items");
	check(r && gfs_pv_seq_len(r->u.obj.list) == 3 && is_int(gfs_pv_seq_at(r->u.obj.list, 2), 5),
	      "APPEND/APPENDS on an OBJECT fill obj.list");
	check(r && is_kind(r->u.obj.state, GFS_PV_DICT), "BUILD stores the state on the OBJECT");
	gfs_pickle_free(p);
	p = load(PK("cmod\nC\n)\x81K\x01" "bK\x02" "b."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_OBJECT) && is_int(r->u.obj.state, 2), "a second BUILD replaces the state");
	gfs_pickle_free(p);
	p = load(PK("]K\x01" "b."));
	check(gfs_pv_seq_len(gfs_pickle_root(p)) == 0 && is_kind(gfs_pickle_root(p), GFS_PV_LIST),
	      "BUILD on a LIST is ignored");
	gfs_pickle_free(p);
	p = load(PK("K\x01K\x02" "b."));
	check(is_int(gfs_pickle_root(p), 1), "BUILD on an INT is ignored");
	gfs_pickle_free(p);
	p = load(PK("K\x07" "cmod\nf\nK\x01\x85R."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_OBJECT) && gfs_pv_is_global(r->u.obj.cls, "mod", "f"),
	      "REDUCE of a GLOBAL gives an OBJECT");
	gfs_pickle_free(p);
	p = load(PK("K\x07)R."));
	r = gfs_pickle_root(p);
	check(is_kind(r, GFS_PV_OBJECT) && is_int(r->u.obj.cls, 7), "REDUCE of a non-GLOBAL gives an OBJECT");
	gfs_pickle_free(p);
	fails("SETITEM on an OBJECT with a list key", PK("cmod\nC\n)\x81]K\x01s."), GFS_ERR_FORMAT,
	      "unhashable list");
}

static double time_limit(void)
{
	const char *const env = getenv("T_PICKLE_TIME_LIMIT");
	const double t = env ? strtod(env, NULL) : 0;

	return t > 0 ? t : 30.0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_large(void)
{
	enum { N = 100000 };
	bbuf b = { 0 };
	char key[32];
	gfs_pickle *p;
	const gfs_pv *r;
	double t0, t1;
	bool all = true;

	/* Like Python's pickler, SETITEMS / ADDITEMS in batches of 1000. */
	BPUT(&b, "\x80\x02}");
	for (int i = 0; i < N; i++) {
		if (i % 1000 == 0)
			bop(&b, '(');
		snprintf(key, sizeof(key), "module.layer.%d.weight", i);
		bstr(&b, key);
		bint(&b, i);
		if (i % 1000 == 999)
			bop(&b, 'u');
	}
	for (int i = N - 1; i >= 0; i--) {
		if (i % 1000 == 999)
			bop(&b, '(');
		snprintf(key, sizeof(key), "module.layer.%d.weight", i);
		bstr(&b, key);
		bint(&b, -i);
		if (i % 1000 == 0)
			bop(&b, 'u');
	}
	bop(&b, '.');
	t0 = now();
	p = load(b.p, b.n);
	t1 = now();
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == N && is_str(r->u.dict.items[0].key, "module.layer.0.weight") &&
	      is_int(r->u.dict.items[N - 1].value, -(N - 1)),
	      "100k SETITEMS then 100k reassignments keep 100k entries in order");
	check(t1 - t0 < time_limit(), "100k-entry dict with duplicates loads in %.3f s (< %g s)", t1 - t0,
	      time_limit());
	t0 = now();
	for (int i = 0; i < N; i++) {
		snprintf(key, sizeof(key), "module.layer.%d.weight", i);
		all = all && is_int(gfs_pv_dict_get(r, key), -i);
	}
	t1 = now();
	check(all && !gfs_pv_dict_get(r, "module.layer.100000.weight") && !gfs_pv_dict_get(r, "x"),
	      "gfs_pv_dict_get() finds all 100k keys in %.3f s", t1 - t0);
	gfs_pickle_free(p);

	b.n = 0;
	BPUT(&b, "\x80\x02}");
	for (int i = 0; i < N; i++) {
		bint(&b, i % 30000);
		bstr(&b, "x");
		bop(&b, 0x86);
		bint(&b, i);
		bop(&b, 's');
	}
	bop(&b, '.');
	t0 = now();
	p = load(b.p, b.n);
	t1 = now();
	r = gfs_pickle_root(p);
	check(r && r->u.dict.len == 30000 && is_int(r->u.dict.items[0].value, 90000) && t1 - t0 < time_limit(),
	      "100k SETITEM with 30k distinct tuple keys in %.3f s", t1 - t0);
	gfs_pickle_free(p);

	b.n = 0;
	BPUT(&b, "\x80\x04\x8f");
	for (int i = 0; i < N; i++) {
		if (i % 1000 == 0)
			bop(&b, '(');
		bint(&b, i % 25000);
		if (i % 1000 == 999)
			bop(&b, 0x90);
	}
	bop(&b, '.');
	p = load(b.p, b.n);
	check(gfs_pv_seq_len(gfs_pickle_root(p)) == 25000, "ADDITEMS of 100k items, 25k distinct");
	gfs_pickle_free(p);
	free(b.p);
}

/* ------------------------------------------------------------------ memo */

static void test_memo(void)
{
	const gfs_pickle_limits small = { .max_memo = 4 };
	gfs_pickle *p = load(PK("K\x01p5\nK\x02g5\n\x86."));
	const gfs_pv *r = gfs_pickle_root(p);

	check(gfs_pv_seq_len(r) == 2 && is_int(gfs_pv_seq_at(r, 0), 2) && is_int(gfs_pv_seq_at(r, 1), 1),
	      "PUT/GET text forms");
	gfs_pickle_free(p);
	p = load(PK("K\x01q\x00K\x02q\x00h\x00."));
	check(is_int(gfs_pickle_root(p), 2), "PUT to a used index replaces");
	gfs_pickle_free(p);
	p = load_lim(PK("K\x01q\x03h\x03."), &small);
	check(is_int(gfs_pickle_root(p), 1), "memo index max_memo - 1 is allowed");
	gfs_pickle_free(p);
	fails_lim("memo index max_memo", PK("K\x01q\x04."), &small, GFS_ERR_LIMIT, "memo index 4 exceeds the limit of 4");
	fails("BINGET of an undefined index", PK("h\x00."), GFS_ERR_FORMAT, "memo entry 0 is undefined at offset 0 in BINGET");
	fails("LONG_BINGET past the memo", PK("K\x01q\x00j\xff\xff\xff\xff."), GFS_ERR_FORMAT, "memo entry 4294967295");
	fails("GET of a hole", PK("K\x01q\x05g3\n."), GFS_ERR_FORMAT, "memo entry 3 is undefined");
	fails("GET negative", PK("g-1\n."), GFS_ERR_FORMAT, "malformed memo index");
	fails("sparse huge LONG_BINPUT", PK("K\x01r\xff\xff\xff\xff."), GFS_ERR_LIMIT, "exceeds the limit of 4194304");
	fails("PUT beyond uint64", PK("K\x01p99999999999999999999999\n."), GFS_ERR_LIMIT, "in PUT");
	fails("PUT on an empty stack", PK("q\x00."), GFS_ERR_FORMAT, "stack underflow");
	fails("MEMOIZE above a MARK", PK("K\x01(\x94."), GFS_ERR_FORMAT, "unexpected MARK");
}

/* ------------------------------------------------------------------ malformed input */

static void test_malformed(void)
{
	fails("empty input", (const uint8_t *)"", 0, GFS_ERR_FORMAT, "no STOP");
	fails("no STOP", PK("N"), GFS_ERR_FORMAT, "truncated: no STOP opcode at offset 1");
	fails("STOP on an empty stack", PK("."), GFS_ERR_FORMAT, "stack underflow at offset 0 in STOP");
	fails("STOP on a MARK", PK("K\x01(."), GFS_ERR_FORMAT, "unexpected MARK");
	fails("TUPLE without MARK", PK("K\x01t."), GFS_ERR_FORMAT, "no MARK");
	fails("APPEND across a MARK", PK("]K\x01(a."), GFS_ERR_FORMAT, "unexpected MARK");
	fails("APPENDS without a list", PK("(K\x01" "e."), GFS_ERR_FORMAT, "nothing below the MARK");
	fails("APPENDS target below an older MARK", PK("]((K\x02" "e."), GFS_ERR_FORMAT,
	      "nothing below the MARK");
	fails("odd SETITEMS", PK("}(K\x01u."), GFS_ERR_FORMAT, "odd number of items (1)");
	fails("odd DICT", PK("(K\x01" "d."), GFS_ERR_FORMAT, "odd number");
	fails("SETITEMS on a list", PK("](K\x01K\x02u."), GFS_ERR_FORMAT, "cannot set items on list");
	fails("SETITEM on an int", PK("K\x01K\x02K\x03s."), GFS_ERR_FORMAT, "cannot set items on int");
	fails("APPENDS on a dict", PK("}(K\x01" "e."), GFS_ERR_FORMAT, "cannot append to dict");
	fails("ADDITEMS on an int", PK("K\x01(K\x02\x90."), GFS_ERR_FORMAT, "cannot add items to int");
	fails("list as a dict key", PK("}]K\x01s."), GFS_ERR_FORMAT, "unhashable list used as a dict key");
	fails("dict as a dict key", PK("}}K\x01s."), GFS_ERR_FORMAT, "unhashable dict");
	fails("set as a dict key", PK("}\x8fK\x01s."), GFS_ERR_FORMAT, "unhashable set");
	fails("tuple holding a list as a key", PK("}]\x85K\x01s."), GFS_ERR_FORMAT, "unhashable tuple");
	fails("list added to a set", PK("\x8f(]\x90."), GFS_ERR_FORMAT, "unhashable list used as a set item");
	fails("REDUCE args not a tuple", PK("K\x01K\x02R."), GFS_ERR_FORMAT, "not a tuple");
	fails("REDUCE underflow", PK(")R."), GFS_ERR_FORMAT, "stack underflow");
	fails("TUPLE3 underflow", PK("K\x01K\x02\x87."), GFS_ERR_FORMAT, "stack underflow");
	fails("TUPLE2 across a MARK", PK("K\x01(K\x02\x86."), GFS_ERR_FORMAT, "unexpected MARK");
	fails("STACK_GLOBAL underflow", PK("\x93."), GFS_ERR_FORMAT, "stack underflow");
	fails("STACK_GLOBAL of ints", PK("K\x01K\x02\x93."), GFS_ERR_FORMAT, "must be str");
	fails("STACK_GLOBAL with an empty module", PK("\x8c\x00\x8c\x01" "a\x93."), GFS_ERR_FORMAT, "empty module");
	fails("GLOBAL with an empty module", PK("c\nx\n."), GFS_ERR_FORMAT, "empty module");
	fails("GLOBAL with a NUL", PK("cos\nsys\x00tem\n."), GFS_ERR_FORMAT, "NUL byte");
	fails("GLOBAL without newline", PK("cos"), GFS_ERR_FORMAT, "no end of line");
	fails("GLOBAL without name", PK("cos\nsystem"), GFS_ERR_FORMAT, "in GLOBAL");
	fails("unknown opcode 0xff", PK("\xff."), GFS_ERR_FORMAT, "unknown opcode 0xff at offset 0");
	fails("unknown opcode 0x00", PK("N\x00."), GFS_ERR_FORMAT, "unknown opcode 0x00 at offset 1");
	fails("unknown opcode 0x99", PK("\x99."), GFS_ERR_FORMAT, "unknown opcode 0x99");
	fails("INT garbage", PK("I12a\n."), GFS_ERR_FORMAT, "malformed integer");
	fails("INT empty", PK("I\n."), GFS_ERR_FORMAT, "malformed integer");
	fails("INT sign only", PK("I-\n."), GFS_ERR_FORMAT, "malformed integer");
	fails("LONG hex", PK("L0x10L\n."), GFS_ERR_FORMAT, "malformed integer");
	fails("FLOAT garbage", PK("F1.2.3\n."), GFS_ERR_FORMAT, "malformed float");
	fails("FLOAT hex", PK("F0x10\n."), GFS_ERR_FORMAT, "malformed float");
	fails("FLOAT empty", PK("F\n."), GFS_ERR_FORMAT, "malformed float");
	fails("STRING unquoted", PK("S'abc\n."), GFS_ERR_FORMAT, "not quoted");
	fails("STRING bad \\x", PK("S'a\\x4'\n."), GFS_ERR_FORMAT, "invalid \\x escape");
	fails("STRING trailing backslash", PK("S'a\\'\n."), GFS_ERR_FORMAT, "trailing \\");
	fails("UNICODE short \\u", PK("V\\u12\n."), GFS_ERR_FORMAT, "malformed \\u escape");
	fails("UNICODE \\U out of range", PK("V\\U00110000\n."), GFS_ERR_FORMAT, "malformed \\u escape");
	fails("UNICODE bad hex", PK("V\\u12g4\n."), GFS_ERR_FORMAT, "in UNICODE");
	fails("PERSID not ASCII", PK("P\xe9\n."), GFS_ERR_FORMAT, "not ASCII");
	fails("OBJ without MARK", PK("o."), GFS_ERR_FORMAT, "no MARK");
	fails("OBJ without class", PK("(o."), GFS_ERR_FORMAT, "no class after the MARK");
	fails("INST truncated", PK("(imod\nC"), GFS_ERR_FORMAT, "in INST");
	fails("INST without MARK", PK("imod\nC\n."), GFS_ERR_FORMAT, "no MARK");
	fails("POP on empty stack", PK("0."), GFS_ERR_FORMAT, "stack underflow at offset 0 in POP");
	fails("POP_MARK without MARK", PK("K\x01" "1."), GFS_ERR_FORMAT, "no MARK");
	fails("DUP on empty stack", PK("2."), GFS_ERR_FORMAT, "stack underflow");
	fails("BUILD on empty stack", PK("K\x01" "b."), GFS_ERR_FORMAT, "stack underflow");
	fails("BINPERSID on empty stack", PK("Q."), GFS_ERR_FORMAT, "stack underflow");
	fails("BINUNICODE truncated", PK("\x80\x02X\x10\x00\x00\x00" "abc"), GFS_ERR_FORMAT,
	      "bad.pkl: truncated: 16 bytes declared, 3 left at offset 2 in BINUNICODE");
	fails("BINUNICODE length truncated", PK("X\x10\x00"), GFS_ERR_FORMAT, "truncated at offset 0 in BINUNICODE");
	fails("huge BINUNICODE", PK("X\xff\xff\xff\xff" "abc."), GFS_ERR_FORMAT, "4294967295 bytes declared");
	fails("huge BINUNICODE8", PK("\x8d\xff\xff\xff\xff\xff\xff\xff\xff."), GFS_ERR_FORMAT, "in BINUNICODE8");
	fails("huge BINBYTES8", PK("\x8e\x00\x00\x00\x00\x00\x00\x00\x80."), GFS_ERR_FORMAT, "in BINBYTES8");
	fails("huge BYTEARRAY8", PK("\x96\xff\xff\xff\xff\xff\xff\xff\x7f."), GFS_ERR_FORMAT, "in BYTEARRAY8");
	fails("huge BINBYTES", PK("B\xff\xff\xff\xff."), GFS_ERR_FORMAT, "in BINBYTES");
	fails("SHORT_BINUNICODE past the end", PK("\x8c\xff" "abc."), GFS_ERR_FORMAT, "255 bytes declared, 4 left");
	fails("huge LONG4", PK("\x8b\xff\xff\xff\x7f."), GFS_ERR_FORMAT, "in LONG4");
	fails("negative LONG4", PK("\x8b\xff\xff\xff\xff."), GFS_ERR_FORMAT, "negative byte count");
	fails("negative BINSTRING", PK("T\xff\xff\xff\xff."), GFS_ERR_FORMAT, "negative length");
	fails("huge FRAME", PK("\x80\x04\x95\xff\xff\xff\xff\xff\xff\xff\x7fN."), GFS_ERR_FORMAT, "in FRAME");
	fails("BININT truncated", PK("J\x01\x02"), GFS_ERR_FORMAT, "truncated at offset 0 in BININT");
	fails("BINFLOAT truncated", PK("G\x01\x02"), GFS_ERR_FORMAT, "in BINFLOAT");
	fails("PROTO truncated", PK("\x80"), GFS_ERR_FORMAT, "in PROTO");

	all_prefixes_fail("protocol 0", py_proto0, sizeof(py_proto0));
	all_prefixes_fail("protocol 4", py_proto4, sizeof(py_proto4));
	all_prefixes_fail("protocol 5", py_proto5, sizeof(py_proto5));
	all_prefixes_fail("STRING", PK("S'a\\n\\x41\\101'\n."));
	all_prefixes_fail("UNICODE", PK("Vx\\u0041\\U0001F600\n."));
}

/* ------------------------------------------------------------------ limits */

static void test_limits(void)
{
	const gfs_pickle_limits shallow = { .max_depth = 10 };
	const gfs_pickle_limits tight = { .max_bytes = 1 << 20 };
	enum { DEEP = 100000 };
	bbuf b = { 0 };
	gfs_pickle *p;
	const gfs_pv *v;
	size_t depth = 0;

	p = load_lim(PK("]]]]]]]]]]."), &shallow);
	check(p != NULL, "max_depth 10: 10 values on the stack are fine");
	gfs_pickle_free(p);
	fails_lim("max_depth 10: 11 values", PK("]]]]]]]]]]]."), &shallow, GFS_ERR_LIMIT,
		  "stack depth exceeds the limit of 10 at offset 10 in EMPTY_LIST");
	fails_lim("max_depth 10: marks count too", PK("(((((((((((."), &shallow, GFS_ERR_LIMIT,
		  "at offset 10 in MARK");
	fails_lim("max_depth 10: values and marks", PK("((((((K\x01K\x01K\x01K\x01K\x01."), &shallow,
		  GFS_ERR_LIMIT, "in BININT1");
	for (int i = 0; i < 10001; i++)
		bop(&b, '(');
	fails("default max_depth: 10001 nested MARKs", b.p, b.n, GFS_ERR_LIMIT, "limit of 10000");
	b.n = 0;
	for (int i = 0; i < 10000; i++)
		bop(&b, ']');
	for (int i = 0; i < 9999; i++)
		bop(&b, 'a');
	bop(&b, '.');
	p = load(b.p, b.n);
	v = gfs_pickle_root(p);
	while (gfs_pv_seq_len(v) == 1) {
		v = gfs_pv_seq_at(v, 0);
		depth++;
	}
	check(p && depth == 9999, "default max_depth: lists nested 10000 deep through the stack");
	gfs_pickle_free(p);

	/* Nesting through the memo needs no stack: the tree can be deeper than max_depth. */
	b.n = 0;
	BPUT(&b, "]r\x00\x00\x00\x00j\x00\x00\x00\x00");
	for (uint32_t i = 1; i <= DEEP; i++) {
		bop(&b, ']');
		bop(&b, 'r');
		bu32(&b, i);
		BPUT(&b, "a0");
		bop(&b, 'j');
		bu32(&b, i);
	}
	BPUT(&b, "0.");
	p = load(b.p, b.n);
	v = gfs_pickle_root(p);
	depth = 0;
	while (gfs_pv_seq_len(v) == 1) {
		v = gfs_pv_seq_at(v, 0);
		depth++;
	}
	check(p && depth == DEEP, "lists nested %d deep through the memo load without recursion", DEEP);
	gfs_pickle_free(p);

	/* Equal deep tuple keys: comparing them is bounded in depth... */
	b.n = 0;
	bop(&b, '}');
	for (int k = 0; k < 2; k++) {
		BPUT(&b, "K\x01");
		for (int i = 0; i < 50; i++)
			bop(&b, 0x85);
		bint(&b, k);
		bop(&b, 's');
	}
	bop(&b, '.');
	p = load(b.p, b.n);
	check(p && gfs_pickle_root(p)->u.dict.len == 1, "tuple keys nested 50 deep compare by value");
	gfs_pickle_free(p);
	b.n = 0;
	bop(&b, '}');
	for (int k = 0; k < 2; k++) {
		BPUT(&b, "K\x01");
		for (int i = 0; i < 5000; i++)
			bop(&b, 0x85);
		bint(&b, k);
		bop(&b, 's');
	}
	bop(&b, '.');
	fails("equal tuple keys nested 5000 deep", b.p, b.n, GFS_ERR_LIMIT, "too deeply nested");
	/* ... and in work: (x, x) doubled 40 times is 2**40 leaves. */
	b.n = 0;
	bop(&b, '}');
	for (int k = 0; k < 2; k++) {
		bstr(&b, "x");
		for (int i = 0; i < 40; i++)
			BPUT(&b, "2\x86");
		bint(&b, k);
		bop(&b, 's');
	}
	bop(&b, '.');
	{
		const double t0 = now();
		gfs_pickle *q = NULL;
		const gfs_err err = gfs_pickle_load(b.p, b.n, "bad.pkl", NULL, &q);

		check(err == GFS_ERR_LIMIT && !q && now() - t0 < time_limit(),
		      "equal DAG tuple keys of 2**40 leaves: bounded comparison (%s)", gfs_errmsg());
		gfs_pickle_free(q);
	}

	b.n = 0;
	bop(&b, 'B');
	bu32(&b, 2 << 20);
	for (int i = 0; i < (2 << 20); i++)
		bop(&b, 'z');
	bop(&b, '.');
	fails_lim("max_bytes 1 MiB: 2 MiB of BINBYTES", b.p, b.n, &tight, GFS_ERR_LIMIT,
		  "memory use exceeds the limit of 1048576 bytes");
	p = load(b.p, b.n);
	check(p && gfs_pickle_root(p)->u.s.len == 2 << 20, "default max_bytes: 2 MiB of BINBYTES load");
	gfs_pickle_free(p);
	{
		const gfs_pickle_limits tiny = { .max_bytes = 8192 };

		p = load_lim(PK("(K\x01K\x02t."), &tiny);
		check(p != NULL, "max_bytes 8 KiB is enough for a tiny pickle");
		gfs_pickle_free(p);
	}
	free(b.p);
}

/* ------------------------------------------------------------------ accessors */

static void test_accessors(void)
{
	gfs_pickle *p = load(PK("(c__builtin__\nset\ncbuiltins\nfrozenset\nK\x05\x88X\x01\x00\x00\x00" "a}l."));
	const gfs_pv *r = gfs_pickle_root(p);
	const gfs_pv *g1 = gfs_pv_seq_at(r, 0), *g2 = gfs_pv_seq_at(r, 1);
	int64_t i = 0;
	bool kinds_ok = true;
	gfs_pickle *q = (gfs_pickle *)&i;

	check(gfs_pv_is_global(g1, "builtins", "set") && gfs_pv_is_global(g1, "__builtin__", "set") &&
	      gfs_pv_is_global(g2, "__builtin__", "frozenset") && !gfs_pv_is_global(g1, "builtins", "sets") &&
	      !gfs_pv_is_global(g1, "builtinsx", "set") && !gfs_pv_is_global(g1, NULL, "set") &&
	      !gfs_pv_is_global(g1, "builtins", NULL) && !gfs_pv_is_global(gfs_pv_seq_at(r, 2), "builtins", "set"),
	      "gfs_pv_is_global(): builtins and __builtin__ are one module");
	check(gfs_pv_int(gfs_pv_seq_at(r, 2), &i) && i == 5 && gfs_pv_int(gfs_pv_seq_at(r, 3), &i) && i == 1 &&
	      !gfs_pv_int(gfs_pv_seq_at(r, 4), &i) && gfs_pv_int(gfs_pv_seq_at(r, 2), NULL),
	      "gfs_pv_int(): INT and BOOL only");
	check(!gfs_pv_str(gfs_pv_seq_at(r, 2)) && strcmp(gfs_pv_str(gfs_pv_seq_at(r, 4)), "a") == 0,
	      "gfs_pv_str(): STR only");
	check(gfs_pv_seq_len(r) == 6 && !gfs_pv_seq_at(r, 6) && !gfs_pv_seq_at(r, (size_t)-1) &&
	      gfs_pv_seq_len(gfs_pv_seq_at(r, 5)) == 0 && !gfs_pv_seq_at(gfs_pv_seq_at(r, 5), 0),
	      "gfs_pv_seq_len()/gfs_pv_seq_at(): bounds and non-sequences");
	check(!gfs_pv_dict_get(r, "a") && !gfs_pv_dict_get(gfs_pv_seq_at(r, 5), NULL) &&
	      !gfs_pv_dict_get(gfs_pv_seq_at(r, 5), "a"), "gfs_pv_dict_get(): non-dicts and NULL key");
	check(!gfs_pv_dict_get(NULL, "a") && gfs_pv_seq_len(NULL) == 0 && !gfs_pv_seq_at(NULL, 0) &&
	      !gfs_pv_str(NULL) && !gfs_pv_int(NULL, &i) && !gfs_pv_is_global(NULL, "a", "b") &&
	      !gfs_pv_enum(NULL, NULL, NULL, NULL, NULL, NULL) && !gfs_pv_enum(r, NULL, NULL, NULL, NULL, NULL) &&
	      !gfs_pickle_root(NULL), "accessors are NULL-safe");
	gfs_pickle_free(NULL);
	gfs_pickle_free(p);
	for (int k = GFS_PV_NONE; k <= GFS_PV_TENSOR; k++)
		kinds_ok = kinds_ok && strcmp(gfs_pv_kind_name((gfs_pv_kind)k), "unknown") != 0;
	check(kinds_ok && strcmp(gfs_pv_kind_name(GFS_PV_TENSOR), "tensor") == 0 &&
	      strcmp(gfs_pv_kind_name((gfs_pv_kind)99), "unknown") == 0, "gfs_pv_kind_name()");
	check(gfs_pickle_load(PK("N."), "x", NULL, NULL) == GFS_ERR_INVAL, "gfs_pickle_load(): out NULL is INVAL");
	check(gfs_pickle_load(NULL, 3, "x", NULL, &q) == GFS_ERR_INVAL && q == (gfs_pickle *)&i,
	      "gfs_pickle_load(): NULL buffer with a length is INVAL");
	check(gfs_pickle_load(NULL, 0, NULL, NULL, &q) == GFS_ERR_FORMAT && !q &&
	      strncmp(gfs_errmsg(), "pickle: ", 8) == 0, "gfs_pickle_load(): empty input, default label");
}

/* ------------------------------------------------------------------ fuzzer findings */

static void test_fuzz_regressions(void)
{
	gfs_pickle *p;

	/* 1: EMPTY_TUPLE as the first opcode computed NULL + 0 on the empty stack (UBSan). */
	fails("fuzz: EMPTY_TUPLE first, then garbage",
	      PK(")PK\x05\x06PK\x05\x06ndPK\x05\x06" "dPK\x05\x06\x8fKPdPK\x05\x06ilsvgrd/PK"),
	      GFS_ERR_FORMAT, NULL);
	p = load(PK(")."));
	check(is_kind(gfs_pickle_root(p), GFS_PV_TUPLE), "fuzz: EMPTY_TUPLE as the first opcode");
	gfs_pickle_free(p);
}

int main(void)
{
	test_proto0();
	test_text_forms();
	test_proto1();
	test_stack_ops();
	test_proto2();
	test_proto3();
	test_proto4();
	test_newobj_ex();
	test_proto5();
	test_deepspeed_optim();
	test_deepspeed_model();
	test_rebuild_from_type();
	test_torch_save("torch_save_p2.pkl");
	test_torch_save("torch_save_p4.pkl");
	test_state_dict_metadata();
	test_dtensors();
	test_enums();
	test_specials();
	test_tensors();
	test_no_execution();
	test_dict_semantics();
	test_objects();
	test_large();
	test_memo();
	test_malformed();
	test_limits();
	test_accessors();
	test_fuzz_regressions();
	printf("1..%u\n", t_num);
	if (t_failed)
		printf("# %u of %u checks failed\n", t_failed, t_num);
	return t_failed ? 1 : 0;
}
