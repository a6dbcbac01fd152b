#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a verl FSDP2 checkpoint (per-rank state dicts) of any size, payloads as holes.

Usage:
  gen_verl.py OUT [--ranks N] [--layers L] [--hidden H] [--ffn F]
                  [--heads A] [--kv-heads K] [--vocab V] [--dtype bf16|fp32]

OUT receives what verl's FSDPCheckpointManager.save_checkpoint writes for a
Hugging Face LlamaForCausalLM (untied) under FSDP2 (fully_shard on a 1-D
mesh "fsdp" of N ranks) at step 1, the files gatherfs reads:
OUT/latest_checkpointed_iteration.txt ("1"), OUT/global_step_1/actor/
fsdp_config.json, huggingface/config.json and model_world_size_N_rank_R.pt,
rank R's torch.save(model.state_dict()) as torch 2.x writes it (prefix
model_world_size_N_rank_R, .format_version, .storage_alignment, byteorder,
.data/serialization_id records): an OrderedDict (with _metadata) of
DTensors, each a _rebuild_from_type_v2 of _rebuild_wrapper_subclass with
the local shard and a DTensorSpec (the rank's DeviceMesh, shared by every
key: _MeshLayout axes, _rank_map, _rank, _coordinate_on_dim; placements
(Shard(0),); TensorMeta; shard_order), as in the torch 2.14 files of
tests/data/fsdp_rank.  FSDP2's shards: ceil(d0 / N) rows a rank, the last
shorter or empty, every local storage padded to ceil(d0 / N) rows.  The
torch.distributed classes are stand-ins registered under their module names
(torch 1.13 has none of them); the pickle is written by the stdlib pickler.
Every payload is a hole (bench/sparse_zip.py): 1,024 ranks of the default
shape take about 30 s and 1.1 GB of disk (the pickles and zip headers) for
13.8 GB apparent.  Default: a Llama-2-7B shape (32 layers,
hidden 4096, ffn 11008, 32 heads, 32 KV heads, vocabulary 32000), bf16, 256
ranks.  No optimizer or extra-state files.  Writes OUT/.gen-done last.
"""
import argparse
import collections
import copyreg
import io
import json
import os
import pickle
import random
import sys

import torch
import torch._tensor
import torch._utils

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_dcp  # noqa: E402  (_Dataclass, _Layout)
import gen_deepspeed  # noqa: E402  (_register)
import sparse_zip  # noqa: E402

SPEC = "torch.distributed.tensor._dtensor_spec"
LAYOUT = "torch.distributed._mesh_layout"
_CPU = "cpu"  # one string: the storages' location and the mesh's device type
_STRIDED = gen_dcp._Layout()  # one object, as torch.strided is: pickled once, then memo gets


def _dataclass(name, module, fields):
    return gen_deepspeed._register(type(name, (gen_dcp._Dataclass,), {"FIELDS": fields}), module)


DeviceMesh = _dataclass("DeviceMesh", "torch.distributed.device_mesh",
                        ("_device_type", "_layout", "_rank_map", "_mesh_dim_names", "_root_mesh",
                         "_flatten_rank_map", "_thread_id", "_flatten_mapping",
                         "_dim_group_names", "_rank", "_coordinate_on_dim", "_hash"))
MeshLayout = _dataclass("_MeshLayout", LAYOUT, ("axes",))
FlatLayout = _dataclass("_FlatLayout", LAYOUT, ("shape", "stride"))
DTensorSpec = _dataclass("DTensorSpec", SPEC,
                         ("mesh", "placements", "tensor_meta", "shard_order",
                          "use_strided_shard_as_shard_order", "_hash"))


class Shard:
    """torch.distributed.tensor.placement_types.Shard: NEWOBJ, BUILD {"dim": d}."""

    def __init__(self, dim):
        self.dim = dim

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), {"".join("dim"): self.dim})  # a fresh key, as torch's


gen_deepspeed._register(Shard, "torch.distributed.tensor.placement_types")


class _Tuple:
    """A NamedTuple: NEWOBJ of its fields, no state."""

    def __init__(self, *values):
        self.values = values

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),) + self.values)


TensorMeta = gen_deepspeed._register(type("TensorMeta", (_Tuple,), {}), SPEC)
ShardOrderEntry = gen_deepspeed._register(type("ShardOrderEntry", (_Tuple,), {}), SPEC)


class DTensor:
    """torch.distributed.tensor.DTensor as a torch 2.x wrapper subclass pickles."""

    def __init__(self, dtype, shape, local, spec):
        self.args = (dtype, shape, _stride(shape), local, spec)

    def __reduce_ex__(self, protocol):
        dtype, shape, stride, local, spec = self.args
        return (torch._tensor._rebuild_from_type_v2,
                (torch._utils._rebuild_wrapper_subclass, DTensor,
                 (DTensor, dtype, shape, stride, 0, _STRIDED, torch.device("cpu"), False),
                 (None, {"_local_tensor": local, "_spec": spec})))


gen_deepspeed._register(DTensor, "torch.distributed.tensor")


class Storage:
    """A storage of numel elements of storage class cls; data: its bytes (None: a hole)."""

    def __init__(self, cls, numel, itemsize, data=None):
        self.cls, self.numel, self.nbytes, self.data = cls, numel, numel * itemsize, data


class Local:
    """A tensor of the given shape at the start of storage (torch._utils._rebuild_tensor_v2)."""

    def __init__(self, storage, shape):
        self.storage, self.shape = storage, shape

    def __reduce_ex__(self, protocol):
        return (torch._utils._rebuild_tensor_v2,
                (self.storage, 0, self.shape, _stride(self.shape), False, collections.OrderedDict()))


def _stride(shape):
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= d
    return tuple(reversed(out))


class _Pickler(pickle.Pickler):
    """Pickles Storage objects as torch.save's persistent ids, keys in order of appearance."""

    def __init__(self, f):
        super().__init__(f, protocol=2)
        self.storages = []
        self.keys = {}

    def persistent_id(self, obj):
        if not isinstance(obj, Storage):
            return None
        key = self.keys.get(id(obj))
        if key is None:
            key = self.keys[id(obj)] = str(len(self.storages))
            self.storages.append(obj)
        return ("storage", obj.cls, key, _CPU, obj.numel)




