/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — the layout index: the table of output tensors.
 *
 * For each output tensor, in output order: its name, dtype, shape, and the
 * pieces that make up its contiguous row-major little-endian bytes.  A piece
 * says "these len bytes come from source file src at offset src_off", "len
 * zero bytes" or "these len bytes come from offset src_off of the
 * decompressed zstd frame stored at frame_off in source src".  A piece may
 * be strided: count runs of len bytes, run k at toff + k * dst_stride in the
 * tensor and src_off + k * src_stride in the source (an N-D box of a
 * tensor split on an inner dimension).  Strided pieces interleave, so
 * pieces are sorted by toff and tile [0, nbytes) exactly as a set: every
 * byte is covered by exactly one run.  An alias
 * (a tied weight) names its target instead of having pieces; it has the
 * target's dtype and shape.
 *
 * Importers build a layout with gfs_layout_new(), gfs_layout_add_*() and
 * gfs_layout_finish(), which validates it and stores the pieces compactly
 * (gfs_pslot: 24 bytes for a contiguous FILE piece); readers get a piece
 * with gfs_tensor_piece().  A finished layout is immutable
 * and safe to share between threads.  The JSON form is documented in
 * docs/layout-json.md.
 */
#ifndef GATHERFS_LAYOUT_H
#define GATHERFS_LAYOUT_H

#include "gatherfs/util/common.h"
#include "gatherfs/util/arena.h"
#include "gatherfs/arith/dtype.h"

#define GFS_MAX_DIMS 16
#define GFS_LAYOUT_VERSION 1     /* written when a layout needs nothing newer */
#define GFS_LAYOUT_VERSION_MAX 3 /* 2: strided and zstd pieces, objects; 3: optimizer state, computed tensors */
#define GFS_LAYOUT_VERSION_COMPUTE 3

typedef enum gfs_piece_kind {
	GFS_PIECE_FILE = 0, /* bytes from a source file */
	GFS_PIECE_ZERO = 1, /* zero bytes */
	GFS_PIECE_ZSTD = 2, /* bytes of a zstd frame's decompressed content */
} gfs_piece_kind;

/* Upper bound on the runs a layout's validation walks (GFS_ERR_LIMIT past it). */
#define GFS_MAX_RUNS ((uint64_t)1 << 28)

/*
 * A piece in full, as importers add it (gfs_layout_add_general()) and as
 * gfs_tensor_piece() returns it from a finished layout, which stores it
 * compactly (gfs_pslot).
 */
typedef struct gfs_piece {
	uint64_t toff;       /* offset of the (first) run inside the tensor's bytes */
	uint64_t len;        /* bytes per run, > 0 */
	uint64_t src_off;    /* FILE: offset in the source file; ZSTD: in the decompressed frame */
	uint64_t count;      /* runs, >= 1; 1 is a contiguous piece */
	uint64_t dst_stride; /* count > 1: distance between runs in the tensor, > len */
	uint64_t src_stride; /* count > 1: distance between runs in the source, >= len */
	uint64_t frame_off;  /* ZSTD: offset of the frame in the source file */
	uint64_t frame_len;  /* ZSTD: compressed size of the frame */
	uint64_t frame_size; /* ZSTD: decompressed size of the frame */
	uint64_t reach;      /* set by gfs_layout_finish(): max end of pieces [0, this] */
	uint32_t src;        /* FILE, ZSTD: index into gfs_layout.sources */
	uint32_t rec;        /* set by gfs_layout_finish(): the checksummed record holding
				all the piece's bytes (index into gfs_layout.records; for
				a piece of an inputs table, into its owner's), or
				GFS_NO_RECORD */
	gfs_piece_kind kind;
} gfs_piece;

/*
 * A finished tensor's piece as stored: 24 bytes for a contiguous FILE or
 * ZERO piece of a tensor without strided pieces, whose length is the
 * distance to the next piece (they tile the tensor in order) and whose
 * reach is its end.  A ZSTD piece, and every piece of a tensor with strided
 * pieces, keeps the rest in the tensor's side table (gfs_pext), which off
 * then indexes.  Read pieces with gfs_tensor_piece().
 */
typedef struct gfs_pslot {
	uint64_t toff;
	uint64_t off;  /* GFS_PSLOT_EXT clear: src_off (0 for ZERO); set: index into gfs_tensor.ext */
	uint32_t bits; /* source index (GFS_PSLOT_SRC), GFS_PSLOT_EXT, kind << GFS_PSLOT_KIND_SHIFT */
	uint32_t rec;  /* as gfs_piece.rec */
} gfs_pslot;

#define GFS_MAX_SOURCES ((uint32_t)1 << 29) /* sources a layout may have */
#define GFS_PSLOT_SRC (GFS_MAX_SOURCES - 1)
#define GFS_PSLOT_EXT GFS_MAX_SOURCES
#define GFS_PSLOT_KIND_SHIFT 30

/* What a gfs_pslot with GFS_PSLOT_EXT does not hold. */
typedef struct gfs_pext {
	uint64_t src_off;
	uint64_t len;
	uint64_t count;
	uint64_t dst_stride;
	uint64_t src_stride;
	uint64_t frame_off;
	uint64_t frame_len;
	uint64_t frame_size;
	uint64_t reach;
} gfs_pext;

