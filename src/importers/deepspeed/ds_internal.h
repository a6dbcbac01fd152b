/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — what the pieces of the DeepSpeed importer share (not a public
 * header: src/importers/deepspeed/ only).
 *
 *   deepspeed.c  the entry, gfs_import_deepspeed(): which kind of checkpoint,
 *                which pieces build it
 *   rankfile.c   one rank file: open, identity of its zip folder, tensors
 *   ranks.c      a tag's rank files: listing, the tag, opening, the vote
 *   zero.c       ZeRO 1/2/3 and BF16_Optimizer partitions, entries, states,
 *                the info line (ds_set_info())
 *   pipeline.c   pipeline parallelism: layer_* files, stages, tied weights
 *   moe.c        mixture of experts: expert files, dense and expert groups
 *   tp.c         tensor parallelism: universal_checkpoint_info, tp_split
 *
 * Functions shared between them are ds_-prefixed; one file's own helpers
 * stay static there.
 */
#ifndef GATHERFS_IMPORTERS_DEEPSPEED_DS_INTERNAL_H
#define GATHERFS_IMPORTERS_DEEPSPEED_DS_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gatherfs/importers/import.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchzip.h"

#define DS_MAX_PICKLE ((uint64_t)1 << 30)
#define DS_MAX_RANKS 65536
/* What an optimizer state name (a folder name under optim/) must not hold. */
#define STATE_BAD_BYTES "/\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f" \
	"\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b\x1c\x1d\x1e\x1f\x7f"

/* One opened .pt file of the checkpoint. */
typedef struct ds_file {
	char *name;     /* file name inside the tag directory */
	char *path;     /* full path, for messages */
	int fd;
	uint64_t size;
	gfs_tzip *zip;
	gfs_pickle *pk;
	const gfs_pv *root;
	int64_t src;    /* layout source index once used, else -1 */
	struct ds_frag *frags; /* ZeRO-3 rank > 0 with frozen params: [nfrags], in the
				  order of rank 0's frozen_param_shapes */
	size_t nfrags;
	bool anonymous; /* its zip folder is archive/ (torch.save to a file
			   object): it records no name to check */
	/* optimizer states file: what it says it was written with */
	int stage;
	bool bf16opt;
	uint64_t ws;    /* its partition_count */
} ds_file;

/* A 1-D run of elements made of consecutive pieces of source files. */
typedef struct flat_seg {
	uint32_t src;
	uint64_t off;   /* byte offset in the source */
	uint64_t start; /* first element of this segment in the flat */
	uint64_t nelem;
} flat_seg;

typedef struct flat {
	flat_seg *segs;
	size_t n, cap;
	uint64_t total; /* elements */
	gfs_dtype dtype;
} flat;

/* Where a tensor's bytes are, as read from a pickle. */
typedef struct tview {
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t numel;
	uint32_t src;
	uint64_t off; /* byte offset of element 0 in the source */
} tview;

typedef enum plan_kind { PLAN_MODULE, PLAN_TRAIN, PLAN_FROZEN, PLAN_ALIAS } plan_kind;

/* What to do with a trainable param: its place in the flats. */
typedef struct train_param {
	const char *name;
	const gfs_pv *shape;
	size_t group;    /* stage 1/2: param group index */
	uint64_t offset; /* stage 1/2: element offset in the group flat; stage 3: per-rank offset */
	bool used;       /* pipeline: served (here, or by an earlier stage: dup) */
	bool dup;        /* pipeline: a tied weight an earlier stage serves */
} train_param;

