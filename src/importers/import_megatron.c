/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs — legacy Megatron-LM checkpoints (docs/megatron.md).
 *
 * iter_NNNNNNN/mp_rank_TT[_PPP][_EEE]/model_optim_rng.pt: one torch zip per
 * (tensor rank, pipeline stage, expert rank), holding `model` (module name
 * -> tensor, layer numbers local to the stage, expert numbers local to the
 * expert rank) and `args` (an argparse.Namespace, read as the inert object
 * the pickle reader makes of it: its BUILD state dict).  Tensor shards
 * become pieces: column-parallel ones stacked on dim 0 (a gated linear_fc1
 * split into its gate and up halves first), row-parallel ones interleaved
 * on dim 1 (strided pieces), replicated ones taken from tensor rank 0.  The
 * MLA down projections are either: column-parallel in the local layer spec
 * (ColumnParallelLinear), duplicated in TransformerEngine's (TELinear); the
 * shard's rows against the args' sizes tell which.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gatherfs/importers/import_megatron.h"
#include "gatherfs/importers/naming.h"
#include "gatherfs/util/json.h"
#include "gatherfs/readers/pickle.h"
#include "gatherfs/readers/torchfile.h"

#define MG_MAX_PICKLE ((uint64_t)1 << 30)
#define MG_MAX_RANKS 4096   /* bound on each parallel size */
#define MG_MAX_INDEX 1000000 /* bound on layer and expert numbers */
#define MG_MAX_ARG_STR (1 << 20) /* bound on a string in args */
#define MG_FILE "model_optim_rng.pt"
#define MG_LATEST "latest_checkpointed_iteration.txt"
#define MG_MARK '\x01' /* a number's place in a template (a key holding it is refused) */
#define MG_TAG_MAX 64 /* bound on an iteration directory's name */

/* How the shards of one parameter merge over tensor ranks. */
typedef enum mg_split {
	MG_REPLICATED,
	MG_COLUMN, /* dim 0 */
	MG_GATED,  /* dim 0, each shard [gate_r; up_r] */
	MG_ROW,    /* dim 1 */
} mg_split;

/* One tensor of one file. */
typedef struct mg_ent {
	size_t tmpl;      /* index into mg_import.tmpls */
	uint32_t pp, tp;  /* stage and tensor rank of its file */
	int64_t layer;    /* local, then global (after fix_layers()); -1: none */
	int64_t expert;   /* global; -1: none */
	gfs_dtype dtype;
	uint32_t ndim;
	uint64_t shape[GFS_MAX_DIMS];
	uint64_t nbytes;
	uint32_t src;
	uint64_t off;     /* absolute offset of its first byte in src */
	size_t file;      /* index into mg_import.files */
} mg_ent;

typedef struct mg_import {
	gfs_layout *l;
	const char *dir;  /* the iteration directory */
	char **files;     /* relative paths, for messages */
	size_t nfiles;
	mg_ent *ents;
	size_t nents, cap;
	char **tmpls;     /* names with MG_MARK for the layer and expert numbers */
	size_t ntmpls, cap_tmpls;
	uint32_t *thash;  /* open addressing over tmpls: index + 1, 0 = empty */
	size_t thash_cap; /* a power of two, more than twice ntmpls */
	int64_t tp, pp, ep, nexperts;
	int64_t q_down, kv_down; /* rows of the whole MLA down projections; 0: unknown */
	bool gated;
	bool tied;        /* the last stage's output_layer.weight is a copy of the embedding */
	mg_ent *copies;   /* tied: the last stage's output_layer.weight shards (tmpl unused) */
	size_t ncopies;
} mg_import;

/* mg_args: the parallel layout a file's args give. */
typedef struct mg_args {
	int64_t tp, pp, ep, nexperts, nlayers;
	int64_t q_down, kv_down; /* q_lora_rank, kv_lora_rank + qk_pos_emb_head_dim; 0: absent */
	int64_t rank, world; /* args.rank and args.world_size of the process that saved it; -1: absent */
	bool gated, tp_pp_dp; /* tp_pp_dp: args.use_tp_pp_dp_mapping (rank order tp-cp-ep-pp-dp) */
} mg_args;

/* ends_with(): does s end with suffix? */
static bool ends_with(const char *s, const char *suffix)
{
	const size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* arg_int(): integer argument name of the args state dict, or dflt when absent or None. */
static gfs_err arg_int(const gfs_pv *args, const char *name, int64_t dflt, const char *path,
		       int64_t *out)
{
	const gfs_pv *v = gfs_pv_dict_get(args, name);

	if (!v || v->kind == GFS_PV_NONE) {
		*out = dflt;
		return GFS_OK;
	}
	if (!gfs_pv_int(v, out) || *out < 0 || *out > MG_MAX_INDEX)
		return gfs_fail(GFS_ERR_FORMAT, "%s: args.%s is not a small non-negative integer",
				path, name);
	return GFS_OK;
}

/*
 * args_sane(): no string of the args state dict args (nor of a list or
 * tuple in it) is longer than MG_MAX_ARG_STR bytes: a real argument (a
 * path, a name, an encoded config) never is.
 */
static gfs_err args_sane(const gfs_pv *args, const char *path)
{
	for (size_t i = 0; i < args->u.dict.len; i++) {
		const gfs_pv *v = args->u.dict.items[i].value;
		const bool seq = v && (v->kind == GFS_PV_LIST || v->kind == GFS_PV_TUPLE);
		const size_t n = seq ? v->u.seq.len : 1;

		for (size_t k = 0; k < n; k++) {
			const gfs_pv *x = seq ? v->u.seq.items[k] : v;

			if (x && (x->kind == GFS_PV_STR || x->kind == GFS_PV_BYTES) &&
			    x->u.s.len > MG_MAX_ARG_STR) {
				const char *name = gfs_pv_name(args->u.dict.items[i].key);
				char shown[GFS_SHOWN_KEY_BUF];

				return gfs_fail(GFS_ERR_LIMIT,
						"%s: args.%s: a string of %zu bytes (more than %d): not an argument",
						path, name ? gfs_shown_key(name, strlen(name), shown) : "?",
						x->u.s.len, MG_MAX_ARG_STR);
			}
		}
	}
	return GFS_OK;
}

/*
 * read_args(): the parallel sizes of root's args (an argparse.Namespace
 * whose BUILD state is a dict).  Refuses what this importer cannot merge.
 */
static gfs_err read_args(const gfs_pv *root, const char *path, mg_args *a)
{
	const gfs_pv *args = gfs_pv_dict_get(root, "args");
	int64_t v, etp, swiglu, order, kv_lora = 0, rope = 0;
	gfs_err err;

	if (!args || args->kind != GFS_PV_OBJECT || !args->u.obj.state ||
	    args->u.obj.state->kind != GFS_PV_DICT)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: no args namespace: not a Megatron-LM checkpoint file", path);
	args = args->u.obj.state;
	err = args_sane(args, path);
	if (!err)
		err = arg_int(args, "tensor_model_parallel_size", 1, path, &a->tp);
	if (!err)
		err = arg_int(args, "pipeline_model_parallel_size", 1, path, &a->pp);
	if (!err)
		err = arg_int(args, "expert_model_parallel_size", 1, path, &a->ep);
	if (!err)
		err = arg_int(args, "num_experts", 0, path, &a->nexperts);
	if (!err)
		err = arg_int(args, "num_layers", 0, path, &a->nlayers);
	if (!err)
		err = arg_int(args, "virtual_pipeline_model_parallel_size", 1, path, &v);
	if (!err)
		err = arg_int(args, "expert_tensor_parallel_size", a->tp, path, &etp);
	if (!err)
		err = arg_int(args, "rank", -1, path, &a->rank);
	if (!err)
		err = arg_int(args, "world_size", -1, path, &a->world);
	if (!err)
		err = arg_int(args, "use_tp_pp_dp_mapping", 0, path, &order);
	a->tp_pp_dp = !err && order != 0;
	if (!err)
		err = arg_int(args, "q_lora_rank", 0, path, &a->q_down);
	if (!err)
		err = arg_int(args, "kv_lora_rank", 0, path, &kv_lora);
	if (!err)
		err = arg_int(args, "qk_pos_emb_head_dim", 0, path, &rope);
	a->kv_down = kv_lora > 0 && rope > 0 ? kv_lora + rope : 0;
	if (!err)
		err = arg_int(args, "swiglu", 0, path, &swiglu);
	if (err)
		return err;
	a->gated = swiglu != 0;
	if (!a->gated && (err = arg_int(args, "gated_linear_unit", 0, path, &swiglu)) == GFS_OK)
		a->gated = swiglu != 0;
	if (err)
		return err;
	if (a->tp < 1 || a->pp < 1 || a->ep < 1 || a->tp > MG_MAX_RANKS || a->pp > MG_MAX_RANKS ||
	    a->ep > MG_MAX_RANKS)
		return gfs_fail(GFS_ERR_FORMAT, "%s: args: parallel sizes out of range (TP %lld, PP %lld, EP %lld)",
				path, (long long)a->tp, (long long)a->pp, (long long)a->ep);
	if (v > 1)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: a virtual-pipeline save (args.virtual_pipeline_model_parallel_size %lld): not supported",
				path, (long long)v);
	if (a->ep > 1 && etp != a->tp)
		return gfs_fail(GFS_ERR_UNSUPPORTED,
				"%s: expert tensor parallel size %lld differs from tensor parallel size %lld: not supported",
				path, (long long)etp, (long long)a->tp);
	if (a->ep > 1 && (a->nexperts == 0 || a->nexperts % a->ep != 0))
		return gfs_fail(GFS_ERR_FORMAT, "%s: args: %lld experts do not divide over %lld expert ranks",
				path, (long long)a->nexperts, (long long)a->ep);
	return GFS_OK;
}

