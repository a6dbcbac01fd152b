/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for -o tp_split files (the JSON object of
 * re.match patterns -> split dimension of a DeepSpeed tensor-parallel
 * checkpoint, docs/deepspeed-3d.md; patterns in src/util/pyre.c's subset).
 *
 * The input is the tp_split file; gfs_import_deepspeed() runs with it on
 * the real tensor-parallel save GFS_FUZZ_TP (environment variable, or the
 * path compiled in with -DGFS_FUZZ_TP_DEFAULT: tp2_buf_dp1_z1_fp32_uci,
 * whose buffer no universal_checkpoint_info pattern covers, so only the
 * file decides) and, when it succeeds, every tensor is read through
 * gfs_tensor_read() (as stored and as bf16).  Must never crash, leak or
 * hang; a refusal must come with a one-line message.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_TP_DEFAULT
#define GFS_FUZZ_TP_DEFAULT "tests/data/ds3d/tp2_buf_dp1_z1_fp32_uci/checkpoint"
#endif

static char g_dir[] = "/tmp/gfs-fuzz-tpsplit.XXXXXX";
static char g_file[600];
static char g_save[4096];

static void cleanup(void)
{
	unlink(g_file);
	rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *save = getenv("GFS_FUZZ_TP");

	(void)argc;
	(void)argv;
	if (!save)
		save = GFS_FUZZ_TP_DEFAULT;
	if (!realpath(save, g_save) || !mkdtemp(g_dir)) {
		fprintf(stderr, "fuzz_tp_split: cannot resolve %s or create %s (set GFS_FUZZ_TP)\n", save,
			g_dir);
		abort();
	}
	atexit(cleanup);
	snprintf(g_file, sizeof(g_file), "%s/split.json", g_dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;

	fuzz_spill(g_dir, "split.json", data, size);
	if (gfs_import_deepspeed(g_save, NULL, g_file, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
