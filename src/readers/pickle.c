/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a safe pickle reader: the pickle VM, which builds inert values.
 *
 * The VM follows CPython's _pickle.c where it matters for safety (the MARK
 * "fence" that hides the values below the top mark, memo semantics, argument
 * checks) but builds gfs_pv nodes instead of Python objects; see pickle.h.
 * It executes nothing: GLOBAL names a class, REDUCE / NEWOBJ / INST / OBJ
 * build an inert OBJECT, except for the callables pickle_classes.c
 * recognises (its table is the whole whitelist).  The values, their arena
 * and their keys are pickle_values.c's; the internals these files share
 * are in pickle_internal.h.
 *
 * Memory: VM scratch (stack, marks, memo) is malloc'ed and freed at the end
 * of the load; it counts against gfs_pickle_limits.max_bytes with the arena.
 */
#include "config.h"

#include <assert.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle_internal.h"

#define DEFAULT_MAX_DEPTH ((size_t)10000)
#define DEFAULT_MAX_MEMO ((size_t)1 << 22)
#define DEFAULT_MAX_BYTES ((size_t)1 << 30)

#define MAX_DECIMAL_DIGITS 4300 /* as CPython's int('...') limit */
#define BIGINT_LIMBS 450        /* 32-bit limbs for MAX_DECIMAL_DIGITS digits */
#define MAX_FLOAT_TEXT 127
#define HIGHEST_PROTOCOL 5

/* Pickle opcodes (CPython Lib/pickletools.py). */
enum {
	OP_MARK = '(',
	OP_STOP = '.',
	OP_POP = '0',
	OP_POP_MARK = '1',
	OP_DUP = '2',
	OP_FLOAT = 'F',
	OP_INT = 'I',
	OP_BININT = 'J',
	OP_BININT1 = 'K',
	OP_LONG = 'L',
	OP_BININT2 = 'M',
	OP_NONE = 'N',
	OP_PERSID = 'P',
	OP_BINPERSID = 'Q',
	OP_REDUCE = 'R',
	OP_STRING = 'S',
	OP_BINSTRING = 'T',
	OP_SHORT_BINSTRING = 'U',
	OP_UNICODE = 'V',
	OP_BINUNICODE = 'X',
	OP_APPEND = 'a',
	OP_BUILD = 'b',
	OP_GLOBAL = 'c',
	OP_DICT = 'd',
	OP_EMPTY_DICT = '}',
	OP_APPENDS = 'e',
	OP_GET = 'g',
	OP_BINGET = 'h',
	OP_INST = 'i',
	OP_LONG_BINGET = 'j',
	OP_LIST = 'l',
	OP_EMPTY_LIST = ']',
	OP_OBJ = 'o',
	OP_PUT = 'p',
	OP_BINPUT = 'q',
	OP_LONG_BINPUT = 'r',
	OP_SETITEM = 's',
	OP_TUPLE = 't',
	OP_EMPTY_TUPLE = ')',
	OP_SETITEMS = 'u',
	OP_BINFLOAT = 'G',
	OP_PROTO = 0x80,
	OP_NEWOBJ = 0x81,
	OP_EXT1 = 0x82,
	OP_EXT2 = 0x83,
	OP_EXT4 = 0x84,
	OP_TUPLE1 = 0x85,
	OP_TUPLE2 = 0x86,
	OP_TUPLE3 = 0x87,
	OP_NEWTRUE = 0x88,
	OP_NEWFALSE = 0x89,
	OP_LONG1 = 0x8a,
	OP_LONG4 = 0x8b,
	OP_BINBYTES = 'B',
	OP_SHORT_BINBYTES = 'C',
	OP_SHORT_BINUNICODE = 0x8c,
	OP_BINUNICODE8 = 0x8d,
	OP_BINBYTES8 = 0x8e,
	OP_EMPTY_SET = 0x8f,
	OP_ADDITEMS = 0x90,
	OP_FROZENSET = 0x91,
	OP_NEWOBJ_EX = 0x92,
	OP_STACK_GLOBAL = 0x93,
	OP_MEMOIZE = 0x94,
	OP_FRAME = 0x95,
	OP_BYTEARRAY8 = 0x96,
	OP_NEXT_BUFFER = 0x97,
	OP_READONLY_BUFFER = 0x98,
};

