#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Write a PyTorch Distributed Checkpoint (FSDP2, Shard(0)) of any size, payloads as holes.

Usage:
  gen_dcp.py OUT [--ws N] [--dtype fp32|bf16] [--layers L] [--hidden H]
                 [--ffn F] [--heads A] [--kv-heads K] [--vocab V]
                 [--experts E] [--tied] [--like CONFIG_JSON]

OUT receives what torch.distributed.checkpoint.save (torch 2.x,
FileSystemWriter, one file per rank) writes for a Hugging Face Llama-shaped
state dict sharded on dim 0 over N ranks: `.metadata` (a pickled Metadata:
state_dict_metadata with each tensor's properties, size and chunks,
planner_data, storage_data mapping each chunk's MetadataIndex to its
_StorageInfo, storage_meta, version) and `__R_0.distcp`, each chunk a
complete torch.save archive (torch 2.x records) whose tensor payload is a
hole (bench/sparse_zip.py): seconds and a little disk for any size.  The
torch.distributed.checkpoint classes are stand-ins registered under their
module names (torch itself is only used to pickle the inner archives).
Chunks follow torch.chunk on dim 0: ceil(d0 / N) rows a rank, trailing
ranks empty when d0 < N (they write no chunk).  --experts E replaces each
MLP by a router and E experts (gate/up/down).  --like CONFIG_JSON takes the
model shape from a transformers config.json.  Writes OUT/.gen-done last.
"""
import argparse
import copyreg
import json
import os
import pathlib
import pickle
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_deepspeed  # noqa: E402  (its stand-in machinery)
import sparse_zip  # noqa: E402

META = "torch.distributed.checkpoint.metadata"
FS = "torch.distributed.checkpoint.filesystem"


class _Dataclass:
    """Pickles as NEWOBJ + BUILD of its fields in declaration order, as a dataclass does."""
    FIELDS = ()

    def __init__(self, *values):
        for k, v in zip(self.FIELDS, values):
            setattr(self, k, v)

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), {k: getattr(self, k) for k in self.FIELDS})


def _dataclass(name, module, fields):
    cls = type(name, (_Dataclass,), {"FIELDS": fields})
    return gen_deepspeed._register(cls, module)


Metadata = _dataclass("Metadata", META,
                      ("state_dict_metadata", "planner_data", "storage_data", "storage_meta",
                       "version"))
TensorStorageMetadata = _dataclass("TensorStorageMetadata", META, ("properties", "size", "chunks"))
ChunkStorageMetadata = _dataclass("ChunkStorageMetadata", META, ("offsets", "sizes"))
MetadataIndex = _dataclass("MetadataIndex", META, ("fqn", "index", "offset"))
StorageMeta = _dataclass("StorageMeta", META, ("checkpoint_id", "save_id", "load_id", "modules"))
StorageInfo = _dataclass("_StorageInfo", FS, ("relative_path", "offset", "length"))


class _MEM_FORMAT_ENCODING:  # noqa: N801 (torch's name)
    def __init__(self, value):
        self.value = value

    def __reduce__(self):
        return (type(self), (self.value,))


gen_deepspeed._register(_MEM_FORMAT_ENCODING, META)


class _Layout:
    def __reduce__(self):
        return (torch.serialization._get_layout, ("torch.strided",))


class _Path:
    """pathlib.PurePosixPath as Python 3.12+ pickles it (one string argument)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (pathlib.PurePosixPath, (self.path,))


class TensorProperties:
    """Pickled with a tuple state, as torch's __getstate__ gives it."""

    def __init__(self, dtype):
        self.state = (dtype, _Layout(), False, _MEM_FORMAT_ENCODING(0), False)

    def __reduce_ex__(self, protocol):
        return (copyreg.__newobj__, (type(self),), self.state)


gen_deepspeed._register(TensorProperties, META)