typedef struct ds_ckpt {
	const char *label;   /* the directory the user named */
	char *tagdir;
	int stage;           /* 1, 2, 3; BF16_Optimizer imports as 1 */
	bool bf16_optimizer;
	uint64_t ws;
	ds_file *optim;      /* [noptim] by rank */
	size_t noptim;
	ds_file *model;      /* stage 3: [ws] by rank; else [1] */
	size_t nmodel;
	gfs_layout *l;
	train_param *train;
	size_t ntrain;
	/* name -> index into train, open addressing */
	uint32_t *tmap;
	size_t tmap_cap;
	flat *rank_flats;    /* stage 3: [ws] */
	flat *group_flats;   /* stage 1/2: [ngroups] */
	size_t ngroups;
	size_t nsub;         /* stage 3: sub-groups (fp32_flat_groups per rank) */
	struct ds_state *states; /* optimizer states, in rank 0's order */
	size_t nstates;
	struct fshape_key *fkeys; /* rank 0's frozen_param_shapes by name */
	size_t nfkeys;
	struct rf_set *rfsets;   /* stage 3: the per-rank flats seen by emit_slices() */
	size_t nrfsets;
	/* a pipeline (PipelineModule) checkpoint: one ds_ckpt per stage
	 * (model-parallel rank) sharing l, and the layer files */
	struct ds_ckpt *stages;
	size_t nstages;
	ds_file *layers;     /* [nlayers] by layer index; fd -1 and no name where absent */
	size_t nlayers;
	struct pipe_layer *play; /* [nlayers] */
	bool tp;             /* stages are tensor ranks (no layer files), not pipeline stages */
	const char *tp_split; /* -o tp_split=FILE: the split patterns, or NULL */
	/* a mixture-of-experts checkpoint */
	ds_file *experts;    /* [nexperts] expert files, MoE layer by layer, global id order */
	size_t nexperts;
	uint64_t *moe_n;     /* [nmoe] experts of each MoE layer */
	size_t nmoe;
	uint64_t ep;         /* expert-parallel size */
	size_t gdense, gexp; /* the optimizer's dense and expert param groups */
	struct moe_param *mparams; /* [nmparams]: dense ones in `module` order, then experts */
	size_t nmparams;
	flat *mflats;        /* [1 + ep]: dense masters, then each expert-parallel rank's */
	ds_file *zip_held;   /* the expert file whose zip moe_zip() read again, or NULL */
} ds_ckpt;

/*
 * Stage 3 per-rank flats (rank_flats, or a state's flats) as regular flats
 * of the layout: when every rank's flat has the same segments (one per
 * sub-group: same start, length and dtype, neighbouring ranks in other
 * files), a param's partitions lie at the same offset of one segment on
 * every rank: one gfs_layout_add_partition(), not ws pieces.
 */
typedef struct rf_set {
	const flat *flats;  /* [ws] */
	bool uniform;
	uint32_t *ids;      /* [segments of rank 0]: layout regular flat, or UINT32_MAX */
} rf_set;

/*
 * One optimizer state of the torch optimizer DeepSpeed wraps.  Per-element
 * states are flats laid out like the fp32 masters; a 0-d tensor state (the
 * step) is a value per flat group, taken from rank 0.
 */
typedef struct ds_state {
	const char *name;   /* borrowed from rank 0's pickle */
	bool scalar;
	flat *flats;        /* per-element: stage 1/2 [ngroups], stage 3 [ws] */
	tview *values;      /* scalar: per flat group (stage 1/2 ngroups, stage 3 nsub) */
} ds_state;

/* The files of one model-parallel rank (pipeline stage). */
typedef struct ds_listing {
	char **optim;   /* [n_optim_slots] by rank, NULL where absent */
	size_t noptim;  /* highest rank + 1 */
	char **zmodel;  /* by rank */
	size_t nzmodel;
	char *mpmodel;
	size_t count_optim, count_zmodel;
} ds_listing;

/* The files of a tag directory. */
typedef struct ds_dir {
	ds_listing *mp;  /* [nmp] by model-parallel rank; mp[0] always exists */
	size_t nmp;
	char **layers;   /* pipeline layer files by layer index, NULL where absent */
	size_t nlayers;
	char *expert;    /* an expert file (MoE), or NULL */
	size_t nexpert;  /* expert files */
	char *tp_layer;  /* a layer file of tensor-parallel rank > 0, or NULL */
} ds_dir;

/* ds_kind_phrase(): "a dict", "an object"... for messages. */
const char *ds_kind_phrase(const gfs_pv *v, char *buf, size_t n);