/* rank_dir(): the directory name of (tp, pp, ep) under sizes a. */
static void rank_dir(const mg_args *a, int64_t tp, int64_t pp, int64_t ep, char *buf, size_t n)
{
	int k = snprintf(buf, n, "mp_rank_%02lld", (long long)tp);

	if (a->pp > 1)
		k += snprintf(buf + k, n - (size_t)k, "_%03lld", (long long)pp);
	if (a->ep > 1)
		snprintf(buf + k, n - (size_t)k, "_%03lld", (long long)ep);
}

/*
 * check_identity(): the file at path, read as tensor rank tp, pipeline
 * stage pp, expert rank ep, against the rank its args say saved it (fa,
 * under Megatron-Core's rank order: tensor ranks innermost, then context
 * and expert ranks, data ranks, pipeline stages outermost; with
 * use_tp_pp_dp_mapping only the tensor rank is checked), and against the
 * world size of rank 0's args (a).  Args without a rank, or written by one
 * process for every rank (a world size smaller than the T x P x E ranks, as
 * a conversion tool's), cannot say: nothing is checked.
 */
static gfs_err check_identity(const char *path, const mg_args *a, const mg_args *fa, int64_t tp,
			      int64_t pp, int64_t ep)
{
	const int64_t mp = a->tp * a->pp * a->ep;
	int64_t rtp, rpp, rep;

	if (fa->world >= 0 && a->world >= 0 && fa->world != a->world)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: its args say a world size of %lld, the other ranks' %lld: not a file of this save",
				path, (long long)fa->world, (long long)a->world);
	if (fa->rank < 0 || fa->world < mp)
		return GFS_OK;
	if (fa->world % mp != 0 || fa->rank >= fa->world)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: its args say rank %lld of a world of %lld, which TP %lld x PP %lld x EP %lld do not divide",
				path, (long long)fa->rank, (long long)fa->world, (long long)a->tp,
				(long long)a->pp, (long long)a->ep);
	rtp = fa->rank % a->tp;
	rep = fa->tp_pp_dp ? ep : fa->rank / a->tp % a->ep;
	rpp = fa->tp_pp_dp ? pp : fa->rank / (fa->world / a->pp);
	if (rtp == tp && rpp == pp && rep == ep)
		return GFS_OK;
	return gfs_fail(GFS_ERR_FORMAT,
			"%s: its args say rank %lld saved it (tensor rank %lld, pipeline stage %lld, expert rank %lld), not tensor rank %lld, pipeline stage %lld, expert rank %lld: another rank's file",
			path, (long long)fa->rank, (long long)rtp, (long long)rpp, (long long)rep,
			(long long)tp, (long long)pp, (long long)ep);
}

/*
 * probe_args(): the args of the file at path: its parallel sizes, and in
 * *arch (its source src) the architecture they describe.
 */
static gfs_err probe_args(const char *path, const char *src, mg_args *a, gfs_arch *arch)
{
	gfs_tzip *zip = NULL;
	gfs_pickle *pk = NULL;
	uint64_t size;
	int fd = -1;
	gfs_err err = gfs_torch_open(path, MG_MAX_PICKLE, "a Megatron-LM checkpoint file", &fd,
				&size, &zip, &pk);

	if (!err)
		err = read_args(gfs_pickle_root(pk), path, a);
	if (!err)
		err = gfs_arch_from_args(gfs_pv_dict_get(gfs_pickle_root(pk), "args")->u.obj.state,
					 src, arch);
	gfs_torch_close(fd, zip, pk);
	return err;
}

/*
 * parse_index(): the decimal number at *s (at most 7 digits, ended by '.'),
 * advancing *s past the dot.  @return false if there is none.
 */
static bool parse_index(const char **s, int64_t *out)
{
	const char *p = *s;
	int64_t v = 0;
	int n = 0;

	while (*p >= '0' && *p <= '9' && n < 7) {
		v = v * 10 + (*p++ - '0');
		n++;
	}
	if (n == 0 || *p != '.')
		return false;
	*s = p + 1;
	*out = v;
	return true;
}

/*
 * grouped_name(): TransformerEngine's grouped MLP (TEGroupedMLP) stores
 * local expert e's weights as "….mlp.experts.linear_fc1.weight<e>" (its
 * GroupedLinear's "weight%d" parameters); write key as SequentialMLP names
 * them ("….mlp.experts.local_experts.<e>.linear_fc1.weight") into out (room
 * for strlen(key) + 15).  @return whether key was one.
 */
static bool grouped_name(const char *key, char *out)
{
	static const char mid[] = ".mlp.experts.linear_fc";
	const char *hit = strstr(key, mid), *w, *d;

	if (!hit || (hit[sizeof(mid) - 1] != '1' && hit[sizeof(mid) - 1] != '2'))
		return false;
	w = hit + sizeof(mid);
	if (strncmp(w, ".weight", 7) != 0)
		return false;
	d = w + 7;
	if (*d < '0' || *d > '9' || (d[0] == '0' && d[1]) || strspn(d, "0123456789") != strlen(d))
		return false;
	sprintf(out, "%.*s.mlp.experts.local_experts.%s.linear_fc%c.weight", (int)(hit - key), key, d,
		hit[sizeof(mid) - 1]);
	return true;
}

/*
 * split_name(): the template of key (layer number after "decoder.layers."
 * and expert number after "local_experts." replaced by MG_MARK), with the
 * numbers in *layer and *expert (-1 if absent).  @return a new string, or
 * NULL (out of memory).
 */
static char *split_name(const char *key, int64_t *layer, int64_t *expert)
{
	static const char *const marks[2] = { "decoder.layers.", "local_experts." };
	const size_t n = strlen(key) + sizeof("local_experts.");
	char *t = gfs_calloc(n + 1, 1), *grouped = gfs_calloc(n + 1, 1);
	const char *s = key;
	char *o = t;

	*layer = *expert = -1;
	if (!t || !grouped) {
		free(t);
		free(grouped);
		return NULL;
	}
	if (grouped_name(key, grouped))
		s = grouped;
	for (int m = 0; m < 2; m++) {
		const char *hit = strstr(s, marks[m]);
		const char *num;
		int64_t v;

		if (!hit)
			continue;
		num = hit + strlen(marks[m]);
		if (!parse_index(&num, &v))
			continue;
		memcpy(o, s, (size_t)(hit - s) + strlen(marks[m]));
		o += (size_t)(hit - s) + strlen(marks[m]);
		*o++ = MG_MARK;
		*o++ = '.';
		s = num;
		*(m == 0 ? layer : expert) = v;
	}
	strcpy(o, s);
	free(grouped);
	return t;
}

/* tmpl_hash(): FNV-1a of the template t. */
static uint64_t tmpl_hash(const char *t)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *t; t++)
		h = (h ^ (unsigned char)*t) * 0x100000001b3ull;
	return h;
}

/* tmpl_slot(): the slot of t in mg->thash, or the empty one it would take. */
static size_t tmpl_slot(const mg_import *mg, const char *t)
{
	size_t k = (size_t)tmpl_hash(t) & (mg->thash_cap - 1);

	while (mg->thash[k] && strcmp(mg->tmpls[mg->thash[k] - 1], t) != 0)
		k = (k + 1) & (mg->thash_cap - 1);
	return k;
}

/*
 * intern(): index of template t in mg->tmpls, added if new (t is taken or
 * freed); hashed, so a file of many keys costs O(1) a key.
 */
static gfs_err intern(mg_import *mg, char *t, size_t *idx)
{
	size_t k;

	if (2 * (mg->ntmpls + 1) > mg->thash_cap) {
		const size_t cap = mg->thash_cap ? 2 * mg->thash_cap : 256;
		uint32_t *n = gfs_calloc(cap, sizeof(*n));

		if (!n || mg->ntmpls >= UINT32_MAX / 2) {
			free(n);
			free(t);
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		}
		free(mg->thash);
		mg->thash = n;
		mg->thash_cap = cap;
		for (size_t i = 0; i < mg->ntmpls; i++)
			n[tmpl_slot(mg, mg->tmpls[i])] = (uint32_t)i + 1;
	}
	k = tmpl_slot(mg, t);
	if (mg->thash[k]) {
		free(t);
		*idx = mg->thash[k] - 1;
		return GFS_OK;
	}
	if (!gfs_grow((void **)&mg->tmpls, &mg->cap_tmpls, mg->ntmpls, sizeof(*mg->tmpls), 64)) {
		free(t);
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	}
	mg->tmpls[mg->ntmpls] = t;
	mg->thash[k] = (uint32_t)mg->ntmpls + 1;
	*idx = mg->ntmpls++;
	return GFS_OK;
}

/* push(): append e to mg->ents. */
static gfs_err push(mg_import *mg, const mg_ent *e)
{
	if (mg->nents == mg->cap) {
		const size_t cap = mg->cap ? 2 * mg->cap : 256;
		mg_ent *n = gfs_reallocarray(mg->ents, cap, sizeof(*n));

		if (!n)
			return gfs_fail(GFS_ERR_NOMEM, "out of memory");
		mg->ents = n;
		mg->cap = cap;
	}
	mg->ents[mg->nents++] = *e;
	return GFS_OK;
}

