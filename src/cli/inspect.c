/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gatherfs-inspect — look at a sharded checkpoint without FUSE: list its
 * tensors, print one tensor's bytes, print or load its layout index, verify
 * that every byte can be served.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/cli/check.h"
#include "gatherfs/cli/diff.h"
#include "gatherfs/cli/stats.h"
#include "gatherfs/cli/export.h"
#include "gatherfs/fs/hfconfig.h"
#include "gatherfs/importers/hfcache.h"
#include "gatherfs/importers/import.h"
#include "gatherfs/importers/import_plain.h"
#include "gatherfs/server/declcheck.h"
#include "gatherfs/server/integrity.h"
#include "gatherfs/util/json.h"
#include "gatherfs/importers/fp8.h"
#include "gatherfs/importers/lora.h"
#include "gatherfs/server/server.h"
#include "gatherfs/util/sha256.h"
#include "gatherfs/views/shards.h"

#define IO_CHUNK ((size_t)1 << 20)

/* The options, as bits: what was given, what a command takes. */
enum {
	OPT_TAG = 1 << 0,
	OPT_INPUT_FORMAT = 1 << 1,
	OPT_PREFIX = 1 << 2,
	OPT_LAYOUT = 1 << 3,
	OPT_DTYPE = 1 << 4,
	OPT_JSON = 1 << 5,
	OPT_FORMAT = 1 << 6,
	OPT_SHARD_SIZE = 1 << 7,
	OPT_OPTIM = 1 << 8,
	OPT_NAMING = 1 << 9,
	OPT_HF_CONFIG = 1 << 10,
	OPT_ALL = 1 << 11,
	OPT_TP_SPLIT = 1 << 12,
	OPT_HTML = 1 << 13,
	OPT_ATOL = 1 << 14,
	OPT_SIDE = 1 << 15,   /* --a-OPTION, --b-OPTION */
	OPT_SHA256 = 1 << 16,
	OPT_RTOL = 1 << 17,
	OPT_DEQUANT = 1 << 18,
	OPT_IMPORT = OPT_TAG | OPT_INPUT_FORMAT | OPT_PREFIX | OPT_LAYOUT | OPT_NAMING | OPT_HF_CONFIG |
		     OPT_TP_SPLIT | OPT_DEQUANT,
};

/* Each command and the options it takes; any other option is refused. */
static const struct command {
	const char *name;
	unsigned opts;
} commands[] = {
	{ "ls", OPT_IMPORT | OPT_DTYPE | OPT_JSON | OPT_OPTIM | OPT_ALL | OPT_SHA256 },
	{ "cat", OPT_IMPORT | OPT_DTYPE | OPT_OPTIM },
	{ "layout", OPT_IMPORT },
	{ "verify", OPT_IMPORT },
	{ "export", OPT_IMPORT | OPT_DTYPE | OPT_FORMAT | OPT_SHARD_SIZE },
	{ "diff", OPT_IMPORT | OPT_DTYPE | OPT_JSON | OPT_HTML | OPT_ATOL | OPT_RTOL | OPT_SIDE },
	{ "stats", OPT_IMPORT | OPT_DTYPE | OPT_JSON | OPT_HTML },
	{ "check", OPT_IMPORT | OPT_DTYPE | OPT_JSON },
};

static const struct option_name {
	unsigned bit;
	const char *name;
} option_names[] = {
	{ OPT_TAG, "--tag" },       { OPT_INPUT_FORMAT, "--input-format" },
	{ OPT_PREFIX, "--prefix" }, { OPT_LAYOUT, "--layout" },
	{ OPT_DTYPE, "--dtype" },   { OPT_JSON, "--json" },
	{ OPT_FORMAT, "--format" }, { OPT_SHARD_SIZE, "--shard-size" },
	{ OPT_OPTIM, "--optim" },   { OPT_NAMING, "--naming" },
	{ OPT_HF_CONFIG, "--hf-config" }, { OPT_ALL, "--all" },
	{ OPT_TP_SPLIT, "--tp-split" }, { OPT_HTML, "--html" },
	{ OPT_ATOL, "--atol" }, { OPT_RTOL, "--rtol" }, { OPT_SIDE, "--a-OPTION/--b-OPTION" },
	{ OPT_SHA256, "--sha256" }, { OPT_DEQUANT, "--dequant" },
};

/*
 * check_options(): refuse an option cmd does not take, naming the commands
 * that take it.  @return 0, or 2 (usage error) after one line on stderr.
 */
static int check_options(const struct command *cmd, unsigned given)
{
	const unsigned extra = given & ~cmd->opts;

	for (size_t i = 0; i < sizeof(option_names) / sizeof(option_names[0]); i++) {
		char takers[96] = "";
		size_t used = 0;

		if (!(extra & option_names[i].bit))
			continue;
		for (size_t c = 0; c < sizeof(commands) / sizeof(commands[0]); c++)
			if (commands[c].opts & option_names[i].bit)
				used += (size_t)snprintf(takers + used, sizeof(takers) - used, "%s%s",
							 used ? ", " : "", commands[c].name);
		fprintf(stderr, "gatherfs-inspect: %s does not take %s (only %s do%s)\n", cmd->name,
			option_names[i].name, takers, strchr(takers, ',') ? "" : "es");
		return 2;
	}
	return 0;
}

typedef struct inspect_opts {
	unsigned given; /* OPT_* */
	const char *tag;
	const char *input_format;
	const char *prefix;
	const char *naming;
	const char *hf_config;
	const char *tp_split;
	const char *layout;
	gfs_dtype dtype;
	gfs_dtype dequant;      /* --dequant: the FP8 model dequantized to it, else INVALID */
	bool json;
	bool all;               /* ls --all: the entries no view shows too */
	gfs_format format;
	uint64_t shard_size;
	bool optim;             /* --optim: optimizer state instead of model tensors */
	bool sha256;            /* ls --sha256 */
	const char *html;       /* diff, stats: --html FILE */
	double atol, rtol;      /* diff */
	const char *state;      /* --optim=STATE (cat): which state */
	gfs_lora_cli lora;
	bool untied;            /* the LoRA merge untied the head (config.json says so) */
} inspect_opts;