static const char *const op_names[256] = {
	[OP_MARK] = "MARK",
	[OP_STOP] = "STOP",
	[OP_POP] = "POP",
	[OP_POP_MARK] = "POP_MARK",
	[OP_DUP] = "DUP",
	[OP_FLOAT] = "FLOAT",
	[OP_INT] = "INT",
	[OP_BININT] = "BININT",
	[OP_BININT1] = "BININT1",
	[OP_LONG] = "LONG",
	[OP_BININT2] = "BININT2",
	[OP_NONE] = "NONE",
	[OP_PERSID] = "PERSID",
	[OP_BINPERSID] = "BINPERSID",
	[OP_REDUCE] = "REDUCE",
	[OP_STRING] = "STRING",
	[OP_BINSTRING] = "BINSTRING",
	[OP_SHORT_BINSTRING] = "SHORT_BINSTRING",
	[OP_UNICODE] = "UNICODE",
	[OP_BINUNICODE] = "BINUNICODE",
	[OP_APPEND] = "APPEND",
	[OP_BUILD] = "BUILD",
	[OP_GLOBAL] = "GLOBAL",
	[OP_DICT] = "DICT",
	[OP_EMPTY_DICT] = "EMPTY_DICT",
	[OP_APPENDS] = "APPENDS",
	[OP_GET] = "GET",
	[OP_BINGET] = "BINGET",
	[OP_INST] = "INST",
	[OP_LONG_BINGET] = "LONG_BINGET",
	[OP_LIST] = "LIST",
	[OP_EMPTY_LIST] = "EMPTY_LIST",
	[OP_OBJ] = "OBJ",
	[OP_PUT] = "PUT",
	[OP_BINPUT] = "BINPUT",
	[OP_LONG_BINPUT] = "LONG_BINPUT",
	[OP_SETITEM] = "SETITEM",
	[OP_TUPLE] = "TUPLE",
	[OP_EMPTY_TUPLE] = "EMPTY_TUPLE",
	[OP_SETITEMS] = "SETITEMS",
	[OP_BINFLOAT] = "BINFLOAT",
	[OP_PROTO] = "PROTO",
	[OP_NEWOBJ] = "NEWOBJ",
	[OP_EXT1] = "EXT1",
	[OP_EXT2] = "EXT2",
	[OP_EXT4] = "EXT4",
	[OP_TUPLE1] = "TUPLE1",
	[OP_TUPLE2] = "TUPLE2",
	[OP_TUPLE3] = "TUPLE3",
	[OP_NEWTRUE] = "NEWTRUE",
	[OP_NEWFALSE] = "NEWFALSE",
	[OP_LONG1] = "LONG1",
	[OP_LONG4] = "LONG4",
	[OP_BINBYTES] = "BINBYTES",
	[OP_SHORT_BINBYTES] = "SHORT_BINBYTES",
	[OP_SHORT_BINUNICODE] = "SHORT_BINUNICODE",
	[OP_BINUNICODE8] = "BINUNICODE8",
	[OP_BINBYTES8] = "BINBYTES8",
	[OP_EMPTY_SET] = "EMPTY_SET",
	[OP_ADDITEMS] = "ADDITEMS",
	[OP_FROZENSET] = "FROZENSET",
	[OP_NEWOBJ_EX] = "NEWOBJ_EX",
	[OP_STACK_GLOBAL] = "STACK_GLOBAL",
	[OP_MEMOIZE] = "MEMOIZE",
	[OP_FRAME] = "FRAME",
	[OP_BYTEARRAY8] = "BYTEARRAY8",
	[OP_NEXT_BUFFER] = "NEXT_BUFFER",
	[OP_READONLY_BUFFER] = "READONLY_BUFFER",
};

/* ------------------------------------------------------------------ errors */

gfs_err gfs_pk_vfail(const vm *m, gfs_err err, const char *fmt, ...)
{
	char msg[512];
	const char *const name = op_names[m->op];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	assert(err != GFS_OK);
	if (name)
		gfs_fail(err, "%s: %s at offset %zu in %s", m->label, msg, m->op_off, name);
	else
		gfs_fail(err, "%s: %s at offset %zu", m->label, msg, m->op_off);
	return err;
}

static gfs_err truncated(const vm *m)
{
	return gfs_pk_vfail(m, GFS_ERR_FORMAT, "truncated");
}

/* ------------------------------------------------------------------ stack and memo */

static size_t fence(const vm *m)
{
	return m->nmarks ? m->marks[m->nmarks - 1] : 0;
}

static gfs_err underflow(const vm *m)
{
	if (m->nmarks)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "stack underflow (unexpected MARK)");
	return gfs_pk_vfail(m, GFS_ERR_FORMAT, "stack underflow");
}

static gfs_err push(vm *m, gfs_pv *v)
{
	void *stack = NULL;
	size_t cap = 0;
	gfs_err err;

	if (m->sp + m->nmarks >= m->max_depth)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "stack depth exceeds the limit of %zu", m->max_depth);
	err = gfs_pk_scratch_grow(m, m->stack, m->stack_cap, m->sp + 1, sizeof(gfs_pv *), m->max_depth,
				  &stack, &cap);
	if (err)
		return err;
	m->stack = stack;
	m->stack_cap = cap;
	m->stack[m->sp++] = v;
	return GFS_OK;
}

static gfs_err pop(vm *m, gfs_pv **out)
{
	if (m->sp <= fence(m))
		return underflow(m);
	*out = m->stack[--m->sp];
	return GFS_OK;
}

static gfs_err peek(const vm *m, gfs_pv **out)
{
	if (m->sp <= fence(m))
		return underflow(m);
	*out = m->stack[m->sp - 1];
	return GFS_OK;
}

static gfs_err push_mark(vm *m)
{
	void *marks = NULL;
	size_t cap = 0;
	gfs_err err;

	if (m->sp + m->nmarks >= m->max_depth)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "stack depth exceeds the limit of %zu", m->max_depth);
	err = gfs_pk_scratch_grow(m, m->marks, m->marks_cap, m->nmarks + 1, sizeof(size_t),
				  m->max_depth, &marks, &cap);
	if (err)
		return err;
	m->marks = marks;
	m->marks_cap = cap;
	m->marks[m->nmarks++] = m->sp;
	return GFS_OK;
}

/* pop_mark(): drop the top mark; the values above it are stack[*start..sp). */
static gfs_err pop_mark(vm *m, size_t *start)
{
	if (!m->nmarks)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "no MARK on the stack");
	*start = m->marks[--m->nmarks];
	assert(*start <= m->sp);
	return GFS_OK;
}

/* mark_target(): after pop_mark(), the value just below the mark. */
static gfs_err mark_target(const vm *m, size_t start, gfs_pv **out)
{
	if (start <= fence(m))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "stack underflow (nothing below the MARK)");
	*out = m->stack[start - 1];
	return GFS_OK;
}

static gfs_err memo_put(vm *m, uint64_t idx)
{
	gfs_pv *v = NULL;
	void *memo = NULL;
	size_t cap = 0;
	gfs_err err;

	err = peek(m, &v);
	if (err)
		return err;
	if (idx >= m->max_memo)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "memo index %llu exceeds the limit of %zu",
				    (unsigned long long)idx, m->max_memo);
	err = gfs_pk_scratch_grow(m, m->memo, m->memo_cap, (size_t)idx + 1, sizeof(gfs_pv *),
				  m->max_memo, &memo, &cap);
	if (err)
		return err;
	m->memo = memo;
	m->memo_cap = cap;
	if (!m->memo[idx])
		m->memo_count++;
	m->memo[idx] = v;
	return GFS_OK;
}

static gfs_err memo_get(vm *m, uint64_t idx)
{
	if (idx >= m->memo_cap || !m->memo[idx])
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "memo entry %llu is undefined",
				    (unsigned long long)idx);
	return push(m, m->memo[idx]);
}