/*
 * tensor_ent(): fill e from the tensor t of key in zip: dtype, shape,
 * where its (C-contiguous) bytes lie; register its storage record.
 */
static gfs_err tensor_ent(mg_import *mg, const gfs_tzip *zip, const char *path, const char *key,
			  const gfs_pv_tensor *t, mg_ent *e)
{
	const gfs_tzip_record *zr;
	uint64_t numel = 1, esize, want = 1, first;
	gfs_err err;

	e->dtype = t->dtype ? gfs_dtype_parse(t->dtype) : gfs_dtype_from_storage_class(t->storage.cls);
	if (e->dtype == GFS_DT_INVALID)
		return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: unsupported dtype", path, key);
	if (t->ndim > GFS_MAX_DIMS)
		return gfs_fail(GFS_ERR_LIMIT, "%s: %s: more than %d dimensions", path, key,
				GFS_MAX_DIMS);
	esize = gfs_dtype_size(e->dtype);
	e->ndim = t->ndim;
	for (uint32_t d = t->ndim; d-- > 0;) {
		if (t->size[d] < 0)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: negative size", path, key);
		if (t->size[d] > 1 && t->stride[d] != (int64_t)want)
			return gfs_fail(GFS_ERR_UNSUPPORTED, "%s: %s: not a contiguous tensor", path, key);
		e->shape[d] = (uint64_t)t->size[d];
		if (!gfs_mul_u64(want, e->shape[d], &want))
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", path, key);
	}
	numel = want;
	if (!gfs_mul_u64(numel, esize, &e->nbytes) || t->offset < 0 ||
	    !gfs_mul_u64((uint64_t)t->offset, esize, &first))
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: size overflows", path, key);
	err = gfs_tzip_storage_record(zip, t->storage.key, &zr);
	if (err)
		return gfs_fail_prefix(err, "%s: %s", path, key);
	if (first > zr->size || e->nbytes > zr->size - first)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s reaches past its storage record: truncated or corrupt",
				path, key);
	e->off = zr->data_off + first;
	if (e->nbytes) {
		const gfs_record r = { .src = e->src, .kind = GFS_PIECE_FILE, .off = zr->data_off,
				       .len = zr->size, .crc32 = zr->crc32 };

		err = gfs_layout_add_record(mg->l, &r, zr->name);
	}
	return err;
}

/* omit(): record rel's entry prefix + key as left out of every view, and why. */
static gfs_err omit(mg_import *mg, const char *rel, const char *prefix, const char *key,
		    const char *why)
{
	char name[4096];

	snprintf(name, sizeof(name), "%s:%s%s", rel, prefix, key);
	return gfs_layout_add_omitted(mg->l, name, why);
}

/*
 * omit_rest(): record the top-level entries of rel's dict root other than
 * args and model (optimizer, RNG state, iteration...), and a
 * distrib_optim.pt beside it.
 */
static gfs_err omit_rest(mg_import *mg, const char *rel, const gfs_pv *root)
{
	char path[PATH_MAX], drel[64];
	gfs_err err = GFS_OK;

	for (size_t i = 0; i < root->u.dict.len && !err; i++) {
		const char *k = gfs_pv_name(root->u.dict.items[i].key);

		if (k && strcmp(k, "args") != 0 && strcmp(k, "model") != 0)
			err = omit(mg, rel, "", k, "not model state");
	}
	snprintf(drel, sizeof(drel), "%.*s/distrib_optim.pt", (int)(strchr(rel, '/') - rel), rel);
	if (!err && (size_t)snprintf(path, sizeof(path), "%s/%s", mg->dir, drel) < sizeof(path) &&
	    access(path, F_OK) == 0)
		err = gfs_layout_add_omitted(mg->l, drel, "distributed optimizer state");
	return err;
}

/*
 * tied_copy(): the output_layer.weight v of the file at path (entry e,
 * its place) under args that say the embeddings are tied: at PP 1 the
 * model holds no output layer weight, so one contradicts the args; on the
 * last stage it is Megatron's copy of the embedding, kept in mg->copies to
 * become a replica of it (add_copies()).
 */
static gfs_err tied_copy(mg_import *mg, const mg_args *a, const gfs_tzip *zip, const char *path,
			 const gfs_pv *v, const mg_ent *e)
{
	mg_ent c = *e;
	mg_ent *n;
	gfs_err err;

	if (a->pp == 1)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: output_layer.weight: the args say the output layer is tied to the embedding (untie_embeddings_and_output_weights False), but the file holds one: they contradict each other",
				path);
	if ((int64_t)e->pp != a->pp - 1 || !v || v->kind != GFS_PV_TENSOR)
		return GFS_OK;
	err = tensor_ent(mg, zip, path, "output_layer.weight", v->u.tensor, &c);
	if (err)
		return err;
	n = gfs_reallocarray(mg->copies, mg->ncopies + 1, sizeof(*n));
	if (!n)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	mg->copies = n;
	n[mg->ncopies++] = c;
	return GFS_OK;
}

/*
 * read_file(): the model tensors of rank (tp, pp, ep)'s file, whose args
 * must agree with a.  Of an expert rank > 0 only the expert tensors are
 * kept (the others are replicas of expert rank 0's).
 */
static gfs_err read_file(mg_import *mg, const mg_args *a, int64_t tp, int64_t pp, int64_t ep)
{
	char rel[64], path[PATH_MAX];
	gfs_tzip *zip = NULL;
	gfs_pickle *pk = NULL;
	const gfs_pv *model;
	mg_args fa;
	uint64_t size = 0;
	uint32_t src;
	int fd = -1;
	char **nf;
	gfs_err err;

	rank_dir(a, tp, pp, ep, rel, sizeof(rel) - sizeof(MG_FILE) - 1);
	strcat(rel, "/" MG_FILE);
	if ((size_t)snprintf(path, sizeof(path), "%s/%s", mg->dir, rel) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", mg->dir);
	nf = gfs_reallocarray(mg->files, mg->nfiles + 1, sizeof(*nf));
	if (!nf)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	mg->files = nf;
	nf[mg->nfiles] = gfs_strdup(path);
	if (!nf[mg->nfiles])
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	mg->nfiles++;
	err = gfs_torch_open(path, MG_MAX_PICKLE, "a Megatron-LM checkpoint file", &fd,
				&size, &zip, &pk);
	if (err == GFS_ERR_NOTFOUND)
		err = gfs_fail(GFS_ERR_NOTFOUND,
			       "%s: missing: the file of tensor rank %lld, pipeline stage %lld, expert rank %lld of a TP %lld x PP %lld x EP %lld save",
			       path, (long long)tp, (long long)pp, (long long)ep, (long long)a->tp,
			       (long long)a->pp, (long long)a->ep);
	if (!err)
		err = read_args(gfs_pickle_root(pk), path, &fa);
	if (!err && (fa.tp != a->tp || fa.pp != a->pp || fa.ep != a->ep || fa.gated != a->gated ||
		     fa.nexperts != a->nexperts))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: its args disagree with the other ranks' (TP %lld x PP %lld x EP %lld)",
			       path, (long long)fa.tp, (long long)fa.pp, (long long)fa.ep);
	if (!err)
		err = check_identity(path, a, &fa, tp, pp, ep);
	if (err)
		goto out;
	model = gfs_pv_dict_get(gfs_pickle_root(pk), "model");
	if (!model || model->kind != GFS_PV_DICT) {
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no model dict%s", path,
			       gfs_pv_dict_get(gfs_pickle_root(pk), "model0")
				       ? " (a virtual-pipeline save: not supported)" : "");
		goto out;
	}
	err = gfs_layout_add_source(mg->l, rel, size, &src);
	if (!err)
		err = omit_rest(mg, rel, gfs_pickle_root(pk));
	for (size_t i = 0; i < model->u.dict.len && !err; i++) {
		const gfs_pv_item *it = &model->u.dict.items[i];
		const char *key = gfs_pv_name(it->key);
		mg_ent e = { .pp = (uint32_t)pp, .tp = (uint32_t)tp, .src = src,
			     .file = mg->nfiles - 1 };
		char *t;

		if (!key) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: model key %zu is not a plain string", path, i);
			break;
		}
		if (strchr(key, MG_MARK)) {
			char shown[GFS_SHOWN_KEY_BUF];

			err = gfs_fail(GFS_ERR_FORMAT, "%s: model key %s holds byte 0x01: refused", path,
				       gfs_shown_key(key, strlen(key), shown));
			break;
		}
		if (mg->tied && strcmp(key, "output_layer.weight") == 0 &&
		    (err = tied_copy(mg, a, zip, path, it->value, &e)) != GFS_OK)
			break;
		if (ends_with(key, "._extra_state") || strcmp(key, "_extra_state") == 0 ||
		    (mg->tied && strcmp(key, "output_layer.weight") == 0)) {
			err = omit(mg, rel, "model.", key,
				   strcmp(key, "output_layer.weight") == 0
					   ? "the last stage's copy of the tied embedding (a replica verify compares)"
					   : "TransformerEngine extra state");
			continue;
		}
		if (!it->value || it->value->kind != GFS_PV_TENSOR) {
			const char *k = it->value ? gfs_pv_kind_name(it->value->kind) : "nothing";

			err = gfs_fail(GFS_ERR_FORMAT, "%s: model entry %s is %s%s, not a tensor", path,
				       key, strchr("aeiou", k[0]) ? "an " : "a ", k);
			break;
		}
		t = split_name(key, &e.layer, &e.expert);
		if (!t) {
			err = gfs_fail(GFS_ERR_NOMEM, "out of memory");
			break;
		}
		if (e.expert < 0 && a->ep > 1 && strstr(key, ".experts.")) {
			free(t);
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: %s: expert weights not stored per expert (grouped GEMM?): not supported",
				       path, key);
			break;
		}
		if (e.expert >= 0 && a->ep > 1) {
			const int64_t local = a->nexperts / a->ep;

			if (e.expert >= local) {
				free(t);
				err = gfs_fail(GFS_ERR_FORMAT, "%s: %s: local expert %lld of %lld per rank",
					       path, key, (long long)e.expert, (long long)local);
				break;
			}
			e.expert += ep * local;
		}
		if (ep > 0 && e.expert < 0) {
			free(t);
			continue;
		}
		err = intern(mg, t, &e.tmpl);
		if (!err)
			err = tensor_ent(mg, zip, path, key, it->value->u.tensor, &e);
		if (!err)
			err = push(mg, &e);
	}