/* ds_printable(): s with control bytes as '?', cut to n - 1 bytes, in buf. */
const char *ds_printable(const char *s, char *buf, size_t n);

/*
 * ds_name_check(): a torch.save to a path names the zip folder after the
 * file (zero_pp_rank_1_mp_rank_00_optim_states/data.pkl), and copying or
 * renaming the file keeps it: prefix, f's zip folder, must be f's name
 * without ".pt", or "archive" (torch.save to a file object records no
 * name: f->anonymous is set).
 */
gfs_err ds_name_check(ds_file *f, const char *prefix);

/*
 * ds_name_peek(): ds_name_check() of f, opened by ds_file_stat() but not read,
 * from the name of its first zip record alone (one pread).
 */
gfs_err ds_name_peek(ds_file *f);

/*
 * ds_file_stat(): open dir/name (f->fd) and check that it is a non-empty
 * regular file, setting f's name, path and size.
 */
gfs_err ds_file_stat(ds_file *f, const char *dir, const char *name);

/*
 * ds_file_read(): read the zip directory and the pickle of f, checked by
 * ds_file_stat(); the zip's folder must be f's name (ds_name_check()).
 */
gfs_err ds_file_read(ds_file *f);

/* ds_file_open(): ds_file_stat() then ds_file_read() of dir/name into f. */
gfs_err ds_file_open(ds_file *f, const char *dir, const char *name);

/* ds_file_close(): free what f holds (fragments, pickle, zip, fd, names), not f. */
void ds_file_close(ds_file *f);

/*
 * ds_file_release(): free what f read (pickle, zip directory) and close it,
 * keeping its name, path and size: a file checked but not read again.
 */
void ds_file_release(ds_file *f);

/*
 * ds_has_frozen(): does the ZeRO-3 model states file f list frozen params
 * (whose fragments every rank's model states file holds)?
 */
bool ds_has_frozen(const ds_file *f);

/* ds_file_source(): f's source index in c->l, added on first use, in *src. */
gfs_err ds_file_source(ds_ckpt *c, ds_file *f, uint32_t *src);

/*
 * ds_shape_from_pv(): a shape tuple v as *ndim, shape[] and *numel; bounded
 * (GFS_MAX_DIMS, no overflow); path and what name it in a refusal.
 */
gfs_err ds_shape_from_pv(const gfs_pv *v, const char *path, const char *what,
			 uint32_t *ndim, uint64_t *shape, uint64_t *numel);

/* ds_tensor_view(): tensor_locate() then tensor_place(). */
gfs_err ds_tensor_view(ds_ckpt *c, ds_file *f, const gfs_pv *v, const char *what,
		       tview *out);

/*
 * ds_frags_read(): the fragments in f of the frozen params fshapes (rank 0's
 * frozen_param_shapes) names.  A bad fragment is kept as its error, given
 * when the param is emitted, as if it were read then.
 */
gfs_err ds_frags_read(ds_file *f, const gfs_pv *fshapes);

/* ds_frag_view(): ds_tensor_view() of fragment k of f, read by ds_frags_read(). */
gfs_err ds_frag_view(ds_ckpt *c, ds_file *f, size_t k, tview *out);

/*
 * ds_flat_append(): append nelem elements of tv (from its offset) to fl; a
 * dtype other than fl's is refused, what naming the part.
 */
gfs_err ds_flat_append(flat *fl, const tview *tv, uint64_t nelem, const char *what);

/*
 * ds_flat_walk(): elements [start, start + n) of fl as pieces appended to
 * tensor ti or, with replica, as replicas of its bytes from 0 on.
 */
gfs_err ds_flat_walk(gfs_layout *l, size_t ti, const flat *fl, uint64_t start, uint64_t n,
		     bool replica);

/* ds_flat_emit(): add pieces for elements [start, start + n) of fl to tensor ti. */
gfs_err ds_flat_emit(gfs_layout *l, size_t ti, const flat *fl, uint64_t start,
		     uint64_t n);

