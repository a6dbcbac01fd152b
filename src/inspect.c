/*
 * gatherfs-inspect — look at a sharded checkpoint without FUSE: list its
 * tensors, print one tensor's bytes, print or load its layout index, verify
 * that every byte can be served.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gatherfs/export.h"
#include "gatherfs/import.h"
#include "gatherfs/json.h"
#include "gatherfs/lora.h"
#include "gatherfs/server.h"
#include "gatherfs/shards.h"

#define IO_CHUNK ((size_t)1 << 20)

typedef struct inspect_opts {
	const char *tag;
	const char *input_format;
	const char *prefix;
	const char *layout;
	gfs_dtype dtype;
	bool json;
	gfs_format format;
	uint64_t shard_size;
	gfs_lora_cli lora;
} inspect_opts;

static void usage(FILE *out)
{
	fputs("Usage: gatherfs-inspect COMMAND [OPTIONS] [DIR] [NAME]\n"
	      "\n"
	      "Look at a sharded checkpoint (a DeepSpeed ZeRO 1/2/3 save or tag directory,\n"
	      "a PyTorch DCP directory, or a layout JSON file) without mounting it.\n"
	      "\n"
	      "Commands:\n"
	      "  ls DIR             list tensors in output order: name, dtype, shape, bytes,\n"
	      "                     alias target\n"
	      "  cat DIR NAME       write tensor NAME's raw little-endian contiguous bytes\n"
	      "                     to standard output\n"
	      "  layout DIR         print the layout index as JSON\n"
	      "  verify DIR         read every piece once, check every range, report\n"
	      "  export DIR OUT     write a view to regular files: OUT.bin (torch zip) or\n"
	      "                     OUT.safetensors; with --shard-size, OUT is a directory\n"
	      "                     that receives Hugging Face shards and their index\n"
	      "\n"
	      "Options:\n"
	      "  --tag TAG          DeepSpeed tag to use instead of the one in `latest`\n"
	      "  --input-format F   read DIR as dcp, deepspeed or layout (default: auto;\n"
	      "                     a directory with `.metadata` is dcp)\n"
	      "  --prefix P         (dcp) keep the keys starting with P, named without it\n"
	      "  --layout FILE      read the layout from FILE (as written by `layout`)\n"
	      "                     instead of importing DIR\n"
	      "  --dtype DTYPE      present floating-point tensors as bf16, fp16 or fp32\n"
	      "                     (round to nearest even; integers never change)\n"
	      "  --json             (ls) print a JSON array instead of a table\n"
	      "  --format FMT       (export) bin or safetensors, instead of OUT's extension\n"
	      "                     (default with --shard-size: safetensors)\n"
	      "  --shard-size SIZE  (export) shards of at most SIZE, e.g. 5G, 500MB, 2GiB\n"
	      "  --lora DIR         merge the PEFT LoRA adapter in DIR onto the model\n"
	      "  --merge lora       merge the adapter of a PEFT-wrapped checkpoint\n"
	      "  --base DIR         (with --merge) the base model of an adapter-only checkpoint\n"
	      "  --lora-tied peft   a targeted tied embedding changes its head too (PEFT)\n"
	      "  -h, --help         show this help\n"
	      "  -V, --version      show the version\n"
	      "\n"
	      "Exit status: 0 on success, 1 if the checkpoint is unusable, 2 on bad usage.\n"
	      "See gatherfs-inspect(1).\n",
	      out);
}

static int fail(void)
{
	fprintf(stderr, "gatherfs-inspect: %s\n", gfs_errmsg());
	return 1;
}

static gfs_err load(const inspect_opts *o, const char *dir, gfs_layout **l)
{
	const gfs_import_opts io = {
		.tag = o->tag, .format = o->input_format, .prefix = o->prefix,
	};

	bool untied;
	gfs_err err = o->layout ? gfs_layout_load_file(o->layout, l) : gfs_import(dir, &io, l);

	if (!err)
		err = gfs_lora_apply(&o->lora, l, &untied);
	return err;
}

/*
 * kind_of(): what ls shows of entry t: "merged:OP" for a computed tensor,
 * "lora" for a LoRA tensor of an unmerged PEFT model, else "-".
 */