out:
	gfs_torch_close(fd, zip, pk);
	return err;
}

/*
 * fix_layers(): make layer numbers global: a stage's layers follow those
 * of the stages before it (as many as the highest local number + 1).
 * With args.num_layers set, the stages' layers must add up to it.
 */
static gfs_err fix_layers(mg_import *mg, const mg_args *a)
{
	int64_t *count = gfs_calloc((size_t)a->pp, sizeof(*count)), off = 0;

	if (!count)
		return gfs_fail(GFS_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < mg->nents; i++)
		if (mg->ents[i].layer + 1 > count[mg->ents[i].pp])
			count[mg->ents[i].pp] = mg->ents[i].layer + 1;
	for (int64_t p = 0; p < a->pp; p++) {
		const int64_t c = count[p];

		count[p] = off;
		off += c;
	}
	for (size_t i = 0; i < mg->nents; i++)
		if (mg->ents[i].layer >= 0)
			mg->ents[i].layer += count[mg->ents[i].pp];
	free(count);
	if (a->nlayers > 0 && off != a->nlayers)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: the %lld pipeline stages hold %lld layers, args.num_layers says %lld",
				mg->dir, (long long)a->pp, (long long)off, (long long)a->nlayers);
	return GFS_OK;
}

static int cmp_ent(const void *pa, const void *pb)
{
	const mg_ent *a = pa, *b = pb;

	if (a->tmpl != b->tmpl)
		return a->tmpl < b->tmpl ? -1 : 1;
	if (a->layer != b->layer)
		return a->layer < b->layer ? -1 : 1;
	if (a->expert != b->expert)
		return a->expert < b->expert ? -1 : 1;
	if (a->tp != b->tp)
		return a->tp < b->tp ? -1 : 1;
	return a->pp < b->pp ? -1 : a->pp > b->pp;
}

/* global_name(): template t with its numbers filled in, into buf. */
static gfs_err global_name(const char *t, int64_t layer, int64_t expert, char *buf, size_t n)
{
	size_t k = 0;
	int which = 0;

	for (; *t; t++) {
		int w;

		if (*t == MG_MARK) {
			const int64_t v = which++ == 0 && layer >= 0 ? layer : expert;

			w = snprintf(buf + k, n - k, "%lld", (long long)v);
		} else {
			w = snprintf(buf + k, n - k, "%c", *t);
		}
		if (w < 0 || (size_t)w >= n - k)
			return gfs_fail(GFS_ERR_LIMIT, "a tensor name is too long");
		k += (size_t)w;
	}
	return GFS_OK;
}

/* split_of(): how the shards of template t merge over tensor ranks. */
static mg_split split_of(const mg_import *mg, const char *t)
{
	static const char *const column[] = {
		"word_embeddings.weight", "output_layer.weight", "linear_qkv.weight",
		"linear_qkv.bias",
		/* MLA: the up projections and linear_q_proj are column-parallel
		   in every layer spec (the down projections: down_split()) */
		"linear_q_proj.weight", "linear_q_up_proj.weight", "linear_kv_up_proj.weight",
	};

	if (mg->tp == 1)
		return MG_REPLICATED;
	if (ends_with(t, "linear_fc1.weight") || ends_with(t, "linear_fc1.bias"))
		return mg->gated ? MG_GATED : MG_COLUMN;
	for (size_t i = 0; i < sizeof(column) / sizeof(column[0]); i++)
		if (ends_with(t, column[i]))
			return MG_COLUMN;
	if (ends_with(t, "linear_proj.weight") || ends_with(t, "linear_fc2.weight"))
		return MG_ROW;
	return MG_REPLICATED;
}

/*
 * down_split(): how the shards e (of tensor name, template t) of an MLA
 * down projection merge, into *sp; other tensors leave *sp alone.
 * Megatron-Core's local layer spec builds linear_q_down_proj and
 * linear_kv_down_proj as ColumnParallelLinear (each rank 1/TP of the rows),
 * TransformerEngine's as a duplicated TELinear (every rank all of them).
 */
static gfs_err down_split(const mg_import *mg, const char *t, const char *name, const mg_ent *e,
			  mg_split *sp)
{
	const bool q = ends_with(t, "linear_q_down_proj.weight");
	const int64_t rows = q ? mg->q_down : mg->kv_down;

	if (mg->tp == 1 || (!q && !ends_with(t, "linear_kv_down_proj.weight")))
		return GFS_OK;
	if (rows == 0)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: an MLA down projection at TP %lld, but the args lack %s: whether it is split cannot be told",
				mg->files[e->file], name, (long long)mg->tp,
				q ? "q_lora_rank" : "kv_lora_rank or qk_pos_emb_head_dim");
	if (e->ndim == 2 && e->shape[0] == (uint64_t)rows)
		*sp = MG_REPLICATED;
	else if (e->ndim == 2 && e->shape[0] * (uint64_t)mg->tp == (uint64_t)rows)
		*sp = MG_COLUMN;
	else
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: %s: %u dimensions, %llu rows: neither the %lld rows the args give nor their 1/%lld share",
				mg->files[e->file], name, e->ndim, (unsigned long long)e->shape[0],
				(long long)rows, (long long)mg->tp);
	return GFS_OK;
}

/* add_group(): the tensor name from the T shards g[0..T) (tensor ranks 0..T-1). */
static gfs_err add_group(mg_import *mg, const char *name, const mg_ent *g)
{
	mg_split sp = split_of(mg, mg->tmpls[g[0].tmpl]);
	uint64_t T, shape[GFS_MAX_DIMS];
	size_t ti;
	gfs_err err = down_split(mg, mg->tmpls[g[0].tmpl], name, &g[0], &sp);

	if (err)
		return err;
	for (int64_t r = 1; r < mg->tp; r++) {
		bool same = g[r].dtype == g[0].dtype && g[r].ndim == g[0].ndim;

		for (uint32_t d = 0; same && d < g[0].ndim; d++)
			same = g[r].shape[d] == g[0].shape[d];
		if (!same)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: %s: its shard's dtype or shape differs from tensor rank 0's (%s)",
					mg->files[g[r].file], name, mg->files[g[0].file]);
	}
	T = sp == MG_REPLICATED ? 1 : (uint64_t)mg->tp;
	memcpy(shape, g[0].shape, sizeof(shape));
	if ((sp == MG_COLUMN || sp == MG_GATED) && g[0].ndim < 1)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: a scalar cannot be tensor-parallel",
				mg->files[g[0].file], name);
	if (sp == MG_GATED && g[0].shape[0] % 2 != 0)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: a gated shard with an odd number of rows (%llu)",
				mg->files[g[0].file], name, (unsigned long long)g[0].shape[0]);
	if (sp == MG_ROW && g[0].ndim < 2)
		return gfs_fail(GFS_ERR_FORMAT, "%s: %s: a row-parallel shard of %u dimensions",
				mg->files[g[0].file], name, g[0].ndim);
	if (sp != MG_REPLICATED)
		shape[sp == MG_ROW ? 1 : 0] *= T;
	err = gfs_layout_add_tensor(mg->l, name, g[0].dtype, g[0].ndim, shape, &ti);
	for (uint64_t r = 0; r < T && !err && g[0].nbytes > 0; r++) {
		const mg_ent *e = &g[r];
		gfs_piece p = { .kind = GFS_PIECE_FILE, .src = e->src, .src_off = e->off, .count = 1 };

		switch (sp) {
		case MG_REPLICATED:
		case MG_COLUMN:
			p.toff = r * e->nbytes;
			p.len = e->nbytes;
			err = gfs_layout_add_general(mg->l, ti, &p);
			break;
		case MG_GATED:
			p.len = e->nbytes / 2;
			p.toff = r * p.len;
			err = gfs_layout_add_general(mg->l, ti, &p);
			p.toff = (T + r) * p.len;
			p.src_off = e->off + p.len;
			if (!err)
				err = gfs_layout_add_general(mg->l, ti, &p);
			break;
		case MG_ROW:
			p.len = e->nbytes / e->shape[0];
			p.toff = r * p.len;
			if (e->shape[0] > 1) {
				p.count = e->shape[0];
				p.dst_stride = T * p.len;
				p.src_stride = p.len;
			}
			err = gfs_layout_add_general(mg->l, ti, &p);
			break;
		}
	}
	return err ? gfs_fail_prefix(err, "%s", mg->files[g[0].file]) : GFS_OK;
}