/* usage(): the help text on out.  @return fputs()'s result. */
static int usage(FILE *out)
{
	if (fputs("Usage: gatherfs-inspect COMMAND [OPTIONS] (DIR | --layout FILE) [NAME | OUT]\n"
	      "       gatherfs-inspect diff [OPTIONS] A B\n"
	      "\n"
	      "Look at a sharded checkpoint without mounting it.\n"
	      "Formats (detected; --input-format forces one):\n", out) < 0 ||
	    fputs(gfs_import_formats, out) < 0)
		return EOF;
	return fputs("\n"
	      "Commands (all take --tag, --input-format, --prefix, --naming, --hf-config,\n"
	      "--tp-split and --layout; the other\n"
	      "options a command takes are shown in brackets):\n"
	      "  ls DIR             list tensors in output order: name, dtype, shape, bytes,\n"
	      "                     alias target; --all: also the checkpoint entries no\n"
	      "                     view shows (optimizer, RNG, extra state)\n"
	      "                     [--json] [--dtype] [--all]\n"
	      "  cat DIR NAME       write tensor NAME's raw little-endian contiguous bytes\n"
	      "                     to standard output (config.json,\n"
	      "                     generation_config.json: as the mount serves them)\n"
	      "                     [--dtype]\n"
	      "  layout DIR         print the layout index as JSON\n"
	      "  verify DIR         check the stored CRC-32 of every zip record tensor\n"
	      "                     bytes come from, then read every piece once; report\n"
	      "                     each corrupt record with the tensors it affects;\n"
	      "                     exit 0: all checked and sound, 1: corrupt or\n"
	      "                     unreadable, 3: sound but some sources carry no\n"
	      "                     checksum (listed as UNVERIFIED:); a Hugging Face\n"
	      "                     cache's blobs are checked against their hash names\n"
	      "  export DIR OUT     write a view to regular files: OUT.bin (torch zip) or\n"
	      "                     OUT.safetensors; with --shard-size, OUT is a directory\n"
	      "                     that receives Hugging Face shards, their index and\n"
	      "                     config.json (what from_pretrained(OUT) needs);\n"
	      "                     OUT - (with --format) is standard output.  OUT must\n"
	      "                     be new or a regular file (a directory with\n"
	      "                     --shard-size): a device, FIFO or symlink is refused\n"
	      "                     [--dtype] [--format] [--shard-size]\n"
	      "  diff A B           compare the tensors of two checkpoints (any formats)\n"
	      "                     by name: equal, close, differs, only_a, only_b or\n"
	      "                     mismatch (shape), with ndiff, max_abs, max_rel,\n"
	      "                     mean_abs, cosine and NaN/Inf counts; exit 0 when the\n"
	      "                     names match and every tensor is equal or close\n"
	      "                     [--json] [--html] [--atol] [--rtol] [--dtype]\n"
	      "                     [--a-OPTION] [--b-OPTION]\n"
	      "  stats DIR          per tensor min, max, mean, std, absmax, l2 and the\n"
	      "                     NaN, Inf and zero counts, in fp64\n"
	      "                     [--json] [--html] [--dtype]\n"
	      "  check DIR          findings: nan, inf, zero (a matrix of zeros),\n"
	      "                     identical (two matrices with the same bytes), config\n"
	      "                     (tensors against config.json); exit 1 on a finding\n"
	      "                     [--json] [--dtype]\n"
	      "ls and verify say on stderr what they read (format, tag).  An option a\n"
	      "command does not take is refused.\n"
	      "\n"
	      "Options:\n"
	      "  --tag TAG          DeepSpeed tag to use instead of the one in `latest`\n"
	      "                     (default without `latest`: the only tag directory);\n"
	      "                     of a Hugging Face cache repository: its snapshot\n"
	      "                     (default: the one refs/main names); of a Megatron-LM\n"
	      "                     save: its iteration directory (iter_0000300, release);\n"
	      "                     of a verl save: its role directory (actor, critic)\n"
	      "  --input-format F   read DIR as dcp, deepspeed, plain, layout, zero3,\n"
	      "                     megatron or rankdict (default: auto; a directory with\n"
	      "                     `.metadata` is dcp, one with zero3-rank-R.json a\n"
	      "                     ZeRO-3 save, one with model_world_size_W_rank_R.pt\n"
	      "                     (or verl's actor/, or global_step_N named by\n"
	      "                     latest_checkpointed_iteration.txt) rankdict, one\n"
	      "                     with latest_checkpointed_iteration.txt or mp_rank_00*\n"
	      "                     megatron, one with\n"
	      "                     DeepSpeed files deepspeed, one with model.safetensors\n"
	      "                     or pytorch_model.bin (or their index) plain)\n"
	      "  --prefix P         (dcp, plain) keep the keys starting with P, named\n"
	      "                     without it\n"
	      "  --naming N         (megatron) hf: Hugging Face names (Llama, Qwen2,\n"
	      "                     Mixtral, Qwen3, Qwen3-MoE, Qwen2-MoE, DeepSeek-V3),\n"
	      "                     megatron: Megatron's own, megatron-local,\n"
	      "                     megatron-te: Megatron's with the norms in one\n"
	      "                     spelling, auto (default): hf when the\n"
	      "                     architecture is known\n"
	      "  --hf-config DIR    (megatron) the model's config.json in DIR gives the\n"
	      "                     architecture and vocabulary and is served as is\n"
	      "  --tp-split FILE    (deepspeed, tensor parallel) the JSON FILE maps\n"
	      "                     param-name patterns to the dimension (0, 1) the ranks'\n"
	      "                     slices join on, or \"replicated\" (instead of\n"
	      "                     universal_checkpoint_info)\n"
	      "  --layout FILE      read the layout from FILE (as written by `layout`)\n"
	      "                     instead of importing DIR\n"
	      "  --dtype DTYPE      (ls, cat, export) present floating-point tensors as\n"
	      "                     bf16, fp16 or fp32 (round to nearest even; integers\n"
	      "                     never change)\n"
	      "  --json             (ls) print a JSON array instead of a table; (diff,\n"
	      "                     stats, check) JSON Lines, one object per line\n"
	      "  --sha256           (ls) add the SHA-256 of each tensor's bytes (as cat\n"
	      "                     writes them; user.gatherfs.sha256 of a mount)\n"
	      "  --html FILE        (diff, stats) also write a self-contained HTML page\n"
	      "                     with a per-layer chart and the table\n"
	      "  --atol X, --rtol X (diff) values are close when |a-b| <= atol +\n"
	      "                     rtol * max(|a|, |b|) (default 0: only equal)\n"
	      "  --a-OPTION V       (diff) a reading option (tag, input-format, prefix,\n"
	      "  --b-OPTION V       naming, hf-config, tp-split, layout, dtype, lora,\n"
	      "                     merge, base, lora-tied, dequant) for A or B only, e.g.\n"
	      "                     --a-tag global_step3 --b-naming megatron; the plain\n"
	      "                     option applies to both sides; a side read with\n"
	      "                     --a-layout FILE or --b-layout FILE takes no A or B\n"
	      "  --optim            (ls) list the optimizer state instead: state, param\n"
	      "                     name, dtype, shape, bytes\n"
	      "  --optim=STATE      (cat) write NAME's optimizer state STATE (exp_avg,\n"
	      "                     exp_avg_sq, step...) instead of the tensor\n"
	      "  --format FMT       (export) bin or safetensors, instead of OUT's extension\n"
	      "                     (default with --shard-size: safetensors)\n"
	      "  --shard-size SIZE  (export) shards of at most SIZE, e.g. 5G, 500MB, 2GiB\n"
	      "  --lora DIR         merge the PEFT LoRA adapter in DIR onto the model\n"
	      "  --merge lora       merge the adapter of a PEFT-wrapped checkpoint\n"
	      "  --base DIR         (with --merge) the base model of an adapter-only checkpoint\n"
	      "  --lora-tied peft   a targeted tied embedding changes its head too (PEFT)\n"
	      "  --dequant DTYPE    an FP8 checkpoint as the model it quantizes, in bf16,\n"
	      "                     fp16 or fp32 (scales left out; see gatherfs -o dequant=)\n"
	      "  -h, --help         show this help\n"
	      "  -V, --version      show the version\n"
	      "\n"
	      "Exit status: 0 on success, 1 if the checkpoint is unusable or an output\n"
	      "cannot be written (diff: the models differ; check: findings), 2 on bad\n"
	      "usage.\n"
	      "See gatherfs-inspect(1).\n",
	      out);
}

static int fail(void)
{
	fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
	return 1;
}

/*
 * Standard output goes through stdio (ls, layout, verify, --help) or
 * write(2) (cat).  out_errno keeps the first stdio error; finish_stdout()
 * flushes and closes stdout at the end, so that a full disk, /dev/full or a
 * closed pipe is one line and exit status 1, never a silently cut output.
 */
static int out_errno;

/* out_ok(): record a failed stdio call's errno; false once anything failed. */
static bool out_ok(int rc)
{
	if ((rc < 0 || ferror(stdout)) && !out_errno)
		out_errno = errno ? errno : EIO;
	return out_errno == 0;
}

static int finish_stdout(int rc)
{
	errno = 0;
	if (fflush(stdout) != 0 && !out_errno)
		out_errno = errno ? errno : EIO;
	if (ferror(stdout) && !out_errno)
		out_errno = EIO;
	errno = 0;
	if (fclose(stdout) != 0 && !out_errno)
		out_errno = errno ? errno : EIO;
	if (!out_errno)
		return rc;
	fprintf(stderr, "gatherfs-inspect: writing to standard output: %s\n", strerror(out_errno));
	return 1;
}