def hf_llama(a):
    """(name, shape) of a Hugging Face LlamaForCausalLM state dict, in its order."""
    hd = a.hidden // a.heads
    kv = a.kv_heads * hd
    out = [("model.embed_tokens.weight", (a.vocab, a.hidden))]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        out += [(p + "self_attn.q_proj.weight", (a.hidden, a.hidden)),
                (p + "self_attn.k_proj.weight", (kv, a.hidden)),
                (p + "self_attn.v_proj.weight", (kv, a.hidden)),
                (p + "self_attn.o_proj.weight", (a.hidden, a.hidden))]
        if a.experts:
            out.append((p + "mlp.gate.weight", (a.experts, a.hidden)))
            for e in range(a.experts):
                q = f"{p}mlp.experts.{e}."
                out += [(q + "gate_proj.weight", (a.ffn, a.hidden)),
                        (q + "up_proj.weight", (a.ffn, a.hidden)),
                        (q + "down_proj.weight", (a.hidden, a.ffn))]
        else:
            out += [(p + "mlp.gate_proj.weight", (a.ffn, a.hidden)),
                    (p + "mlp.up_proj.weight", (a.ffn, a.hidden)),
                    (p + "mlp.down_proj.weight", (a.hidden, a.ffn))]
        out += [(p + "input_layernorm.weight", (a.hidden,)),
                (p + "post_attention_layernorm.weight", (a.hidden,))]
    out.append(("model.norm.weight", (a.hidden,)))
    out.append(("lm_head.weight", (a.vocab, a.hidden)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--ws", type=int, default=4)
    ap.add_argument("--dtype", default="fp32", choices=("fp32", "bf16"))
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--ffn", type=int, default=96)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=512)
    ap.add_argument("--experts", type=int, default=0)
    ap.add_argument("--like", help="a transformers config.json giving the shape")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.like:
        with open(a.like) as f:
            c = json.load(f)
        a.layers, a.hidden, a.ffn = c["num_hidden_layers"], c["hidden_size"], c["intermediate_size"]
        a.heads, a.kv_heads, a.vocab = (c["num_attention_heads"], c["num_key_value_heads"],
                                        c["vocab_size"])
    rnd = random.Random(a.seed)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    params = hf_llama(a)
    os.makedirs(a.out, exist_ok=True)

    sdm, planner, storage = {}, {}, {}
    chunks = {n: [] for n, _ in params}
    for r in range(a.ws):
        rel = f"__{r}_0.distcp"
        with open(os.path.join(a.out, rel), "wb") as f:
            for n, shape in params:
                rows = -(-shape[0] // a.ws)
                lo, hi = min(r * rows, shape[0]), min((r + 1) * rows, shape[0])
                if lo >= hi:
                    continue
                off = (lo,) + (0,) * (len(shape) - 1)
                size = (hi - lo,) + tuple(shape[1:])
                t = sparse_zip.empty_hole(torch.Size(size).numel(), dtype).view(size)
                sid = str(rnd.getrandbits(128)).zfill(40).encode()
                start = f.tell()
                length = sparse_zip.sparse_save_torch2(t, f, sid)
                sparse_zip.forget_holes()
                idx = MetadataIndex(n, len(chunks[n]), torch.Size(off))
                chunks[n].append(ChunkStorageMetadata(torch.Size(off), torch.Size(size)))
                storage[idx] = StorageInfo(rel, start, length)
            f.truncate(f.tell())
    for n, shape in params:
        sdm[n] = TensorStorageMetadata(TensorProperties(dtype), torch.Size(shape), chunks[n])
        planner[n] = (n,)
    meta = Metadata(sdm, planner, storage,
                    StorageMeta(_Path(os.path.abspath(a.out)),
                                "%08x-%04x-%04x-%04x-%012x" % tuple(rnd.getrandbits(b) for b in
                                                                   (32, 16, 16, 16, 48)),
                                None, []),
                    "1.0.0")
    with open(os.path.join(a.out, ".metadata"), "wb") as f:
        pickle.dump(meta, f, protocol=5)
    open(os.path.join(a.out, ".gen-done"), "w").close()


if __name__ == "__main__":
    main()
