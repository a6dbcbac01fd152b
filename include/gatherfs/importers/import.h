/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — importers: turn a checkpoint on disk into a layout index.
 *
 * Importers read metadata only (pickles, zip central directories, local
 * headers); they never read tensor payloads.
 */
#ifndef GATHERFS_IMPORT_H
#define GATHERFS_IMPORT_H

#include "gatherfs/index/layout.h"

typedef struct gfs_dcpmeta gfs_dcpmeta;

typedef struct gfs_import_opts {
	const char *tag;    /* DeepSpeed tag (e.g. "global_step3"); NULL: read `latest`;
			     * of a Hugging Face cache repository: its revision */
	const char *format; /* "dcp", "deepspeed", "plain", "layout", "zero3", "megatron", "rankdict"; NULL or "auto": detect */
	const char *prefix; /* DCP, plain: keep only keys starting with it, without it; NULL: all */
	const char *naming; /* Megatron: "hf", "megatron", or NULL / "auto" (hf when the
			     * architecture is known, else megatron) */
	const char *hf_config; /* Megatron: a directory holding the model's config.json, or NULL */
	const char *tp_split;  /* DeepSpeed tensor parallelism: a JSON file of patterns -> split
				* dimension (docs/deepspeed-3d.md), or NULL */
} gfs_import_opts;

/*
 * gfs_import(): detect the format of path and import it.  path may be
 *   - a layout JSON file (docs/layout-json.md);
 *   - a PyTorch DCP directory (one holding `.metadata`);
 *   - a rank-local ZeRO-3 save (zero3-rank-*.json/.bin, written by
 *     python/gatherfs_save.py);
 *   - per-rank state dicts (verl, FSDP): a directory of
 *     model_world_size_W_rank_R.pt files, a global_step_N directory or a
 *     verl checkpoint root (import_rankdict.h);
 *   - a legacy Megatron-LM save or iteration directory (import_megatron.h);
 *   - a directory holding `layout.json` and no `latest` (a hand-written
 *     layout over files of that directory);
 *   - a DeepSpeed save directory (holding `latest` and tag directories), a
 *     tag directory, or a save directory with opts->tag set;
 *   - plain model files (import_plain.h): a directory holding
 *     model.safetensors, pytorch_model.bin or their .index.json and no
 *     DCP or DeepSpeed files (shards win over plain files), or one such
 *     file (told from a layout JSON by its contents);
 *   - a Hugging Face cache repository models--ORG--NAME (hfcache.h): its
 *     snapshot opts->tag (a revision or a ref), or the one refs/main
 *     names, imported as the directory it is.
 * opts->format forces one of them ("layout", "dcp", "deepspeed", "plain",
 * "zero3", "megatron", "rankdict"); an unknown name is GFS_ERR_INVAL.  opts->tag applies to
 * DeepSpeed, Megatron, zero3 and per-rank saves and cache repositories only, opts->prefix to DCP and plain files only
 * (GFS_ERR_INVAL otherwise).
 * opts may be NULL.
 * @return GFS_OK and a finished layout in *out.
 */
gfs_err gfs_import(const char *path, const gfs_import_opts *opts, gfs_layout **out);

/*
 * gfs_import_formats: the formats gfs_import() detects, for --help texts: one
 * per line, each indented two spaces and ending in a newline.
 */
extern const char gfs_import_formats[];

/*
 * gfs_import_deepspeed(): import a DeepSpeed ZeRO 1/2/3 (or BF16_Optimizer)
 * checkpoint; dir and tag as for gfs_import().  The output follows DESIGN.md
 * §2: model key order, fp32 masters for trainable params, frozen params and
 * buffers in their stored dtype, tied aliases, no padding.  Pipeline,
 * mixture-of-experts and tensor-parallel checkpoints are put together as
 * docs/deepspeed-3d.md says, or refused with one line.  tp_split (may be
 * NULL): a JSON file of patterns saying how a tensor-parallel checkpoint's
 * params are split, used instead of its universal_checkpoint_info; refused
 * for a checkpoint that is not tensor-parallel.
 */