/* load(): import dir (or load --layout), apply --dequant, --lora / --merge (*untied). */
static gfs_err load(const inspect_opts *o, const char *dir, gfs_layout **l, bool *untied)
{
	const gfs_import_opts io = {
		.tag = o->tag, .format = o->input_format, .prefix = o->prefix,
		.naming = o->naming, .hf_config = o->hf_config, .tp_split = o->tp_split,
	};
	gfs_err err = o->layout ? gfs_layout_load_file(o->layout, l) : gfs_import(dir, &io, l);

	if (err)
		return err;
	if (o->dequant != GFS_DT_INVALID) {
		gfs_layout *d;

		err = gfs_fp8_dequant(*l, o->dequant, &d);
		if (!err) {
			gfs_layout_free(*l);
			*l = d;
		}
	}
	if (!err)
		err = gfs_lora_apply(&o->lora, l, untied);
	if (!err)
		err = gfs_fp8_check_dtype(*l, o->dtype);
	if (err) {
		gfs_layout_free(*l);
		*l = NULL;
	}
	return err;
}

/*
 * say_source(): on stderr, the note of the import (a tag chosen without
 * `latest`) and, for ls and verify (tell = true), what was read: format and
 * tag (the layout's info line).  Standard output stays machine-readable.
 */
static void say_source(const inspect_opts *o, const char *dir, const gfs_layout *l, bool tell)
{
	struct stat st;
	const char *what = o->layout ? o->layout : dir;
	const bool forced = o->input_format && strcmp(o->input_format, "auto") != 0;
	/* a file given as DIR is a layout JSON unless it is a plain model file */
	const bool file = o->layout || (stat(dir, &st) == 0 && S_ISREG(st.st_mode) &&
					(forced ? strcmp(o->input_format, "layout") == 0
						: !gfs_plain_is_file(dir)));

	if (l->note)
		fprintf(stderr, "gatherfs-inspect: note: %s\n", l->note);
	if (!tell)
		return;
	if (file)
		fprintf(stderr, "gatherfs-inspect: %s: layout JSON%s%s\n", what, l->info ? ": " : "",
			l->info ? l->info : "");
	else
		fprintf(stderr, "gatherfs-inspect: %s: %s\n", what, l->info ? l->info : l->format);
}

/*
 * kind_of(): what ls shows of entry t: "merged:OP" for a computed tensor
 * ("dequant" for an FP8 dequantized one),
 * "lora" for a LoRA tensor of an unmerged PEFT model, else "-".
 */
static const char *kind_of(const gfs_tensor *t, char *buf, size_t n)
{
	if (t->comp) {
		snprintf(buf, n, "%s%s", t->comp->op == GFS_OP_DEQUANT ? "" : "merged:",
			 gfs_op_name(t->comp->op));
		return buf;
	}
	return strstr(t->name, ".lora_") ? "lora" : "-";
}

/* has_kinds(): l has a computed or LoRA tensor (ls then shows a KIND column). */
static bool has_kinds(const gfs_layout *l)
{
	return l->inputs || gfs_lora_count(l) > 0;
}

static void format_shape(const gfs_tensor *t, char *buf, size_t n)
{
	size_t used = 0;

	used += (size_t)snprintf(buf, n, "[");
	for (uint32_t d = 0; d < t->ndim && used < n; d++)
		used += (size_t)snprintf(buf + used, n - used, "%s%" PRIu64, d ? ", " : "",
					 t->shape[d]);
	if (used < n)
		snprintf(buf + used, n - used, "]");
}

/*
 * json_entry(): a new object in arr for entry t: its state (if state),
 * name, dtype dt and shape; NULL when memory is short (arr keeps what it has).
 */
static cJSON *json_entry(cJSON *arr, const gfs_tensor *t, bool state, gfs_dtype dt)
{
	cJSON *e = cJSON_CreateObject();
	cJSON *shape = cJSON_CreateArray();
	bool ok = e && shape && cJSON_AddItemToArray(arr, e);

	if (!ok) {
		cJSON_Delete(e);
		cJSON_Delete(shape);
		return NULL;
	}
	ok = (!state || cJSON_AddStringToObject(e, "state", t->state)) &&
	     cJSON_AddStringToObject(e, "name", t->name) &&
	     cJSON_AddStringToObject(e, "dtype", gfs_dtype_name(dt)) &&
	     cJSON_AddItemToObject(e, "shape", shape);
	if (!ok) {
		cJSON_Delete(shape);
		return NULL;
	}
	for (uint32_t d = 0; ok && d < t->ndim; d++) {
		cJSON *v = gfs_json_u64_item(t->shape[d]);

		ok = v && cJSON_AddItemToArray(shape, v);
		if (!ok)
			cJSON_Delete(v);
	}
	return ok ? e : NULL;
}

/* LS_NAME_BUF: room for a layout name (at most 4096 bytes) with every byte %XX. */
#define LS_NAME_BUF (3 * 4096 + 1)

/*
 * ls_name(): name for a line of ls: itself, or, when it holds a control
 * byte (0x00-0x1f, 0x7f: a tab would break the columns), a copy in buf
 * (LS_NAME_BUF bytes) with those written %XX as tensors/ names write them.
 */
static const char *ls_name(const char *name, char *buf)
{
	const size_t n = strlen(name);
	bool ctl = false;

	for (size_t i = 0; i < n && !ctl; i++)
		ctl = gfs_escape_has(GFS_ESC_CONTROL, (unsigned char)name[i]);
	if (!ctl)
		return name;
	assert(3 * n + 1 <= LS_NAME_BUF);
	(void)gfs_escape(name, n, GFS_ESC_CONTROL, buf);
	return buf;
}

/* cmd_ls_optim(): ls --optim: the optimizer-state entries, in --dtype as cat gives them. */
static int cmd_ls_optim(const inspect_opts *o, const gfs_layout *l)
{
	if (o->json) {
		cJSON *arr = cJSON_CreateArray();
		char *text;
		bool ok = arr != NULL;

		for (size_t i = l->ntensors; ok && i < gfs_layout_nentries(l); i++) {
			const gfs_tensor *t = &l->tensors[i];
			const gfs_dtype dt = gfs_dtype_out(t->dtype, o->dtype);
			cJSON *e = json_entry(arr, t, true, dt);

			ok = e && gfs_json_add_u64(e, "nbytes", gfs_tensor_out_nbytes(l, i, o->dtype));
		}
		text = ok ? cJSON_Print(arr) : NULL;
		cJSON_Delete(arr);
		if (!text) {
			fputs("gatherfs-inspect: out of memory\n", stderr);
			return 1;
		}
		puts(text);
		free(text);
		return 0;
	}
	printf("%-12s %-48s %-9s %-20s %14s\n", "STATE", "NAME", "DTYPE", "SHAPE", "BYTES");
	for (size_t i = l->ntensors; i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = &l->tensors[i];
		static char nb[LS_NAME_BUF];
		char shape[512];

		format_shape(t, shape, sizeof(shape));
		printf("%-12s %-48s %-9s %-20s %14" PRIu64 "\n", t->state, ls_name(t->name, nb),
		       gfs_dtype_name(gfs_dtype_out(t->dtype, o->dtype)), shape,
		       gfs_tensor_out_nbytes(l, i, o->dtype));
	}
	return 0;
}

/*
 * name_width(): the NAME column's width for ls: 48, or the longest name
 * listed (tensors, objects and, with --all, the entries left out), so the
 * columns after it stay aligned.
 */
