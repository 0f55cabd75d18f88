"""FAISS indexes made every way the probe must see: a constructor (+ add), index_factory IVF/PQ and HNSW,
clone_index, serialize/deserialize, write/read_index. Prints one TRUTH line per index: its serialized size,
measured here by the script (the probe itself never serializes).

argv: a directory to write an index file into."""

import json
import os
import sys
import time

import faiss
import numpy as np

d, n = 64, 10000
rng = np.random.default_rng(0)
x = rng.standard_normal((n, d), dtype=np.float32)
truth = {}

flat = faiss.IndexFlatL2(d)
flat.add(x)
truth["flat"] = int(faiss.serialize_index(flat).nbytes)

ivfpq = faiss.index_factory(d, "IVF32,PQ8x4")  # 4-bit PQ: trains in a second (8-bit PQ takes ~30 s here)
ivfpq.train(x[:1000])
for i in range(0, n, 2500):  # several adds: the last ntotal must be the one reported
    ivfpq.add(x[i : i + 2500])
truth["ivfpq"] = int(faiss.serialize_index(ivfpq).nbytes)

hnsw = faiss.index_factory(d, "HNSW16")
hnsw.add(x)
truth["hnsw"] = int(faiss.serialize_index(hnsw).nbytes)

quantizer = faiss.IndexFlatL2(d)  # the user's own quantizer: inside the IVF index, not counted twice
ivfflat = faiss.IndexIVFFlat(quantizer, d, 16)
ivfflat.train(x[:2000])
ivfflat.add(x[:5000])

clone = faiss.clone_index(flat)
copy = faiss.deserialize_index(faiss.serialize_index(ivfpq))
path = os.path.join(sys.argv[1], "hnsw.index")
faiss.write_index(hnsw, path)
loaded = faiss.read_index(path)

tmp = faiss.IndexFlatIP(d)  # a temporary index, freed before the end
tmp.add(x[:1000])
del tmp

try:
    faiss.IndexFlatL2("not a dimension")
except TypeError as exc:
    print("user error:", type(exc).__name__, flush=True)

print("TRUTH " + json.dumps(truth), flush=True)
time.sleep(0.5)
print("done", flat.ntotal, ivfpq.ntotal, hnsw.ntotal, clone.ntotal, copy.ntotal, loaded.ntotal, flush=True)
