/*
 * gatherfs — importers: turn a checkpoint on disk into a layout index.
 *
 * Importers read metadata only (pickles, zip central directories, local
 * headers); they never read tensor payloads.
 */
#ifndef GATHERFS_IMPORT_H
#define GATHERFS_IMPORT_H

#include "gatherfs/layout.h"

typedef struct gfs_import_opts {
	const char *tag; /* DeepSpeed tag (e.g. "global_step3"); NULL: read `latest` */
} gfs_import_opts;

/*
 * gfs_import(): detect the format of path and import it.  path may be
 *   - a layout JSON file (docs/layout-json.md);
 *   - a DeepSpeed save directory (holding `latest` and tag directories), a
 *     tag directory, or a save directory with opts->tag set.
 * opts may be NULL.  @return GFS_OK and a finished layout in *out.
 */
gfs_err gfs_import(const char *path, const gfs_import_opts *opts, gfs_layout **out);

/*
 * gfs_import_deepspeed(): import a DeepSpeed ZeRO 1/2/3 (or BF16_Optimizer)
 * checkpoint; dir and tag as for gfs_import().  The output follows DESIGN.md
 * §2: model key order, fp32 masters for trainable params, frozen params and
 * buffers in their stored dtype, tied aliases, no padding.
 */
gfs_err gfs_import_deepspeed(const char *dir, const char *tag, gfs_layout **out);

#endif
