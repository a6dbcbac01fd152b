/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the rank-dict importer's verl layout
 * (import_rankdict.h): a checkpoint root whose
 * latest_checkpointed_iteration.txt names a global_step_N directory
 * holding a role directory (actor/) of rank files and fsdp_config.json.
 *
 * Per input, a fresh root is built in a temporary directory, the rank
 * files linked from the fixture GFS_FUZZ_VERL (or -DGFS_FUZZ_VERL_DEFAULT:
 * an FSDP2 save of 2 ranks, global_step_2/actor), and the first byte picks
 * what the rest of the input becomes:
 *   0  latest_checkpointed_iteration.txt (global_step_2/actor as saved);
 *   1  actor/fsdp_config.json;
 *   2  three lines: the step directory's name, the role directory's name
 *      (each one path component; others fall back to the saved names) and
 *      the tag (-o tag=, none when empty); the iteration file says 2.
 * Then gfs_import() runs on the root (format detection included: Megatron
 * reads a file of the same name) and, when it succeeds, every tensor is
 * read through gfs_tensor_read() (as stored and as bf16).  Must never
 * crash, leak or hang; a refusal must come with a one-line message.
 */
#include "config.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/server/server.h"

#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#ifndef GFS_FUZZ_VERL_DEFAULT
#define GFS_FUZZ_VERL_DEFAULT "tests/data/fsdp_rank/fsdp2_ws2"
#endif

static const char *const g_ranks[] = { "model_world_size_2_rank_0.pt", "model_world_size_2_rank_1.pt",
				       "optim_world_size_2_rank_0.pt", "optim_world_size_2_rank_1.pt",
				       "fsdp_config.json" };
static char g_tmp[] = "/tmp/gfs-fuzz-verl.XXXXXX";
static char g_root[600];
static char g_src[4096];

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return flag == FTW_DP ? rmdir(path) : unlink(path);
}

static void cleanup(void)
{
	nftw(g_tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *save = getenv("GFS_FUZZ_VERL");

	(void)argc;
	(void)argv;
	if (!save)
		save = GFS_FUZZ_VERL_DEFAULT;
	if (!realpath(save, g_src) || !mkdtemp(g_tmp)) {
		fprintf(stderr, "fuzz_import_verl: cannot resolve %s or create %s (set GFS_FUZZ_VERL)\n",
			save, g_tmp);
		abort();
	}
	atexit(cleanup);
	snprintf(g_root, sizeof(g_root), "%s/root", g_tmp);
	return 0;
}

/* usable(): s[0..n) is a name we may create (one path component). */
static bool usable(const char *s, size_t n)
{
	return n > 0 && n < 200 && !memchr(s, '/', n) && !memchr(s, '\0', n) &&
	       !(n == 1 && s[0] == '.') && !(n == 2 && s[0] == '.' && s[1] == '.');
}

/* build(): the root with step directory step, role directory role. */
static void build(const char *step, const char *role, const uint8_t *cfg, size_t cfg_len)
{
	char dir[1200], from[4400];

	nftw(g_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	snprintf(dir, sizeof(dir), "%s/%s", g_root, step);
	if (mkdir(g_root, 0700) != 0 || mkdir(dir, 0700) != 0)
		abort();
	snprintf(dir, sizeof(dir), "%s/%s/%s", g_root, step, role);
	if (mkdir(dir, 0700) != 0)
		abort();
	for (size_t i = 0; i < sizeof(g_ranks) / sizeof(g_ranks[0]); i++) {
		if (cfg && strcmp(g_ranks[i], "fsdp_config.json") == 0) {
			fuzz_spill(dir, g_ranks[i], cfg, cfg_len);
			continue;
		}
		snprintf(from, sizeof(from), "%s/global_step_2/actor/%s", g_src, g_ranks[i]);
		fuzz_link(from, dir, g_ranks[i]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_import_opts opts = { 0 };
	gfs_layout *l = NULL;
	char step[256] = "global_step_2", role[256] = "actor", tag[256];
	const uint8_t *rest = data + 1;
	size_t n = size ? size - 1 : 0;

	if (size == 0)
		return 0;
	switch (data[0] % 3) {
	case 0:
		build(step, role, NULL, 0);
		fuzz_spill(g_root, "latest_checkpointed_iteration.txt", rest, n);
		break;
	case 1:
		build(step, role, rest, n);
		fuzz_spill(g_root, "latest_checkpointed_iteration.txt", "2", 1);
		break;
	default: {
		char *const field[3] = { step, role, tag };
		const uint8_t *p = rest, *end = rest + n;

		for (int f = 0; f < 3; f++) {
			const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));
			const size_t len = (size_t)((nl ? nl : end) - p);

			if ((f == 2 && len < sizeof(tag) && !memchr(p, '\0', len)) || usable((const char *)p, len)) {
				memcpy(field[f], p, len);
				field[f][len] = '\0';
			} else if (f == 2) {
				tag[0] = '\0';
			}
			p = nl ? nl + 1 : end;
		}
		build(step, role, NULL, 0);
		fuzz_spill(g_root, "latest_checkpointed_iteration.txt", "2", 1);
		opts.tag = tag[0] ? tag : NULL;
		break;
	}
	}
	if (gfs_import(g_root, &opts, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