/* ------------------------------------------------------------------ input */

static gfs_err need(const vm *m, size_t n)
{
	return m->len - m->pos < n ? truncated(m) : GFS_OK;
}

static gfs_err read_u8(vm *m, uint8_t *out)
{
	const gfs_err err = need(m, 1);

	if (!err)
		*out = m->buf[m->pos++];
	return err;
}

static gfs_err read_u16(vm *m, uint16_t *out)
{
	const gfs_err err = need(m, 2);

	if (!err) {
		*out = gfs_le16(m->buf + m->pos);
		m->pos += 2;
	}
	return err;
}

static gfs_err read_u32(vm *m, uint32_t *out)
{
	const gfs_err err = need(m, 4);

	if (!err) {
		*out = gfs_le32(m->buf + m->pos);
		m->pos += 4;
	}
	return err;
}

static gfs_err read_u64(vm *m, uint64_t *out)
{
	const gfs_err err = need(m, 8);

	if (!err) {
		*out = gfs_le64(m->buf + m->pos);
		m->pos += 8;
	}
	return err;
}

/* read_data(): n bytes of payload, bounds-checked before anything is allocated. */
static gfs_err read_data(vm *m, uint64_t n, const uint8_t **out)
{
	if (n > (uint64_t)(m->len - m->pos))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "truncated: %llu bytes declared, %zu left",
				    (unsigned long long)n, m->len - m->pos);
	*out = m->buf + m->pos;
	m->pos += (size_t)n;
	return GFS_OK;
}

/* read_line(): the bytes up to the next '\n' (excluded), which is consumed. */
static gfs_err read_line(vm *m, const char **s, size_t *n)
{
	const uint8_t *nl = NULL;

	if (m->pos >= m->len)
		return truncated(m);
	nl = memchr(m->buf + m->pos, '\n', m->len - m->pos);
	if (!nl)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "truncated (no end of line)");
	*s = (const char *)(m->buf + m->pos);
	*n = (size_t)(nl - (m->buf + m->pos));
	m->pos += *n + 1;
	return GFS_OK;
}

/* ------------------------------------------------------------------ text numbers */

static bool is_blank(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static void trim(const char **s, size_t *n)
{
	while (*n && is_blank(**s)) {
		(*s)++;
		(*n)--;
	}
	while (*n && is_blank((*s)[*n - 1]))
		(*n)--;
}

/* split_decimal(): [+-]digits with blanks around.  @return false if malformed. */
static bool split_decimal(const char *s, size_t n, bool *neg, const char **digits, size_t *nd)
{
	trim(&s, &n);
	*neg = false;
	if (n && (*s == '+' || *s == '-')) {
		*neg = *s == '-';
		s++;
		n--;
	}
	if (!n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	while (n > 1 && *s == '0') {
		s++;
		n--;
	}
	*digits = s;
	*nd = n;
	return true;
}

/* parse_u64(): digits as a uint64_t.  @return false on overflow. */
static bool parse_u64(const char *d, size_t nd, uint64_t *out)
{
	uint64_t v = 0;

	for (size_t i = 0; i < nd; i++) {
		if (!gfs_mul_u64(v, 10, &v) || !gfs_add_u64(v, (uint64_t)(d[i] - '0'), &v))
			return false;
	}
	*out = v;
	return true;
}

/* decimal_bigint(): a decimal that does not fit in int64_t, as BIGINT. */
static gfs_err decimal_bigint(vm *m, bool neg, const char *d, size_t nd, gfs_pv **out)
{
	static const uint32_t pow10[10] = {
		1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
	};
	uint32_t limb[BIGINT_LIMBS];
	uint8_t bytes[BIGINT_LIMBS * 4 + 1];
	size_t nl = 0, nb = 0;

	if (nd > MAX_DECIMAL_DIGITS)
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "integer literal of %zu digits exceeds the limit of %d",
				    nd, MAX_DECIMAL_DIGITS);
	for (size_t i = 0; i < nd;) {
		const size_t k = i == 0 && nd % 9 ? nd % 9 : 9;
		uint64_t carry = 0;

		for (size_t j = 0; j < k; j++)
			carry = carry * 10 + (uint64_t)(d[i + j] - '0');
		for (size_t j = 0; j < nl; j++) {
			const uint64_t t = (uint64_t)limb[j] * pow10[k] + carry;

			limb[j] = (uint32_t)t;
			carry = t >> 32;
		}
		if (carry) {
			assert(nl < BIGINT_LIMBS);
			limb[nl++] = (uint32_t)carry;
		}
		i += k;
	}
	nb = nl * 4 + 1;
	for (size_t j = 0; j < nl; j++)
		for (size_t b = 0; b < 4; b++)
			bytes[4 * j + b] = (uint8_t)(limb[j] >> (8 * b));
	bytes[nb - 1] = 0;
	if (neg) {
		unsigned carry = 1;

		for (size_t j = 0; j < nb; j++) {
			const unsigned t = (uint8_t)~bytes[j] + carry;

			bytes[j] = (uint8_t)t;
			carry = t >> 8;
		}
	}
	return gfs_pk_new_long(m, bytes, nb, out);
}

/* text_int(): the argument of INT or LONG (without the L suffix). */
static gfs_err text_int(vm *m, const char *s, size_t n, gfs_pv **out)
{
	const char *d = NULL;
	size_t nd = 0;
	bool neg;
	uint64_t mag = 0;

	if (!split_decimal(s, n, &neg, &d, &nd))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed integer literal");
	if (parse_u64(d, nd, &mag)) {
		if (!neg && mag <= (uint64_t)INT64_MAX)
			return gfs_pk_new_int(m, (int64_t)mag, out);
		if (neg && mag <= (uint64_t)INT64_MAX + 1)
			return gfs_pk_new_int(m, mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag,
					      out);
	}
	return decimal_bigint(m, neg, d, nd, out);
}

/* text_index(): the decimal argument of GET or PUT. */
static gfs_err text_index(vm *m, uint64_t *out)
{
	const char *s = NULL, *d = NULL;
	size_t n = 0, nd = 0;
	bool neg;
	gfs_err err;

	err = read_line(m, &s, &n);
	if (err)
		return err;
	if (!split_decimal(s, n, &neg, &d, &nd) || neg)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed memo index");
	if (!parse_u64(d, nd, out))
		return gfs_pk_vfail(m, GFS_ERR_LIMIT, "memo index exceeds the limit of %zu", m->max_memo);
	return GFS_OK;
}

static gfs_err text_float(vm *m, const char *s, size_t n, gfs_pv **out)
{
	static const char allowed[] = "0123456789+-.eEinfatyINFATY";
	const char *const point = localeconv()->decimal_point;
	char text[MAX_FLOAT_TEXT + 1];
	char *end = NULL;
	double f;

	trim(&s, &n);
	if (n == 0 || n > MAX_FLOAT_TEXT)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed float literal");
	for (size_t i = 0; i < n; i++) {
		if (!s[i] || !strchr(allowed, s[i]))
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed float literal");
		/* strtod() follows the locale; pickle always writes '.'. */
		text[i] = s[i] == '.' && point && point[0] && !point[1] ? point[0] : s[i];
	}
	text[n] = '\0';
	f = strtod(text, &end);
	if (end != text + n)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed float literal");
	return gfs_pk_new_float(m, f, out);
}

/* ------------------------------------------------------------------ text strings */

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/*
 * text_string(): STRING's quoted argument, unescaped as codecs.escape_decode
 * (a backslash-newline cannot occur: the argument ends at the first newline).
 */
static gfs_err text_string(vm *m, const char *s, size_t n, gfs_pv **out)
{
	char *o = NULL;
	size_t k = 0;
	gfs_err err;

	if (n < 2 || s[0] != s[n - 1] || (s[0] != '\'' && s[0] != '"'))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "STRING argument is not quoted");
	s++;
	n -= 2;
	err = gfs_pk_new_blob(m, GFS_PV_STR, n, out, &o);
	if (err)
		return err;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c != '\\') {
			o[k++] = c;
			continue;
		}
		if (++i == n)
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "trailing \\ in STRING argument");
		c = s[i];
		switch (c) {
		case '\\': case '\'': case '"': o[k++] = c; break;
		case 'a': o[k++] = '\a'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'n': o[k++] = '\n'; break;
		case 'r': o[k++] = '\r'; break;
		case 't': o[k++] = '\t'; break;
		case 'v': o[k++] = '\v'; break;
		case '0': case '1': case '2': case '3': case '4': case '5': case '6': case '7': {
			unsigned v = (unsigned)(c - '0');

			for (int j = 0; j < 2 && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '7'; j++)
				v = v * 8 + (unsigned)(s[++i] - '0');
			o[k++] = (char)(uint8_t)v;
			break;
		}
		case 'x': {
			const int hi = i + 1 < n ? hex_digit(s[i + 1]) : -1;
			const int lo = i + 2 < n ? hex_digit(s[i + 2]) : -1;

			if (hi < 0 || lo < 0)
				return gfs_pk_vfail(m, GFS_ERR_FORMAT, "invalid \\x escape in STRING argument");
			o[k++] = (char)(hi * 16 + lo);
			i += 2;
			break;
		}
		default:
			o[k++] = '\\';
			o[k++] = c;
			break;
		}
	}
	gfs_pk_seal_blob(m, *out, o, k, false);
	return GFS_OK;
}