/* ds_flats_free(): free flats fl[0..n) and the array; fl may be NULL. */
void ds_flats_free(flat *fl, size_t n);

/* ds_tmap_build(): index c->train by name (c->tmap) for ds_tmap_find(). */
gfs_err ds_tmap_build(ds_ckpt *c);

/* ds_tmap_find(): the trainable param called name, or NULL. */
const train_param *ds_tmap_find(const ds_ckpt *c, const char *name);

/* ds_parse_u64(): decimal digits at *p, advancing; false if none or overflow. */
bool ds_parse_u64(const char **p, uint64_t *out);

/* ds_eat(): if *p starts with lit, step past it and say true; else false. */
bool ds_eat(const char **p, const char *lit);

/* ds_dir_free(): free what ds_list_tagdir() filled in d; d is left empty. */
void ds_dir_free(ds_dir *d);

/*
 * ds_list_tagdir(): the DeepSpeed files of tag directory dir (classify()), by
 * model-parallel rank, layer and kind, in d (ds_dir_free() frees it).  Two
 * files for one slot (rank, layer) are refused.
 */
gfs_err ds_list_tagdir(const char *dir, ds_dir *d);

/*
 * ds_read_stage(): the ZeRO stage optimizer states file f records in osd
 * (zero_stage, an int or a ZeroStageEnum); no zero_stage but fp32 partitions:
 * BF16_Optimizer (*bf16opt), imported as stage 1.
 */
gfs_err ds_read_stage(ds_ckpt *c, const ds_file *f, const gfs_pv *osd, int *stage,
		      bool *bf16opt);

/*
 * ds_read_ws(): the world size optimizer states file f was written with:
 * osd's partition_count (an int, or a list of one per param group).
 */
gfs_err ds_read_ws(const ds_file *f, const gfs_pv *osd, uint64_t *ws);

/* ds_osd_of(): f's optimizer_state_dict, or NULL. */
const gfs_pv *ds_osd_of(const ds_file *f);

/*
 * ds_plan_stage12(): stage 1/2 (and BF16_Optimizer): every rank's
 * single_partition_of_fp32_groups joined into one flat per param group
 * (c->group_flats), each trainable param of param_shapes at its offset there
 * (c->train).
 */
gfs_err ds_plan_stage12(ds_ckpt *c);

/*
 * ds_plan_stage3(): stage 3: every rank's fp32_flat_groups as one flat per
 * rank (c->rank_flats), each trainable param of param_shapes at the same
 * per-rank offset, ceil(numel / ws) elements on each (c->train).
 */
gfs_err ds_plan_stage3(ds_ckpt *c);

/*
 * ds_emit_trainable(): the entry of trainable param tp, its fp32 master from
 * the flats; module_t, its tensor in `module` (or NULL), must have its shape
 * below stage 3.
 */
gfs_err ds_emit_trainable(ds_ckpt *c, const train_param *tp, const gfs_pv *module_t);

/* ds_emit_view(): a tensor whose bytes are one contiguous view of a file. */
gfs_err ds_emit_view(ds_ckpt *c, const char *name, const tview *tv, uint64_t numel,
		     uint32_t ndim, const uint64_t *shape);

/* ds_in_list(): does the list of strings list hold name? */
bool ds_in_list(const gfs_pv *list, const char *name);

/*
 * ds_build_entries(): every entry in rank 0's `module` order (trainable,
 * frozen, buffer, alias), then the aliases `module` does not name.
 */
gfs_err ds_build_entries(ds_ckpt *c);

/* ds_base_state(): the torch optimizer state_dict inside rank r's optimizer state. */
const gfs_pv *ds_base_state(const ds_ckpt *c, size_t r);

/* ds_group_state(): state[g] of rank r's torch optimizer, or NULL. */
const gfs_pv *ds_group_state(const ds_ckpt *c, size_t r, size_t g);

/* ds_fp32_part(): rank r's fp32 partition g (stage 1/2 group, stage 3 sub-group). */
gfs_err ds_fp32_part(ds_ckpt *c, size_t r, size_t g, tview *tv);

