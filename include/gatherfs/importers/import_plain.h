/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — plain model files as a source: what transformers'
 * save_pretrained, torch.save and safetensors write.
 *
 *   model.safetensors                    one safetensors file
 *   model.safetensors.index.json         sharded safetensors (weight_map)
 *   pytorch_model.bin                    one torch.save zip (torch >= 1.6)
 *   pytorch_model.bin.index.json         sharded torch.save zips
 *   adapter_model.safetensors / .bin     a PEFT adapter's tensors (only
 *                                        when no model file is present)
 *
 * Only metadata is read: the safetensors header (length-bounded, every
 * entry checked, offsets tiling the data buffer exactly as the safetensors
 * format requires), or the zip central directory and the data.pkl pickle
 * of a torch zip (through the safe pickle reader: nothing is executed).
 *
 * Tensors of a torch zip may be views into larger or shared storages
 * (storage offset, strides): a C-contiguous view is one piece, any other
 * view becomes strided pieces (at most GFS_PLAIN_MAX_PIECES per tensor, and
 * GFS_PLAIN_MAX_STRIDED runs x pieces in all where they interleave, else
 * it is refused).  Two keys viewing one storage at the same offset
 * with the same dtype, shape and strides are a tied pair: the later one
 * becomes an alias of the first; other overlapping views are separate
 * tensors, each with its own pieces.
 *
 * Output order: a torch zip's keys in pickle (state_dict) order; a
 * safetensors file's keys in header order; a sharded model shard by shard
 * (shard file names in byte order), each in its own order.  The index files
 * used are recorded as layout sources (no pieces) next to the data files,
 * so that a mount does not pass them through.
 */
#ifndef GATHERFS_IMPORT_PLAIN_H
#define GATHERFS_IMPORT_PLAIN_H

#include "gatherfs/index/layout.h"

/* Longest safetensors header accepted (the safetensors library's limit). */
#define GFS_PLAIN_MAX_HEADER ((uint64_t)100000000)
/* Longest index JSON accepted. */
#define GFS_PLAIN_MAX_INDEX ((uint64_t)1 << 28)
/* Most pieces one non-contiguous torch view may become. */
#define GFS_PLAIN_MAX_PIECES ((uint64_t)1 << 20)
/*
 * Most runs x pieces of the views of one import made of interleaved strided
 * pieces (transposed matrices): the layout's tiling check walks every run
 * against the interleaved pieces (about 0.5 s at this bound).
 */
#define GFS_PLAIN_MAX_STRIDED ((uint64_t)1 << 27)

/*
 * gfs_import_plain_dir(): import the plain model files of directory dir.
 * Picks, in transformers' order of preference, the first of
 * model.safetensors, model.safetensors.index.json, pytorch_model.bin,
 * pytorch_model.bin.index.json that exists; if none does,
 * adapter_model.safetensors, then adapter_model.bin.  With prefix (NULL or
 * "" for all), only keys starting with it are kept, named without it (no
 * such key is GFS_ERR_NOTFOUND).  The layout's format is "plain", its
 * base_dir and root_dir are dir (so a mount passes dir's other files
 * through).  Errors are one line naming the file (GFS_ERR_NOTFOUND when dir
 * holds none of those files).  @return GFS_OK and a finished layout in
 * *out.
 */
gfs_err gfs_import_plain_dir(const char *dir, const char *prefix, gfs_layout **out);

/*
 * gfs_import_plain_file(): import one plain file: a safetensors file, a
 * torch zip (told apart by their contents, not their names), or an index
 * JSON (a name ending in ".index.json") together with the shards it names
 * next to it.  prefix as for gfs_import_plain_dir().  base_dir is the
 * file's directory; root_dir is unset (nothing is passed through).
 * @return GFS_OK and a finished layout in *out.
 */
gfs_err gfs_import_plain_file(const char *path, const char *prefix, gfs_layout **out);

/*
 * gfs_plain_is_model_name(): name is one of the plain model file names of a
 * Hugging Face model directory: model.safetensors, pytorch_model.bin, their
 * .index.json files, or a shard model-NNNNN-of-NNNNN.safetensors /
 * pytorch_model-NNNNN-of-NNNNN.bin.  A mount never passes such a file
 * through: it is either a source of the layout or shadowed by the mount's
 * own views.
 */
bool gfs_plain_is_model_name(const char *name);

/*
 * gfs_plain_has_model(): directory dir holds a regular file (or a link to
 * one) named model.safetensors, model.safetensors.index.json,
 * pytorch_model.bin or pytorch_model.bin.index.json.
 */
bool gfs_plain_has_model(const char *dir);

/*
 * gfs_plain_is_file(): the regular file at path looks like a plain model
 * file: a name ending in ".index.json", or contents starting like a
 * safetensors file (an 8-byte little-endian header length of at most
 * GFS_PLAIN_MAX_HEADER that fits in the file, then '{'; tried first, so a
 * length whose low byte is 0x80 is no pickle), a torch zip ("PK\3\4") or a
 * legacy torch.save pickle (0x80).  Reads at most 9 bytes.
 */
bool gfs_plain_is_file(const char *path);

/*
 * gfs_plain_hidden_note(): a one-line note naming the plain model files of
 * l->root_dir (gfs_plain_is_model_name()) that are no source of l: a mount
 * of l hides them.  *note is NULL when there is none (or l has no root
 * directory); the caller frees it.  A directory that cannot be listed
 * yields no note.
 */
gfs_err gfs_plain_hidden_note(const gfs_layout *l, char **note);

#endif
