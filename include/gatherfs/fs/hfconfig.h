/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the model's configuration files as the mount serves them
 * (config.json, generation_config.json): the text the import generated
 * (gfs_layout.texts) or the checkpoint root's own file passed through, and
 * config.json rewritten to agree with the tensors served (a head untied by
 * a LoRA merge, another dtype).  The mount, `gatherfs-inspect cat` and
 * `export` all take them from here, so they show the same bytes.
 */
#ifndef GATHERFS_FS_HFCONFIG_H
#define GATHERFS_FS_HFCONFIG_H

#include "gatherfs/index/layout.h"

/* The root files a loader (from_pretrained) reads besides the weights. */
extern const char *const gfs_config_names[];
#define GFS_CONFIG_NNAMES 2

/*
 * gfs_config_served(): the bytes root file name of l is served with, as a
 * new string in *text (free() it), its length in *len; *text NULL when l
 * has no such file.  name is one of gfs_config_names.  Its source: the
 * layout's generated text of that name, else the regular file name in
 * l->root_dir (at most 16 MiB; a symbolic link only if it stays beneath
 * root_dir or is a Hugging Face snapshot's link into blobs/).  config.json
 * is rewritten (as cJSON prints it) when untied ("tie_word_embeddings":
 * false) or when want (GFS_DT_INVALID: as stored) is a floating-point
 * dtype its "torch_dtype" (and transformers 5's "dtype") do not already
 * name; *rewritten (if not NULL) says whether it was.  A config.json that
 * is unreadable or not a JSON object is an error naming it.
 */
gfs_err gfs_config_served(const gfs_layout *l, const char *name, gfs_dtype want, bool untied,
			  char **text, size_t *len, bool *rewritten);

#endif