#define GFS_NO_RECORD UINT32_MAX

/*
 * gfs_piece_end(): one past the last tensor byte of piece p's last run.
 */
static inline uint64_t gfs_piece_end(const gfs_piece *p)
{
	return p->toff + (p->count - 1) * p->dst_stride + p->len;
}

/*
 * gfs_piece_src_end(): one past the last source byte p reads (in the file for
 * FILE, in the decompressed frame for ZSTD).
 */
static inline uint64_t gfs_piece_src_end(const gfs_piece *p)
{
	return p->src_off + (p->count - 1) * p->src_stride + p->len;
}

typedef struct gfs_source {
	char *path;    /* as written in the layout (relative to base_dir, or absolute) */
	char *abspath; /* resolved */
	uint64_t size; /* expected file size in bytes */
} gfs_source;

/*
 * A checksummed record of a source: the bytes of one zip record (a
 * torch.save storage data/<key>, whole, padding included) and the CRC-32
 * its central directory stores.  FILE: bytes [off, off + len) of source
 * src.  ZSTD: bytes [off, off + len) of the decompressed content of the
 * zstd frame at frame_off (frame_len bytes, frame_size decompressed) of
 * src; checking such a record decompresses the whole frame, which also
 * checks the frame's content checksum when it has one.  Importers register
 * the records tensor bytes may come from; gfs_layout_finish() keeps those
 * holding bytes of some piece.  Metadata only: O(records).
 */
typedef struct gfs_record {
	const char *name;    /* names the record in messages ("archive/data/3"); the layout's */
	uint64_t item;       /* nonzero: the record lies in the item at offset item - 1 of
			      * its source (a DCP file), see gfs_record_name() */
	uint32_t src;
	gfs_piece_kind kind; /* FILE or ZSTD */
	uint64_t off;
	uint64_t len;
	uint64_t frame_off;  /* ZSTD */
	uint64_t frame_len;  /* ZSTD; lazy (a FILE record): the item's length */
	uint64_t frame_size;
	uint32_t crc32;      /* stored CRC-32 of the len bytes (lazy: unknown, 0) */
	bool lazy;           /* a DCP chunk whose archive was not opened: off and len
			      * are where .metadata places the record (its item's
			      * frame_len bytes at item - 1 hold a torch.save zip of
			      * a dtype tensor of len bytes); the first check opens
			      * the archive, confirms them and learns crc32
			      * (gfs_dcp_confirm()) */
	uint8_t dtype;       /* lazy: the chunk's gfs_dtype */
} gfs_record;

/*
 * gfs_record_src_len(): the bytes of its source a check of r reads: the
 * whole zstd frame (frame_len) of a ZSTD record, else its len bytes.
 */
static inline uint64_t gfs_record_src_len(const gfs_record *r)
{
	return r->kind == GFS_PIECE_ZSTD ? r->frame_len : r->len;
}

/*
 * Piece p of tensor ti (a finished layout has fewer than UINT32_MAX entries,
 * each of fewer than UINT32_MAX pieces).
 */
typedef struct gfs_piece_ref {
	uint32_t ti;
	uint32_t p;
} gfs_piece_ref;

/*
 * A computed tensor (layout version 3) has no pieces: its bytes are a
 * function of input tensors, evaluated on read (compute.h, merge.h).  The
 * inputs are tensors of the layout's `inputs` table, which are never part of
 * a view and whose pieces use the layout's own sources.
 *
 *   LORA       W + s * (B @ A), [R, C]: W [R, C], A [r, C], B [R, r]; with
 *              GFS_OPF_T the transpose W + s * (B @ A)^T: A [r, R], B [C, r]
 *              (HF Conv1D with fan_in_fan_out, nn.Embedding)
 *   LORA_BIAS  W + s * A, all of shape [n] (a bias and lora_B.bias)
 *   DORA       (M / ||V||) * V with V as for LORA: the norm of each output
 *              feature, M [R] per row, or with GFS_OPF_T M [C] per column
 *   DEQUANT    FP8 weight W [..., R, C] (F8_E4M3 or F8_E5M2) times the scale
 *              S of its block: out[e, i, j] = float32(W[e, i, j]) *
 *              float32(S[e, i / BM, j / BN]) (a float32 product, as torch
 *              and DeepSeek's fp8_cast_bf16.py compute it), rounded once to
 *              the output dtype; S (F32, BF16 or F8_E8M0) holds the grid
 *              [..., ceil(R / BM), ceil(C / BN)] (edge blocks ragged), or is
 *              one value (0-d or [1]) when the grid is 1 x 1; block = {BM, BN}
 *
 * LORA and DORA may take an FP8 weight W (2-D) with its scale S and block
 * as DEQUANT's: W is then DEQUANT's float32 value (a LoRA adapter merged
 * onto a dequantized base).
 */
typedef enum gfs_op {
	GFS_OP_LORA = 1,
	GFS_OP_LORA_BIAS = 2,
	GFS_OP_DORA = 3,
	GFS_OP_DEQUANT = 4,
} gfs_op;