gfs_err gfs_import_deepspeed(const char *dir, const char *tag, const char *tp_split,
			     gfs_layout **out);

/*
 * gfs_import_dcp(): import the PyTorch Distributed Checkpoint in dir (its
 * `.metadata` and the .distcp files it names).  Tensors come in
 * state_dict_metadata order with their stored dtypes; chunks split on an
 * inner dimension become strided pieces, zstd-transformed items ZSTD
 * pieces; BytesStorageMetadata entries become layout objects.  With prefix
 * (may be NULL), only keys starting with it are kept, named without it; no
 * such key is GFS_ERR_NOTFOUND.  Validates that the chunks of each tensor
 * tile it exactly and that every item lies inside its file.
 */
gfs_err gfs_import_dcp(const char *dir, const char *prefix, gfs_layout **out);

/*
 * Chunk archives are opened lazily: the import opens one archive of each
 * shape of item (the item's length less its tensor's bytes, those bytes
 * modulo 4096, an item past 4 GiB) to learn where such an archive holds
 * its storage record, and places the records of the other chunks of that
 * shape from .metadata alone as lazy records (gfs_record.lazy), which the
 * first check of each opens (gfs_dcp_confirm()).  zstd items, and items
 * whose sampled archive holds more than its chunk's bytes, are opened at
 * import.  GATHERFS_DCP_EAGER=1 in the environment opens every archive
 * at import.
 */

/*
 * gfs_dcp_confirm(): open the chunk archive of lazy record r (its item in
 * fd, the source at path) and check that it is a torch.save zip of one
 * contiguous tensor of r's dtype and r->len bytes whose storage record
 * lies at r->off, r->len bytes.  @return GFS_OK and its stored CRC-32 in
 * *crc, or GFS_ERR_IO naming the file, the item and the problem.
 * Thread-safe (reads fd with pread).
 */
gfs_err gfs_dcp_confirm(const gfs_record *r, int fd, const char *path, uint32_t *crc);

/*
 * gfs_dcp_parse_metadata(): parse a DCP `.metadata` pickle held in
 * buf[0..len) with the DCP metadata reader (gatherfs/readers/dcpmeta.h)
 * and check its shape: a Metadata object whose state_dict_metadata has
 * string keys and whose storage_data maps MetadataIndex objects (fqn
 * string, offset tuple or None) to _StorageInfo objects (relative_path
 * string, non-negative offset and length).  Key, fqn and relative_path
 * strings must hold no NUL or control character.  label names the file in
 * messages.  @return GFS_OK and the metadata in *out (the caller frees it
 * with gfs_dcpmeta_free()).
 */
gfs_err gfs_dcp_parse_metadata(const uint8_t *buf, size_t len, const char *label,
			       gfs_dcpmeta **out);

/*
 * gfs_import_zero3(): import a rank-local ZeRO-3 save (docs/zero3-save.md):
 * the one written straight into dir if it holds rank files, else that of
 * dir/tag with tag, else the newest complete save among the subdirectories
 * of dir that hold rank files (not hidden ones), which the layout's note
 * names with the newer incomplete ones.  Of that save, rank 0's manifest
 * gives the tag, the world size W
 * and the tensor table; the manifests of ranks 1..W-1 must agree with it,
 * no file of a rank >= W may be present, each data file must have the
 * size its manifest records and each rank's byte ranges must be those the
 * partition arithmetic gives.  With tag (may be NULL), the save must carry
 * that tag.  The CRC-32 of each tensor's bytes in a rank file, when the
 * manifests give them, makes them a checksummed record.  The stale live
 * copies the ranks report are summarised in the layout's info.  Passes the
 * save directory's other files through (config.json).
 */
gfs_err gfs_import_zero3(const char *dir, const char *tag, gfs_layout **out);

/* gfs_zero3_detect(): does directory dir hold a file named zero3-rank-R.json or .bin? */
bool gfs_zero3_detect(const char *dir);

/*
 * gfs_zero3_detect_saves(): does a subdirectory of dir that is not hidden
 * hold such a file (a directory of saves, one per tag)?
 */
bool gfs_zero3_detect_saves(const char *dir);

#endif