static size_t utf8_put(uint32_t cp, char *o)
{
	if (cp < 0x80) {
		if (o)
			o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		if (o) {
			o[0] = (char)(0xc0 | (cp >> 6));
			o[1] = (char)(0x80 | (cp & 0x3f));
		}
		return 2;
	}
	if (cp < 0x10000) {
		if (o) {
			o[0] = (char)(0xe0 | (cp >> 12));
			o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
			o[2] = (char)(0x80 | (cp & 0x3f));
		}
		return 3;
	}
	if (o) {
		o[0] = (char)(0xf0 | (cp >> 18));
		o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[3] = (char)(0x80 | (cp & 0x3f));
	}
	return 4;
}

/*
 * raw_unicode_decode(): decode raw-unicode-escape s[0..n) to UTF-8 into o
 * (or only measure when o is NULL).  Lone surrogates are encoded as three
 * bytes.  @return false on a malformed escape.
 */
static bool raw_unicode_decode(const char *s, size_t n, char *o, size_t *outlen)
{
	size_t k = 0;

	for (size_t i = 0; i < n;) {
		const uint8_t c = (uint8_t)s[i++];
		uint32_t cp = 0;
		size_t count;

		if (c != '\\' || i == n || (s[i] != 'u' && s[i] != 'U')) {
			k += utf8_put(c, o ? o + k : NULL);
			continue;
		}
		count = s[i++] == 'u' ? 4 : 8;
		if (n - i < count)
			return false;
		for (; count; count--) {
			const int h = hex_digit(s[i++]);

			if (h < 0)
				return false;
			cp = cp << 4 | (uint32_t)h;
		}
		if (cp > 0x10ffff)
			return false;
		k += utf8_put(cp, o ? o + k : NULL);
	}
	*outlen = k;
	return true;
}

static gfs_err text_unicode(vm *m, const char *s, size_t n, gfs_pv **out)
{
	size_t len = 0;
	char *o = NULL;
	gfs_err err;

	if (!raw_unicode_decode(s, n, NULL, &len))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "malformed \\u escape in UNICODE argument");
	err = gfs_pk_new_blob(m, GFS_PV_STR, len, out, &o);
	if (err)
		return err;
	raw_unicode_decode(s, n, o, &len);
	gfs_pk_seal_blob(m, *out, o, len, false);
	return GFS_OK;
}

/* ------------------------------------------------------------------ opcodes */

/*
 * push_new(): push *v unless err.  Takes &v, not v, so that
 * push_new(m, new_x(m, &v), &v) reads v only after new_x() has set it.
 */
static gfs_err push_new(vm *m, gfs_err err, gfs_pv *const *v)
{
	return err ? err : push(m, *v);
}