#define GFS_OPF_T 1u /* the delta is (B @ A)^T */
#define GFS_MAX_LORA_RANK 65536

enum { GFS_OPIN_W, GFS_OPIN_A, GFS_OPIN_B, GFS_OPIN_M, GFS_OPIN_S, GFS_OPIN_COUNT };
#define GFS_OPIN_NONE { -1, -1, -1, -1, -1 }

typedef struct gfs_compute {
	gfs_op op;
	uint32_t flags;                /* GFS_OPF_* */
	double scale;                  /* s, finite (LORA, DORA; 0 for DEQUANT) */
	uint32_t block[2];             /* DEQUANT, or with an FP8 weight: BM, BN >= 1; else 0 */
	int64_t in[GFS_OPIN_COUNT];    /* indices into the inputs table, -1: unused */
} gfs_compute;

/*
 * A regular flat (a ZeRO-3 flat group, or one optimizer state of it): on
 * each of nranks ranks, nbytes bytes at byte off of source src, held by
 * record rec.  A tensor partitioned on it (gfs_layout_add_partition()) has
 * its piece k on rank k: plen bytes (the last piece shorter) at the same
 * byte offset of every rank's flat, so it costs O(1), not O(ranks).
 * Pieces are synthesized by gfs_tensor_piece(); their records are those
 * holding all of their rank's nbytes (gfs_layout_finish()), else none.
 */
typedef struct gfs_rflat_rank {
	uint64_t off;
	uint32_t src;
	uint32_t rec; /* set by gfs_layout_finish(), as gfs_piece.rec */
} gfs_rflat_rank;

typedef struct gfs_rflat {
	uint64_t nbytes;        /* on each rank */
	uint32_t nranks;
	uint32_t maxp;          /* most pieces of its tensors (ranks with a record) */
	gfs_rflat_rank *ranks;  /* [nranks] */
} gfs_rflat;

typedef struct gfs_tensor {
	char *name;       /* in the layout's arena */
	uint64_t *shape;  /* ndim sizes, in the layout's arena (shared by an alias) */
	gfs_pslot *slots;  /* the pieces once finished (gfs_tensor_piece()), else NULL */
	gfs_pext *ext;     /* once finished: the slots' side table, or NULL */
	char *state;      /* optimizer-state entries: the state ("exp_avg", "step"...), in
			     the layout's arena (shared by the entries of one state); else NULL */
	gfs_compute *comp; /* a computed tensor (no pieces), else NULL */
	const gfs_rflat *rf; /* partitioned on a regular flat (no slots), else NULL */
	uint64_t rf_off;  /* rf: byte offset of the partitions in every rank's flat */
	uint64_t rf_plen; /* rf: bytes of each rank's partition, > 0 */
	uint64_t numel;
	uint64_t nbytes;  /* numel * dtype size */
	int64_t alias_of; /* index of the target tensor, or -1 */
	uint32_t npieces;
	gfs_dtype dtype;
	uint32_t ndim;
	bool strided;     /* set by gfs_layout_finish(): some piece has count > 1 */
} gfs_tensor;

/*
 * gfs_tensor_piece(): piece i (< t->npieces) of a finished tensor, in full.
 * O(1).
 */
static inline gfs_piece gfs_tensor_piece(const gfs_tensor *t, size_t i)
{
	const gfs_pslot *s;
	gfs_piece p = { .count = 1 };

	if (t->rf) {
		const gfs_rflat_rank *k = &t->rf->ranks[i];

		p.toff = i * t->rf_plen;
		p.len = t->nbytes - p.toff < t->rf_plen ? t->nbytes - p.toff : t->rf_plen;
		p.src_off = k->off + t->rf_off;
		p.reach = p.toff + p.len;
		p.src = k->src;
		p.rec = k->rec;
		p.kind = GFS_PIECE_FILE;
		return p;
	}
	s = &t->slots[i];
	p.toff = s->toff;
	p.src = s->bits & GFS_PSLOT_SRC;
	p.rec = s->rec;
	p.kind = (gfs_piece_kind)(s->bits >> GFS_PSLOT_KIND_SHIFT);
	if (s->bits & GFS_PSLOT_EXT) {
		const gfs_pext *x = &t->ext[s->off];

		p.src_off = x->src_off;
		p.len = x->len;
		p.count = x->count;
		p.dst_stride = x->dst_stride;
		p.src_stride = x->src_stride;
		p.frame_off = x->frame_off;
		p.frame_len = x->frame_len;
		p.frame_size = x->frame_size;
		p.reach = x->reach;
	} else {
		p.src_off = s->off;
		p.len = (i + 1 < t->npieces ? t->slots[i + 1].toff : t->nbytes) - s->toff;
		p.reach = s->toff + p.len;
	}
	return p;
}

/*
 * A non-tensor entry of the checkpoint (a DCP BytesStorageMetadata value:
 * torch.save bytes of a Python object).  Listed by `gatherfs-inspect ls`,
 * never part of a tensor view.
 */
typedef struct gfs_object {
	char *name;
	uint32_t src;     /* index into gfs_layout.sources */
	uint64_t src_off; /* bytes as stored (possibly transformed) */
	uint64_t len;
} gfs_object;