/* build(): sort the entries and add one tensor per (template, layer, expert). */
static gfs_err build(mg_import *mg)
{
	char name[4096];
	size_t i = 0;

	qsort(mg->ents, mg->nents, sizeof(*mg->ents), cmp_ent);
	while (i < mg->nents) {
		const mg_ent *g = &mg->ents[i];
		size_t n = 1;
		gfs_err err = global_name(mg->tmpls[g->tmpl], g->layer, g->expert, name, sizeof(name));

		if (err)
			return err;
		while (i + n < mg->nents && mg->ents[i + n].tmpl == g->tmpl &&
		       mg->ents[i + n].layer == g->layer && mg->ents[i + n].expert == g->expert)
			n++;
		for (size_t r = 0; r < n; r++)
			if (g[r].tp != r)
				return gfs_fail(GFS_ERR_FORMAT, "%s: %s: %s", mg->files[g[r].file], name,
						g[r].tp < r ? "present twice (in two pipeline stages or twice in the file)"
							    : "missing from the file of the tensor rank before it");
		if (n != (size_t)mg->tp)
			return gfs_fail(GFS_ERR_FORMAT, "%s: %s: not in the file of tensor rank %zu",
					mg->files[g[n - 1].file], name, n);
		err = add_group(mg, name, g);
		if (err)
			return err;
		i += n;
	}
	return GFS_OK;
}

/*
 * add_copies(): each tied copy (mg->copies, one per tensor rank of the last
 * stage) as a replica of its rows of embedding.word_embeddings.weight, of
 * the same dtype and shard shape: verify compares them byte for byte.
 */
static gfs_err add_copies(mg_import *mg)
{
	size_t emb = mg->l->ntensors;

	for (size_t i = 0; i < mg->l->ntensors; i++)
		if (strcmp(mg->l->tensors[i].name, "embedding.word_embeddings.weight") == 0)
			emb = i;
	for (size_t i = 0; i < mg->ncopies; i++) {
		const mg_ent *c = &mg->copies[i];
		const gfs_tensor *t = emb < mg->l->ntensors ? &mg->l->tensors[emb] : NULL;
		const gfs_piece p = { .kind = GFS_PIECE_FILE, .src = c->src, .toff = c->tp * c->nbytes,
				      .src_off = c->off, .len = c->nbytes, .count = 1 };

		if (!t || t->dtype != c->dtype || t->ndim != c->ndim || c->ndim != 2 ||
		    t->shape[1] != c->shape[1] || t->shape[0] != c->shape[0] * (uint64_t)mg->tp)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: output_layer.weight, the copy of the tied embedding, %s",
					mg->files[c->file],
					t ? "differs in dtype or shape from tensor rank's embedding shard"
					  : "copies an embedding the save does not hold");
		if (c->nbytes) {
			const gfs_err err = gfs_layout_add_replica_on_read(mg->l, emb, &p);

			if (err)
				return err;
		}
	}
	return GFS_OK;
}

/*
 * read_small(): the regular file dir/name (less than n bytes, no NUL),
 * trimmed, into buf.
 */
static gfs_err read_small(const char *dir, const char *name, char *buf, size_t n)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	gfs_err err;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
	err = gfs_read_meta(path, n - 1, 0, &text, &len);
	if (err)
		return err;
	if (strlen(text) != len) {
		free(text);
		return gfs_fail(GFS_ERR_FORMAT, "%s: holds a NUL byte: not a tracker file", path);
	}
	while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r' || text[len - 1] == ' '))
		text[--len] = '\0';
	memcpy(buf, text, len + 1);
	free(text);
	return GFS_OK;
}

/* valid_tag(): "release" or "iter_" followed by digits. */
static bool valid_tag(const char *t)
{
	if (strcmp(t, "release") == 0)
		return true;
	if (strncmp(t, "iter_", 5) != 0 || !t[5])
		return false;
	for (t += 5; *t; t++)
		if (*t < '0' || *t > '9')
			return false;
	return true;
}

/* has_entry(): does dir/rel exist (any type)? */
static bool has_entry(const char *dir, const char *rel)
{
	char path[PATH_MAX];
	struct stat st;

	return (size_t)snprintf(path, sizeof(path), "%s/%s", dir, rel) < sizeof(path) &&
	       stat(path, &st) == 0;
}

/* is_iteration(): does dir look like a Megatron iteration directory (either form)? */
static bool is_iteration(const char *dir)
{
	return (has_entry(dir, ".metadata") && has_entry(dir, "metadata.json") &&
		has_entry(dir, "common.pt")) || has_entry(dir, "mp_rank_00/" MG_FILE) ||
	       has_entry(dir, "mp_rank_00_000/" MG_FILE) ||
	       has_entry(dir, "mp_rank_00_000_000/" MG_FILE);
}

/*
 * rank_num(): the number of 1 to 7 digits at *s (after sep, unless sep is
 * 0), advancing *s.  @return false if there is none.
 */
static bool rank_num(const char **s, char sep, int64_t *out)
{
	const char *p = *s;
	int64_t v = 0;
	int n = 0;

	if (sep && *p++ != sep)
		return false;
	while (*p >= '0' && *p <= '9' && n < 7) {
		v = v * 10 + (*p++ - '0');
		n++;
	}
	*s = p;
	*out = v;
	return n > 0;
}

/*
 * known_rank(): is name (an mp_rank_* entry) the directory of one of the
 * T x P x E ranks a names?  Its numbers are parsed and the name made from
 * them compared: O(1), whatever the sizes.
 */
static bool known_rank(const mg_args *a, const char *name)
{
	const char *s = name + 8;
	int64_t t, p = 0, e = 0;
	char want[64];

	if (!rank_num(&s, 0, &t) || (a->pp > 1 && !rank_num(&s, '_', &p)) ||
	    (a->ep > 1 && !rank_num(&s, '_', &e)) || *s || t >= a->tp || p >= a->pp || e >= a->ep)
		return false;
	rank_dir(a, t, p, e, want, sizeof(want));
	return strcmp(want, name) == 0;
}

/* iteration_match(): a Megatron iteration directory (a gfs_dir_matches() match). */
static bool iteration_match(const char *path, const char *name)
{
	return valid_tag(name) && is_iteration(path);
}

/*
 * iterations(): how many iter_NNNNNNN (or release) directories of dir look
 * like Megatron iteration directories; the first one's name in first
 * (MG_TAG_MAX bytes), their names, comma-separated, in list (n bytes, cut
 * short with "...").
 */
static size_t iterations(const char *dir, char *first, char *list, size_t n)
{
	return gfs_dir_matches(dir, iteration_match, first, MG_TAG_MAX, list, n);
}

bool gfs_megatron_detect(const char *dir)
{
	char first[MG_TAG_MAX], list[8];

	return has_entry(dir, MG_LATEST) || is_iteration(dir) ||
	       iterations(dir, first, list, sizeof(list)) > 0;
}

/*
 * check_dirs(): every mp_rank_* entry of the iteration directory is one of
 * the T x P x E ranks a names (a missing one is found when it is read).
 */
static gfs_err check_dirs(const char *dir, const mg_args *a)
{
	DIR *d = opendir(dir);
	const struct dirent *de;
	gfs_err err = GFS_OK;

	if (!d)
		return gfs_fail(GFS_ERR_IO, "%s: %s", dir, strerror(errno));
	while (!err && (de = readdir(d))) {
		if (strncmp(de->d_name, "mp_rank_", 8) != 0)
			continue;
		if (!known_rank(a, de->d_name))
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s/%s: not a rank of this TP %lld x PP %lld x EP %lld save (its args say so)",
				       dir, de->d_name, (long long)a->tp, (long long)a->pp,
				       (long long)a->ep);
	}
	closedir(d);
	return err;
}

/*
 * first_args(): the args of rank (0, 0, 0), whichever name its directory
 * has, and the architecture they describe (src: a buffer of PATH_MAX + 16
 * bytes that names their file).
 */
static gfs_err first_args(const char *dir, mg_args *a, gfs_arch *arch, char *src)
{
	static const char *const names[3] = { "mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000" };
	char path[PATH_MAX], want[64];
	gfs_err err;

	for (int i = 0; i < 3; i++) {
		if (!has_entry(dir, names[i]))
			continue;
		if ((size_t)snprintf(path, sizeof(path), "%s/%s/" MG_FILE, dir, names[i]) >=
		    sizeof(path))
			return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
		snprintf(src, PATH_MAX + 16, "the args of %s", path);
		err = probe_args(path, src, a, arch);
		if (err)
			return err;
		rank_dir(a, 0, 0, 0, want, sizeof(want));
		if (strcmp(want, names[i]) != 0)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: its args (TP %lld x PP %lld x EP %lld) name its rank directory %s, not %s",
					path, (long long)a->tp, (long long)a->pp, (long long)a->ep,
					want, names[i]);
		return GFS_OK;
	}
	return gfs_fail(GFS_ERR_NOTFOUND,
			"%s: no mp_rank_00[_000[_000]] directory: not a legacy Megatron-LM iteration directory%s",
			dir, "");
}

/*
 * iter_dir(): the iteration directory of dir and tag into buf.  A tag is
 * iter_NNNNNNN, release, or the iteration's number.  A save directory
 * without the tracker file: its only iteration directory (*note says so;
 * n bytes), or a refusal listing them.
 */