static int name_width(const inspect_opts *o, const gfs_layout *l)
{
	static char nb[LS_NAME_BUF];
	size_t w = 48, n;

	for (size_t i = 0; i < l->ntensors; i++)
		if ((n = strlen(ls_name(l->tensors[i].name, nb))) > w)
			w = n;
	for (size_t i = 0; i < l->nobjects; i++)
		if ((n = strlen(l->objects[i].name)) > w)
			w = n;
	for (size_t i = 0; o->all && i < l->nomitted; i++)
		if ((n = strlen(ls_name(l->omitted[i].name, nb))) > w)
			w = n;
	return (int)w;
}

typedef struct hash_ctx {
	gfs_rside x;
	char (*hex)[65];
} hash_ctx;

static gfs_err hash_one(void *ctx, size_t i, uint64_t *bytes)
{
	hash_ctx *h = ctx;
	uint8_t d[32];
	const gfs_err err = gfs_reduce_sha256(&h->x, i, d);

	*bytes = gfs_tensor_out_nbytes(h->x.l, i, h->x.want);
	if (!err)
		gfs_sha256_hex(d, h->hex[i]);
	return err;
}

/*
 * ls_hashes(): ls --sha256: the hex SHA-256 of every model tensor's bytes
 * as cat (and the tensors/ file of a mount with the same dtype) serves
 * them.  @return the array (free() it), or NULL after one line on stderr.
 */
static char (*ls_hashes(const inspect_opts *o, const gfs_layout *l))[65]
{
	const gfs_report_opts ro = { .progress = isatty(STDERR_FILENO) };
	hash_ctx h = { .x = { .l = l, .want = o->dtype, .what = o->layout ? o->layout : "" },
		       .hex = calloc(l->ntensors ? l->ntensors : 1, 65) };
	gfs_srcset *s = NULL;
	gfs_err err = h.hex ? gfs_srcset_open(l, &s) : gfs_fail(GFS_ERR_NOMEM, "out of memory");
	uint64_t total = 0;

	for (size_t i = 0; i < l->ntensors; i++)
		total += gfs_tensor_out_nbytes(l, i, o->dtype);
	h.x.s = s;
	if (!err)
		err = gfs_report_run(&ro, l->ntensors, total, hash_one, &h);
	gfs_srcset_close(s);
	if (err) {
		fail();
		free(h.hex);
		return NULL;
	}
	return h.hex;
}

static int cmd_ls(const inspect_opts *o, const gfs_layout *l)
{
	const bool kinds = !o->optim && has_kinds(l); /* O(tensors): once */
	int w;
	char (*hex)[65] = NULL;

	if (o->optim)
		return cmd_ls_optim(o, l);
	if (o->sha256 && !(hex = ls_hashes(o, l)))
		return 1;
	if (o->json) {
		cJSON *arr = cJSON_CreateArray();
		char *text;
		bool ok = arr != NULL;

		for (size_t i = 0; ok && i < l->ntensors; i++) {
			const gfs_tensor *t = &l->tensors[i];
			const gfs_dtype dt = gfs_dtype_out(t->dtype, o->dtype);
			cJSON *e = json_entry(arr, t, false, dt);

			ok = e != NULL;
			if (ok && kinds) {
				char kb[32];

				ok = cJSON_AddStringToObject(e, "kind", kind_of(t, kb, sizeof(kb))) != NULL;
			}
			ok = ok && (!hex || cJSON_AddStringToObject(e, "sha256", hex[i])) &&
			     gfs_json_add_u64(e, "nbytes", t->numel * gfs_dtype_size(dt)) &&
			     (t->alias_of >= 0
				      ? cJSON_AddStringToObject(e, "alias_of",
								l->tensors[t->alias_of].name) != NULL
				      : cJSON_AddNullToObject(e, "alias_of") != NULL);
		}
		for (size_t i = 0; ok && i < l->nobjects; i++) {
			cJSON *e = cJSON_CreateObject();

			ok = e && cJSON_AddItemToArray(arr, e);
			if (!ok) {
				cJSON_Delete(e);
				break;
			}
			ok = cJSON_AddStringToObject(e, "name", l->objects[i].name) &&
			     cJSON_AddStringToObject(e, "dtype", "object") &&
			     cJSON_AddNullToObject(e, "shape") &&
			     gfs_json_add_u64(e, "nbytes", l->objects[i].len) &&
			     cJSON_AddNullToObject(e, "alias_of");
		}
		text = ok ? cJSON_Print(arr) : NULL;
		cJSON_Delete(arr);
		free(hex);
		if (!text) {
			fputs("gatherfs-inspect: out of memory\n", stderr);
			return 1;
		}
		out_ok(puts(text));
		free(text);
		return 0;
	}
	w = name_width(o, l);
	out_ok(printf("%-*s %-9s %-20s %14s  %s%s%s\n", w, "NAME", "DTYPE", "SHAPE", "BYTES",
		      "ALIAS_OF", kinds ? "  KIND" : "", hex ? "  SHA256" : ""));
	for (size_t i = 0; i < l->ntensors && !out_errno; i++) {
		const gfs_tensor *t = &l->tensors[i];
		const gfs_dtype dt = gfs_dtype_out(t->dtype, o->dtype);
		static char nb[LS_NAME_BUF], ab[LS_NAME_BUF];
		char shape[512], kb[32];

		format_shape(t, shape, sizeof(shape));
		out_ok(printf("%-*s %-9s %-20s %14" PRIu64 "  %s%s%s%s%s\n", w, ls_name(t->name, nb),
			      gfs_dtype_name(dt), shape, t->numel * gfs_dtype_size(dt),
			      t->alias_of >= 0 ? ls_name(l->tensors[t->alias_of].name, ab) : "-",
			      kinds ? "  " : "", kinds ? kind_of(t, kb, sizeof(kb)) : "",
			      hex ? "  " : "", hex ? hex[i] : ""));
	}
	free(hex);
	/* non-tensor entries (DCP bytes): listed, never served as tensors */
	for (size_t i = 0; i < l->nobjects && !out_errno; i++)
		out_ok(printf("%-*s %-9s %-20s %14" PRIu64 "  %s\n", w, l->objects[i].name, "object",
			      "-", l->objects[i].len, "-"));
	for (size_t i = 0; o->all && i < l->nomitted && !out_errno; i++) {
		static char nb[LS_NAME_BUF];

		out_ok(printf("%-*s %-9s %-20s %14s  - (left out: %s)\n", w,
			      ls_name(l->omitted[i].name, nb), "omitted", "-", "-", l->omitted[i].text));
	}
	if (!o->all && l->nomitted)
		fprintf(stderr, "gatherfs-inspect: %zu checkpoint entries no view shows (ls --all lists them)\n",
			l->nomitted);
	return 0;
}

static gfs_err write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		const ssize_t w = write(fd, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return gfs_fail(GFS_ERR_IO, "writing to standard output: %s", strerror(errno));
		}
		p += w;
		n -= (size_t)w;
	}
	return GFS_OK;
}

/*
 * served_config(): gfs_config_served() of name, and config.json of a
 * --dequant model as the mount's -o dequant= serves it (gfs_fp8_config()).
 */
static gfs_err served_config(const inspect_opts *o, const gfs_layout *l, const char *name,
			     char **text, size_t *len)
{
	gfs_err err = gfs_config_served(l, name, o->dtype, o->untied, text, len, NULL);
	char *t;

	if (err || o->dequant == GFS_DT_INVALID || strcmp(name, "config.json") != 0)
		return err;
	err = gfs_fp8_config(l, *text, o->dequant, &t);
	free(*text);
	*text = err ? NULL : t;
	*len = *text ? strlen(*text) : 0;
	return err;
}