/*
 * Optimizer state (docs/layout-json.md, "optimizer").  An optimizer-state
 * entry is a gfs_tensor with a `state`, named after its parameter: the
 * per-parameter slice of one per-element state of the flat groups
 * ("exp_avg", "exp_avg_sq", "momentum_buffer"...), or "step", the 0-d step
 * of the parameter's group.  They follow the model tensors in
 * gfs_layout.tensors: entries [ntensors, ntensors + noptim).  Views that
 * iterate [0, ntensors) never see them.  The fp32 masters are the model
 * tensors themselves.
 *
 * gfs_optim carries what is not a tensor: how the states were partitioned
 * and the optimizer's param_groups (hyper-parameters, without "params"),
 * as plain values.
 */
typedef enum gfs_hkind {
	GFS_HV_NONE, GFS_HV_BOOL, GFS_HV_INT, GFS_HV_FLOAT, GFS_HV_STR, GFS_HV_TUPLE,
	GFS_HV_LIST,
} gfs_hkind;

typedef struct gfs_hval {
	gfs_hkind kind;
	bool b;
	int64_t i;
	double f;
	char *s;                /* STR */
	struct gfs_hval *items; /* TUPLE, LIST */
	size_t n;
} gfs_hval;

typedef struct gfs_hparam {
	char *key;
	gfs_hval v;
} gfs_hparam;

typedef struct gfs_pgroup {
	gfs_hparam *items;
	size_t n;
} gfs_pgroup;

typedef struct gfs_optim {
	int zero_stage;       /* DeepSpeed ZeRO stage 1, 2, 3; 0: no optimizer metadata */
	bool bf16_optimizer;  /* DeepSpeed's BF16_Optimizer (stage 1 layout) */
	bool round_robin;     /* round_robin_gradients: flat order is not module order */
	uint32_t world_size;  /* ranks the states are partitioned over */
	uint32_t nflat;       /* flat groups: stage 1/2 param groups, stage 3 sub-groups */
	uint32_t pipe_stages; /* a pipeline's stages (each its own flats); 0: no pipeline */
	bool moe;             /* a mixture-of-experts checkpoint (expert files) */
	uint32_t tp_ranks;    /* tensor-parallel ranks put together; 0: none */
	char *version;        /* ds_version, or NULL */
	gfs_pgroup *groups;   /* the optimizer's param_groups, or NULL */
	size_t ngroups;
	uint32_t *model_srcs; /* sources that are model-states files, in rank order */
	size_t nmodel_srcs;
} gfs_optim;

/*
 * A small file an importer generates (a config.json), served at the
 * mount's root beside the views; not in the layout JSON.
 */
typedef struct gfs_text {
	char *name; /* a plain file name */
	char *text;
} gfs_text;

/*
 * A replica: bytes of a source that hold the same values as some bytes of
 * an entry that the layout serves from elsewhere (an HSDP replica
 * rank's shard, a tensor-parallel rank's copy of a replicated parameter).
 * Never served; `gatherfs-inspect verify` compares them.  p is a FILE
 * piece in the tensor's byte space (p.toff, runs, strides) reading src.
 */
typedef struct gfs_replica {
	size_t ti;
	gfs_piece p;
	bool on_read; /* also compared before ti's first read under -o verify (gfs_layout_add_replica_on_read()) */
} gfs_replica;

/*
 * A split claim of the declarations (gfs_layout_declare()): entry ti is
 * nparts slices put together; slice y is the count runs of len bytes at
 * tensor bytes y * step + k * stride (k < count).  Slices that are all
 * byte-identical and not constant prove the declaration wrong (a
 * replicated tensor declared split).
 */
typedef struct gfs_split_claim {
	size_t ti;
	uint32_t nparts;
	uint64_t step, len, count, stride;
} gfs_split_claim;

/*
 * What an importer followed without being able to check it from the
 * files' metadata alone (which tensors are copies of one another, which
 * are slices of a larger one: a DeepSpeed tp_split file or
 * universal_checkpoint_info), to be checked against the data before any
 * entry it governs is served: every replica (gfs_replica) of a governed
 * entry must equal the bytes served, every split claim must hold.  One
 * proven wrong makes the declarations untrusted: no governed entry is
 * served (server/declcheck.h).
 */
typedef struct gfs_decls {
	char *what;           /* what declared ("the tp_split file F"); NULL: nothing */
	char *part;           /* what one slice is ("tensor rank") */
	size_t *governed;     /* entries the declarations govern, ascending */
	size_t ngoverned;
	size_t cap_governed;
	gfs_split_claim *splits;
	size_t nsplits;
	size_t cap_splits;
} gfs_decls;

