/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — libFuzzer target for the plain model files importer.
 *
 * The first input byte chooses what the rest of the input becomes, in its
 * own temporary directory:
 *   0  model.safetensors (alone)
 *   1  pytorch_model.bin (alone)
 *   2  model-00001-of-00002.safetensors of a sharded model whose index and
 *      second shard are valid
 *   3  model.safetensors.index.json over two valid shards
 * Then gfs_import() runs on that directory (format detection included)
 * and, when it succeeds, every entry is read through gfs_tensor_read() (as
 * stored and as bf16).  Must never crash, leak or hang; a refusal must come
 * with a one-line message.
 */
#include "config.h"

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

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"

static const char *const g_names[4] = { "model.safetensors", "pytorch_model.bin", SHARD1, INDEX };
static char g_root[] = "/tmp/gfs-fuzz-plain.XXXXXX";
static char g_dir[4][512];

__attribute__((noreturn)) static void die(const char *what, const char *path)
{
	fprintf(stderr, "fuzz_import_plain: %s %s\n", what, path);
	abort();
}

static void spill(const char *dir, const char *name, const void *buf, size_t len)
{
	char path[600];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || (len && fwrite(buf, 1, len, f) != len) || fclose(f) != 0)
		die("cannot write", path);
}

/* spill_st(): a safetensors file of JSON header h and data bytes d[0..n). */
static void spill_st(const char *dir, const char *name, const char *h, const char *d, size_t n)
{
	uint8_t buf[512];
	const size_t hl = strlen(h);

	for (int i = 0; i < 8; i++)
		buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
	memcpy(buf + 8, h, hl);
	memcpy(buf + 8 + hl, d, n);
	spill(dir, name, buf, 8 + hl + n);
}

static void cleanup(void)
{
	char p[600];

	for (int i = 0; i < 4; i++) {
		for (int k = 0; k < 4; k++) {
			snprintf(p, sizeof(p), "%s/%s", g_dir[i], g_names[k]);
			unlink(p);
		}
		snprintf(p, sizeof(p), "%s/" SHARD2, g_dir[i]);
		unlink(p);
		rmdir(g_dir[i]);
	}
	rmdir(g_root);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char index[] =
		"{\"metadata\": {\"total_size\": 14}, \"weight_map\": {\"a\": \"" SHARD1
		"\", \"b\": \"" SHARD2 "\"}}";
	static const char h1[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
	static const char h2[] = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[0,6]}}";

	(void)argc;
	(void)argv;
	if (!mkdtemp(g_root))
		die("cannot create", g_root);
	atexit(cleanup);
	for (int i = 0; i < 4; i++) {
		snprintf(g_dir[i], sizeof(g_dir[i]), "%s/%d", g_root, i);
		if (mkdir(g_dir[i], 0700) != 0)
			die("cannot create", g_dir[i]);
	}
	for (int i = 2; i < 4; i++) {
		spill(g_dir[i], INDEX, index, strlen(index));
		spill_st(g_dir[i], SHARD1, h1, "\0\0\200?\0\0\0@", 8);
		spill_st(g_dir[i], SHARD2, h2, "\200?\0@@@", 6);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	gfs_layout *l = NULL;
	int which;

	if (size == 0)
		return 0;
	which = data[0] % 4;
	spill(g_dir[which], g_names[which], data + 1, size - 1);
	if (gfs_import(g_dir[which], NULL, &l) != GFS_OK) {
		fuzz_check_refusal(l);
		return 0;
	}
	fuzz_serve_and_free(l);
	return 0;
}