/*
 * ds_plan_states(): find the optimizer states in rank 0's state[0] and check
 * that every rank and flat group holds the same ones: each per-element
 * state exactly as long as that rank's fp32 partition, each 0-d one (the
 * step) 0-d.  Non-tensor values are not carried.  A checkpoint without
 * optimizer state (state[0] empty or absent everywhere) has none.
 */
gfs_err ds_plan_states(ds_ckpt *c);

/* ds_emit_states(): every state of every trainable param, state by state. */
gfs_err ds_emit_states(ds_ckpt *c);

/* ds_build_optim(): the layout's optimizer metadata. */
gfs_err ds_build_optim(ds_ckpt *c);

/*
 * ds_resolve_tagdir(): the tag directory to read: dir/tag, dir/$(cat latest),
 * the only tag directory of a save directory without `latest` (*note then
 * says so; to free), or dir itself.
 */
gfs_err ds_resolve_tagdir(const char *dir, const char *tag, char **tagdir, char **root,
			  char **note);

/*
 * ds_open_files(): open and read the optimizer and model states files of
 * listing ls (in parallel), the vote deciding stage and world size; every
 * rank's file must be there.
 */
gfs_err ds_open_files(ds_ckpt *c, const ds_listing *ls);

/*
 * ds_moe_plain_open(): the mp_rank file alone of a mixture-of-experts
 * checkpoint without ZeRO (listing ls, no *_optim_states.pt but the
 * expp_rank_* ones).
 */
gfs_err ds_moe_plain_open(ds_ckpt *c, const ds_listing *ls);

/*
 * ds_anon_note(): *note (ds_resolve_tagdir()'s, or NULL; to free) extended with
 * a line on the files whose zip folder is archive/, whose names
 * ds_name_check() could not check.
 */
gfs_err ds_anon_note(const ds_ckpt *c, char **note);

/* ds_pipe_open(): the stages' files and the layer files named in d. */
gfs_err ds_pipe_open(ds_ckpt *c, const ds_dir *d);

/* ds_pipe_build(): the layout of a pipeline checkpoint opened by ds_pipe_open(). */
gfs_err ds_pipe_build(ds_ckpt *c, char **note);

/*
 * ds_moe_open(): the expert files num_experts (in c's mp_rank file) names,
 * layer_L_expert_X_mp_rank_00_model_states.pt, every one of them and no
 * other (d->nexpert counts those found).
 */
gfs_err ds_moe_open(ds_ckpt *c, const ds_dir *d);

/*
 * ds_moe_build_plain(): the layout of a mixture-of-experts checkpoint without
 * ZeRO (no *_optim_states.pt but the expp_rank_* files, holding the torch
 * optimizer's state by param index): every entry as `module` and the
 * expert files hold it, in moe_emit()'s order; no optimizer states.  A
 * model in 16 bits is refused: its fp32 masters are in that optimizer
 * state.
 */
gfs_err ds_moe_build_plain(ds_ckpt *c);

/* ds_moe_build(): the layout of a mixture-of-experts checkpoint. */
gfs_err ds_moe_build(ds_ckpt *c);

/*
 * ds_tp_build(): the layout of a tensor-parallel checkpoint: rank 0's
 * `module` entries in order, each put together from every tensor rank's
 * slice as universal_checkpoint_info says (fp32 masters for trainable
 * params), then the optimizer states of rank 0's param_shapes params.
 */
gfs_err ds_tp_build(ds_ckpt *c, char **note);

/*
 * ds_set_info(): set c->l's info line, "DeepSpeed WHAT, ZERO, tag TAG": WHAT
 * the kind of checkpoint (none for NULL: a data-parallel one), ZERO z's
 * "ZeRO-N[ (BF16_Optimizer)], WS RANKS" (ranks: "ranks", "data-parallel
 * ranks") or "no ZeRO" for z NULL, TAG the tag directory's last component.
 */
gfs_err ds_set_info(const ds_ckpt *c, const char *what, const ds_ckpt *z, const char *ranks);

#endif