static const char *kind_of(const gfs_tensor *t, char *buf, size_t n)
{
	if (t->comp) {
		snprintf(buf, n, "merged:%s", gfs_op_name(t->comp->op));
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

static int cmd_ls(const inspect_opts *o, const gfs_layout *l)
{
	if (o->json) {
		cJSON *arr = cJSON_CreateArray();
		char *text;
		bool ok = arr != NULL;

		for (size_t i = 0; ok && i < l->ntensors; i++) {
			const gfs_tensor *t = &l->tensors[i];
			const gfs_dtype dt = gfs_dtype_out(t->dtype, o->dtype);
			cJSON *e = cJSON_CreateObject();
			cJSON *shape = cJSON_CreateArray();

			ok = e && shape && cJSON_AddItemToArray(arr, e);
			if (!ok) {
				cJSON_Delete(e);
				cJSON_Delete(shape);
				break;
			}
			ok = cJSON_AddStringToObject(e, "name", t->name) &&
			     cJSON_AddStringToObject(e, "dtype", gfs_dtype_name(dt)) &&
			     cJSON_AddItemToObject(e, "shape", shape);
			if (!ok) {
				cJSON_Delete(shape);
				break;
			}
			for (uint32_t d = 0; ok && d < t->ndim; d++) {
				cJSON *v = gfs_json_u64_item(t->shape[d]);

				ok = v && cJSON_AddItemToArray(shape, v);
				if (!ok)
					cJSON_Delete(v);
			}
			if (ok && has_kinds(l)) {
				char kb[32];

				ok = cJSON_AddStringToObject(e, "kind", kind_of(t, kb, sizeof(kb))) != NULL;
			}
			ok = ok && gfs_json_add_u64(e, "nbytes", t->numel * gfs_dtype_size(dt)) &&
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
		if (!text) {
			fputs("gatherfs-inspect: out of memory\n", stderr);
			return 1;
		}
		puts(text);
		free(text);
		return 0;
	}
	printf("%-48s %-9s %-20s %14s  %s%s\n", "NAME", "DTYPE", "SHAPE", "BYTES", "ALIAS_OF",
	       has_kinds(l) ? "  KIND" : "");
	for (size_t i = 0; i < l->ntensors; i++) {
		const gfs_tensor *t = &l->tensors[i];
		const gfs_dtype dt = gfs_dtype_out(t->dtype, o->dtype);
		char shape[512], kb[32];

		format_shape(t, shape, sizeof(shape));
		printf("%-48s %-9s %-20s %14" PRIu64 "  %s%s%s\n", t->name, gfs_dtype_name(dt), shape,
		       t->numel * gfs_dtype_size(dt),
		       t->alias_of >= 0 ? l->tensors[t->alias_of].name : "-",
		       has_kinds(l) ? "  " : "", has_kinds(l) ? kind_of(t, kb, sizeof(kb)) : "");
	}
	/* non-tensor entries (DCP bytes): listed, never served as tensors */
	for (size_t i = 0; i < l->nobjects; i++)
		printf("%-48s %-9s %-20s %14" PRIu64 "  %s\n", l->objects[i].name, "object", "-",
		       l->objects[i].len, "-");
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

static int cmd_cat(const inspect_opts *o, const gfs_layout *l, const char *name)
{
	const int64_t i = gfs_layout_find(l, name);
	gfs_srcset *s = NULL;
	uint8_t *buf = NULL;
	uint64_t size, off = 0;
	gfs_err err;

	if (i < 0) {
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
	puts(text);
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
	gfs_export_opts eo = {
		.format = o->format, .want = o->dtype, .shard_size = o->shard_size,
		.progress = isatty(STDERR_FILENO),
	};
	gfs_srcset *s = NULL;
	gfs_err err;

	if (eo.format == GFS_FORMAT_NONE)
		eo.format = o->shard_size ? GFS_FORMAT_SAFETENSORS : gfs_format_from_name(out);
	if (eo.format == GFS_FORMAT_NONE) {
		fprintf(stderr, "gatherfs-inspect: %s: name it .bin or .safetensors, or give --format\n",
			out);
		return 2;
	}
	err = gfs_srcset_open(l, &s);
	if (!err)
		err = gfs_export(l, s, out, &eo);
	gfs_srcset_close(s);
	return err ? fail() : 0;
}

static int cmd_verify(const gfs_layout *l)
{
	gfs_srcset *s = NULL;
	uint8_t *buf = malloc(IO_CHUNK);
	uint64_t bytes = 0, pieces = 0, aliases = 0, nonfinite = 0;
	const double t0 = now_s();
	gfs_err err;
	double dt;

	if (!buf) {
		fputs("gatherfs-inspect: out of memory\n", stderr);
		return 1;
	}
	err = gfs_srcset_open(l, &s);
	for (size_t i = 0; !err && i < l->ntensors; i++) {
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
	free(buf);
	gfs_srcset_close(s);
	if (err)
		return fail();
	dt = now_s() - t0;
	printf("OK: %zu entries (%" PRIu64 " aliases), %" PRIu64 " pieces, %" PRIu64
	       " bytes read from %zu files in %.3f s (%.1f MB/s)\n",
	       l->ntensors, aliases, pieces, bytes, l->nsources, dt,
	       dt > 0 ? (double)bytes / dt / 1e6 : 0.0);
	if (nonfinite)
		printf("note: %" PRIu64 " NaN or infinite floating-point values\n", nonfinite);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "tag", required_argument, NULL, 't' },
		{ "input-format", required_argument, NULL, 'i' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "layout", required_argument, NULL, 'l' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "json", no_argument, NULL, 'j' },
		{ "format", required_argument, NULL, 'f' },
		{ "shard-size", required_argument, NULL, 's' },
		{ "lora", required_argument, NULL, 'L' },
		{ "merge", required_argument, NULL, 'M' },
		{ "base", required_argument, NULL, 'B' },
		{ "lora-tied", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	inspect_opts o = { .dtype = GFS_DT_INVALID };
	const char *cmd, *dir = NULL, *name = NULL;
	gfs_layout *l = NULL;
	int c, rc, npos;

	while ((c = getopt_long(argc, argv, "hV", longopts, NULL)) != -1) {
		switch (c) {
		case 't':
			o.tag = optarg;
			break;
		case 'i':
			o.input_format = optarg;
			break;
		case 'p':
			o.prefix = optarg;
			break;
		case 'l':
			o.layout = optarg;
			break;
		case 'd':
			o.dtype = gfs_dtype_parse(optarg);
			if (!gfs_dtype_is_float(o.dtype) || o.dtype == GFS_DT_F64) {
				fprintf(stderr, "gatherfs-inspect: --dtype must be bf16, fp16 or fp32, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 'j':
			o.json = true;
			break;
		case 'f':
			o.format = gfs_format_from_name(optarg);
			if (o.format == GFS_FORMAT_NONE) {
				fprintf(stderr, "gatherfs-inspect: --format must be bin or safetensors, not '%s'\n",
					optarg);
				return 2;
			}
			break;
		case 's':
			if (gfs_parse_size(optarg, &o.shard_size) != GFS_OK) {
				fprintf(stderr, "gatherfs-inspect: --shard-size: %s\n", gfs_errmsg());
				return 2;
			}
			break;
		case 'L':
			o.lora.lora = optarg;
			break;
		case 'M':
			o.lora.merge = optarg;
			break;
		case 'B':
			o.lora.base = optarg;
			break;
		case 'T':
			o.lora.tied = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			puts(PACKAGE_STRING);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	cmd = argv[optind++];
	npos = argc - optind;
	if (strcmp(cmd, "cat") == 0 || strcmp(cmd, "export") == 0) {
		if (npos != (o.layout ? 1 : 2)) {
			fprintf(stderr, "gatherfs-inspect: usage: %s (DIR | --layout FILE) %s\n", cmd,
				strcmp(cmd, "cat") == 0 ? "NAME" : "OUT");
			return 2;
		}
		dir = o.layout ? NULL : argv[optind];
		name = argv[argc - 1];
	} else if (strcmp(cmd, "ls") == 0 || strcmp(cmd, "layout") == 0 ||
		   strcmp(cmd, "verify") == 0) {
		if (npos != (o.layout ? 0 : 1)) {
			fprintf(stderr, "gatherfs-inspect: usage: %s (DIR | --layout FILE)\n", cmd);
			return 2;
		}
		dir = o.layout ? NULL : argv[optind];
	} else {
		fprintf(stderr, "gatherfs-inspect: unknown command '%s' (try --help)\n", cmd);
		return 2;
	}
	if (load(&o, dir, &l))
		return fail();
	if (strcmp(cmd, "ls") == 0)
		rc = cmd_ls(&o, l);
	else if (strcmp(cmd, "cat") == 0)
		rc = cmd_cat(&o, l, name);
	else if (strcmp(cmd, "layout") == 0)
		rc = cmd_layout(l);
	else if (strcmp(cmd, "export") == 0)
		rc = cmd_export(&o, l, name);
	else
		rc = cmd_verify(l);
	gfs_layout_free(l);
	return rc;
}