typedef struct gfs_layout {
	char *format;   /* source format: "deepspeed", "json", ... */
	char *info;     /* one line describing the checkpoint, may be NULL */
	char *note;     /* a line for the user: how the importer chose what it read (e.g. a tag without
			   `latest`), for the user; not in the JSON; may be NULL */
	char *base_dir; /* absolute directory relative source paths resolve against */
	char *root_dir; /* absolute checkpoint directory whose other files are passed through, may be NULL */
	char **metafiles;/* absolute paths of the files the names, shapes and offsets were read from */
	size_t nmetafiles;
	size_t cap_metafiles;
	gfs_text *texts;  /* generated root files (gfs_layout_add_text()) */
	size_t ntexts;
	gfs_text *omitted; /* checkpoint entries no view shows, text: why (gfs_layout_add_omitted()) */
	gfs_replica *replicas; /* gfs_layout_add_replica(); not in the JSON, not derived */
	size_t nreplicas;
	size_t nreplicas_cap;
	gfs_decls decls;  /* gfs_layout_declare(); not in the JSON, not derived */
	size_t nomitted;
	gfs_object *objects; /* non-tensor entries, listed but not served as tensors */
	size_t nobjects;
	size_t cap_objects;
	gfs_source *sources;
	size_t nsources;
	size_t cap_sources;
	gfs_tensor *tensors;
	size_t ntensors;   /* model tensors: entries [0, ntensors) */
	size_t cap_tensors;
	struct gfs_tbuild *tbuild; /* per entry while building (layout.c), NULL once finished */
	size_t cap_tbuild;
	size_t noptim;     /* optimizer-state entries: [ntensors, ntensors + noptim) */
	gfs_optim optim;   /* filled by importers directly; freed with the layout */
	gfs_rflat **rflats;  /* regular flats (gfs_layout_add_rflat()) */
	size_t nrflats;
	size_t cap_rflats;
	gfs_record *records; /* sorted by (src, kind, frame_off, off) once finished */
	size_t nrecords;
	size_t cap_records;
	/* set by gfs_layout_finish(): the pieces of the layout's entries (not
	 * of its inputs table) in record r are
	 * rec_pieces[rec_piece0[r] .. rec_piece0[r + 1]), in layout order, as
	 * numbers among all the entries' pieces (gfs_layout_piece_ref());
	 * entry i's pieces are numbered from piece0[i] (piece0 has an entry
	 * more: the total, bounded by UINT32_MAX) */
	size_t *rec_piece0;
	uint32_t *rec_pieces;
	size_t *piece0;
	/* set by gfs_layout_finish(): the pieces on regular flats are not in
	 * rec_pieces; record r holds the ranks rec_rfs[rec_rf0[r] ..
	 * rec_rf0[r + 1]) of regular flats (gfs_record_each_piece()) */
	size_t *rec_rf0;
	struct gfs_rflat_ref *rec_rfs;
	/* set by gfs_layout_finish(): the entries partitioned on regular flat
	 * f are rf_ents[rf_ent0[f] .. rf_ent0[f + 1]), in layout order */
	size_t *rf_ent0;
	uint32_t *rf_ents;
	/* operands of computed tensors (layout version 3), NULL if none: a
	 * layout whose sources are this layout's own (copied by
	 * gfs_layout_finish_inputs()) and whose pieces read this layout's
	 * records (it has none of its own) */
	struct gfs_layout *inputs;
	/* names, shapes and state names of the entries: chunks freed with the layout */
	gfs_arena arena;  /* names, shapes, states, record names */
	bool lazy_records; /* some record is lazy (gfs_record.lazy) */
	char *last_state; /* the arena copy of the newest entry's state */
	const char *last_rec_name; /* the arena copy of the newest record's name */
	/* name lookup, built by gfs_layout_finish() */
	uint32_t *hash;
	size_t hash_cap;
	bool finished;
} gfs_layout;

/*
 * gfs_layout_new(): an empty layout for the given format name and base
 * directory (made absolute).  @return GFS_OK and *out.
 */
gfs_err gfs_layout_new(const char *format, const char *base_dir, gfs_layout **out);

/* gfs_layout_free(): free everything; NULL allowed. */
void gfs_layout_free(gfs_layout *l);

/* gfs_layout_set_note(): set (or, with NULL, clear) the note; one line. */
gfs_err gfs_layout_set_note(gfs_layout *l, const char *note);

/* gfs_layout_set_info(), gfs_layout_set_root(): optional descriptive fields. */
gfs_err gfs_layout_set_info(gfs_layout *l, const char *info);
gfs_err gfs_layout_set_root(gfs_layout *l, const char *root_dir);

/*
 * gfs_layout_add_metafile(): record that the importer read metadata (tensor
 * names, shapes, offsets) from the file at path (made absolute): views
 * that show metadata are no more readable than it (see perm.h).  Allowed
 * on a finished layout by its creator, before the layout is shared.
 */
gfs_err gfs_layout_add_metafile(gfs_layout *l, const char *path);

/*
 * gfs_layout_add_text(): a generated file name (a plain name, no '/')
 * holding text, served at the root of a mount of l.  Names are unique.
 */
gfs_err gfs_layout_add_text(gfs_layout *l, const char *name, const char *text);

/*
 * gfs_layout_add_omitted(): record that the checkpoint entry name is left
 * out of every view, and why (one line each, listed by `gatherfs-inspect
 * ls --all`).  Allowed on a finished layout by its creator.
 */
gfs_err gfs_layout_add_omitted(gfs_layout *l, const char *name, const char *why);