static gfs_err iter_dir(const char *dir, const char *tag, char *buf, size_t n, char *note,
			size_t nn)
{
	char it[80], first[MG_TAG_MAX], list[512];
	size_t count;
	gfs_err err;

	note[0] = '\0';
	if (tag) {
		bool digits = tag[0] != '\0' && strlen(tag) <= 10;

		for (const char *c = tag; digits && *c; c++)
			digits = *c >= '0' && *c <= '9';
		if (digits)
			snprintf(it, sizeof(it), "iter_%07llu", strtoull(tag, NULL, 10));
		else if (valid_tag(tag))
			snprintf(it, sizeof(it), "%s", tag);
		else
			return gfs_fail(GFS_ERR_INVAL, "tag '%s': not iter_NNNNNNN or release (or the iteration's number)", tag);
	}
	if (!has_entry(dir, MG_LATEST)) {
		if (is_iteration(dir)) {
			if (tag)
				return gfs_fail(GFS_ERR_INVAL,
						"%s: a tag picks an iteration of a save directory (one holding " MG_LATEST " or iter_* directories)",
						dir);
			snprintf(buf, n, "%s", dir);
			return GFS_OK;
		}
		count = iterations(dir, first, list, sizeof(list));
		if (!tag && count > 1)
			return gfs_fail(GFS_ERR_NOTFOUND,
					"%s: no " MG_LATEST " and %zu iteration directories (%s): choose one with --tag (mount: -o tag=)",
					dir, count, list);
		if (!tag && count == 1) {
			snprintf(it, sizeof(it), "%s", first);
			snprintf(note, nn, "%s has no " MG_LATEST ": using its only iteration directory, %s",
				 dir, first);
		}
		if (!tag && count == 0) {
			snprintf(buf, n, "%s", dir);
			return GFS_OK;
		}
	} else if (!tag) {
		char line[65];
		char *end;
		unsigned long long v;

		err = read_small(dir, MG_LATEST, line, sizeof(line));
		if (err)
			return err;
		errno = 0;
		v = strtoull(line, &end, 10);
		if (strcmp(line, "release") == 0)
			snprintf(it, sizeof(it), "release");
		else if (line[0] >= '0' && line[0] <= '9' && !*end && errno == 0)
			snprintf(it, sizeof(it), "iter_%07llu", v);
		else
			return gfs_fail(GFS_ERR_FORMAT, "%s/" MG_LATEST ": neither a number nor 'release'",
					dir);
	}
	if ((size_t)snprintf(buf, n, "%s/%s", dir, it) >= n)
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
	if (!has_entry(dir, it))
		return gfs_fail(GFS_ERR_NOTFOUND, "%s: no iteration directory %s%s", dir, it,
				tag || note[0] ? "" : " (the one " MG_LATEST " names)");
	return GFS_OK;
}

/* import_legacy(): the Megatron view of the legacy iteration directory idir, and its arch. */
static gfs_err import_legacy(const char *idir, gfs_arch *arch, char *src, gfs_layout **out)
{
	mg_import mg = { 0 };
	mg_args a;
	char note[128];
	gfs_err err;

	err = first_args(idir, &a, arch, src);
	if (!err)
		err = check_dirs(idir, &a);
	if (err)
		return err;
	mg.dir = idir;
	mg.tp = a.tp;
	mg.pp = a.pp;
	mg.ep = a.ep;
	mg.nexperts = a.nexperts;
	mg.q_down = a.q_down;
	mg.kv_down = a.kv_down;
	mg.gated = a.gated;
	mg.tied = arch->tied;
	err = gfs_layout_new("megatron", idir, &mg.l);
	for (int64_t p = 0; p < a.pp && !err; p++)
		for (int64_t e = 0; e < a.ep && !err; e++)
			for (int64_t t = 0; t < a.tp && !err; t++)
				err = read_file(&mg, &a, t, p, e);
	if (!err)
		err = fix_layers(&mg, &a);
	if (!err)
		err = build(&mg);
	if (!err)
		err = add_copies(&mg);
	if (!err) {
		snprintf(note, sizeof(note), "legacy Megatron-LM checkpoint, TP %lld x PP %lld x EP %lld",
			 (long long)a.tp, (long long)a.pp, (long long)a.ep);
		err = gfs_layout_set_info(mg.l, note);
	}
	if (!err)
		err = gfs_layout_finish(mg.l, idir);
	for (size_t i = 0; i < mg.nfiles; i++)
		free(mg.files[i]);
	free(mg.files);
	for (size_t i = 0; i < mg.ntmpls; i++)
		free(mg.tmpls[i]);
	free(mg.tmpls);
	free(mg.thash);
	free(mg.ents);
	free(mg.copies);
	if (err) {
		gfs_layout_free(mg.l);
		return err;
	}
	*out = mg.l;
	return GFS_OK;
}

/* ---------------------------------------------------------------- torch_dist */

#define MG_STACKED "decoder.layers."
#define MG_EXPERTS "mlp.experts.experts."

/*
 * dist_backend(): check idir/metadata.json names the torch_dist sharded
 * backend (Megatron-Core's dist_checkpointing).
 */
static gfs_err dist_backend(const char *idir)
{
	char path[PATH_MAX], *text = NULL;
	size_t len;
	cJSON *c = NULL;
	const cJSON *b;
	gfs_err err;

	if ((size_t)snprintf(path, sizeof(path), "%s/metadata.json", idir) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", idir);
	err = gfs_read_text(path, 1 << 20, &text, &len);
	if (!err)
		err = gfs_json_parse(text, len, path, &c);
	free(text);
	if (err)
		return err;
	b = gfs_json_get(c, "sharded_backend");
	if (!cJSON_IsString(b))
		err = gfs_fail(GFS_ERR_FORMAT, "%s: no sharded_backend: not a Megatron-Core checkpoint", path);
	else if (strcmp(b->valuestring, "torch_dist") != 0)
		err = gfs_fail(GFS_ERR_UNSUPPORTED,
			       "%s: sharded backend '%.40s': only torch_dist is read", path, b->valuestring);
	cJSON_Delete(c);
	return err;
}

/*
 * dist_args(): the args in idir/common.pt (Megatron-LM's save_checkpoint
 * writes them; a bare dist_checkpointing.save writes none: *have false).
 */
static gfs_err dist_args(const char *idir, gfs_arch *arch, char *src, bool *have)
{
	char path[PATH_MAX];
	gfs_tzip *zip = NULL;
	gfs_pickle *pk = NULL;
	const gfs_pv *args;
	uint64_t size;
	int fd = -1;
	gfs_err err;

	*have = false;
	if ((size_t)snprintf(path, sizeof(path), "%s/common.pt", idir) >= sizeof(path))
		return gfs_fail(GFS_ERR_INVAL, "%s: path too long", idir);
	err = gfs_torch_open(path, MG_MAX_PICKLE, "a Megatron-LM checkpoint file", &fd,
				&size, &zip, &pk);
	if (err == GFS_ERR_NOTFOUND)
		err = gfs_fail(GFS_ERR_FORMAT, "%s: missing: every torch_dist checkpoint has one", path);
	if (!err) {
		args = gfs_pv_dict_get(gfs_pickle_root(pk), "args");
		if (args && args->kind == GFS_PV_OBJECT && args->u.obj.state &&
		    args->u.obj.state->kind == GFS_PV_DICT) {
			snprintf(src, PATH_MAX + 16, "the args of %s", path);
			err = args_sane(args->u.obj.state, path);
			if (!err)
				err = gfs_arch_from_args(args->u.obj.state, src, arch);
			*have = !err;
		} else if (args && args->kind != GFS_PV_NONE) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s: args is not an argparse.Namespace", path);
		}
	}
	gfs_torch_close(fd, zip, pk);
	return err;
}

/* dist_name(): the Megatron-view name of stacked key (layer l, expert e or -1) into buf. */
static gfs_err dist_name(const char *key, int64_t l, int64_t e, char *buf, size_t n)
{
	const char *rest = key + strlen(MG_STACKED);
	int w;

	if (e < 0)
		w = snprintf(buf, n, MG_STACKED "%lld.%s", (long long)l, rest);
	else
		w = snprintf(buf, n, MG_STACKED "%lld.mlp.experts.local_experts.%lld.%s", (long long)l,
			     (long long)e, rest + strlen(MG_EXPERTS));
	return w < 0 || (size_t)w >= n ? gfs_fail(GFS_ERR_LIMIT, "%s: name too long", key) : GFS_OK;
}

/*
 * optimizer_key(): is name a key of Megatron's optimizer state: "optimizer."
 * after any number of "chained_<N>." (a ChainedOptimizer of more than one
 * optimizer prefixes each one's keys so, unless it may avoid it: e.g. an MoE
 * model's dense and expert optimizers under the distributed optimizer's
 * default dp_reshardable format)?
 */
static bool optimizer_key(const char *name)
{
	while (strncmp(name, "chained_", 8) == 0) {
		const char *p = name + 8;

		if (*p < '0' || *p > '9')
			return false;
		while (*p >= '0' && *p <= '9')
			p++;
		if (*p != '.')
			return false;
		name = p + 1;
	}
	return strncmp(name, "optimizer.", 10) == 0;
}

/*
 * unstack(): the Megatron view of the DCP layout d of a torch_dist
 * checkpoint: each key under decoder.layers. (stacked on a leading layer
 * axis, and an expert axis after it for the experts) split into one
 * tensor per layer (and expert), at most MG_MAX_INDEX of them in all (as
 * the legacy form's numbers are bounded); other keys as they are;
 * optimizer state left out.  nlayers: args.num_layers, or 0.
 */