def llama_keys(a):
    """(key, global shape) of LlamaForCausalLM's state dict, in its order; and _metadata's modules."""
    H, D = a.hidden, a.hidden // a.heads
    keys = [("model.embed_tokens.weight", (a.vocab, H))]
    mods = ["", "model", "model.embed_tokens", "model.layers"]
    for i in range(a.layers):
        p = "model.layers.%d." % i
        keys += [(p + "self_attn.q_proj.weight", (a.heads * D, H)),
                 (p + "self_attn.k_proj.weight", (a.kv_heads * D, H)),
                 (p + "self_attn.v_proj.weight", (a.kv_heads * D, H)),
                 (p + "self_attn.o_proj.weight", (H, a.heads * D)),
                 (p + "mlp.gate_proj.weight", (a.ffn, H)),
                 (p + "mlp.up_proj.weight", (a.ffn, H)),
                 (p + "mlp.down_proj.weight", (H, a.ffn)),
                 (p + "input_layernorm.weight", (H,)),
                 (p + "post_attention_layernorm.weight", (H,))]
        mods += [p[:-1]] + [p + m for m in ("self_attn", "self_attn.q_proj", "self_attn.k_proj",
                                 "self_attn.v_proj", "self_attn.o_proj", "mlp", "mlp.gate_proj",
                                 "mlp.up_proj", "mlp.down_proj", "mlp.act_fn", "input_layernorm",
                                 "post_attention_layernorm")]
    keys += [("model.norm.weight", (H,)), ("lm_head.weight", (a.vocab, H))]
    mods += ["model.norm", "model.rotary_emb", "lm_head"]
    return keys, mods


