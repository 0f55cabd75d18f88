"""The NumPy, FAISS and glibc-heap probes, on real numpy and faiss-cpu in real processes under memscope, and
the pure analysis and panel that turn their messages into the summary's ``loads``, ``faiss`` and ``malloc``."""

import json
import os
import platform

import pytest
from conftest import script

np = pytest.importorskip("numpy")

MiB = 1 << 20


def _row(loads, name, key=None):
    rows = [r for r in loads if os.path.basename(r["path"]) == name and r["key"] == key]
    assert len(rows) == 1, (name, key, loads)
    return rows[0]


@pytest.fixture(scope="module")
def np_run(tmp_path_factory):
    import memscope

    d = tmp_path_factory.mktemp("npdata")
    X = np.arange(4 * MiB, dtype=np.float32).reshape(-1, 64)  # 16 MiB
    Y = np.ones(MiB, dtype=np.float32)  # 4 MiB
    np.savez(d / "pairs.npz", X_train=X, Y_train=Y)
    np.savez_compressed(d / "packed.npz", X_train=X)
    np.save(d / "bank.npy", np.arange(3 * MiB, dtype=np.float64))  # 24 MiB
    np.save(d / "plain.npy", Y)
    (d / "small").mkdir()
    for i in range(40):
        np.save(d / "small" / f"{i}.npy", np.full(16, i, dtype=np.int64))
    run = memscope.run(
        [script("np_loads.py"), str(d)],
        output="capture",
        record_dir=str(tmp_path_factory.mktemp("runs")),
        interval_s=0.1,
    )
    summary = run.wait(90)
    if summary is None:
        run.kill()
    assert summary is not None
    return d, run, summary


def test_npz_mmap_mode_is_reported_ignored_and_repeat_reads_counted(np_run):
    _d, _run, s = np_run
    assert s["exit"]["cause"] == "ok", s["exit"]
    x = _row(s["loads"], "pairs.npz", "X_train")
    assert x["requested_mmap"] == "r" and x["mmapped"] is False
    assert x["reads"] == 3
    assert x["shape"] == [65536, 64] and x["dtype"] == "float32" and x["nbytes"] == 16 * MiB
    assert x["compressed"] is False
    # The first read of a fresh heap: a whole new 16 MiB array, anonymous memory, not page cache mapped in.
    assert x["anon_delta_bytes"] >= 12 * MiB and x["file_delta_bytes"] < 4 * MiB
    assert x["rss_delta_bytes"] == x["anon_delta_bytes"] + x["file_delta_bytes"]
    assert "mmap_mode is ignored for .npz" in x["advice"] and "X_train (16.0 MiB)" in x["advice"]
    assert "np.save" in x["advice"] and "read 3 times" in x["advice"]
    y = _row(s["loads"], "pairs.npz", "Y_train")  # read through data.f.Y_train
    assert y["reads"] == 1 and y["nbytes"] == 4 * MiB and y["mmapped"] is False
    p = _row(s["loads"], "packed.npz", "X_train")
    assert p["compressed"] is True and p["requested_mmap"] is None and p["reads"] == 1
    assert p["advice"] is None  # read once, small, no mmap asked: nothing to say


def test_npy_memmap_is_honoured_and_grows_file_backed_on_touch(np_run):
    _d, run, s = np_run
    assert "bank type memmap" in run.output_tail
    b = _row(s["loads"], "bank.npy")
    assert b["requested_mmap"] == "r" and b["mmapped"] is True and b["advice"] is None
    assert b["shape"] == [3 * MiB] and b["nbytes"] == 24 * MiB
    assert b["anon_delta_bytes"] < 2 * MiB  # at open nothing is read
    assert b["resident_file_bytes"] >= 22 * MiB  # bank.sum() paged it all in ...
    assert b["resident_anon_bytes"] < 2 * MiB  # ... as file-backed pages, no private copy
    plain = _row(s["loads"], "plain.npy")
    assert plain["mmapped"] is False and plain["requested_mmap"] is None and plain["reads"] == 1
    assert plain["nbytes"] == 4 * MiB


