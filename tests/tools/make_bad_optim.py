#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Corrupt the optimizer state of a copy of a DeepSpeed checkpoint (with torch).

    make_bad_optim.py TAGDIR KIND

TAGDIR is a (copied) tag directory; one rank's *_optim_states.pt is loaded,
edited and saved back in place:
    missing    rank 1 loses exp_avg_sq of flat group 0
    short      rank 1's exp_avg of flat group 0 is 3 elements short
    long       rank 0's exp_avg_sq of flat group 0 has 2 elements more
The DeepSpeed classes these files pickle (LossScaler, ZeroStageEnum,
fragment_address) are stood in for by plain classes of the same qualified
names, so that the rewritten file names them as DeepSpeed wrote them.
"""
import enum
import glob
import os
import sys
import types

import torch


def install_stand_ins():
    class ZeroStageEnum(int, enum.Enum):
        disabled = 0
        optimizer_states = 1
        gradients = 2
        weights = 3

    class LossScaler:
        pass

    class fragment_address:  # noqa: N801 (DeepSpeed's name)
        pass

    for mod, cls in (("deepspeed.runtime.zero.config", ZeroStageEnum),
                     ("deepspeed.runtime.fp16.loss_scaler", LossScaler),
                     ("deepspeed.utils.tensor_fragment", fragment_address)):
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        cls.__module__ = mod
        cls.__qualname__ = cls.__name__
        setattr(sys.modules[mod], cls.__name__, cls)


def main():
    tagdir, kind = sys.argv[1], sys.argv[2]
    install_stand_ins()
    rank = 0 if kind == "long" else 1
    path = glob.glob(os.path.join(tagdir, f"*zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"))[0]
    sd = torch.load(path, map_location="cpu")
    osd = sd["optimizer_state_dict"]
    base = osd.get("base_optimizer_state") or osd["optimizer_state_dict"]
    st = base["state"][0]
    if kind == "missing":
        del st["exp_avg_sq"]
    elif kind == "short":
        st["exp_avg"] = st["exp_avg"][:-3].clone()
    elif kind == "long":
        st["exp_avg_sq"] = torch.cat([st["exp_avg_sq"], torch.zeros(2)])
    else:
        sys.exit(f"unknown kind {kind}")
    torch.save(sd, path)
    print(f"{path}: {kind}")


if __name__ == "__main__":
    main()