def rank_pickle(a, r, keys, mods, rng):
    """data.pkl of rank r and its storages (in key order)."""
    n = a.ranks
    dtype, scls, isz = a.torch_dtype, a.storage_cls, a.itemsize
    rank_map = Local(Storage(torch.IntStorage, n, 4,
                             b"".join(i.to_bytes(4, "little") for i in range(n))), (n,))
    mesh = DeviceMesh(_CPU, MeshLayout((FlatLayout((n,), (1,)),)), rank_map, ("fsdp",), None,
                      tuple(range(n)), None, {}, ["0"], r, (r,), rng.getrandbits(63))
    sd = collections.OrderedDict()
    specs = {}
    for name, shape in keys:
        chunk = -(-shape[0] // n)
        rows = max(0, min(chunk, shape[0] - r * chunk))
        cols = 1
        for d in shape[1:]:
            cols *= d
        local = Local(Storage(scls, chunk * cols, isz), (rows,) + shape[1:])
        spec = specs.get(shape)
        if spec is None:  # one spec a global shape, shared by its keys (as torch 2.14 saves)
            spec = specs[shape] = DTensorSpec(
                mesh, (Shard(0),), TensorMeta(torch.Size(shape), _stride(shape), dtype),
                (ShardOrderEntry(0, tuple([0])),), False, rng.getrandbits(64) - (1 << 63))
        sd[name] = DTensor(dtype, shape, local, spec)
    sd._metadata = collections.OrderedDict((m, {"version": 1}) for m in mods)
    buf = io.BytesIO()
    p = _Pickler(buf)
    p.dump(sd)
    return buf.getvalue(), p.storages


def write_rank(path, data_pkl, storages, rng):
    sid = "".join(str(rng.randrange(10)) for _ in range(40)).encode()
    with open(path, "wb") as f:
        w = sparse_zip.SparseZipWriter(f, os.path.splitext(os.path.basename(path))[0])
        t = sparse_zip._Torch2Records(w, sid)
        t.write_record("data.pkl", data_pkl, len(data_pkl))
        for i, s in enumerate(storages):
            w.write_record("data/%d" % i, s.data if s.data is not None else sparse_zip.HOLE,
                           s.nbytes)
        w.write_record("version", b"3\n", 2)
        w.write_record(".data/serialization_id", sid, len(sid))
        w.write_end_of_file()
        f.truncate(f.tell())


def hf_config(a):
    return {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "eos_token_id": 2, "head_dim": a.hidden // a.heads, "hidden_act": "silu",
        "hidden_size": a.hidden, "initializer_range": 0.02, "intermediate_size": a.ffn,
        "max_position_embeddings": 4096, "mlp_bias": False, "model_type": "llama",
        "num_attention_heads": a.heads, "num_hidden_layers": a.layers,
        "num_key_value_heads": a.kv_heads, "pad_token_id": None, "pretraining_tp": 1,
        "rms_norm_eps": 1e-05,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "tie_word_embeddings": False, "transformers_version": "5.12.1", "use_cache": True,
        "vocab_size": a.vocab,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ranks", type=int, default=256)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--ffn", type=int, default=11008)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    a = ap.parse_args()
    a.torch_dtype, a.storage_cls, a.itemsize = {
        "bf16": (torch.bfloat16, torch.BFloat16Storage, 2),
        "fp32": (torch.float32, torch.FloatStorage, 4)}[a.dtype]
    rng = random.Random(45)
    actor = os.path.join(a.out, "global_step_1", "actor")
    os.makedirs(os.path.join(actor, "huggingface"), exist_ok=True)
    with open(os.path.join(a.out, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("1")
    with open(os.path.join(actor, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": a.ranks}, f, indent=4)
    with open(os.path.join(actor, "huggingface", "config.json"), "w") as f:
        json.dump(hf_config(a), f, indent=2)
        f.write("\n")
    keys, mods = llama_keys(a)
    for r in range(a.ranks):
        data_pkl, storages = rank_pickle(a, r, keys, mods, rng)
        write_rank(os.path.join(actor, "model_world_size_%d_rank_%d.pt" % (a.ranks, r)),
                   data_pkl, storages, rng)
    open(os.path.join(a.out, ".gen-done"), "w").close()


if __name__ == "__main__":
    main()
