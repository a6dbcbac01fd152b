/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — Python re.match() subset (pyre.h, which lists the syntax):
 * compiled to a list of atoms, each with an optional quantifier, matched by
 * backtracking with a step bound.
 */
#include "config.h"

#include <assert.h>
#include <ctype.h>
#include <string.h>

#include "gatherfs/util/pyre.h"

/* rx_esc_class(): is e the letter of an escape class (d w s, or D W S negated)? */
static bool rx_esc_class(char e)
{
	return strchr("dwsDWS", e) != NULL;
}

/* rx_esc(): does character x fall in escape class e (d w s D W S)? */
static bool rx_esc(char e, unsigned char x)
{
	bool in;

	switch (e | 0x20) {
	case 'd':
		in = x >= '0' && x <= '9';
		break;
	case 'w':
		in = (x >= '0' && x <= '9') || ((x | 0x20) >= 'a' && (x | 0x20) <= 'z') || x == '_' ||
		     x >= 0x80;
		break;
	default:
		in = x == ' ' || (x >= '\t' && x <= '\r');
		break;
	}
	return (e >= 'a') == in;
}

/* rx_class(): does x match class atom t? */
static bool rx_class(const gfs_pyre_atom *t, unsigned char x)
{
	bool in = false;

	for (size_t i = 0; i < t->clen && !in;) {
		unsigned char lo = (unsigned char)t->cls[i], hi;

		if (lo == '\\' && rx_esc_class(t->cls[i + 1])) {
			in = rx_esc(t->cls[i + 1], x);
			i += 2;
			continue;
		}
		if (lo == '\\')
			lo = (unsigned char)t->cls[++i];
		i++;
		hi = lo;
		if (i + 1 < t->clen && t->cls[i] == '-') {
			hi = (unsigned char)t->cls[i + 1];
			if (hi == '\\')
				hi = (unsigned char)t->cls[i + 2], i++;
			i += 2;
		}
		in = x >= lo && x <= hi;
	}
	return in != t->neg;
}

/* gfs_pyre_compile(): pattern p into r; false if it uses a feature outside the subset. */
bool gfs_pyre_compile(const char *p, gfs_pyre *r)
{
	memset(r, 0, sizeof(*r));
	if (*p == '^')
		p++;
	while (*p) {
		gfs_pyre_atom *t;

		if (*p == '$' && p[1] == '\0') {
			r->end = true;
			break;
		}
		if (strchr("*+?", *p)) {
			if (r->n == 0)
				return false;
			t = &r->a[r->n - 1];
			if (t->q == 0)
				t->q = *p;
			else if (*p != '?' || p[-1] == '?')
				return false; /* a*+ (possessive), a??? */
			p++;
			continue;
		}
		if (r->n == GFS_PYRE_MAX_ATOMS || strchr("()|{}^$", *p))
			return false;
		t = &r->a[r->n++];
		if (*p == '\\') {
			if (!p[1] || (isalnum((unsigned char)p[1]) && !rx_esc_class(p[1])))
				return false;
			t->kind = rx_esc_class(p[1]) ? '\\' : 'c';
			t->c = p[1];
			p += 2;
		} else if (*p == '[') {
			const char *q = ++p;

			t->kind = '[';
			if (*q == '^')
				t->neg = true, q++, p++;
			if (*q == ']')
				q++;
			for (; *q && *q != ']'; q++)
				if (*q == '\\' && (!q[1] || (isalnum((unsigned char)q[1]) &&
							     !rx_esc_class(q[1]))))
					return false;
				else if (*q == '\\')
					q++;
				else if (*q == '[')
					return false;
			if (!*q)
				return false;
			t->cls = p;
			t->clen = (size_t)(q - p);
			p = q + 1;
		} else {
			t->kind = *p == '.' ? '.' : 'c';
			t->c = *p++;
		}
	}
	return true;
}

/* rx_one(): does atom t (its quantifier aside) match the character at s? */
static bool rx_one(const gfs_pyre_atom *t, const char *s)
{
	const unsigned char x = (unsigned char)*s;

	if (!x)
		return false;
	switch (t->kind) {
	case '.':
		return x != '\n';
	case '\\':
		return rx_esc(t->c, x);
	case '[':
		return rx_class(t, x);
	default:
		return x == (unsigned char)t->c;
	}
}

/* rx_at(): do atoms i.. match at s?  -1: too many steps. */
static int rx_at(gfs_pyre *r, size_t i, const char *s)
{
	const gfs_pyre_atom *t;
	size_t n = 0, lo, hi;

	if (++r->steps > r->limit)
		return -1;
	if (i == r->n)
		return !r->end || *s == '\0';
	t = &r->a[i];
	lo = t->q == '+' ? 1 : t->q == 0 ? 1 : 0;
	hi = t->q == '*' || t->q == '+' ? (size_t)-1 : 1;
	while (n < hi && rx_one(t, s + n))
		n++;
	if (n < lo)
		return 0;
	for (;; n--) {
		const int m = rx_at(r, i + 1, s + n);

		if (m)
			return m;
		if (n == lo)
			return 0;
	}
}

/*
 * gfs_pyre_match(): re.match(pattern, name) of a pattern gfs_pyre_compile() took:
 * 1 a match, 0 none, -1 too costly to tell; its steps are taken off *budget.
 */
int gfs_pyre_match(gfs_pyre *r, const char *name, unsigned long *budget)
{
	int m;

	assert(r && name && budget);
	r->steps = 0;
	r->limit = *budget < GFS_PYRE_MAX_STEPS ? *budget : GFS_PYRE_MAX_STEPS;
	m = rx_at(r, 0, name);
	*budget -= r->steps < *budget ? r->steps : *budget;
	return m;
}
