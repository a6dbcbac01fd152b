#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Save time and peak memory per rank: save_zero3 against GatheredParameters + torch.save.

Runs under real DeepSpeed (a source tree in $DS_SRC, v0.14.5; CPU, gloo) with
W ranks (one process each) and an optimizer-free ZeRO-3 engine, as LOMO
builds it.  The model is a GPT-like stack (tied embedding/head, LayerNorms,
MLP blocks) of about 120 M parameters by default.  Each round runs, on the
same engine, in turn:

  gfs      python/gatherfs_save.py save_zero3(module, OUT/gfs, tag=round)
           on every rank (each rank writes its own partitions);
  gather   the correct gathered save (LOMO's fixed save_model):
           partition_all_parameters(), then GatheredParameters over every
           param (read-only), rank 0 torch.save(module.state_dict()) into
           OUT/gather.bin, then the persistent params are re-gathered.

For each method and rank: wall time from a barrier to the rank's return
(and to the last rank's, the save's time), and the peak RSS during the
method (VmHWM, reset through /proc/self/clear_refs before each method),
absolute and above the RSS before it.  The model is built under
deepspeed.zero.Init, as transformers does under ZeRO-3, so no rank ever
holds the whole model outside the gathered save.  Prints a Markdown table: best of --rounds rounds per
figure; ratio = gather / gfs.  With --verify GATHERFS, mounts OUT/gfs and
checks that the mount's pytorch_model.bin holds the same tensors as
OUT/gather.bin (torch.load both).

  DS_SRC=... bench/zero3_save.py [--world-size 4] [--layers 10] [--hidden 1024]
      [--vocab 32000] [--dtype fp32|bf16] [--rounds 3] [--out DIR] [--verify ./gatherfs]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
SAVER = os.path.join(HERE, "..", "python", "gatherfs_save.py")


def build_model(args):
    import torch
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(args.hidden)
            self.fc1 = nn.Linear(args.hidden, 4 * args.hidden)
            self.fc2 = nn.Linear(4 * args.hidden, args.hidden)

        def forward(self, h):
            return h + self.fc2(torch.relu(self.fc1(self.ln(h))))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(args.vocab, args.hidden)
            self.layers = nn.ModuleList([Block() for _ in range(args.layers)])
            self.norm = nn.LayerNorm(args.hidden)
            self.head = nn.Linear(args.hidden, args.vocab, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("position_ids", torch.arange(2048))

    torch.manual_seed(0)
    return LM()


def shims():
    """torch 1.13 gloo lacks _allgather_base (all_gather_into_tensor), and the
    DeepSpeed source tree imports hjson, which Debian lacks: stand-ins."""
    import torch
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d
    hj = types.ModuleType("hjson")
    hj.load, hj.loads, hj.dump, hj.dumps = json.load, json.loads, json.dump, json.dumps
    sys.modules.setdefault("hjson", hj)

    class Done:
        def wait(self, *a, **k):
            return True

        def is_completed(self):
            return True

    gather_list = dist.all_gather

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        out, inp = output_tensor, input_tensor
        ws = dist.get_world_size(group)
        inp = inp.contiguous()
        bf16 = inp.dtype == torch.bfloat16  # gloo moves bf16 bit-exactly as fp16
        view = (lambda t: t.view(torch.float16)) if bf16 else (lambda t: t)
        parts = [torch.empty_like(inp) for _ in range(ws)]
        gather_list([view(p) for p in parts], view(inp), group=group)
        out.view(-1).copy_(torch.cat([p.view(-1) for p in parts]))
        return Done() if async_op else None

    for mod in (dist, c10d):
        mod.all_gather_into_tensor = mod._all_gather_base = all_gather_into_tensor


def rss_reset():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def rss_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(field)


def measure(fn, dist):
    """(seconds to this rank's return, seconds to every rank's, peak RSS KiB above the
    start, peak RSS KiB)."""
    dist.barrier()
    rss_reset()
    base = rss_kib("VmRSS")
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    peak = rss_kib("VmHWM")
    dist.barrier()
    return t1 - t0, time.perf_counter() - t0, peak - base, peak


def worker(args):
    import importlib.util

    import torch
    src = os.environ["DS_SRC"]
    shims()
    cwd = os.getcwd()
    os.chdir(src)  # deepspeed reads version.txt from the cwd when not installed
    import deepspeed
    os.chdir(cwd)
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    import torch.distributed as dist
    rank = dist.get_rank()
    spec = importlib.util.spec_from_file_location("gatherfs_save", SAVER)
    gsave = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gsave)

    cfg = {
        "bf16": {"enabled": args.dtype == "bf16"},
        "zero_optimization": {"stage": 3},  # DeepSpeed's defaults (persistence threshold 1e5)
        "train_micro_batch_size_per_gpu": 1,
        "steps_per_print": 1000000,
    }
    with deepspeed.zero.Init(config_dict_or_path=cfg):  # as transformers' from_pretrained does under ZeRO-3
        model = build_model(args)
    engine, _, _, _ = deepspeed.initialize(config=cfg, model=model)
    module = engine.module
    params = list(module.parameters())
    nparams = sum(p.ds_numel for p in params)
    del model

    def gfs(r):
        gsave.save_zero3(module, os.path.join(args.out, "gfs"), tag=f"round{r}")

    def gather(r):
        engine.optimizer.partition_all_parameters()
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None):
            if rank == 0:
                torch.save(module.state_dict(), os.path.join(args.out, "gather.bin"))
        persistent = engine.optimizer.persistent_parameters
        if persistent:
            persistent[0].all_gather(persistent)

    res = {"gfs": [], "gather": []}
    for r in range(args.rounds):
        for name, fn in (("gfs", gfs), ("gather", gather)):
            res[name].append(measure(lambda: fn(r), dist))
    with open(os.path.join(args.out, f"result_rank{rank}.json"), "w") as f:
        json.dump({"rank": rank, "nparams": nparams, "res": res}, f)