static gfs_err op_binint(vm *m, size_t width)
{
	gfs_pv *v = NULL;
	uint8_t b8 = 0;
	uint16_t b16 = 0;
	uint32_t b32 = 0;
	gfs_err err;

	switch (width) {
	case 1:
		err = read_u8(m, &b8);
		return err ? err : push_new(m, gfs_pk_new_int(m, b8, &v), &v);
	case 2:
		err = read_u16(m, &b16);
		return err ? err : push_new(m, gfs_pk_new_int(m, b16, &v), &v);
	default:
		assert(width == 4);
		err = read_u32(m, &b32);
		if (err)
			return err;
		/* Sign-extend the 32-bit two's complement value. */
		return push_new(m, gfs_pk_new_int(m, gfs_pk_u64_to_i64((b32 & 0x80000000u) ?
			(uint64_t)b32 | 0xffffffff00000000ULL : b32), &v), &v);
	}
}

static gfs_err op_long_bin(vm *m, size_t width)
{
	const uint8_t *data = NULL;
	uint8_t n8 = 0;
	uint32_t n32 = 0;
	uint64_t n = 0;
	gfs_pv *v = NULL;
	gfs_err err;

	if (width == 1) {
		err = read_u8(m, &n8);
		n = n8;
	} else {
		err = read_u32(m, &n32);
		if (!err && (n32 & 0x80000000u))
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "negative byte count");
		n = n32;
	}
	if (!err)
		err = read_data(m, n, &data);
	if (err)
		return err;
	return push_new(m, gfs_pk_new_long(m, data, (size_t)n, &v), &v);
}

/* op_counted(): BINSTRING, BINUNICODE, BINBYTES... : a length then the bytes. */
static gfs_err op_counted(vm *m, size_t width, bool is_signed, gfs_pv_kind kind, bool mutable_bytes)
{
	const uint8_t *data = NULL;
	uint64_t n = 0;
	uint8_t n8 = 0;
	uint32_t n32 = 0;
	gfs_pv *v = NULL;
	gfs_err err;

	switch (width) {
	case 1:
		err = read_u8(m, &n8);
		n = n8;
		break;
	case 4:
		err = read_u32(m, &n32);
		if (!err && is_signed && (n32 & 0x80000000u))
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "negative length");
		n = n32;
		break;
	default:
		assert(width == 8);
		err = read_u64(m, &n);
		break;
	}
	if (!err)
		err = read_data(m, n, &data);
	if (err)
		return err;
	return push_new(m, gfs_pk_new_bytes(m, kind, data, (size_t)n, mutable_bytes, &v), &v);
}

static gfs_err op_text(vm *m)
{
	const char *s = NULL;
	size_t n = 0;
	gfs_pv *v = NULL;
	gfs_err err = read_line(m, &s, &n);

	if (err)
		return err;
	switch (m->op) {
	case OP_INT:
		if (n == 2 && s[0] == '0' && (s[1] == '0' || s[1] == '1'))
			err = gfs_pk_new_bool(m, s[1] == '1', &v);
		else
			err = text_int(m, s, n, &v);
		break;
	case OP_LONG:
		if (n && s[n - 1] == 'L')
			n--;
		err = text_int(m, s, n, &v);
		break;
	case OP_FLOAT:
		err = text_float(m, s, n, &v);
		break;
	case OP_STRING:
		err = text_string(m, s, n, &v);
		break;
	default:
		assert(m->op == OP_UNICODE);
		err = text_unicode(m, s, n, &v);
		break;
	}
	return push_new(m, err, &v);
}

static gfs_err op_binfloat(vm *m)
{
	uint64_t bits = 0;
	double f;
	gfs_pv *v = NULL;
	const gfs_err err = need(m, 8);

	if (err)
		return err;
	for (size_t i = 0; i < 8; i++)
		bits = bits << 8 | m->buf[m->pos + i];
	m->pos += 8;
	memcpy(&f, &bits, sizeof(f));
	return push_new(m, gfs_pk_new_float(m, f, &v), &v);
}

/* op_tuple_n(): TUPLE1/2/3 and EMPTY_TUPLE. */
static gfs_err op_tuple_n(vm *m, size_t n)
{
	gfs_pv *v = NULL;

	if (m->sp - fence(m) < n)
		return underflow(m);
	m->sp -= n;
	return push_new(m, gfs_pk_new_tuple(m, m->stack + m->sp, n, &v), &v);
}

/* op_marked(): TUPLE, LIST, DICT, FROZENSET, POP_MARK: consume the values above the mark. */
static gfs_err op_marked(vm *m)
{
	size_t start = 0, n = 0;
	gfs_pv **items = NULL;
	gfs_pv *v = NULL;
	gfs_err err = pop_mark(m, &start);

	if (err)
		return err;
	items = m->stack + start;
	n = m->sp - start;
	m->sp = start;
	switch (m->op) {
	case OP_POP_MARK:
		return GFS_OK;
	case OP_TUPLE:
		return push_new(m, gfs_pk_new_tuple(m, items, n, &v), &v);
	case OP_LIST:
		err = gfs_pk_new_seq(m, GFS_PV_LIST, n, &v);
		if (!err) {
			if (n)
				memcpy(v->u.seq.items, items, n * sizeof(*items));
			v->u.seq.len = n;
		}
		return push_new(m, err, &v);
	case OP_DICT:
		if (n % 2)
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "odd number of items (%zu)", n);
		err = gfs_pk_new_dict(m, &v);
		for (size_t i = 0; !err && i < n; i += 2)
			err = gfs_pk_dict_set(m, v, items[i], items[i + 1]);
		return push_new(m, err, &v);
	default:
		assert(m->op == OP_FROZENSET);
		err = gfs_pk_new_set(m, true, &v);
		for (size_t i = 0; !err && i < n; i++)
			err = gfs_pk_set_add(m, v, items[i]);
		return push_new(m, err, &v);
	}
}