/*
 * gfs_layout_add_replica(): record that the FILE piece p (in tensor ti's
 * byte space, as for gfs_layout_add_general(): runs inside the tensor, a
 * source of the layout, inside its size) holds the same bytes as tensor ti
 * does there.  Entry ti (a model tensor or an optimizer state) must not be
 * an alias.
 */
gfs_err gfs_layout_add_replica(gfs_layout *l, size_t ti, const gfs_piece *p);

/*
 * gfs_layout_declare(): say that the entries added from now on with
 * gfs_layout_govern() follow declarations what (one line: "the tp_split
 * file F"), whose slices are each called part ("tensor rank").  Once per
 * layout, before it is finished.
 */
gfs_err gfs_layout_declare(gfs_layout *l, const char *what, const char *part);

/*
 * gfs_layout_govern(): entry ti (not an alias; entries in ascending order)
 * follows the declarations; with split non-NULL (split->ti == ti, nparts >=
 * 2, its runs inside the tensor, of whole elements), its slices must not
 * be byte-identical unless constant.  After gfs_layout_declare().
 */
gfs_err gfs_layout_govern(gfs_layout *l, size_t ti, const gfs_split_claim *split);

/*
 * gfs_layout_governed(): does entry i (its alias target for an alias)
 * follow the declarations?  O(log n).
 */
bool gfs_layout_governed(const gfs_layout *l, size_t i);

/*
 * gfs_layout_add_replica_on_read(): gfs_layout_add_replica(), and the
 * server compares the replica before the first read of tensor ti under
 * -o verify (a copy whose disagreement makes the tensor untrustworthy, not
 * one of several equal sources of which one is served).
 */
gfs_err gfs_layout_add_replica_on_read(gfs_layout *l, size_t ti, const gfs_piece *p);

/*
 * gfs_layout_derive(): a new, unfinished layout of format format over the
 * sources, checksummed records, objects, texts, metafiles, info and note
 * omitted entries of the finished layout src (same source indices), with no tensors; its
 * tensors are filled with gfs_layout_add_extent().  src must have no
 * optimizer state or computed tensors.  @return GFS_OK and *out.
 */
gfs_err gfs_layout_derive(const gfs_layout *src, const char *format, gfs_layout **out);

/*
 * gfs_layout_add_extent(): add to tensor ti of dst (derived from src),
 * at byte toff, the bytes [off, off + len) of src's model tensor si (an
 * alias: its target), as clipped copies of the pieces holding them (a
 * strided piece stays strided).  O(log pieces + pieces met).
 */
gfs_err gfs_layout_add_extent(gfs_layout *dst, size_t ti, uint64_t toff, const gfs_layout *src,
			      size_t si, uint64_t off, uint64_t len);

/*
 * gfs_layout_add_source(): register a source file (deduplicated by path)
 * with its expected size.  @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_source(gfs_layout *l, const char *path, uint64_t size,
			      uint32_t *idx);

/*
 * gfs_layout_add_tensor(): append a tensor with no pieces yet.  numel and
 * nbytes are computed with overflow checks.  @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_tensor(gfs_layout *l, const char *name, gfs_dtype dtype,
			      uint32_t ndim, const uint64_t *shape, size_t *idx);

/*
 * gfs_layout_add_object(): record a non-tensor entry: len bytes at src_off
 * of source src (checked against the source size by gfs_layout_finish()).
 */
gfs_err gfs_layout_add_object(gfs_layout *l, const char *name, uint32_t src,
			      uint64_t src_off, uint64_t len);

/*
 * gfs_layout_add_state(): append the optimizer-state entry `state` of
 * parameter `param` (no pieces yet).  Model tensors cannot be added after
 * it.  (state, param) pairs are unique.  @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_state(gfs_layout *l, const char *state, const char *param,
			     gfs_dtype dtype, uint32_t ndim, const uint64_t *shape,
			     size_t *idx);

/* gfs_layout_nentries(): model tensors plus optimizer-state entries. */
static inline size_t gfs_layout_nentries(const gfs_layout *l)
{
	return l->ntensors + l->noptim;
}

/*
 * gfs_layout_find_state(): index of the optimizer-state entry (state,
 * param), or -1.  O(1).
 */
int64_t gfs_layout_find_state(const gfs_layout *l, const char *state, const char *param);

/* gfs_hval_clear(): free what v owns (recursively); v becomes NONE. */
void gfs_hval_clear(gfs_hval *v);

/* gfs_optim_clear(): free what o owns; o becomes empty (zero_stage 0). */
void gfs_optim_clear(gfs_optim *o);

/*
 * gfs_layout_add_alias(): append an alias entry named name for target.  The
 * target may be added later; gfs_layout_finish() resolves it (it must be a
 * tensor, not an alias) and gives the alias the target's dtype and shape.
 */
gfs_err gfs_layout_add_alias(gfs_layout *l, const char *name, const char *target);

/*
 * gfs_layout_add_piece(): append a FILE piece to tensor ti, right after its
 * previous piece.  Adjacent pieces from one source are merged.
 */
gfs_err gfs_layout_add_piece(gfs_layout *l, size_t ti, uint32_t src,
			     uint64_t src_off, uint64_t len);