def test_small_loads_are_counted_together(np_run):
    d, _run, s = np_run
    rows = [r for r in s["loads"] if r["path"] == os.path.join(str(d / "small"), "*.npy")]
    assert len(rows) == 1 and rows[0]["reads"] == 40 and rows[0]["nbytes"] == 40 * 16 * 8
    assert not [r for r in s["loads"] if "/small/" in r["path"] and not r["path"].endswith("*.npy")]


def test_user_errors_from_np_load_pass_through_unchanged(np_run):
    d, run, s = np_run
    tail = list(run.output_tail)
    assert f"user error: FileNotFoundError {d / 'missing.npy'}" in tail
    with pytest.raises(ValueError) as exc:  # the same call without memscope, for the exact message
        np.load(d / "bank.npy", mmap_mode="bogus")
    assert f"user error: ValueError {exc.value}" in tail
    assert "done True 40" in tail
    assert not [r for r in s["loads"] if "missing" in r["path"]]


@pytest.fixture(scope="module")
def faiss_run(tmp_path_factory):
    pytest.importorskip("faiss")
    import memscope

    d = tmp_path_factory.mktemp("faiss")
    run = memscope.run(
        [script("faiss_indexes.py"), str(d)],
        output="capture",
        record_dir=str(tmp_path_factory.mktemp("runs")),
        interval_s=0.1,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    summary = run.wait(120)
    if summary is None:
        run.kill()
    assert summary is not None
    truth = next(json.loads(line[6:]) for line in run.output_tail if line.startswith("TRUTH "))
    return d, run, summary, truth


def _index(s, how, type_=None):
    rows = [r for r in s["faiss"]["indexes"] if r["how"] == how and (type_ is None or r["type"] == type_)]
    assert len(rows) == 1, (how, type_, s["faiss"]["indexes"])
    return rows[0]


def test_faiss_indexes_made_every_way_are_seen_with_their_size(faiss_run):
    _d, run, s, truth = faiss_run
    assert s["exit"]["cause"] == "ok", s["exit"]
    assert "user error: TypeError" in run.output_tail
    [flat] = [r for r in s["faiss"]["indexes"] if r["how"] == "IndexFlatL2()" and not r["inside_other"]]
    assert (flat["type"], flat["d"], flat["ntotal"]) == ("IndexFlatL2", 64, 10000) and flat["alive"]
    assert 0.95 * truth["flat"] <= flat["est_bytes"] <= 1.05 * truth["flat"]
    ivfpq = _index(s, "index_factory", "IndexIVFPQ")
    assert ivfpq["ntotal"] == 10000  # four add() calls: the last count is the one kept
    # In RAM an IVFPQ also holds a precomputed table that is not serialized: a little above the file.
    assert 0.9 * truth["ivfpq"] <= ivfpq["est_bytes"] <= 1.5 * truth["ivfpq"]
    hnsw = _index(s, "index_factory", "IndexHNSWFlat")
    assert hnsw["ntotal"] == 10000
    assert 0.9 * truth["hnsw"] <= hnsw["est_bytes"] <= 1.1 * truth["hnsw"]  # links included (flat alone: 64%)
    assert hnsw["serialized_bytes"] == truth["hnsw"]  # from the user's write_index


def test_faiss_copies_reads_and_temporaries(faiss_run):
    _d, _run, s, truth = faiss_run
    clone = _index(s, "clone_index")
    assert clone["type"] == "IndexFlatL2" and clone["ntotal"] == 10000
    copy = _index(s, "deserialize_index")  # deserialize_index calls read_index inside: seen once
    assert copy["type"] == "IndexIVFPQ" and copy["serialized_bytes"] == truth["ivfpq"]
    loaded = _index(s, "read_index")
    assert loaded["type"] == "IndexHNSWFlat" and loaded["serialized_bytes"] == truth["hnsw"]
    tmp = _index(s, "IndexFlatIP()")
    assert tmp["alive"] is False and tmp["ntotal"] == 1000 and tmp["est_bytes"] == 1000 * 64 * 4
    ivfflat = _index(s, "IndexIVFFlat()")
    assert ivfflat["ntotal"] == 5000
    qs = [r for r in s["faiss"]["indexes"] if r["inside_other"]]
    assert len(qs) == 1 and qs[0]["ptr"] in ivfflat["children"]  # the user's quantizer, counted once
    assert qs[0]["how"] == "IndexFlatL2()" and qs[0]["ntotal"] == 16
    live = [r for r in s["faiss"]["indexes"] if r["alive"] and not r["inside_other"]]
    assert s["faiss"]["live_count"] == len(live) == 7
    assert s["faiss"]["live_est_bytes"] == sum(r["est_bytes"] for r in live)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")
def test_glibc_heap_free_but_held_is_seen(start):
    s = start([script("heap_held.py")]).wait(60)
    assert s["exit"]["cause"] == "ok", s["exit"]
    rows = s["malloc"]["processes"]
    assert len(rows) == 1
    r = rows[0]
    # 60k blocks of ~1 KiB freed between live ones: about 60 MiB free but held, 60 MiB still in use.
    assert r["peak_in_use_bytes"] >= 110 * MiB
    assert r["peak_free_held_bytes"] >= 50 * MiB and r["in_use_bytes"] >= 50 * MiB


def test_probes_stay_away_from_a_process_without_numpy(start):
    run = start([script("no_numpy.py")])
    s = run.wait(60)
    assert s["exit"]["cause"] == "ok"
    assert "modules False False False" in run.output_tail
    threads = next(line for line in run.output_tail if line.startswith("threads"))
    assert "memscope-probes" not in threads
    assert s["loads"] == [] and s["faiss"]["indexes"] == [] and s["malloc"]["processes"] == []


# -- pure analysis and panel ------------------------------------------------------------------------------------


def _ev(t, pid, **data):
    return {"t": t, "pid": pid, "data": data}


def test_member_reads_add_up_across_processes_and_keep_the_last_count():
    from memscope.analysis.probes.numpy_load import summarize_loads

    base = dict(
        path="/d/pairs.npz",
        key="X_train",
        shape=[10, 4],
        dtype="float32",
        nbytes=2 << 30,
        compressed=False,
        requested_mmap=None,
        anon_delta_bytes=2 << 30,
        file_delta_bytes=0,
    )
    reads = [
        _ev(1.0, 10, id="10-1", reads=1, duration_s=1.0, **base),
        _ev(2.0, 10, id="10-1", reads=5, duration_s=5.0, **base),  # running count: 5 in all
        _ev(3.0, 11, id="10-1", reads=2, duration_s=2.0, **base),
    ]  # a forked worker, from zero
    [row] = summarize_loads([], reads)
    assert row["reads"] == 7 and row["duration_s"] == 7.0 and row["rss_delta_bytes"] == 2 << 30
    assert "was read 7 times" in row["advice"] and "2.0 GiB" in row["advice"]


def test_advice_only_where_it_matters():
    from memscope.analysis.probes.malloc import malloc_advice
    from memscope.analysis.probes.numpy_load import load_advice

    npy = dict(path="/d/x.npy", key=None, nbytes=8 << 30, reads=1, requested_mmap=None, mmapped=False)
    assert "mmap_mode='r'" in load_advice(npy)
    assert load_advice(dict(npy, nbytes=1 << 20)) is None
    assert load_advice(dict(npy, requested_mmap="r", mmapped=True)) is None
    held = {"pid": 7, "peak_free_held_bytes": 2 << 30, "in_use_bytes": 1 << 30}
    assert "malloc_trim(0)" in malloc_advice(held)
    assert malloc_advice(dict(held, peak_free_held_bytes=100 << 20)) is None  # small
    assert malloc_advice(dict(held, in_use_bytes=40 << 30)) is None  # small share of a big heap


def test_panel_escapes_what_comes_from_the_program():
    from memscope.analysis.probes.faiss_index import summarize_faiss
    from memscope.analysis.probes.numpy_load import summarize_loads
    from memscope.ui.probes import probes_html

    evil = "<script>alert(1)</script>"
    loads = summarize_loads(
        [
            _ev(
                1.0,
                5,
                ev="open",
                id="5-1",
                path=f"/d/{evil}.npy",
                kind="npy",
                shape=[3],
                dtype=evil,
                nbytes=12,
                requested_mmap=evil,
                mmapped=False,
                duration_s=0.1,
                anon_delta_bytes=0,
                file_delta_bytes=0,
            )
        ],
        [],
    )
    faiss = summarize_faiss([_ev(1.0, 5, ev="new", id="5-2", how=evil, type=evil, d=4, ntotal=2, est_bytes=32)])
    page = probes_html({"loads": loads, "faiss": faiss, "malloc": {}})
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "IGNORED" in page  # mmap asked for and not given


def test_row_advice_reaches_the_summary_advice():
    from memscope.analysis.advice import advise
    from memscope.analysis.probes.faiss_index import summarize_faiss
    from memscope.analysis.probes.malloc import summarize_malloc

    faiss = summarize_faiss(
        [
            _ev(
                1.0,
                5,
                ev="new",
                id="5-1",
                how="index_factory",
                type="IndexFlatL2",
                d=768,
                ntotal=771_115,
                est_bytes=771_115 * 768 * 4,
            )
        ]
    )
    malloc = summarize_malloc(
        [
            _ev(
                1.0,
                5,
                in_use_bytes=1 << 30,
                free_held_bytes=3 << 30,
                releasable_bytes=0,
                arena_bytes=4 << 30,
                mmap_bytes=0,
            )
        ]
    )
    topics = {a["topic"]: a["text"] for a in advise({"exit": {}, "faiss": faiss, "malloc": malloc})}
    assert "IndexFlatL2" in topics["faiss"] and "2.2 GiB" in topics["faiss"]  # seed 002's bank: 771k x 768
    assert "malloc_trim(0)" in topics["malloc"] and "3.0 GiB" in topics["malloc"]


def test_member_reads_in_dataloader_workers_are_all_counted(np_run, start):
    pytest.importorskip("torch")
    d, _run, _s = np_run
    run = start([script("np_dataloader.py"), str(d)])
    s = run.wait(120)
    assert s["exit"]["cause"] == "ok", (s["exit"]["message"], s["exit"]["traceback"])
    assert "items 12" in run.output_tail
    workers = [p["pid"] for p in s["processes"] if p["role"] == "dataloader_worker"]
    assert len(workers) == 2
    x = _row(s["loads"], "pairs.npz", "X_train")
    # Every read, the last ones included: the workers leave by os._exit, after multiprocessing's finalizers.
    assert x["reads"] == 12 and x["requested_mmap"] == "r" and "mmap_mode is ignored" in x["advice"]


def test_an_npz_read_in_forked_children_is_flagged():
    from memscope.analysis.probes.numpy_load import summarize_loads

    base = dict(
        path="/d/pairs.npz",
        key="X_train",
        shape=[10, 4],
        dtype="float32",
        nbytes=160,
        compressed=False,
        requested_mmap=None,
        anon_delta_bytes=0,
        file_delta_bytes=0,
        duration_s=0.1,
    )
    [own] = summarize_loads([], [_ev(1.0, 10, id="10-1", reads=1, **base)])
    assert "shared_after_fork" not in own and own["advice"] is None
    [row] = summarize_loads([], [_ev(1.0, 11, id="10-1", reads=1, **base), _ev(1.0, 12, id="10-1", reads=1, **base)])
    assert row["shared_after_fork"] == [11, 12] and row["reads"] == 2
    assert "opened before a fork" in row["advice"] and "was read 2 times" in row["advice"]


def test_npz_member_sizes_are_read_in_both_numpy_layouts(tmp_path):
    """numpy 2.4 keeps NpzFile._files as {key: member name}; numpy 2.1 (what Colab ships) as the list of member
    names ("X.npy" for key "X"). Reading only the first made every member read on Colab go unseen (notebook 04
    failed under Colab's pins)."""
    from memscope.agent.probes.numpy_load import _member_info

    np.savez(tmp_path / "p.npz", X=np.zeros((512, 512), np.float32))
    with np.load(tmp_path / "p.npz") as z:
        names = {"X": "X.npy"}
        for files in (names, list(names.values())):  # this numpy's layout, then the other one
            z._files = files
            assert _member_info(z, "X") == (512 * 512 * 4 + 128, False), files
            assert _member_info(z, "missing") is None