def verify(args):
    mnt = tempfile.mkdtemp(prefix="gfs-bench-mnt-")
    subprocess.run([args.verify, os.path.join(args.out, "gfs"), mnt], check=True)
    try:
        code = ("import sys, torch\n"
                "a = torch.load(sys.argv[1]); b = torch.load(sys.argv[2])\n"
                "assert list(a) == list(b), 'keys'\n"
                "bad = [k for k in b if a[k].dtype != b[k].dtype or not torch.equal(a[k], b[k])]\n"
                "assert not bad, bad\n"
                "print(f'verify: the mount holds the {len(b)} tensors of the gathered save')\n")
        subprocess.run([sys.executable, "-c", code, os.path.join(mnt, "pytorch_model.bin"),
                        os.path.join(args.out, "gather.bin")], check=True)
    finally:
        subprocess.run(["fusermount3", "-u", mnt], check=True)
        os.rmdir(mnt)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--world-size", type=int, default=4)
    ap.add_argument("--layers", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--verify", default="", help="path of the gatherfs binary: mount OUT/gfs and compare")
    ap.add_argument("--worker", action="store_true")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if not os.path.isdir(os.path.join(os.environ.get("DS_SRC", ""), "deepspeed")):
        sys.exit("set DS_SRC to a DeepSpeed source tree")
    args.out = args.out or tempfile.mkdtemp(prefix="gfs-bench-zero3-")
    os.makedirs(args.out, exist_ok=True)
    argv = [a for a in sys.argv[1:]]
    if "--out" not in argv:
        argv += ["--out", args.out]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000),
               WORLD_SIZE=str(args.world_size), PYTHONPATH=os.environ["DS_SRC"])
    with open("/proc/loadavg") as f:
        load0 = " ".join(f.read().split()[:3])
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"] + argv,
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.DEVNULL if r else None)
             for r in range(args.world_size)]
    rcs = [p.wait() for p in procs]
    if any(rcs):
        sys.exit(f"workers exited {rcs}")
    with open("/proc/loadavg") as f:
        load1 = " ".join(f.read().split()[:3])
    results = [json.load(open(os.path.join(args.out, f"result_rank{r}.json")))["res"] for r in range(args.world_size)]
    nparams = json.load(open(os.path.join(args.out, "result_rank0.json")))["nparams"]
    size = {m: os.path.getsize(os.path.join(args.out, "gather.bin")) if m == "gather" else
            sum(os.path.getsize(os.path.join(args.out, "gfs", f)) for f in os.listdir(os.path.join(args.out, "gfs")))
            for m in ("gfs", "gather")}
    print(f"bench/zero3_save.py: {nparams / 1e6:.1f} M params, {args.dtype}, {args.world_size} ranks, "
          f"best of {args.rounds} rounds; {os.cpu_count()} CPUs; load average at start {load0}, at end {load1}")
    print(f"command: DS_SRC=$DS_SRC bench/zero3_save.py {' '.join(sys.argv[1:])}\n")
    print("| measurement | save_zero3 | GatheredParameters + torch.save | ratio |")
    print("|---|---|---|---|")
    best = {m: [min(x[m][i][0] for i in range(args.rounds)) for x in results] for m in size}
    whole = {m: min(max(x[m][i][1] for x in results) for i in range(args.rounds)) for m in size}
    peak = {m: [max(0, min(x[m][i][2] for i in range(args.rounds))) / 1024 for x in results] for m in size}
    hwm = {m: [min(x[m][i][3] for i in range(args.rounds)) / 1024 for x in results] for m in size}
    print(f"| save time, every rank done | {whole['gfs']:.2f} s | {whole['gather']:.2f} s | "
          f"{whole['gather'] / whole['gfs']:.1f}x |")
    for r in range(args.world_size):
        print(f"| rank {r}: time to return | {best['gfs'][r]:.2f} s | {best['gather'][r]:.2f} s | "
              f"{best['gather'][r] / best['gfs'][r]:.1f}x |")
    for r in range(args.world_size):
        ratio = f"{peak['gather'][r] / peak['gfs'][r]:.1f}x" if peak["gfs"][r] >= 1 else ""
        print(f"| rank {r}: peak RSS above start | {peak['gfs'][r]:.0f} MiB | {peak['gather'][r]:.0f} MiB | "
              f"{ratio} |")
    for r in range(args.world_size):
        print(f"| rank {r}: peak RSS | {hwm['gfs'][r]:.0f} MiB | {hwm['gather'][r]:.0f} MiB | "
              f"{hwm['gather'][r] / hwm['gfs'][r]:.2f}x |")
    print(f"| bytes written | {size['gfs'] / 2**20:.0f} MiB ({args.world_size} ranks) | "
          f"{size['gather'] / 2**20:.0f} MiB (rank 0) | |")
    if args.verify:
        verify(args)


if __name__ == "__main__":
    main()
