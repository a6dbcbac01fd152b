/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the importer of per-rank state dicts
 * (DTensor and ShardedTensor pickles), on a real save.
 *
 * At startup, the rank files of the fixture GFS_FUZZ_RANKDICT (environment
 * variable, or the path compiled in with -DGFS_FUZZ_RANKDICT_DEFAULT: an
 * FSDP2 actor directory of 2 ranks with model and optimizer files) are
 * linked into a temporary directory.  Per input, its first byte picks a
 * rank R (bit 0) and a file kind (bit 1: model or optim); the rest becomes
 * that file, next to the fixture's other three.  Then gfs_import_rankdict()
 * runs on the directory and, when it succeeds, every tensor is read
 * through gfs_tensor_read() (as stored and as bf16).  Must never crash,
 * leak or hang; a refusal must come with a one-line message.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gatherfs/importers/import_rankdict.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_RANKDICT_DEFAULT
#define GFS_FUZZ_RANKDICT_DEFAULT "tests/data/fsdp_rank/fsdp2_ws2/global_step_2/actor"
#endif
#define RANKS 2

static const char *const kinds[2] = { "model", "optim" };
static char g_dir[] = "/tmp/gfs-fuzz-rankdict.XXXXXX";
static char g_src[512];
static char g_file[2][RANKS][600];

static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_import_rankdict: %s %s (set GFS_FUZZ_RANKDICT)\n", what, path);
	abort();
}

static void cleanup(void)
{
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < RANKS; r++)
			unlink(g_file[k][r]);
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *save = getenv("GFS_FUZZ_RANKDICT");

	(void)argc;
	(void)argv;
	if (!save)
		save = GFS_FUZZ_RANKDICT_DEFAULT;
	if (!realpath(save, g_src))
		die("cannot resolve", save);
	if (!mkdtemp(g_dir))
		die("cannot create", g_dir);
	atexit(cleanup);
	for (int k = 0; k < 2; k++)
		for (int r = 0; r < RANKS; r++)
			snprintf(g_file[k][r], sizeof(g_file[k][r]), "%s/%s_world_size_%d_rank_%d.pt",
				 g_dir, kinds[k], RANKS, r);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;
	const int pick = size ? data[0] % (2 * RANKS) : 0;
	char from[1100];

	for (int k = 0; k < 2; k++)
		for (int r = 0; r < RANKS; r++) {
			unlink(g_file[k][r]);
			if (k * RANKS + r == pick) {
				FILE *f = fopen(g_file[k][r], "wb");

				if (!f || (size > 1 && fwrite(data + 1, 1, size - 1, f) != size - 1) ||
				    fclose(f) != 0)
					die("cannot write", g_file[k][r]);
				continue;
			}
			snprintf(from, sizeof(from), "%s/%s_world_size_%d_rank_%d.pt", g_src, kinds[k],
				 RANKS, r);
			if (symlink(from, g_file[k][r]) != 0)
				die("cannot link", g_file[k][r]);
		}
	if (gfs_import_rankdict(g_dir, NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
