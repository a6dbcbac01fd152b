/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — importer dispatch: detect what a path holds.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "gatherfs/importers/hfcache.h"
#include "gatherfs/importers/import.h"
#include "gatherfs/importers/import_megatron.h"
#include "gatherfs/importers/import_plain.h"
#include "gatherfs/importers/import_rankdict.h"
#include "gatherfs/readers/pickle.h"

/* has_file(): does directory path hold a regular file called name? */
static bool has_file(const char *path, const char *name)
{
	struct stat st;
	char buf[4096];

	if ((size_t)snprintf(buf, sizeof(buf), "%s/%s", path, name) >= sizeof(buf))
		return false;
	return stat(buf, &st) == 0 && S_ISREG(st.st_mode);
}

/*
 * holds_states(): does directory path hold a ZeRO model or optimizer
 * states file (*_model_states.pt, *_optim_states.pt), or, with sub, does
 * one of its subdirectories (a tag directory)?
 */
static bool holds_states(const char *path, bool sub)
{
	DIR *d = opendir(path);
	const struct dirent *de;
	bool found = false;

	if (!d)
		return false;
	while (!found && (de = readdir(d))) {
		const size_t n = strlen(de->d_name);
		struct stat st;
		char buf[4096];

		found = (n > 16 && strcmp(de->d_name + n - 16, "_optim_states.pt") == 0) ||
			(n > 16 && strcmp(de->d_name + n - 16, "_model_states.pt") == 0);
		if (!found && sub && strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0 &&
		    (size_t)snprintf(buf, sizeof(buf), "%s/%s", path, de->d_name) < sizeof(buf) &&
		    stat(buf, &st) == 0 && S_ISDIR(st.st_mode))
			found = holds_states(buf, false);
	}
	closedir(d);
	return found;
}

/*
 * is_deepspeed(): does directory path look like a DeepSpeed save or tag
 * directory: a `latest` file, or ZeRO states files in it or in a tag
 * directory under it?
 */
static bool is_deepspeed(const char *path)
{
	return has_file(path, "latest") || holds_states(path, true);
}

/* is_dcp(): does directory path hold a `.metadata` file? */
static bool is_dcp(const char *path)
{
	return has_file(path, ".metadata");
}

/*
 * dir_format(): the format of directory path: DCP, a zero3 save (or a
 * directory of them, unless it is a DeepSpeed checkpoint), DeepSpeed
 * (shards win over plain files), a layout.json, plain model files; NULL
 * for none of them.
 */
static const char *dir_format(const char *path, const char *tag)
{
	if (is_dcp(path))
		return gfs_megatron_detect(path) ? "megatron" : "dcp";
	if (gfs_zero3_detect(path) || (!is_deepspeed(path) && gfs_zero3_detect_saves(path)))
		return "zero3";
	if (gfs_rankdict_detect(path))
		return "rankdict";
	if (gfs_megatron_detect(path))
		return "megatron";
	if (tag || is_deepspeed(path))
		return "deepspeed";
	if (has_file(path, "layout.json"))
		return "layout";
	return gfs_plain_has_model(path) ? "plain" : NULL;
}