/* list_of(): where APPEND(S) put items: a LIST, or an OBJECT's obj.list. */
static gfs_err list_of(vm *m, gfs_pv *target, gfs_pv **out)
{
	gfs_err err;

	if (target->kind == GFS_PV_LIST) {
		*out = target;
		return GFS_OK;
	}
	if (target->kind != GFS_PV_OBJECT)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "cannot append to %s",
				    gfs_pv_kind_name(target->kind));
	if (!target->u.obj.list) {
		err = gfs_pk_new_seq(m, GFS_PV_LIST, 0, &target->u.obj.list);
		if (err)
			return err;
	}
	*out = target->u.obj.list;
	return GFS_OK;
}

/* dict_of(): where SETITEM(S) put items: a DICT, or an OBJECT's obj.items. */
static gfs_err dict_of(vm *m, gfs_pv *target, gfs_pv **out)
{
	gfs_err err;

	if (target->kind == GFS_PV_DICT) {
		*out = target;
		return GFS_OK;
	}
	if (target->kind != GFS_PV_OBJECT)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "cannot set items on %s",
				    gfs_pv_kind_name(target->kind));
	if (!target->u.obj.items) {
		err = gfs_pk_new_dict(m, &target->u.obj.items);
		if (err)
			return err;
	}
	*out = target->u.obj.items;
	return GFS_OK;
}

static gfs_err op_append(vm *m)
{
	gfs_pv *v = NULL, *target = NULL, *list = NULL;
	gfs_err err = pop(m, &v);

	if (!err)
		err = peek(m, &target);
	if (!err)
		err = list_of(m, target, &list);
	return err ? err : gfs_pk_seq_push(m, list, v);
}

static gfs_err op_setitem(vm *m)
{
	gfs_pv *k = NULL, *v = NULL, *target = NULL, *d = NULL;
	gfs_err err = pop(m, &v);

	if (!err)
		err = pop(m, &k);
	if (!err)
		err = peek(m, &target);
	if (!err)
		err = dict_of(m, target, &d);
	return err ? err : gfs_pk_dict_set(m, d, k, v);
}

/* op_marked_into(): APPENDS, SETITEMS, ADDITEMS: the values above the mark go into the value below it. */
static gfs_err op_marked_into(vm *m)
{
	size_t start = 0, n = 0;
	gfs_pv **items = NULL;
	gfs_pv *target = NULL, *into = NULL;
	gfs_err err = pop_mark(m, &start);

	if (!err)
		err = mark_target(m, start, &target);
	if (err)
		return err;
	items = m->stack + start;
	n = m->sp - start;
	m->sp = start;
	switch (m->op) {
	case OP_APPENDS:
		err = list_of(m, target, &into);
		for (size_t i = 0; !err && i < n; i++)
			err = gfs_pk_seq_push(m, into, items[i]);
		return err;
	case OP_SETITEMS:
		if (n % 2)
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "odd number of items (%zu)", n);
		err = dict_of(m, target, &into);
		for (size_t i = 0; !err && i < n; i += 2)
			err = gfs_pk_dict_set(m, into, items[i], items[i + 1]);
		return err;
	default:
		assert(m->op == OP_ADDITEMS);
		if (target->kind != GFS_PV_SET || (gfs_pk_cpn(target)->flags & PN_FROZEN))
			return gfs_pk_vfail(m, GFS_ERR_FORMAT, "cannot add items to %s%s",
					    target->kind == GFS_PV_SET ? "frozen " : "",
					    gfs_pv_kind_name(target->kind));
		for (size_t i = 0; !err && i < n; i++)
			err = gfs_pk_set_add(m, target, items[i]);
		return err;
	}
}

static gfs_err op_global(vm *m)
{
	const char *mod = NULL, *name = NULL;
	size_t ml = 0, nl = 0;
	gfs_pv *v = NULL;
	gfs_err err = read_line(m, &mod, &ml);

	if (!err)
		err = read_line(m, &name, &nl);
	if (err)
		return err;
	return push_new(m, gfs_pk_new_global(m, mod, ml, name, nl, &v), &v);
}

static gfs_err op_stack_global(vm *m)
{
	gfs_pv *mod = NULL, *name = NULL, *v = NULL;
	gfs_err err = pop(m, &name);

	if (!err)
		err = pop(m, &mod);
	if (err)
		return err;
	if (mod->kind != GFS_PV_STR || name->kind != GFS_PV_STR)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "module and name must be str, not %s and %s",
				    gfs_pv_kind_name(mod->kind), gfs_pv_kind_name(name->kind));
	return push_new(m, gfs_pk_new_global(m, mod->u.s.ptr, mod->u.s.len, name->u.s.ptr,
					     name->u.s.len, &v), &v);
}

static gfs_err op_reduce(vm *m)
{
	gfs_pv *fn = NULL, *args = NULL, *v = NULL;
	gfs_err err = pop(m, &args);

	if (!err)
		err = pop(m, &fn);
	if (err)
		return err;
	if (args->kind != GFS_PV_TUPLE)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "arguments are a %s, not a tuple",
				    gfs_pv_kind_name(args->kind));
	return push_new(m, gfs_pk_call(m, fn, args, &v), &v);
}

/* op_newobj(): NEWOBJ and NEWOBJ_EX: cls.__new__(cls, *args, **kwargs). */
static gfs_err op_newobj(vm *m)
{
	gfs_pv *cls = NULL, *args = NULL, *kwargs = NULL, *g = NULL, *t = NULL, *v = NULL;
	gfs_err err = GFS_OK;

	if (m->op == OP_NEWOBJ_EX)
		err = pop(m, &kwargs);
	if (!err)
		err = pop(m, &args);
	if (!err)
		err = pop(m, &cls);
	if (err)
		return err;
	if (args->kind != GFS_PV_TUPLE)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "arguments are a %s, not a tuple",
				    gfs_pv_kind_name(args->kind));
	if (kwargs && kwargs->kind != GFS_PV_DICT)
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "keyword arguments are a %s, not a dict",
				    gfs_pv_kind_name(kwargs->kind));
	if (kwargs && kwargs->u.dict.len) {
		gfs_pv *const parts[3] = { cls, args, kwargs };

		err = gfs_pk_new_global(m, "copyreg", 7, "__newobj_ex__", 13, &g);
		if (!err)
			err = gfs_pk_new_tuple(m, parts, 3, &t);
		return err ? err : push_new(m, gfs_pk_new_object(m, g, t, &v), &v);
	}
	if (gfs_pk_is_class(cls, GFS_PK_ORDERED_DICT) && args->u.seq.len == 0)
		return push_new(m, gfs_pk_new_dict(m, &v), &v);
	return push_new(m, gfs_pk_new_object(m, cls, args, &v), &v);
}

