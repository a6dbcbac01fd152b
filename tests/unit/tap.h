/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Minimal TAP-style helpers for the unit tests: each check prints
 * "ok N - what" or "not ok N - what"; tap_done() prints the plan and a
 * summary line and returns the exit status.
 */
#ifndef GATHERFS_TESTS_TAP_H
#define GATHERFS_TESTS_TAP_H

#include <stdarg.h>
#include <stdio.h>

static int tap_n, tap_failed;

__attribute__((format(printf, 2, 3))) static int tap_ok(int cond, const char *fmt, ...)
{
	va_list ap;

	tap_n++;
	if (!cond)
		tap_failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap_n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	return cond;
}

static int tap_done(void)
{
	printf("1..%d\n# %d passed, %d failed\n", tap_n, tap_n - tap_failed, tap_failed);
	return tap_failed ? 1 : 0;
}

#endif
