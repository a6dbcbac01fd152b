/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the universal view: a DeepSpeed checkpoint's optimizer state
 * presented as the "universal checkpoint" that DeepSpeed's
 * `"checkpoint": {"load_universal": true}` loads at any world size (the
 * v0.14.5 and v0.19.5 loaders; format: ds_to_universal.py's output), served from the
 * shards without conversion:
 *
 *   latest_universal                 "<tag>_universal" (no newline)
 *   <tag>_universal/<model states>   the model-states file(s), passed through
 *   <tag>_universal/zero/optimizer_state.pt
 *       stage 1/2: {'ds_version', 'param_groups'}; stage 3:
 *       {'optimizer_state_dict': {'state': {0: {'step'}}, 'param_groups'}}
 *       (only what the loader reads)
 *   <tag>_universal/zero/<param>/fp32.pt, <state>.pt (exp_avg, exp_avg_sq...)
 *       stage 1/2: {'cat_dim': 0, 'param': T} with T in the param's shape
 *       (a 0-d param as shape (1,), which the loader can chunk); stage 3:
 *       the 1-D tensor [numel] (exactly numel: no padding)
 *   <tag>_universal/zero/<param>/step.pt   stage 1/2: the group's 0-d step
 *
 * Every .pt is a torch zip (view_torchzip.h) whose tensor bytes are layout
 * entries: the fp32 master (the model tensor) and the optimizer-state
 * entries (layout.h).  Always fp32, whatever the mount's output dtype.
 * <param> is the DeepSpeed name (the first name of a tied parameter).
 */
#ifndef GATHERFS_VIEW_UNIVERSAL_H
#define GATHERFS_VIEW_UNIVERSAL_H

#include "gatherfs/server/vfile.h"

typedef struct gfs_uview gfs_uview;

/*
 * gfs_uview_new(): compose the universal checkpoint of the finished layout
 * l whose sources are open in src (both must outlive the view).  crc_cache
 * as in gfs_vctx (may be NULL).  Reads no tensor data; composes only the
 * few files outside zero/<param>/ (the rest on first use).
 * @return GFS_OK and *out (freed with gfs_uview_free());
 * GFS_ERR_NOTFOUND if l holds no DeepSpeed optimizer state;
 * GFS_ERR_UNSUPPORTED, with one line saying why, for what DeepSpeed's
 * universal loader cannot consume correctly (mixture-of-experts, tensor
 * parallelism, round-robin gradients, states other than exp_avg/exp_avg_sq
 * at stage 3, no step, non-fp32 state).  ZeRO-3 with several param groups
 * or sub-groups is served (DeepSpeed >= 0.18 loads it: gfs_uview_note()).
 */
gfs_err gfs_uview_new(const gfs_layout *l, const gfs_srcset *src, const gfs_crccache *crc_cache,
		      gfs_uview **out);

/* gfs_uview_free(): NULL allowed. */
void gfs_uview_free(gfs_uview *u);

/*
 * gfs_uview_note(): one line for the user about who can load the view
 * (ZeRO-3 with several param groups or sub-groups needs DeepSpeed >= 0.18),
 * or NULL.  Owned by u.
 */
const char *gfs_uview_note(const gfs_uview *u);

/*
 * gfs_uview_nfiles(): the number of files, indexed 0.. in listing order:
 * latest_universal, the model states, zero/optimizer_state.pt (composed by
 * gfs_uview_new()), then zero/<param>/<stem>.pt per param (composed on first
 * use: gfs_uview_size(), gfs_uview_vfile()).
 */
size_t gfs_uview_nfiles(const gfs_uview *u);

/*
 * The zero/<param>/<stem>.pt files by (param p, stem s): file
 * gfs_uview_nfixed() + p * gfs_uview_per_param() + s.  gfs_uview_nfixed():
 * the files composed by gfs_uview_new(), listed first;
 * gfs_uview_nparams(): the params, in listing order; gfs_uview_per_param():
 * the files in each param's folder.
 */
size_t gfs_uview_nfixed(const gfs_uview *u);
size_t gfs_uview_nparams(const gfs_uview *u);
size_t gfs_uview_per_param(const gfs_uview *u);

/* gfs_uview_zero_dir(): "<tag>_universal/zero", the folder of the param folders.  Owned by u. */
const char *gfs_uview_zero_dir(const gfs_uview *u);

/* gfs_uview_param(): the folder name of param p (< gfs_uview_nparams()).  Owned by u. */
const char *gfs_uview_param(const gfs_uview *u, size_t p);

/* gfs_uview_stem(): the file name of stem s (< gfs_uview_per_param()): "fp32.pt"...  Owned by u. */
const char *gfs_uview_stem(const gfs_uview *u, size_t s);

/*
 * gfs_uview_find_param()/gfs_uview_find_stem(): the param whose folder, the
 * stem whose file is called name, or -1.  O(log params), O(stems).
 */
int64_t gfs_uview_find_param(const gfs_uview *u, const char *name);
int64_t gfs_uview_find_stem(const gfs_uview *u, const char *name);

/*
 * gfs_uview_path(): file i's path relative to the mount root
 * ("latest_universal", "global_step3_universal/zero/embed.weight/fp32.pt"...),
 * derived from the plan, written to buf as snprintf() does.  @return its
 * length (buf holds it all when that is below size).
 */
size_t gfs_uview_path(const gfs_uview *u, size_t i, char *buf, size_t size);

/*
 * gfs_uview_size(): file i's exact size, the size gfs_uview_vfile() serves.
 * A zero/ file's size is that of a measured file of the same stem and
 * shape, else it is composed, measured and freed (no zip kept), the size
 * cached per size class.  Thread-safe.  @return GFS_OK and *size, or the
 * composition's error (out of memory) with the file's path.
 */
gfs_err gfs_uview_size(const gfs_uview *u, size_t i, uint64_t *size);

/*
 * gfs_uview_vfile(): file i's contents, owned by u.  A zero/ file's torch
 * zip is composed on the first call and kept (threads racing compose their
 * own, the first stored wins, the others are freed).  Thread-safe.
 * @return GFS_OK and *out, or the composition's error with the file's path.
 */
gfs_err gfs_uview_vfile(const gfs_uview *u, size_t i, const gfs_vfile **out);

#endif