/* cat_config(): cat of config.json or generation_config.json, as the mount serves it. */
static int cat_config(const inspect_opts *o, const gfs_layout *l, const char *name)
{
	char *text;
	size_t len;
	gfs_err err = served_config(o, l, name, &text, &len);

	if (err)
		return fail();
	if (!text) {
		fprintf(stderr, "gatherfs-inspect: no tensor and no %s in this checkpoint\n", name);
		return 1;
	}
	err = write_all(STDOUT_FILENO, (const uint8_t *)text, len);
	free(text);
	return err ? fail() : 0;
}

static int cmd_cat(const inspect_opts *o, const gfs_layout *l, const char *name)
{
	const int64_t i = o->state ? gfs_layout_find_state(l, o->state, name)
				   : gfs_layout_find(l, name);
	gfs_srcset *s = NULL;
	uint8_t *buf = NULL;
	uint64_t size, off = 0;
	gfs_err err;

	if (i < 0 && o->state) {
		fprintf(stderr, "gatherfs-inspect: no optimizer state %s of '%s' (see `gatherfs-inspect ls --optim`)\n",
			o->state, name);
		return 1;
	}
	if (i < 0) {
		for (size_t k = 0; k < GFS_CONFIG_NNAMES; k++)
			if (strcmp(name, gfs_config_names[k]) == 0)
				return cat_config(o, l, name);
		fprintf(stderr, "gatherfs-inspect: no tensor named '%s' (see `gatherfs-inspect ls`)\n",
			name);
		return 1;
	}
	err = gfs_srcset_open(l, &s);
	if (err)
		return fail();
	buf = malloc(IO_CHUNK);
	if (!buf) {
		gfs_srcset_close(s);
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return 1;
	}
	size = gfs_tensor_out_nbytes(l, (size_t)i, o->dtype);
	while (!err && off < size) {
		const size_t n = size - off < IO_CHUNK ? (size_t)(size - off) : IO_CHUNK;

		err = gfs_tensor_read(l, s, (size_t)i, o->dtype, off, buf, n);
		if (!err)
			err = write_all(STDOUT_FILENO, buf, n);
		off += n;
	}
	free(buf);
	gfs_srcset_close(s);
	return err ? fail() : 0;
}

