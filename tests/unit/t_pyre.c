/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Unit tests for the re.match() subset (pyre.h): every construct it takes,
 * matches and non-matches, the anchoring, what it refuses, and the step
 * bound and the caller's budget that answer -1.
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gatherfs/util/pyre.h"
#include "tap.h"

static gfs_pyre re;

/* m(): re.match(p, s): 1, 0, -1; 2 when p is refused. */
static int m(const char *p, const char *s)
{
	unsigned long budget = ULONG_MAX;

	if (!gfs_pyre_compile(p, &re))
		return 2;
	return gfs_pyre_match(&re, s, &budget);
}

/* shown(): s with its control bytes as \xNN, for a TAP line. */
static const char *shown(const char *s)
{
	static char buf[256];
	size_t o = 0;

	for (; *s && o + 5 < sizeof(buf); s++)
		if ((unsigned char)*s < 0x20)
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "\\x%02x", (unsigned char)*s);
		else
			buf[o++] = *s;
	buf[o] = '\0';
	return buf;
}

static void yes(const char *p, const char *s)
{
	tap_ok(m(p, s) == 1, "re.match(%s, %s) matches", p, shown(s));
}

static void no(const char *p, const char *s)
{
	tap_ok(m(p, s) == 0, "re.match(%s, %s) does not match", p, shown(s));
}

static void refused(const char *p)
{
	tap_ok(!gfs_pyre_compile(p, &re), "%s is refused", p);
}

int main(void)
{
	char *big;

	/* literals; anchored at the start only */
	yes("abc", "abc");
	yes("abc", "abcdef");
	no("abc", "xabc");
	no("abc", "ab");
	yes("", "anything");
	/* '^' first, '$' last */
	yes("^abc", "abcd");
	yes("abc$", "abc");
	no("abc$", "abcd");
	yes("$", "");
	no("$", "a");
	/* '.': anything but a newline */
	yes("a.c", "abc");
	yes("a.c", "a.c");
	no("a.c", "a\nc");
	no("a.c", "ac");
	/* escapes and their negations */
	yes("\\d\\d", "42");
	no("\\d", "x");
	yes("\\D", "x");
	no("\\D", "4");
	yes("\\w\\w\\w", "a_9");
	yes("\\w", "\xc3");
	no("\\w", "-");
	yes("\\W", "-");
	no("\\W", "z");
	yes("\\s\\s", " \t");
	yes("\\s", "\r");
	no("\\s", "a");
	yes("\\S", "a");
	no("\\S", "\n");
	/* escaped non-alphanumeric characters are literals */
	yes("a\\.b", "a.b");
	no("a\\.b", "axb");
	yes("\\[\\]\\\\", "[]\\");
	yes("\\*", "*");
	/* classes */
	yes("[abc]", "b");
	no("[abc]", "d");
	yes("[a-f]x", "ex");
	no("[a-f]", "g");
	yes("[^a-f]", "g");
	no("[^a-f]", "a");
	yes("[]]", "]");
	yes("[^]]", "a");
	no("[^]]", "]");
	yes("[\\d_]", "7");
	yes("[\\d_]", "_");
	no("[\\d_]", "a");
	yes("[\\.]", ".");
	no("[\\.]", "x");
	yes("[a\\-z]", "-");
	no("[a\\-z]", "b");
	yes("[!-\\/]", "/");
	yes("[^\\s]", "x");
	no("[^\\s]", " ");
	/* quantifiers, greedy and lazy, backtracking */
	yes("ab*c", "ac");
	yes("ab*c", "abbbc");
	no("ab+c", "ac");
	yes("ab+c", "abbc");
	yes("ab?c", "ac");
	yes("ab?c", "abc");
	no("ab?c", "abbc");
	yes("a.*b", "axxbyy");
	yes("a.*?b", "axxb");
	yes("a.+?b$", "axxb");
	yes(".*fc2\\.weight", "blocks.1.fc2.weight");
	no(".*fc2\\.weight", "blocks.1.fc2.bias");

	/* refused */
	refused("(a)");
	refused("a|b");
	refused("a{2}");
	refused("a^");
	refused("a$b");
	refused("*a");
	refused("a*+");
	refused("a??"); /* a lazy ? is not taken */
	refused("a???");
	refused("\\b");
	refused("\\1");
	refused("\\A");
	refused("a\\");
	refused("[abc");
	refused("[a[b]");
	refused("[\\b]");
	refused("[a\\");
	big = malloc(GFS_PYRE_MAX_ATOMS + 2);
	memset(big, 'a', GFS_PYRE_MAX_ATOMS + 1);
	big[GFS_PYRE_MAX_ATOMS + 1] = '\0';
	refused(big);
	big[GFS_PYRE_MAX_ATOMS] = '\0';
	tap_ok(m(big, big) == 1, "%d atoms are taken", GFS_PYRE_MAX_ATOMS);
	free(big);
	/* the step bound: nested backtracking answers -1, not a hang */
	tap_ok(m(".*.*.*.*.*x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") == -1,
	       "a match past %d steps answers -1", GFS_PYRE_MAX_STEPS);
	tap_ok(m(".*.*x", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") == 0,
	       "a small backtracking search answers 0");
	/* the per-match count restarts with each match */
	tap_ok(gfs_pyre_compile(".*.*x", &re), ".*.*x compiles");
	for (int i = 0; i < 3; i++) {
		unsigned long budget = GFS_PYRE_MAX_STEPS;

		tap_ok(gfs_pyre_match(&re, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaax", &budget) == 1,
		       "match %d of one compiled pattern", i + 1);
	}
	/* the caller's budget is shared by its matches: each takes its steps
	 * off; a match that would need more answers -1, and so does every one
	 * after the budget is spent */
	{
		const char *name = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
		unsigned long budget = ULONG_MAX, one, left;
		int i, r = 0;

		tap_ok(gfs_pyre_compile(".*.*.*x", &re), ".*.*.*x compiles");
		tap_ok(gfs_pyre_match(&re, name, &budget) == 0, "a costly non-match answers 0");
		one = ULONG_MAX - budget;
		tap_ok(one > 1000 && one <= GFS_PYRE_MAX_STEPS, "it took %lu steps off the budget", one);
		budget = 10 * one;
		for (i = 0; i < 1000 && (r = gfs_pyre_match(&re, name, &budget)) == 0; i++)
			;
		tap_ok(r == -1 && i == 10 && budget == 0,
		       "a budget of 10 such matches: the 11th answers -1 (%d matches, %lu left)", i, budget);
		tap_ok(gfs_pyre_compile("a", &re) && gfs_pyre_match(&re, "a", &budget) == -1,
		       "once spent, even a one-step match answers -1");
		budget = one - 1;
		tap_ok(gfs_pyre_compile(".*.*.*x", &re) && gfs_pyre_match(&re, name, &budget) == -1 &&
			       budget == 0,
		       "a match needing more than the budget left answers -1 and spends it");
		left = 5;
		tap_ok(gfs_pyre_compile("ab", &re) && gfs_pyre_match(&re, "ab", &left) == 1 && left == 2,
		       "a cheap match takes its 3 steps");
	}
	return tap_done();
}
