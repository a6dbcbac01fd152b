/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — a subset of Python's regular expressions with re.match()'s
 * semantics (anchored at the start only), as DeepSpeed's
 * ds_to_universal.py applies universal_checkpoint_info's patterns and as
 * a -o tp_split file's patterns are read.
 *
 * The syntax taken, exactly:
 *   - a literal character (any byte other than the ones below);
 *   - '.': any character but '\n';
 *   - the escapes \d \w \s and their negations \D \W \S (ASCII digits;
 *     ASCII letters, digits, '_' and every byte >= 0x80; ' ' and \t..\r);
 *   - an escaped non-alphanumeric character (\. \[ \\ ...): that character;
 *   - classes [...] and negated [^...]: characters, ranges a-z (an end may
 *     be escaped), the escapes above, escaped characters; a ']' first is a
 *     literal; no nested '[';
 *   - the quantifiers * + ? after an atom; * and + optionally followed
 *     by '?' (lazy: the same answer as greedy, since only whether a match
 *     exists is asked);
 *   - '^' as the first character (redundant under re.match) and '$' as the
 *     last (the match must reach the end of the name).
 * Anything else is refused by gfs_pyre_compile(): groups ( ), alternation
 * |, counted repetition { }, '^' or '$' elsewhere, other escapes (\b \A
 * \1 ...), a quantifier with nothing before it, a*+, a?? and a???, a trailing
 * '\', an unclosed class, more than GFS_PYRE_MAX_ATOMS atoms.
 * Matching backtracks; one gfs_pyre_match() takes at most
 * GFS_PYRE_MAX_STEPS steps, and no more than its caller's budget has left
 * (a count the caller owns, shared by every match of one import: many
 * patterns that each stay under the per-match bound still cost a bounded
 * total), and answers -1 (too costly to tell) past either.
 */
#ifndef GATHERFS_PYRE_H
#define GATHERFS_PYRE_H

#include <stdbool.h>
#include <stddef.h>

#define GFS_PYRE_MAX_ATOMS 256
#define GFS_PYRE_MAX_STEPS 1000000

typedef struct gfs_pyre_atom {
	char kind;       /* 'c' a character, '.' any, '\\' an escape class, '[' a class */
	char c;          /* 'c': the character; '\\': d w s D W S */
	const char *cls; /* '[': the text between [ (or [^) and ] */
	size_t clen;
	bool neg;        /* '[': [^...] */
	char q;          /* 0 once, '*', '+', '?' */
} gfs_pyre_atom;

/* A compiled pattern; it borrows the pattern text, which must outlive it. */
typedef struct gfs_pyre {
	gfs_pyre_atom a[GFS_PYRE_MAX_ATOMS];
	size_t n;
	bool end;        /* '$' last */
	unsigned long steps; /* of the match under way */
	unsigned long limit; /* its bound: GFS_PYRE_MAX_STEPS, or less as the budget says */
} gfs_pyre;

/*
 * gfs_pyre_compile(): compile the NUL-terminated pattern p into *r (which
 * keeps pointers into p); false if p uses a feature outside the subset
 * above (*r is then unspecified).
 */
bool gfs_pyre_compile(const char *p, gfs_pyre *r);

/*
 * gfs_pyre_match(): re.match(pattern, name) of a pattern gfs_pyre_compile()
 * took: 1 a match, 0 none, -1 too costly to tell (more than
 * GFS_PYRE_MAX_STEPS steps, or more than *budget).  Each step taken is
 * taken off *budget (the caller's total for all its matches); at 0 every
 * later match answers -1.  r is not const: it counts the steps.
 */
int gfs_pyre_match(gfs_pyre *r, const char *name, unsigned long *budget);

#endif