static gfs_err unstack(const gfs_layout *d, int64_t nlayers, const char *idir, const char *info,
		       gfs_layout **out)
{
	gfs_layout *l = NULL;
	int64_t layers = nlayers, experts = 0;
	uint64_t made = 0; /* tensors unstacked so far: at most MG_MAX_INDEX */
	char name[4096];
	gfs_err err = gfs_layout_derive(d, "megatron", &l);

	for (size_t i = 0; i < d->ntensors && !err; i++) {
		const gfs_tensor *t = &d->tensors[i];
		const bool stacked = strncmp(t->name, MG_STACKED, strlen(MG_STACKED)) == 0 &&
				     !(t->name[strlen(MG_STACKED)] >= '0' && t->name[strlen(MG_STACKED)] <= '9');
		const bool expert = stacked && strncmp(t->name + strlen(MG_STACKED), MG_EXPERTS,
							 strlen(MG_EXPERTS)) == 0;
		const uint32_t lead = expert ? 2 : stacked ? 1 : 0;
		uint64_t slice;
		size_t ti;

		if (optimizer_key(t->name)) {
			err = gfs_layout_add_omitted(l, t->name, "optimizer state");
			continue;
		}
		if (!stacked) {
			err = gfs_layout_add_tensor(l, t->name, t->dtype, t->ndim, t->shape, &ti);
			if (!err && t->nbytes)
				err = gfs_layout_add_extent(l, ti, 0, d, i, 0, t->nbytes);
			continue;
		}
		if (t->ndim < lead || t->shape[0] == 0 || (expert && t->shape[1] == 0)) {
			err = gfs_fail(GFS_ERR_FORMAT, "%s/.metadata: %s: no layer%s axis to split", idir,
				       t->name, expert ? " and expert" : "");
			break;
		}
		if (layers == 0)
			layers = (int64_t)t->shape[0];
		if (expert && experts == 0)
			experts = (int64_t)t->shape[1];
		if ((int64_t)t->shape[0] != layers || (expert && (int64_t)t->shape[1] != experts)) {
			err = gfs_fail(GFS_ERR_FORMAT,
				       "%s/.metadata: %s: %llu layers%s, where the others have %lld%s", idir,
				       t->name, (unsigned long long)t->shape[0],
				       expert ? " (and its experts)" : "", (long long)layers,
				       nlayers ? " (args.num_layers)" : "");
			break;
		}
		if (layers > MG_MAX_INDEX || experts > MG_MAX_INDEX ||
		    (uint64_t)layers * (uint64_t)(expert ? experts : 1) > MG_MAX_INDEX - made) {
			err = gfs_fail(GFS_ERR_LIMIT,
				       "%s/.metadata: %s: %lld layers x %lld experts: more than %d tensors unstacked",
				       idir, t->name, (long long)layers, (long long)(expert ? experts : 1),
				       MG_MAX_INDEX);
			break;
		}
		made += (uint64_t)layers * (uint64_t)(expert ? experts : 1);
		slice = t->nbytes / t->shape[0] / (expert ? t->shape[1] : 1);
		for (int64_t k = 0; k < layers && !err; k++)
			for (int64_t e = 0; e < (expert ? experts : 1) && !err; e++) {
				err = dist_name(t->name, k, expert ? e : -1, name, sizeof(name));
				if (!err)
					err = gfs_layout_add_tensor(l, name, t->dtype, t->ndim - lead,
								    t->shape + lead, &ti);
				if (!err && slice)
					err = gfs_layout_add_extent(l, ti, 0, d, i,
								    (uint64_t)(k * (expert ? experts : 1) + e) * slice,
								    slice);
			}
	}
	if (!err)
		err = gfs_layout_set_info(l, info);
	if (!err)
		err = gfs_layout_finish(l, idir);
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

/*
 * dist_meta(): count metadata.json and common.pt (whose args give the
 * generated config.json) among the metadata inputs of l, with .metadata:
 * nothing served is wider than they are.
 */
static gfs_err dist_meta(gfs_layout *l, const char *idir)
{
	static const char *const names[2] = { "metadata.json", "common.pt" };
	char path[PATH_MAX];
	gfs_err err = GFS_OK;

	for (int i = 0; i < 2 && !err; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", idir, names[i]) >= sizeof(path))
			return gfs_fail(GFS_ERR_INVAL, "%s: path too long", idir);
		err = gfs_layout_add_metafile(l, path);
	}
	return err;
}

/* import_dist(): the Megatron view of the torch_dist iteration directory idir, and its arch. */
static gfs_err import_dist(const char *idir, gfs_arch *arch, char *src, bool *have_arch,
			   gfs_layout **out)
{
	gfs_layout *d = NULL;
	char info[256];
	gfs_err err = dist_backend(idir);

	if (!err)
		err = dist_args(idir, arch, src, have_arch);
	if (!err)
		err = gfs_import_dcp(idir, NULL, &d);
	if (!err) {
		snprintf(info, sizeof(info), "Megatron-Core torch_dist checkpoint (%s)",
			 *have_arch ? "args in common.pt" : "no args in common.pt");
		err = unstack(d, *have_arch ? arch->layers : 0, idir, info, out);
	}
	gfs_layout_free(d);
	if (!err && (err = dist_meta(*out, idir)) != GFS_OK) {
		gfs_layout_free(*out);
		*out = NULL;
	}
	return err;
}

/*
 * import_torch_dcp(): the Megatron view of the Megatron-LM torch_dcp
 * iteration directory idir (--ckpt-format torch_dcp, as with
 * --use-torch-fsdp2: torch.distributed.checkpoint.save of the state dict
 * save_checkpoint builds, no metadata.json, no common.pt): the model's
 * tensors, under their module names past "model.".  Its args are a pickled
 * object inside the .distcp files, not read here.
 */
static gfs_err import_torch_dcp(const char *idir, gfs_layout **out)
{
	gfs_layout *d = NULL;
	gfs_err err = gfs_import_dcp(idir, "model.", &d);

	if (err == GFS_ERR_NOTFOUND)
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s/.metadata: no model.* keys and no metadata.json: neither a torch_dcp nor a torch_dist Megatron-LM checkpoint",
			       idir);
	if (!err)
		err = unstack(d, 0, idir, "Megatron-LM torch_dcp checkpoint (args not read)", out);
	gfs_layout_free(d);
	return err;
}

/* ---------------------------------------------------------------- the views */

/*
 * hf_config_meta(): count hf_config's files (dir/config.json, and
 * dir/generation_config.json when a holds it) among the metadata inputs of
 * the HF view hf, after every file it already comes from (its sources, when
 * it names no metafile): nothing served is wider than any of them.
 */
static gfs_err hf_config_meta(gfs_layout *hf, const char *dir, const gfs_arch *a)
{
	const bool none = hf->nmetafiles == 0;
	char path[PATH_MAX];
	gfs_err err = GFS_OK;

	for (uint32_t i = 0; none && i < hf->nsources && !err; i++)
		err = gfs_layout_add_metafile(hf, hf->sources[i].abspath);
	if (!err && (size_t)snprintf(path, sizeof(path), "%s/config.json", dir) >= sizeof(path))
		err = gfs_fail(GFS_ERR_INVAL, "%s: path too long", dir);
	if (!err)
		err = gfs_layout_add_metafile(hf, path);
	if (!err && a->gen_config) {
		snprintf(path, sizeof(path), "%s/generation_config.json", dir);
		err = gfs_layout_add_metafile(hf, path);
	}
	return err;
}

/*
 * The two spellings of the norms of a Megatron-Core layer: the local layer
 * spec's modules (legacy saves) and TransformerEngine's, whose
 * LayerNormLinear holds the norm (torch_dist keys whatever the spec, MoE
 * layers included).
 */
static const struct {
	const char *local, *te;
} mg_forms[] = {
	{ ".input_layernorm.weight", ".self_attention.linear_qkv.layer_norm_weight" },
	{ ".input_layernorm.bias", ".self_attention.linear_qkv.layer_norm_bias" },
	{ ".pre_mlp_layernorm.weight", ".mlp.linear_fc1.layer_norm_weight" },
	{ ".pre_mlp_layernorm.bias", ".mlp.linear_fc1.layer_norm_bias" },
};

/* form_name(): name in the local (te false) or TransformerEngine spelling into buf (n bytes). */
static gfs_err form_name(const char *name, bool te, char *buf, size_t n)
{
	const size_t len = strlen(name);
	const char *to = "";
	size_t cut = 0;

	for (size_t i = 0; i < sizeof(mg_forms) / sizeof(mg_forms[0]); i++) {
		const char *from = te ? mg_forms[i].local : mg_forms[i].te;

		if (strncmp(name, MG_STACKED, strlen(MG_STACKED)) == 0 && ends_with(name, from)) {
			cut = strlen(from);
			to = te ? mg_forms[i].te : mg_forms[i].local;
			break;
		}
	}
	if ((size_t)snprintf(buf, n, "%.*s%s", (int)(len - cut), name, to) >= n)
		return gfs_fail(GFS_ERR_LIMIT, "%s: name too long", name);
	return GFS_OK;
}

/*
 * spell(): the Megatron view mg with its norms in one spelling
 * (-o naming=megatron-local or megatron-te), so that a legacy and a
 * torch_dist save of one model list the same names.  Takes mg.
 */