static int cmd_layout(const gfs_layout *l)
{
	char *text;

	if (gfs_layout_to_json(l, &text))
		return fail();
	out_ok(puts(text));
	free(text);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* count_nonfinite(): NaN and infinity count of n float32 values. */
static uint64_t count_nonfinite(gfs_dtype dt, const uint8_t *p, size_t n)
{
	uint64_t bad = 0;

	for (size_t k = 0; k < n; k++) {
		uint32_t exp_mask, bits;

		switch (dt) {
		case GFS_DT_F32:
			bits = gfs_le32(p + 4 * k);
			exp_mask = 0x7f800000u;
			break;
		case GFS_DT_BF16:
			bits = gfs_le16(p + 2 * k);
			exp_mask = 0x7f80u;
			break;
		case GFS_DT_F16:
			bits = gfs_le16(p + 2 * k);
			exp_mask = 0x7c00u;
			break;
		default:
			return 0;
		}
		bad += (bits & exp_mask) == exp_mask;
	}
	return bad;
}

static int cmd_export(const inspect_opts *o, const gfs_layout *l, const char *out)
{
	const bool to_stdout = strcmp(out, "-") == 0;
	gfs_export_opts eo = {
		.format = o->format, .want = o->dtype, .shard_size = o->shard_size,
		.progress = isatty(STDERR_FILENO), .signals = !to_stdout,
	};
	gfs_export_file extra[GFS_CONFIG_NNAMES] = { { 0 } };
	char *texts[GFS_CONFIG_NNAMES] = { 0 };
	gfs_srcset *s = NULL;
	gfs_err err = GFS_OK;

	if (to_stdout && o->shard_size) {
		fprintf(stderr, "gatherfs-inspect: --shard-size writes a directory, not standard output\n");
		return 2;
	}
	if (to_stdout && eo.format == GFS_FORMAT_NONE) {
		fprintf(stderr, "gatherfs-inspect: -: give --format bin or safetensors for standard output\n");
		return 2;
	}
	/* a target export may not write is refused first, whatever its name */
	if (!to_stdout && gfs_export_check_target(out, o->shard_size != 0))
		return fail();
	if (eo.format == GFS_FORMAT_NONE)
		eo.format = o->shard_size ? GFS_FORMAT_SAFETENSORS : gfs_format_from_name(out);
	if (eo.format == GFS_FORMAT_NONE) {
		fprintf(stderr, "gatherfs-inspect: %s: name it .bin or .safetensors, or give --format\n",
			out);
		return 2;
	}
	/* a sharded export is a model directory: the config files go with it */
	for (size_t k = 0; o->shard_size && !err && k < GFS_CONFIG_NNAMES; k++) {
		err = served_config(o, l, gfs_config_names[k], &texts[k], &extra[eo.nextra].len);
		if (!err && texts[k]) {
			extra[eo.nextra].name = gfs_config_names[k];
			extra[eo.nextra++].text = texts[k];
		}
	}
	eo.extra = extra;
	if (!err)
		err = gfs_srcset_open(l, &s);
	if (!err)
		err = gfs_export(l, s, out, &eo);
	gfs_srcset_close(s);
	for (size_t k = 0; k < GFS_CONFIG_NNAMES; k++)
		free(texts[k]);
	return err ? fail() : 0;
}

/*
 * report_bad(): one line per corrupt record of l in s: its file, its name
 * and every entry with bytes in it (model tensors by name, optimizer-state
 * entries as "STATE of NAME").  @return how many.
 */
static size_t report_bad(const gfs_layout *l, const gfs_srcset *s)
{
	const size_t cap = gfs_layout_nentries(l) ? gfs_layout_nentries(l) : 1;
	size_t nbad = 0;
	size_t *idx = gfs_calloc(cap, sizeof(*idx));

	for (uint32_t r = 0; r < l->nrecords; r++) {
		const gfs_record *rec = &l->records[r];
		char rn[512];
		size_t n;

		if (gfs_srcset_rec_state(s, r) != GFS_REC_BAD)
			continue;
		nbad++;
		printf("CORRUPT: %s: record %s does not match its stored CRC-32%s; tensors affected:",
		       l->sources[rec->src].abspath, gfs_record_name(rec, rn, sizeof(rn)),
		       rec->kind == GFS_PIECE_ZSTD ? " (or its zstd frame does not decode)" : "");
		n = idx ? gfs_record_tensors(l, r, idx, cap) : 0;
		assert(n <= cap);
		for (size_t k = 0; k < n; k++) {
			const gfs_tensor *t = &l->tensors[idx[k]];

			printf("%s %s%s%s", k ? "," : "", t->state ? t->state : "",
			       t->state ? " of " : "", t->name);
		}
		putchar('\n');
	}
	free(idx);
	return nbad;
}

/* What gfs_hf_verify() found: the snapshot's files whose blob hash matched, how many did not. */
typedef struct blob_check {
	const gfs_layout *l;
	bool *hashed; /* [nsources]: the source is a snapshot file whose blob hash matched */
	size_t nok, nbad;
} blob_check;

static void blob_seen(void *ctx, const char *name, const char *blob, const char *got)
{
	blob_check *b = ctx;
	const size_t rlen = strlen(b->l->root_dir);

	if (got) {
		b->nbad++;
		out_ok(printf("BLOB DIFFERS: %s/%s: blobs/%s holds contents whose %s is %s\n",
			      b->l->root_dir, name, blob, strlen(blob) == 40 ? "git blob SHA-1" : "SHA-256",
			      got));
		return;
	}
	b->nok++;
	for (size_t i = 0; i < b->l->nsources; i++) {
		const char *p = b->l->sources[i].abspath;

		if (strncmp(p, b->l->root_dir, rlen) == 0 && p[rlen] == '/' && strcmp(p + rlen + 1, name) == 0)
			b->hashed[i] = true;
	}
}

/*
 * check_blobs(): for a layout read from a Hugging Face cache snapshot,
 * check every file's blob against the hash its name is (gfs_hf_verify()),
 * one line per blob that differs; b->hashed marks the sources vouched for.
 * Anything else: nothing checked.
 */
static gfs_err check_blobs(const gfs_layout *l, blob_check *b)
{
	char real[PATH_MAX];

	b->l = l;
	if (!l->root_dir || !realpath(l->root_dir, real) || !gfs_hf_is_snapshot(real))
		return GFS_OK;
	return gfs_hf_verify(l->root_dir, blob_seen, b);
}

/*
 * report_unsummed(): one line per source holding tensor bytes that no
 * stored checksum covers (nothing could vouch for them), but for those
 * hashed (a matching blob hash; NULL: none).  @return whether there is
 * one, false too when out of memory (after a line).
 */
static bool report_unsummed(const gfs_layout *l, const bool *hashed)
{
	gfs_unsummed u;
	const gfs_source *src;

	if (!gfs_unsummed_init(&u, l)) {
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return false;
	}
	if (hashed) {
		bool left = false;

		for (size_t i = 0; i < l->nsources; i++)
			left |= u.src[i] &= !hashed[i];
		if (!left)
			u.bytes = 0;
	}
	while ((src = gfs_unsummed_next(&u)) != NULL) {
		out_ok(printf("UNVERIFIED: %s: no stored checksum covers its tensor bytes\n",
			      src->abspath));
		if (strcmp(l->format, "zero3") == 0) /* its manifest has no CRC-32s */
			out_ok(printf("%s: no checksums (saved by an older save_zero3)\n", src->path));
	}
	if (u.bytes)
		out_ok(printf("note: %" PRIu64 " bytes of %zu tensors lie in no checksummed record "
			      "(safetensors, raw or layout JSON sources): not verified, but for the "
			      "content checksum of a zstd frame that has one\n",
			      u.bytes, u.ntensors));
	gfs_unsummed_free(&u);
	return u.bytes != 0;
}

/*
 * check_replicas(): compare every replica (gfs_layout.replicas) with the
 * tensor bytes served at its place, using buf and rb (IO_CHUNK bytes each);
 * print one line per replica that differs.  *ndiff: how many differ,
 * *bytes: bytes compared.
 */
static gfs_err check_replicas(const gfs_layout *l, gfs_srcset *s, uint8_t *buf, uint8_t *rb,
			      size_t *ndiff, uint64_t *bytes)
{
	gfs_err err = GFS_OK;

	*ndiff = 0;
	*bytes = 0;
	for (size_t i = 0; !err && i < l->nreplicas; i++) {
		const gfs_replica *r = &l->replicas[i];
		const gfs_source *src = &l->sources[r->p.src];
		bool same = true;

		for (uint64_t k = 0; !err && same && k < r->p.count; k++) {
			const uint64_t toff = r->p.toff + k * r->p.dst_stride;
			const uint64_t soff = r->p.src_off + k * r->p.src_stride;

			err = gfs_srcset_check(l, s, r->p.src);
			for (uint64_t o = 0; !err && same && o < r->p.len; o += IO_CHUNK) {
				const size_t n = r->p.len - o < IO_CHUNK ? (size_t)(r->p.len - o) : IO_CHUNK;

				err = gfs_tensor_read(l, s, r->ti, GFS_DT_INVALID, toff + o, buf, n);
				if (!err)
					err = gfs_pread_full(gfs_srcset_fd(s, r->p.src), rb, n, soff + o,
							     src->path);
				if (!err && memcmp(buf, rb, n) != 0) {
					same = false;
					out_ok(printf("REPLICA DIFFERS: %s bytes [%" PRIu64 ", %" PRIu64
						      "): %s at offset %" PRIu64 " holds other values\n",
						      l->tensors[r->ti].name, toff + o, toff + o + n, src->path,
						      soff + o));
				}
				*bytes += n;
			}
		}
		*ndiff += !same;
	}
	return err;
}

static int cmd_verify(const gfs_layout *l)
{
	gfs_srcset *s = NULL;
	uint8_t *buf = malloc(IO_CHUNK);
	uint64_t bytes = 0, pieces = 0, aliases = 0, nonfinite = 0, rbytes = 0;
	gfs_integrity_stats st = { 0 };
	size_t nbad = 0, ndiff = 0;
	blob_check bc = { .hashed = gfs_calloc(l->nsources ? l->nsources : 1, sizeof(bool)) };
	bool unsummed;
	const double t0 = now_s();
	gfs_err err;
	double dt, dt_crc = 0;

	if (!buf || !bc.hashed) {
		free(buf);
		free(bc.hashed);
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return 1;
	}
	err = check_blobs(l, &bc);
	if (!err && bc.nbad) {
		free(buf);
		free(bc.hashed);
		fprintf(stderr, "gatherfs-inspect: %zu of %zu cache blobs do not match the hash they are named by\n",
			bc.nbad, bc.nbad + bc.nok);
		return 1;
	}
	if (!err)
		err = gfs_srcset_open(l, &s);
	if (!err) {
		/* every record and replica is checked here, each reported: reads need not */
		gfs_srcset_set_verify(s, false, NULL);
		err = gfs_integrity_check(l, s, NULL, 0, 0, &nbad, &st);
		dt_crc = now_s() - t0;
	}
	if (!err && nbad) {
		report_bad(l, s);
		free(buf);
		free(bc.hashed);
		gfs_srcset_close(s);
		fprintf(stderr, "gatherfs-inspect: %zu of %zu checksummed records are corrupt\n", nbad,
			l->nrecords);
		return 1;
	}
	if (!err && l->decls.what) {
		err = gfs_srcset_decls_require(s);
		if (err && gfs_srcset_decls_wrong(s)) {
			out_ok(printf("DECLARATION WRONG: %s\n", gfs_errmsg()));
			free(buf);
			gfs_srcset_close(s);
			fprintf(stderr, "gatherfs-inspect: the entries %s governs are not served\n",
				l->decls.what);
			return 1;
		}
	}
	for (size_t i = 0; !err && i < gfs_layout_nentries(l); i++) {
		const gfs_tensor *t = &l->tensors[i];
		const size_t es = gfs_dtype_size(t->dtype);
		uint64_t off = 0;

		if (t->alias_of >= 0) {
			aliases++;
			continue;
		}
		pieces += t->npieces;
		while (!err && off < t->nbytes) {
			size_t n = t->nbytes - off < IO_CHUNK ? (size_t)(t->nbytes - off) : IO_CHUNK;

			n -= n % es;
			err = gfs_tensor_read(l, s, i, GFS_DT_INVALID, off, buf, n);
			if (!err)
				nonfinite += count_nonfinite(t->dtype, buf, n / es);
			off += n;
		}
		bytes += off;
	}
	if (!err && l->nreplicas) {
		uint8_t *rb = malloc(IO_CHUNK);

		err = rb ? check_replicas(l, s, buf, rb, &ndiff, &rbytes)
			 : gfs_fail(GFS_ERR_NOMEM, "out of memory");
		free(rb);
	}
	free(buf);
	gfs_srcset_close(s);
	if (err) {
		free(bc.hashed);
		return fail();
	}
	if (ndiff) {
		free(bc.hashed);
		fprintf(stderr, "gatherfs-inspect: %zu of %zu replicas differ from the copy served\n",
			ndiff, l->nreplicas);
		return 1;
	}
	dt = now_s() - t0;
	out_ok(printf("OK: %zu entries (%" PRIu64 " aliases)", l->ntensors, aliases));
	if (l->noptim)
		out_ok(printf(" and %zu optimizer-state entries", l->noptim));
	out_ok(printf(", %" PRIu64 " pieces, %" PRIu64 " bytes read from %zu files in %.3f s (%.1f MB/s)\n",
		      pieces, bytes, l->nsources, dt, dt > 0 ? (double)bytes / dt / 1e6 : 0.0));
	out_ok(printf("OK: %zu zip records match their stored CRC-32 (%" PRIu64
		      " source bytes read, %zu zstd frames decompressed, %zu of them with a content checksum) in %.3f s\n",
		      st.checked, st.bytes, st.frames, st.frames_sum, dt_crc));
	if (l->nreplicas)
		out_ok(printf("OK: %zu replicas equal the copy served (%" PRIu64 " bytes compared)\n",
			      l->nreplicas, rbytes));
	if (l->decls.what)
		out_ok(printf("OK: %s holds: %zu split tensors' slices are not byte-identical copies (or are constant), the replicated ones' copies are equal\n",
			      l->decls.what, l->decls.nsplits));
	if (bc.nok)
		out_ok(printf("OK: %zu Hugging Face cache blobs match the hash they are named by\n",
			      bc.nok));
	unsummed = report_unsummed(l, bc.hashed);
	free(bc.hashed);
	if (nonfinite)
		out_ok(printf("note: %" PRIu64 " NaN or infinite floating-point values\n", nonfinite));
	return unsummed ? 3 : 0;
}

/*
 * The options that say how to read a checkpoint: every command takes them;
 * diff also takes each as --a-OPTION and --b-OPTION for one side only.
 */
static const struct read_opt {
	const char *name;
	int code;
} read_opts[] = {
	{ "tag", 't' },    { "input-format", 'i' }, { "prefix", 'p' },  { "layout", 'l' },
	{ "naming", 'N' }, { "hf-config", 'H' },    { "tp-split", 'S' }, { "dtype", 'd' },
	{ "lora", 'L' },   { "merge", 'M' },        { "base", 'B' },     { "lora-tied", 'T' },
	{ "dequant", 'Q' },
};
#define N_READ_OPTS (sizeof(read_opts) / sizeof(read_opts[0]))
/* getopt codes of --a-OPTION (side 0) and --b-OPTION (side 1): SIDE_CODE | side << 8 | code */
#define SIDE_CODE 0x10000

/*
 * set_read_opt(): apply the reading option of getopt code c with argument
 * arg to o.  @return 0, 2 (usage error, after one line on stderr), or -1
 * when c is no reading option.
 */
static int set_read_opt(inspect_opts *o, int c, const char *arg)
{
	switch (c) {
	case 't':
		o->given |= OPT_TAG;
		o->tag = arg;
		break;
	case 'i':
		o->given |= OPT_INPUT_FORMAT;
		o->input_format = arg;
		break;
	case 'p':
		o->given |= OPT_PREFIX;
		o->prefix = arg;
		break;
	case 'l':
		o->given |= OPT_LAYOUT;
		o->layout = arg;
		break;
	case 'N':
		o->given |= OPT_NAMING;
		o->naming = arg;
		break;
	case 'H':
		o->given |= OPT_HF_CONFIG;
		o->hf_config = arg;
		break;
	case 'S':
		o->given |= OPT_TP_SPLIT;
		o->tp_split = arg;
		break;
	case 'd':
		o->given |= OPT_DTYPE;
		o->dtype = gfs_dtype_parse(arg);
		if (!gfs_dtype_is_float(o->dtype) || o->dtype == GFS_DT_F64) {
			fprintf(stderr, "gatherfs-inspect: --dtype must be bf16, fp16 or fp32, not '%s'\n",
				arg);
			return 2;
		}
		break;
	case 'L':
		o->lora.lora = arg;
		break;
	case 'M':
		o->lora.merge = arg;
		break;
	case 'B':
		o->lora.base = arg;
		break;
	case 'T':
		o->lora.tied = arg;
		break;
	case 'Q':
		o->given |= OPT_DEQUANT;
		o->dequant = gfs_dtype_parse(arg);
		if (!gfs_dtype_is_float(o->dequant) || o->dequant == GFS_DT_F64) {
			fprintf(stderr, "gatherfs-inspect: --dequant must be bf16, fp16 or fp32, not '%s'\n",
				arg);
			return 2;
		}
		break;
	default:
		return -1;
	}
	return 0;
}

/* side_opts(): o's reading options overridden by those given for one side (s). */
static inspect_opts side_opts(const inspect_opts *o, const inspect_opts *s)
{
	inspect_opts r = *o;

	r.given |= s->given;
	r.tag = s->tag ? s->tag : o->tag;
	r.input_format = s->input_format ? s->input_format : o->input_format;
	r.prefix = s->prefix ? s->prefix : o->prefix;
	r.naming = s->naming ? s->naming : o->naming;
	r.hf_config = s->hf_config ? s->hf_config : o->hf_config;
	r.tp_split = s->tp_split ? s->tp_split : o->tp_split;
	r.layout = s->layout ? s->layout : o->layout;
	r.dtype = s->dtype != GFS_DT_INVALID ? s->dtype : o->dtype;
	r.dequant = s->dequant != GFS_DT_INVALID ? s->dequant : o->dequant;
	r.lora.lora = s->lora.lora ? s->lora.lora : o->lora.lora;
	r.lora.merge = s->lora.merge ? s->lora.merge : o->lora.merge;
	r.lora.base = s->lora.base ? s->lora.base : o->lora.base;
	r.lora.tied = s->lora.tied ? s->lora.tied : o->lora.tied;
	return r;
}

/* layout_conflict(): 2 after one line if o has --layout and an import option, else 0. */
static int layout_conflict(const inspect_opts *o)
{
	if (o->layout && (o->tag || o->prefix || o->naming || o->hf_config || o->tp_split ||
			  (o->input_format && strcmp(o->input_format, "layout") != 0 &&
			   strcmp(o->input_format, "auto") != 0))) {
		fprintf(stderr, "gatherfs-inspect: %s applies to a checkpoint directory, not to --layout FILE\n",
			o->tag ? "--tag" : o->prefix ? "--prefix" : o->naming ? "--naming"
			: o->hf_config ? "--hf-config" : o->tp_split ? "--tp-split" : "--input-format");
		return 2;
	}
	return 0;
}

static gfs_report_opts report_opts(const inspect_opts *o)
{
	return (gfs_report_opts){ .json = o->json, .html = o->html, .atol = o->atol,
				  .rtol = o->rtol, .progress = isatty(STDERR_FILENO) };
}

/*
 * cmd_diff(): diff A B, A read with o's options overridden by side[0]'s
 * (--a-OPTION), B with side[1]'s.  pos: the npos positional arguments.
 * @return the exit status, or -1 on bad usage (after one line).
 */
static int cmd_diff(const inspect_opts *o, const inspect_opts side[2], char **pos, int npos)
{
	const inspect_opts so[2] = { side_opts(o, &side[0]), side_opts(o, &side[1]) };
	const int need = !so[0].layout + !so[1].layout;
	const char *dirs[2] = { NULL, NULL };
	gfs_layout *l[2] = { NULL, NULL };
	gfs_srcset *s[2] = { NULL, NULL };
	gfs_rside x[2];
	gfs_report_opts ro;
	int rc = 1, p = 0;

	if (npos != need) {
		fprintf(stderr, "gatherfs-inspect: usage: diff [OPTIONS] A B (a side read with "
				"--a-layout/--b-layout FILE takes no positional argument)\n");
		return -1;
	}
	for (int k = 0; k < 2; k++) {
		if (layout_conflict(&so[k]))
			return -1;
		dirs[k] = so[k].layout ? NULL : pos[p++];
	}
	for (int k = 0; k < 2; k++) {
		bool untied;

		if (load(&so[k], dirs[k], &l[k], &untied) || gfs_srcset_open(l[k], &s[k])) {
			fprintf(stderr, "gatherfs-inspect: %c: %s\n", 'A' + k, gfs_errmsg());
			goto out;
		}
		say_source(&so[k], dirs[k], l[k], false);
		x[k] = (gfs_rside){ .l = l[k], .s = s[k], .want = so[k].dtype,
				    .what = so[k].layout ? so[k].layout : dirs[k] };
	}
	ro = report_opts(o);
	rc = gfs_cli_diff(&x[0], &x[1], &ro);
out:
	for (int k = 0; k < 2; k++) {
		gfs_srcset_close(s[k]);
		gfs_layout_free(l[k]);
	}
	return rc;
}

/* cmd_analyze(): stats or check (cmd) of l, read from dir. */
static int cmd_analyze(const inspect_opts *o, const gfs_layout *l, const char *dir, const char *cmd)
{
	const gfs_report_opts ro = report_opts(o);
	gfs_rside x = { .l = l, .want = o->dtype, .what = o->layout ? o->layout : dir };
	gfs_srcset *s = NULL;
	int rc;

	if (gfs_srcset_open(l, &s))
		return fail();
	x.s = s;
	rc = strcmp(cmd, "stats") == 0 ? gfs_cli_stats(&x, &ro)
				       : gfs_cli_check(&x, o->hf_config ? o->hf_config : dir, &ro);
	gfs_srcset_close(s);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option base_opts[] = {
		{ "tag", required_argument, NULL, 't' },
		{ "input-format", required_argument, NULL, 'i' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "layout", required_argument, NULL, 'l' },
		{ "naming", required_argument, NULL, 'N' },
		{ "hf-config", required_argument, NULL, 'H' },
		{ "tp-split", required_argument, NULL, 'S' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "all", no_argument, NULL, 'a' },
		{ "optim", optional_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "shard-size", required_argument, NULL, 's' },
		{ "lora", required_argument, NULL, 'L' },
		{ "merge", required_argument, NULL, 'M' },
		{ "base", required_argument, NULL, 'B' },
		{ "lora-tied", required_argument, NULL, 'T' },
		{ "dequant", required_argument, NULL, 'Q' },
		{ "html", required_argument, NULL, 'W' },
		{ "atol", required_argument, NULL, 'A' },
		{ "rtol", required_argument, NULL, 'R' },
		{ "sha256", no_argument, NULL, 'D' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
	};
	enum { NBASE = sizeof(base_opts) / sizeof(base_opts[0]) };
	static char side_names[2 * N_READ_OPTS][32];
	struct option longopts[NBASE + 2 * N_READ_OPTS + 1];
	inspect_opts o = { .dtype = GFS_DT_INVALID, .dequant = GFS_DT_INVALID };
	inspect_opts side[2] = { { .dtype = GFS_DT_INVALID, .dequant = GFS_DT_INVALID },
				 { .dtype = GFS_DT_INVALID, .dequant = GFS_DT_INVALID } };
	const struct command *command = NULL;
	const char *cmd, *dir = NULL, *name = NULL;
	gfs_layout *l = NULL;
	int c, rc, npos;

	memcpy(longopts, base_opts, sizeof(base_opts));
	for (size_t k = 0; k < 2 * N_READ_OPTS; k++) {
		const struct read_opt *r = &read_opts[k % N_READ_OPTS];

		snprintf(side_names[k], sizeof(side_names[k]), "%c-%s", k < N_READ_OPTS ? 'a' : 'b',
			 r->name);
		longopts[NBASE + k] = (struct option){ side_names[k], required_argument, NULL,
						       SIDE_CODE | (k >= N_READ_OPTS) << 8 | r->code };
	}
	longopts[NBASE + 2 * N_READ_OPTS] = (struct option){ NULL, 0, NULL, 0 };
	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		rc = set_read_opt(c & SIDE_CODE ? &side[(c >> 8) & 1] : &o, c & ~(SIDE_CODE | 0x100),
				  optarg);
		if (rc > 0)
			return rc;
		if (rc == 0) {
			o.given |= c & SIDE_CODE ? OPT_SIDE : 0;
			continue;
		}
		switch (c) {
		case 'W':
			o.given |= OPT_HTML;
			o.html = optarg;
			break;
		case 'A':
		case 'R': {
			char *end;
			double v;

			errno = 0;
			v = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(v >= 0) || v == INFINITY) {
				fprintf(stderr, "gatherfs-inspect: --%s must be a number >= 0, not '%s'\n",
					c == 'A' ? "atol" : "rtol", optarg);
				return 2;
			}
			o.given |= c == 'A' ? OPT_ATOL : OPT_RTOL;
			*(c == 'A' ? &o.atol : &o.rtol) = v;
			break;
		}
		case 'D':
			o.given |= OPT_SHA256;
			o.sha256 = true;
			break;
		case 'j':
			o.given |= OPT_JSON;
			o.json = true;
			break;
		case 'a':
			o.given |= OPT_ALL;
			o.all = true;
			break;
		case 'o':
			o.given |= OPT_OPTIM;
			o.optim = true;
			o.state = optarg;
			break;
		case 'f':
			o.given |= OPT_FORMAT;
			o.format = gfs_format_from_name(optarg);
			if (o.format == GFS_FORMAT_NONE) {
				fprintf(stderr, "gatherfs-inspect: --format must be bin or safetensors, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 's':
			o.given |= OPT_SHARD_SIZE;
			if (gfs_parse_size(optarg, &o.shard_size) != GFS_OK) {
				fprintf(stderr, "gatherfs-inspect: --shard-size: %s\n", gfs_errmsg());
				return 2;
			}
			break;
		case 'h':
			errno = 0;
			out_ok(usage(stdout));
			return finish_stdout(0);
		case 'V':
			out_ok(puts(PACKAGE_STRING));
			return finish_stdout(0);
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]) && !command; i++)
		if (strcmp(argv[optind], commands[i].name) == 0)
			command = &commands[i];
	if (!command) {
		fprintf(stderr, "gatherfs-inspect: unknown command '%s' (try --help)\n", argv[optind]);
		return 2;
	}
	cmd = argv[optind++];
	npos = argc - optind;
	rc = check_options(command, o.given);
	if (rc)
		return rc;
	if (strcmp(cmd, "diff") == 0) {
		rc = cmd_diff(&o, side, argv + optind, npos);
		return rc < 0 ? 2 : finish_stdout(rc);
	}
	rc = layout_conflict(&o);
	if (rc)
		return rc;
	if (strcmp(cmd, "cat") == 0 || strcmp(cmd, "export") == 0) {
		if (npos != (o.layout ? 1 : 2)) {
			fprintf(stderr, "gatherfs-inspect: usage: %s (DIR | --layout FILE) %s\n", cmd,
				strcmp(cmd, "cat") == 0 ? "NAME" : "OUT");
			return 2;
		}
		dir = o.layout ? NULL : argv[optind];
		name = argv[argc - 1];
	} else {
		if (npos != (o.layout ? 0 : 1)) {
			fprintf(stderr, "gatherfs-inspect: usage: %s (DIR | --layout FILE)\n", cmd);
			return 2;
		}
		dir = o.layout ? NULL : argv[optind];
	}
	if (load(&o, dir, &l, &o.untied))
		return fail();
	say_source(&o, dir, l, strcmp(cmd, "ls") == 0 || strcmp(cmd, "verify") == 0);
	if (strcmp(cmd, "ls") == 0)
		rc = cmd_ls(&o, l);
	else if (strcmp(cmd, "cat") == 0)
		rc = cmd_cat(&o, l, name);
	else if (strcmp(cmd, "layout") == 0)
		rc = cmd_layout(l);
	else if (strcmp(cmd, "export") == 0)
		rc = cmd_export(&o, l, name);
	else if (strcmp(cmd, "stats") == 0 || strcmp(cmd, "check") == 0)
		rc = cmd_analyze(&o, l, dir, cmd);
	else
		rc = cmd_verify(l);
	gfs_layout_free(l);
	return finish_stdout(rc);
}