/* import_path(): gfs_import() but for the pickle pool. */
static gfs_err import_path(const char *path, const gfs_import_opts *opts, gfs_layout **out)
{
	struct stat st;
	const char *tag = opts ? opts->tag : NULL;
	const char *format = opts && opts->format && strcmp(opts->format, "auto") != 0
				     ? opts->format : NULL;
	const char *prefix = opts && opts->prefix && opts->prefix[0] ? opts->prefix : NULL;

	if (format && strcmp(format, "dcp") != 0 && strcmp(format, "deepspeed") != 0 &&
	    strcmp(format, "layout") != 0 && strcmp(format, "plain") != 0 &&
	    strcmp(format, "zero3") != 0 && strcmp(format, "megatron") != 0 &&
	    strcmp(format, "rankdict") != 0)
		return gfs_fail(GFS_ERR_INVAL,
				"unknown input format '%s' (dcp, deepspeed, plain, layout, zero3, megatron, rankdict or auto)",
				format);
	if (stat(path, &st) != 0)
		return gfs_fail(errno == ENOENT ? GFS_ERR_NOTFOUND : GFS_ERR_IO, "%s: %s", path,
				strerror(errno));
	if (!format && S_ISREG(st.st_mode))
		format = gfs_plain_is_file(path) ? "plain" : "layout";
	else if (!format)
		format = S_ISDIR(st.st_mode) ? dir_format(path, tag) : "deepspeed";
	if (!format)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: no known checkpoint format (looked for: DeepSpeed `latest` or *_model_states.pt / *_optim_states.pt in it or a tag directory, "
				"PyTorch DCP .metadata, zero3-rank-*.json or .bin, "
				"Megatron latest_checkpointed_iteration.txt, iter_*/ or mp_rank_*/model_optim_rng.pt or metadata.json + common.pt, "
				"verl/FSDP model_world_size_W_rank_R.pt in it, actor/, critic/ or global_step_*/, "
				"layout.json, model.safetensors / pytorch_model.bin or their .index.json; "
				"name another format with --input-format or -o format=)",
				path);
	if (prefix && strcmp(format, "dcp") != 0 && strcmp(format, "plain") != 0)
		return gfs_fail(GFS_ERR_INVAL,
				"%s: a key prefix applies to a DCP checkpoint only, or to plain model files",
				path);
	if (tag && strcmp(format, "deepspeed") != 0 && strcmp(format, "layout") != 0 &&
	    strcmp(format, "zero3") != 0 && strcmp(format, "megatron") != 0 &&
	    strcmp(format, "rankdict") != 0)
		return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a DeepSpeed, Megatron or per-rank checkpoint only",
				path);
	if (opts && (opts->naming || opts->hf_config) && strcmp(format, "megatron") != 0)
		return gfs_fail(GFS_ERR_INVAL, "%s: %s applies to a Megatron checkpoint only", path,
				opts->naming ? "a naming" : "an hf_config");
	if (opts && opts->tp_split && strcmp(format, "deepspeed") != 0)
		return gfs_fail(GFS_ERR_INVAL, "%s: a tp_split applies to a DeepSpeed checkpoint only", path);
	if (strcmp(format, "layout") == 0 && S_ISDIR(st.st_mode) && has_file(path, "layout.json")) {
		char buf[4096];

		if (tag)
			return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a checkpoint directory, not to a layout file",
					path);
		if ((size_t)snprintf(buf, sizeof(buf), "%s/layout.json", path) >= sizeof(buf))
			return gfs_fail(GFS_ERR_INVAL, "%s: path too long", path);
		return gfs_layout_load_file(buf, out);
	}
	if (strcmp(format, "layout") == 0) {
		if (!S_ISREG(st.st_mode))
			return gfs_fail(GFS_ERR_INVAL, "%s: not a layout file", path);
		if (tag)
			return gfs_fail(GFS_ERR_INVAL, "%s: a tag applies to a checkpoint directory, not to a layout file",
					path);
		return gfs_layout_load_file(path, out);
	}
	if (strcmp(format, "plain") == 0)
		return S_ISREG(st.st_mode) ? gfs_import_plain_file(path, prefix, out)
					   : gfs_import_plain_dir(path, prefix, out);
	if (!S_ISDIR(st.st_mode))
		return gfs_fail(GFS_ERR_INVAL, "%s: neither a checkpoint directory nor a layout file",
				path);
	if (strcmp(format, "dcp") == 0)
		return gfs_import_dcp(path, prefix, out);
	if (strcmp(format, "zero3") == 0)
		return gfs_import_zero3(path, tag, out);
	if (strcmp(format, "megatron") == 0)
		return gfs_import_megatron(path, opts, out);
	if (strcmp(format, "rankdict") == 0)
		return gfs_import_rankdict(path, tag, out);
	return gfs_import_deepspeed(path, tag, opts ? opts->tp_split : NULL, out);
}

/*
 * import_hf(): a Hugging Face cache repository: its snapshot opts->tag
 * (refs/main without one), imported as a directory (the tag is spent).
 */
static gfs_err import_hf(const char *repo, const gfs_import_opts *opts, gfs_layout **out)
{
	gfs_import_opts snap_opts = opts ? *opts : (gfs_import_opts){ 0 };
	char *snap;
	gfs_err err = gfs_hf_snapshot(repo, snap_opts.tag, &snap);

	if (err)
		return err;
	snap_opts.tag = NULL;
	err = import_path(snap, &snap_opts, out);
	if (!err) {
		/* which snapshot, and through which ref, on stderr with the layout's note */
		const char *rev = strrchr(snap, '/') + 1;
		const char *tag = opts ? opts->tag : NULL;
		const char *old = (*out)->note;
		const bool given = tag && strcmp(tag, rev) == 0;
		const size_t n = strlen(rev) + (tag ? strlen(tag) : 4) + (old ? strlen(old) : 0) + 64;
		char *note = malloc(n);

		if (note) {
			snprintf(note, n, "Hugging Face cache: snapshot %s%s%s%s%s", rev,
				 given ? " (given)" : ", named by refs/", given ? "" : tag ? tag : "main",
				 old ? "; " : "", old ? old : "");
			err = gfs_layout_set_note(*out, note);
		} else {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		free(note);
		if (err) {
			gfs_layout_free(*out);
			*out = NULL;
		}
	}
	free(snap);
	return err;
}

const char gfs_import_formats[] =
	"  DeepSpeed ZeRO 1/2/3, BF16_Optimizer\n"
	"  DeepSpeed optimizer state, universal checkpoint\n"
	"  DeepSpeed pipeline, MoE, tensor parallel\n"
	"  PyTorch DCP (torch.distributed.checkpoint)\n"
	"  Megatron-LM / Megatron-Core (legacy and torch_dist)\n"
	"  Per-rank state dicts (verl, FSDP1/FSDP2)\n"
	"  Rank-local ZeRO-3 saves (gatherfs_save.py, LOMO)\n"
	"  Plain model files, Hugging Face cache\n"
	"  FP8 weight-quantized Hugging Face models (DeepSeek-V3, Qwen3-FP8,\n"
	"    compressed-tensors)\n"
	"  LoRA: PEFT adapters, merged on read\n"
	"  A layout JSON (hand-written or saved)\n";

gfs_err gfs_import(const char *path, const gfs_import_opts *opts, gfs_layout **out)
{
	char *real = opts && opts->tag ? realpath(path, NULL) : NULL;
	gfs_err err;

	if (real && gfs_hf_is_snapshot(real))
		err = gfs_fail(GFS_ERR_INVAL,
			       "%s: a snapshot of a Hugging Face cache repository: a tag picks a snapshot of the repository itself",
			       path);
	else
		err = gfs_hf_is_repo(path) ? import_hf(path, opts, out) : import_path(path, opts, out);
	free(real);
	gfs_pickle_pool_drain();
	return err;
}