/* op_inst_obj(): INST (class named inline) and OBJ (class first after the mark). */
static gfs_err op_inst_obj(vm *m)
{
	const char *mod = NULL, *name = NULL;
	size_t ml = 0, nl = 0, start = 0, n = 0;
	gfs_pv *cls = NULL, *args = NULL, *v = NULL;
	gfs_err err = GFS_OK;

	if (m->op == OP_INST) {
		err = read_line(m, &mod, &ml);
		if (!err)
			err = read_line(m, &name, &nl);
	}
	if (!err)
		err = pop_mark(m, &start);
	if (err)
		return err;
	n = m->sp - start;
	m->sp = start;
	if (m->op == OP_INST) {
		err = gfs_pk_new_global(m, mod, ml, name, nl, &cls);
	} else if (n == 0) {
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "no class after the MARK");
	} else {
		cls = m->stack[start++];
		n--;
	}
	if (!err)
		err = gfs_pk_new_tuple(m, m->stack + start, n, &args);
	return err ? err : push_new(m, gfs_pk_new_object(m, cls, args, &v), &v);
}

static gfs_err op_build(vm *m)
{
	gfs_pv *state = NULL, *inst = NULL;
	gfs_err err = pop(m, &state);

	if (!err)
		err = peek(m, &inst);
	if (err)
		return err;
	/*
	 * Only objects keep their state.  BUILD on a dict is how an
	 * OrderedDict gets its instance attributes (torch's state_dict()
	 * _metadata): they are not items, so they are dropped.
	 */
	if (inst->kind == GFS_PV_OBJECT)
		inst->u.obj.state = state;
	return GFS_OK;
}

static gfs_err op_persid(vm *m)
{
	const char *s = NULL;
	size_t n = 0;
	gfs_pv *id = NULL, *v = NULL;
	gfs_err err;

	if (m->op == OP_PERSID) {
		err = read_line(m, &s, &n);
		if (err)
			return err;
		for (size_t i = 0; i < n; i++)
			if ((uint8_t)s[i] >= 0x80)
				return gfs_pk_vfail(m, GFS_ERR_FORMAT, "persistent id is not ASCII");
		err = gfs_pk_new_bytes(m, GFS_PV_STR, s, n, false, &id);
	} else {
		err = pop(m, &id);
	}
	if (err)
		return err;
	return push_new(m, gfs_pk_new_persid(m, id, &v), &v);
}

static gfs_err op_memo(vm *m)
{
	uint64_t idx = 0;
	uint8_t i8 = 0;
	uint32_t i32 = 0;
	gfs_err err = GFS_OK;

	switch (m->op) {
	case OP_GET:
	case OP_PUT:
		err = text_index(m, &idx);
		break;
	case OP_BINGET:
	case OP_BINPUT:
		err = read_u8(m, &i8);
		idx = i8;
		break;
	case OP_LONG_BINGET:
	case OP_LONG_BINPUT:
		err = read_u32(m, &i32);
		idx = i32;
		break;
	default:
		assert(m->op == OP_MEMOIZE);
		idx = m->memo_count;
		break;
	}
	if (err)
		return err;
	if (m->op == OP_GET || m->op == OP_BINGET || m->op == OP_LONG_BINGET)
		return memo_get(m, idx);
	return memo_put(m, idx);
}

static gfs_err op_pop(vm *m)
{
	gfs_pv *v = NULL;

	if (m->sp > fence(m))
		return pop(m, &v);
	if (m->nmarks && m->sp == fence(m)) {
		m->nmarks--;
		return GFS_OK;
	}
	return underflow(m);
}

static gfs_err op_dup(vm *m)
{
	gfs_pv *v = NULL;
	const gfs_err err = peek(m, &v);

	return err ? err : push(m, v);
}

static gfs_err op_proto_frame(vm *m)
{
	uint8_t proto = 0;
	uint64_t n = 0;
	gfs_err err;

	if (m->op == OP_PROTO) {
		err = read_u8(m, &proto);
		if (!err && proto > HIGHEST_PROTOCOL)
			return gfs_pk_vfail(m, GFS_ERR_UNSUPPORTED, "unsupported pickle protocol %u",
					    (unsigned)proto);
		return err;
	}
	err = read_u64(m, &n);
	if (!err && n > (uint64_t)(m->len - m->pos))
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "truncated: frame of %llu bytes, %zu left",
				    (unsigned long long)n, m->len - m->pos);
	return err;
}

static gfs_err op_simple(vm *m)
{
	gfs_pv *v = NULL;

	switch (m->op) {
	case OP_NONE:
		return push_new(m, gfs_pk_new_none(m, &v), &v);
	case OP_NEWTRUE:
	case OP_NEWFALSE:
		return push_new(m, gfs_pk_new_bool(m, m->op == OP_NEWTRUE, &v), &v);
	case OP_EMPTY_LIST:
		return push_new(m, gfs_pk_new_seq(m, GFS_PV_LIST, 0, &v), &v);
	case OP_EMPTY_DICT:
		return push_new(m, gfs_pk_new_dict(m, &v), &v);
	default:
		assert(m->op == OP_EMPTY_SET);
		return push_new(m, gfs_pk_new_set(m, false, &v), &v);
	}
}

