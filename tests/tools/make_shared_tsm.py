#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Rewrite a DCP .metadata so that two entries share one TensorStorageMetadata.

Usage (torch 2.x, e.g. in the compat root): make_shared_tsm.py METADATA

Loads the Metadata object with pickle, makes
model.layers.0.self_attn.o_proj.weight's entry the very object of
model.layers.0.self_attn.q_proj.weight's (both [64, 64] float32, chunked
alike), and pickles it back as DCP does (pickle.dump): the second entry is
then a memo reference (BINGET) to the first's object, while each keeps its
own storage_data items.  Made tests/data/dcp/fsdp2_ws2-shared-tsm.metadata
from fsdp2_ws2's.
"""
import pickle, sys
p = sys.argv[1]
md = pickle.load(open(p, "rb"))
sd = md.state_dict_metadata
a, b = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
assert sd[a] == sd[b], (sd[a], sd[b])
sd[b] = sd[a]  # one TensorStorageMetadata object for both names: the pickle memoizes it
pickle.dump(md, open(p, "wb"))
print(type(md).__name__, len(sd), "entries;", b, "is", a, sd[a] is sd[b])