/*
 * gfs_layout_add_rflat(): register a regular flat of nbytes bytes on each
 * of nranks ranks, rank k's at byte offs[k] of source srcs[k] (checked
 * against the source's size by gfs_layout_finish()).  Neighbouring ranks
 * must have different sources (their pieces are never merged).
 * @return GFS_OK and *idx.
 */
gfs_err gfs_layout_add_rflat(gfs_layout *l, uint32_t nranks, const uint32_t *srcs,
			     const uint64_t *offs, uint64_t nbytes, uint32_t *idx);

/*
 * gfs_layout_add_partition(): make tensor ti (no pieces; not of an inputs
 * table) partitioned on regular flat f: its piece k is bytes [off, off +
 * plen) of rank k's flat, cut to the tensor's size: ceil(nbytes / plen)
 * pieces, at most the flat's ranks.  The same pieces as
 * gfs_layout_add_piece() of each rank's range in turn, in O(1).
 */
gfs_err gfs_layout_add_partition(gfs_layout *l, size_t ti, uint32_t f, uint64_t off,
				 uint64_t plen);

/*
 * gfs_layout_add_record(): register a checksummed record r named name
 * (copied into the layout's arena, a name equal to the previous record's
 * shared; r->name is ignored) that pieces may read.  Registering one twice is harmless.
 * gfs_layout_finish() drops the records no piece reads and gives each
 * piece lying wholly inside a record that record's index.
 */
gfs_err gfs_layout_add_record(gfs_layout *l, const gfs_record *r, const char *name);

/*
 * gfs_record_name(): r's name for messages into buf (n > 0 bytes, cut to
 * fit): its name, followed by " of the item at offset N" if r->item is set.
 * @return buf
 */
const char *gfs_record_name(const gfs_record *r, char *buf, size_t n);

/* gfs_layout_add_zero(): append a ZERO piece of len bytes to tensor ti. */
gfs_err gfs_layout_add_zero(gfs_layout *l, size_t ti, uint64_t len);

/*
 * gfs_layout_add_general(): add any piece to tensor ti at p->toff (pieces
 * may come in any order; gfs_layout_finish() sorts them by toff).  Checks
 * the piece's own fields (kind, source index, count >= 1, len > 0, strides
 * larger than a run, extents without overflow, inside the tensor); whether
 * the pieces tile the tensor is checked by gfs_layout_finish().  p->reach is
 * ignored.  Contiguous FILE and ZERO pieces may also come from
 * gfs_layout_add_piece() / gfs_layout_add_zero(), which append at the end
 * of the pieces added in order so far.
 */
gfs_err gfs_layout_add_general(gfs_layout *l, size_t ti, const gfs_piece *p);

/*
 * gfs_layout_copy_pieces(): gfs_layout_add_general() of every piece of
 * tensor t of another finished layout to tensor ti of l, each FILE or ZSTD
 * piece's source index mapped through remap (t's layout's index -> l's).
 */
gfs_err gfs_layout_copy_pieces(gfs_layout *l, size_t ti, const gfs_tensor *t,
			       const uint32_t *remap);

/*
 * gfs_layout_finish(): validate and seal: unique names, pieces tile each
 * tensor exactly (every byte in exactly one run: no gap, no overlap), every
 * FILE piece lies inside its source's recorded size, every ZSTD piece's
 * frame lies inside its source and its bytes inside the frame's
 * decompressed size, alias targets are tensors.  Sorts pieces by toff and
 * sets each piece's reach.  The tiling check of a tensor with strided
 * pieces is arithmetic when they form regular blocks (pieces of one count
 * and stride whose first runs lie end to end over one stride: a matrix
 * split by columns), O(pieces); otherwise it walks the runs (O(runs x
 * interleaved pieces), at most GFS_MAX_RUNS runs per layout).  label names
 * the layout's origin in messages.
 */
gfs_err gfs_layout_finish(gfs_layout *l, const char *label);

/*
 * gfs_layout_add_input(): append an operand tensor (no pieces yet) to l's
 * inputs table, created on first use.  Its pieces are added with
 * gfs_layout_add_piece(l->inputs, ...) etc. and name l's sources.
 * @return GFS_OK and *idx (an index into l->inputs).
 */
gfs_err gfs_layout_add_input(gfs_layout *l, const char *name, gfs_dtype dtype,
			     uint32_t ndim, const uint64_t *shape, size_t *idx);

/*
 * gfs_layout_finish_inputs(): copy l's sources into its inputs table and
 * finish it (so that its names can be looked up); a no-op without inputs
 * or when done already.  gfs_layout_finish() calls it.
 */
gfs_err gfs_layout_finish_inputs(gfs_layout *l, const char *label);

/*
 * gfs_layout_set_compute(): make tensor ti (no pieces) a computed tensor.
 * gfs_layout_finish() checks the operation against its inputs' shapes and
 * dtypes (floating point), the rank (1..GFS_MAX_LORA_RANK) and the scale
 * (finite).
 */
gfs_err gfs_layout_set_compute(gfs_layout *l, size_t ti, const gfs_compute *c);