static gfs_err spell(gfs_layout *mg, bool te, const char *idir, gfs_layout **out)
{
	gfs_layout *l = NULL;
	char name[4096];
	gfs_err err = gfs_layout_derive(mg, "megatron", &l);

	for (size_t i = 0; i < mg->ntensors && !err; i++) {
		const gfs_tensor *t = &mg->tensors[i];
		size_t ti;

		err = form_name(t->name, te, name, sizeof(name));
		if (!err)
			err = gfs_layout_add_tensor(l, name, t->dtype, t->ndim, t->shape, &ti);
		if (!err && t->nbytes)
			err = gfs_layout_add_extent(l, ti, 0, mg, i, 0, t->nbytes);
	}
	if (!err)
		err = gfs_layout_set_note(l, te ? "Megatron view, TransformerEngine norm names (-o naming=megatron-te)"
						: "Megatron view, local norm names (-o naming=megatron-local)");
	if (!err)
		err = gfs_layout_finish(l, idir);
	gfs_layout_free(mg);
	if (err) {
		gfs_layout_free(l);
		return err;
	}
	*out = l;
	return GFS_OK;
}

/*
 * agree_config(): every number both the args (a, possibly incomplete: 0 is
 * a size they lack) and the hf_config (c) give must be equal, or the
 * mount is refused naming the field and both values; the config only
 * fills what the args lack.
 */
static gfs_err agree_config(const gfs_arch *a, const gfs_arch *c, const char *idir)
{
	const struct {
		const char *field, *arg;
		int64_t have, want;
	} ints[] = {
		{ "vocab_size", "vocab_size", c->vocab, a->vocab },
		{ "hidden_size", "hidden_size", c->hidden, a->hidden },
		{ "num_hidden_layers", "num_layers", c->layers, a->layers },
		{ "num_attention_heads", "num_attention_heads", c->heads, a->heads },
		{ "num_key_value_heads", "num_query_groups", c->groups, a->groups },
		{ "head_dim", "kv_channels", c->kv_channels, a->kv_channels },
		{ "intermediate_size", c->experts ? "moe_ffn_hidden_size" : "ffn_hidden_size",
		  c->experts ? c->moe_ffn : c->ffn, a->experts ? a->moe_ffn : a->ffn },
		{ "num_local_experts", "num_experts", c->experts, a->experts },
		{ "num_experts_per_tok", "moe_router_topk", c->topk, a->topk },
	};
	const struct {
		const char *field, *arg;
		double have, want;
	} nums[] = {
		{ "rms_norm_eps", "norm_epsilon", c->eps, a->eps },
		{ "rope_theta", "rotary_base", c->theta, a->theta },
	};

	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if ((ints[i].want != 0 ||
		     (!a->incomplete && strcmp(ints[i].field, "num_local_experts") == 0)) &&
		    ints[i].have != ints[i].want)
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: the hf_config config.json's %s is %lld, but args.%s is %lld (%s): they must agree",
					idir, ints[i].field, (long long)ints[i].have, ints[i].arg,
					(long long)ints[i].want, a->source);
	for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
		if (nums[i].want > 0 && nums[i].have != nums[i].want) {
			char have[32], want[32];
			int prec = 6;

			do { /* the shortest precision that tells them apart */
				snprintf(have, sizeof(have), "%.*g", prec, nums[i].have);
				snprintf(want, sizeof(want), "%.*g", prec, nums[i].want);
			} while (strcmp(have, want) == 0 && ++prec <= 17);
			return gfs_fail(GFS_ERR_FORMAT,
					"%s: the hf_config config.json's %s is %s, but args.%s is %s (%s): they must agree",
					idir, nums[i].field, have, nums[i].arg, want, a->source);
		}
	if (c->tied != a->tied)
		return gfs_fail(GFS_ERR_FORMAT,
				"%s: the hf_config config.json's tie_word_embeddings is %s, but args.untie_embeddings_and_output_weights is %s (%s): they must agree",
				idir, c->tied ? "true" : "false", a->tied ? "False" : "True", a->source);
	return a->family ? gfs_arch_family_agree(a, c, idir) : GFS_OK;
}

/*
 * choose_view(): the layout to serve: mg itself (the Megatron view) or its
 * Hugging Face view, as opts and the architecture say.  Without args
 * (!have_args), noargs says why and noargs_how how the save was made.
 * Takes mg.
 */
static gfs_err choose_view(gfs_layout *mg, const gfs_import_opts *opts, gfs_arch *args_arch,
			   bool have_args, const char *noargs, const char *noargs_how,
			   const char *idir, gfs_layout **out)
{
	const char *naming = opts && opts->naming && strcmp(opts->naming, "auto") != 0
				     ? opts->naming : NULL;
	gfs_arch cfg = { 0 };
	gfs_arch *a = args_arch;
	char note[400];
	gfs_err err = GFS_OK;

	if (naming && (strcmp(naming, "megatron-local") == 0 || strcmp(naming, "megatron-te") == 0))
		return spell(mg, strcmp(naming, "megatron-te") == 0, idir, out);
	if (naming && strcmp(naming, "hf") != 0 && strcmp(naming, "megatron") != 0)
		err = gfs_fail(GFS_ERR_INVAL, "naming '%s': hf, megatron, megatron-local, megatron-te or auto",
			       naming);
	if (!err && naming && strcmp(naming, "megatron") == 0) {
		*out = mg;
		return gfs_layout_set_note(mg, opts->hf_config ? "Megatron view (-o naming=megatron; hf_config not used)"
							       : NULL);
	}
	if (!err && opts && opts->hf_config) {
		err = gfs_arch_from_hf_config(opts->hf_config, &cfg);
		if (!err && have_args && !args_arch->family && !args_arch->incomplete)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: the Hugging Face naming cannot express %s (%s): mount with -o naming=megatron",
				       idir, args_arch->why, args_arch->source);
		if (!err && have_args)
			err = agree_config(args_arch, &cfg, idir);
		a = &cfg;
	} else if (!err && !have_args) {
		if (naming)
			err = gfs_fail(GFS_ERR_INVAL,
				       "%s: %s (%s): give the model's config with -o hf_config=DIR",
				       idir, noargs, noargs_how);
		else
			snprintf(note, sizeof(note),
				 "Megatron view: %s; -o hf_config=DIR (the model's config.json) gives the Hugging Face view",
				 noargs);
	} else if (!err && !a->family) {
		if (naming)
			err = gfs_fail(GFS_ERR_UNSUPPORTED,
				       "%s: the Hugging Face naming cannot express %s (%s)", idir, a->why,
				       a->source);
		else
			snprintf(note, sizeof(note),
				 "Megatron view: the Hugging Face naming cannot express %s", a->why);
	}
	if (!err && a == args_arch && (!have_args || !a->family)) {
		*out = mg;
		return gfs_layout_set_note(mg, note);
	}
	if (!err && a->vocab == 0)
		err = gfs_fail(GFS_ERR_FORMAT,
			       "%s: the true vocabulary size is unknown (args.vocab_size is None, as with a Hugging Face tokenizer): give the model's config with -o hf_config=DIR, or mount the Megatron view with -o naming=megatron",
			       idir);
	if (!err)
		err = gfs_naming_to_hf(mg, a, idir, out);
	if (!err && a == &cfg && (err = hf_config_meta(*out, opts->hf_config, a)) != GFS_OK) {
		gfs_layout_free(*out);
		*out = NULL;
	}
	if (!err) {
		size_t mtp = 0;

		for (size_t i = 0; i < mg->ntensors; i++)
			mtp += strncmp(mg->tensors[i].name, "mtp.", 4) == 0;
		if (mtp)
			snprintf(note, sizeof(note),
				 "Hugging Face view (%s naming; -o naming=megatron for Megatron's names); %zu multi-token prediction tensors (mtp.*) left out: gatherfs-inspect ls --all lists them",
				 a->family, mtp);
		else
			snprintf(note, sizeof(note),
				 "Hugging Face view (%s naming; -o naming=megatron for Megatron's names)", a->family);
		err = gfs_layout_set_note(*out, note);
	}
	gfs_arch_clear(&cfg);
	gfs_layout_free(mg);
	return err;
}

gfs_err gfs_import_megatron(const char *dir, const gfs_import_opts *opts, gfs_layout **out)
{
	gfs_layout *mg = NULL;
	gfs_arch arch = { 0 };
	char idir[PATH_MAX], src[PATH_MAX + 16], pick[PATH_MAX + 128];
	bool have_args = true, dcp = false;
	gfs_err err;

	*out = NULL;
	err = iter_dir(dir, opts ? opts->tag : NULL, idir, sizeof(idir), pick, sizeof(pick));
	if (err)
		return err;
	if (has_entry(idir, ".metadata") && !has_entry(idir, "metadata.json")) {
		dcp = true;
		have_args = false;
		err = import_torch_dcp(idir, &mg);
	} else if (has_entry(idir, ".metadata")) {
		err = import_dist(idir, &arch, src, &have_args, &mg);
	} else {
		err = import_legacy(idir, &arch, src, &mg);
	}
	if (err)
		return err;
	err = choose_view(mg, opts, &arch, have_args,
			  dcp ? "the args of a torch_dcp save are not read" : "common.pt holds no args",
			  dcp ? "a pickled object in its .distcp files" : "a bare dist_checkpointing.save",
			  idir, out);
	if (!err && pick[0]) {
		char note[sizeof(pick) + 512];

		snprintf(note, sizeof(note), "%s%s%s", pick, (*out)->note ? "; " : "",
			 (*out)->note ? (*out)->note : "");
		for (char *c = note; *c; c++)
			if ((unsigned char)*c < 0x20 || *c == 0x7f)
				*c = '?';
		err = gfs_layout_set_note(*out, note);
		if (err) {
			gfs_layout_free(*out);
			*out = NULL;
		}
	}
	return err;
}
