/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the importer of rank-local ZeRO-3 saves,
 * on a real save.
 *
 * At startup, the data files of the fixture GFS_FUZZ_ZERO3 (environment
 * variable, or the path compiled in with -DGFS_FUZZ_ZERO3_DEFAULT: a save
 * directory of 3 ranks) are linked into a temporary directory.  Per input,
 * its first byte picks a rank R (mod 3); the rest becomes that directory's
 * zero3-rank-R.json, next to the fixture's other two manifests.  Then
 * gfs_import_zero3() runs on the directory and, when it succeeds, every
 * tensor is read through gfs_tensor_read() (as stored and as bf16).  Must
 * never crash, leak or hang; a refusal must come with a one-line message.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_ZERO3_DEFAULT
#define GFS_FUZZ_ZERO3_DEFAULT "tests/data/lomo/saves/ws3_bf16/gfs_save"
#endif
#define RANKS 3

static char g_dir[] = "/tmp/gfs-fuzz-zero3.XXXXXX";
static char g_src[512];
static char g_bin[RANKS][600];
static char g_json[RANKS][600];

static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_import_zero3: %s %s (set GFS_FUZZ_ZERO3)\n", what, path);
	abort();
}

static void cleanup(void)
{
	for (int r = 0; r < RANKS; r++) {
		unlink(g_bin[r]);
		unlink(g_json[r]);
	}
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *save = getenv("GFS_FUZZ_ZERO3");
	char from[1100];

	(void)argc;
	(void)argv;
	if (!save)
		save = GFS_FUZZ_ZERO3_DEFAULT;
	if (!realpath(save, g_src))
		die("cannot resolve", save);
	if (!mkdtemp(g_dir))
		die("cannot create", g_dir);
	atexit(cleanup);
	for (int r = 0; r < RANKS; r++) {
		snprintf(from, sizeof(from), "%s/zero3-rank-%d.bin", g_src, r);
		snprintf(g_bin[r], sizeof(g_bin[r]), "%s/zero3-rank-%d.bin", g_dir, r);
		snprintf(g_json[r], sizeof(g_json[r]), "%s/zero3-rank-%d.json", g_dir, r);
		if (symlink(from, g_bin[r]) != 0)
			die("cannot link", g_bin[r]);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;
	const int pick = size ? data[0] % RANKS : 0;
	char from[1100];

	for (int r = 0; r < RANKS; r++) {
		unlink(g_json[r]);
		if (r == pick) {
			FILE *f = fopen(g_json[r], "wb");

			if (!f || (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) ||
			    fclose(f) != 0)
				die("cannot write", g_json[r]);
			continue;
		}
		snprintf(from, sizeof(from), "%s/zero3-rank-%d.json", g_src, r);
		if (symlink(from, g_json[r]) != 0)
			die("cannot link", g_json[r]);
	}
	if (gfs_import_zero3(g_dir, NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