/*
 * gfs_layout_check_computed(): finish l's inputs and check every computed
 * tensor of l (see gfs_layout_set_compute()); gfs_layout_finish() calls it.
 */
gfs_err gfs_layout_check_computed(gfs_layout *l, const char *label);

/* gfs_op_name(): "lora", "lora_bias", "dora", "dequant". */
const char *gfs_op_name(gfs_op op);

/* gfs_op_parse(): the op named s, or 0. */
gfs_op gfs_op_parse(const char *s);

/* A range [first, last) of a tensor's pieces. */
typedef struct gfs_piece_span {
	size_t first;
	size_t last;
} gfs_piece_span;

/*
 * gfs_piece_candidates(): of a finished tensor's pieces, the range that may
 * hold bytes of [off, end): pieces starting before end whose reach passes
 * off.  Every piece with a run intersecting [off, end) is in the range (some
 * in it may have none).  O(log npieces).
 */
gfs_piece_span gfs_piece_candidates(const gfs_tensor *t, uint64_t off, uint64_t end);

/*
 * gfs_piece_run_at(): if a run of p holds tensor byte pos, true and its
 * [*start, *end).
 */
bool gfs_piece_run_at(const gfs_piece *p, uint64_t pos, uint64_t *start, uint64_t *end);

/*
 * gfs_piece_next_run(): the first run of p starting at or after pos:
 * true and its [*start, *end), or false if none.
 */
bool gfs_piece_next_run(const gfs_piece *p, uint64_t pos, uint64_t *start, uint64_t *end);

/*
 * gfs_record_tensors(): the entries of a finished layout with bytes in
 * record r (tensors with a piece in it, computed tensors with an input with
 * a piece in it, and their aliases), in layout order: up to max indices into out; @return how many there are in all.
 * O(tensors log pieces).
 */
size_t gfs_record_tensors(const gfs_layout *l, uint32_t r, size_t *out, size_t max);

/* A rank of a regular flat. */
typedef struct gfs_rflat_ref {
	uint32_t flat;
	uint32_t rank;
} gfs_rflat_ref;

/*
 * gfs_record_each_piece(): call fn(ctx, ref) for every piece of the
 * finished layout's entries (not of its inputs table) in record r, in no
 * set order, until fn returns false.  O(pieces in r + tensors on the
 * regular flats in r).  @return false if fn did.
 */
bool gfs_record_each_piece(const gfs_layout *l, uint32_t r,
			   bool (*fn)(void *ctx, gfs_piece_ref ref), void *ctx);

/*
 * gfs_record_describe(): "SOURCE: record NAME (tensors A, B, ...)" into
 * buf[0..n), at most max_names names (then "and K more").  @return buf.
 */
const char *gfs_record_describe(const gfs_layout *l, uint32_t r, size_t max_names,
				char *buf, size_t n);

/*
 * gfs_layout_piece_ref(): the entry and piece numbered g (< the finished
 * layout's piece0[nentries]) in rec_pieces.  O(log entries).
 */
gfs_piece_ref gfs_layout_piece_ref(const gfs_layout *l, uint32_t g);

/* gfs_layout_find(): index of the model tensor named name, or -1.  O(1). */
int64_t gfs_layout_find(const gfs_layout *l, const char *name);

/*
 * gfs_layout_target(): the tensor holding the bytes of entry i (itself, or
 * its alias target); i < gfs_layout_nentries().
 */
const gfs_tensor *gfs_layout_target(const gfs_layout *l, size_t i);

/*
 * gfs_layout_to_json(): serialise to the documented JSON schema.  The caller
 * frees *text with free().
 */
gfs_err gfs_layout_to_json(const gfs_layout *l, char **text);

/*
 * gfs_layout_json_nunits(), gfs_layout_json_unit(): gfs_layout_to_json()'s
 * text in units, to write it a part at a time: the texts of units
 * [0, gfs_layout_json_nunits()) in order, concatenated, are the whole text.
 * Unit 0 is the head (up to the tensors), the last the tail, and each
 * entry of the layout has one unit: O(its pieces) to write.
 * gfs_layout_json_unit() returns unit u (malloc()ed, NUL-terminated, freed
 * by the caller) in *text and its length in *len.
 */
size_t gfs_layout_json_nunits(const gfs_layout *l);
gfs_err gfs_layout_json_unit(const gfs_layout *l, size_t u, char **text, size_t *len);

/*
 * gfs_layout_json_unit_size(): the length of gfs_layout_json_unit()'s
 * unit u in *size, without writing its pieces (O(pieces) arithmetic, the
 * rest of the unit written and dropped).
 */
gfs_err gfs_layout_json_unit_size(const gfs_layout *l, size_t u, uint64_t *size);

/*
 * gfs_layout_from_json(): parse and validate a layout JSON held in
 * text[0..len).  Relative source paths resolve against the "base_dir" field
 * or, if absent, json_dir.  label names the file in messages.
 */
gfs_err gfs_layout_from_json(const char *text, size_t len, const char *label,
			     const char *json_dir, gfs_layout **out);

/* gfs_layout_load_file(): read a layout JSON file (see gfs_layout_from_json). */
gfs_err gfs_layout_load_file(const char *path, gfs_layout **out);

#endif