/* step(): run the opcode at m->pos.  Every opcode consumes input. */
static gfs_err step(vm *m)
{
	m->op_off = m->pos;
	m->op = m->buf[m->pos++];
	switch (m->op) {
	case OP_PROTO: case OP_FRAME:
		return op_proto_frame(m);
	case OP_MARK:
		return push_mark(m);
	case OP_POP:
		return op_pop(m);
	case OP_DUP:
		return op_dup(m);
	case OP_NONE: case OP_NEWTRUE: case OP_NEWFALSE:
	case OP_EMPTY_LIST: case OP_EMPTY_DICT: case OP_EMPTY_SET:
		return op_simple(m);
	case OP_INT: case OP_LONG: case OP_FLOAT: case OP_STRING: case OP_UNICODE:
		return op_text(m);
	case OP_BININT1:
		return op_binint(m, 1);
	case OP_BININT2:
		return op_binint(m, 2);
	case OP_BININT:
		return op_binint(m, 4);
	case OP_LONG1:
		return op_long_bin(m, 1);
	case OP_LONG4:
		return op_long_bin(m, 4);
	case OP_BINFLOAT:
		return op_binfloat(m);
	case OP_SHORT_BINSTRING:
		return op_counted(m, 1, false, GFS_PV_STR, false);
	case OP_BINSTRING:
		return op_counted(m, 4, true, GFS_PV_STR, false);
	case OP_SHORT_BINUNICODE:
		return op_counted(m, 1, false, GFS_PV_STR, false);
	case OP_BINUNICODE:
		return op_counted(m, 4, false, GFS_PV_STR, false);
	case OP_BINUNICODE8:
		return op_counted(m, 8, false, GFS_PV_STR, false);
	case OP_SHORT_BINBYTES:
		return op_counted(m, 1, false, GFS_PV_BYTES, false);
	case OP_BINBYTES:
		return op_counted(m, 4, false, GFS_PV_BYTES, false);
	case OP_BINBYTES8:
		return op_counted(m, 8, false, GFS_PV_BYTES, false);
	case OP_BYTEARRAY8:
		return op_counted(m, 8, false, GFS_PV_BYTES, true);
	case OP_EMPTY_TUPLE:
		return op_tuple_n(m, 0);
	case OP_TUPLE1:
		return op_tuple_n(m, 1);
	case OP_TUPLE2:
		return op_tuple_n(m, 2);
	case OP_TUPLE3:
		return op_tuple_n(m, 3);
	case OP_TUPLE: case OP_LIST: case OP_DICT: case OP_FROZENSET: case OP_POP_MARK:
		return op_marked(m);
	case OP_APPEND:
		return op_append(m);
	case OP_SETITEM:
		return op_setitem(m);
	case OP_APPENDS: case OP_SETITEMS: case OP_ADDITEMS:
		return op_marked_into(m);
	case OP_GLOBAL:
		return op_global(m);
	case OP_STACK_GLOBAL:
		return op_stack_global(m);
	case OP_REDUCE:
		return op_reduce(m);
	case OP_NEWOBJ: case OP_NEWOBJ_EX:
		return op_newobj(m);
	case OP_INST: case OP_OBJ:
		return op_inst_obj(m);
	case OP_BUILD:
		return op_build(m);
	case OP_PERSID: case OP_BINPERSID:
		return op_persid(m);
	case OP_GET: case OP_BINGET: case OP_LONG_BINGET:
	case OP_PUT: case OP_BINPUT: case OP_LONG_BINPUT: case OP_MEMOIZE:
		return op_memo(m);
	case OP_EXT1: case OP_EXT2: case OP_EXT4:
		return gfs_pk_vfail(m, GFS_ERR_UNSUPPORTED, "extension registry codes are not supported");
	case OP_NEXT_BUFFER: case OP_READONLY_BUFFER:
		return gfs_pk_vfail(m, GFS_ERR_UNSUPPORTED, "out-of-band buffers are not supported");
	default:
		return gfs_pk_vfail(m, GFS_ERR_FORMAT, "unknown opcode 0x%02x", (unsigned)m->op);
	}
}

static gfs_err run(vm *m)
{
	gfs_pv *root = NULL;
	void *stack = NULL;
	gfs_err err;

	/* Allocate the stack up front: m->stack + n must never be NULL + 0. */
	err = gfs_pk_scratch_grow(m, NULL, 0, 1, sizeof(gfs_pv *), m->max_depth, &stack, &m->stack_cap);
	if (err)
		return err;
	m->stack = stack;
	while (m->pos < m->len) {
		if (m->buf[m->pos] == OP_STOP) {
			m->op_off = m->pos;
			m->op = m->buf[m->pos++];
			err = pop(m, &root);
			if (!err)
				m->p->root = root;
			return err;
		}
		err = step(m);
		if (err)
			return err;
	}
	m->op_off = m->len;
	m->op = 0;
	return gfs_pk_vfail(m, GFS_ERR_FORMAT, "truncated: no STOP opcode");
}

/* ------------------------------------------------------------------ public */

gfs_err gfs_pickle_load(const uint8_t *buf, size_t len, const char *label,
			const gfs_pickle_limits *lim, gfs_pickle **out)
{
	gfs_pickle *p;
	vm m;
	gfs_err err;

	if (!label)
		label = "pickle";
	if (!out || (!buf && len))
		return gfs_fail(GFS_ERR_INVAL, "%s: gfs_pickle_load: invalid arguments", label);
	*out = NULL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return gfs_fail(GFS_ERR_NOMEM, "%s: out of memory", label);
	p->max_bytes = lim && lim->max_bytes ? lim->max_bytes : DEFAULT_MAX_BYTES;
	memset(&m, 0, sizeof(m));
	m.p = p;
	m.buf = buf;
	m.len = len;
	m.label = label;
	m.max_depth = lim && lim->max_depth ? lim->max_depth : DEFAULT_MAX_DEPTH;
	m.max_memo = lim && lim->max_memo ? lim->max_memo : DEFAULT_MAX_MEMO;
	/* Seed the key hashes per load so colliding keys cannot be precomputed. */
	m.seed = gfs_pk_mix64((uint64_t)(uintptr_t)p ^ (uint64_t)(uintptr_t)&m ^ len);
	err = run(&m);
	free(m.stack);
	free(m.marks);
	free(m.memo);
	if (err) {
		gfs_pickle_free(p);
		return err;
	}
	*out = p;
	return GFS_OK;
}

