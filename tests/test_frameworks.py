"""Phases and the leak verdict on real training frameworks (issue 12): Lightning 2.x and the Hugging Face Trainer,
tiny models built from a config, synthetic data, 2 DataLoader workers, nothing downloaded.

Lightning restores train mode after validation by setting ``module.training`` directly; the Trainer calls
``model.train()`` every step. memscope's phases must match the frameworks' own validation time either way."""

import re

import pytest
from conftest import script

import memscope


def _truth(run):
    line = next(x for x in run.output_tail if x.startswith("TRUTH"))
    return {k: float(v) for k, v in re.findall(r"(\w+)=([\d.]+)", line)}


def _phase_time(summary, name):
    return sum(p["end_s"] - p["start_s"] for p in summary["phases"] if p["name"] == name)


@pytest.mark.parametrize("framework,module", [("lightning_train.py", "lightning"), ("hf_trainer.py", "transformers")])
def test_phases_and_leak_on_a_real_framework(record_dir, framework, module):
    pytest.importorskip(module)
    # 25 s of training: a verdict is fitted from the training's start and needs 20 s of it (imports take 8-20 s
    # more on a loaded machine).
    run = memscope.run([script(framework), "--seconds", "25", "--leak"], record_dir=record_dir, output="capture")
    s = run.wait(240)
    assert s is not None and s["exit"]["cause"] == "ok", s and s["exit"]
    truth = _truth(run)
    evals = _phase_time(s, "eval")
    trains = _phase_time(s, "train")
    print(
        f"{module}: eval {evals:.1f} s by memscope vs {truth['val_s']:.1f} s by the framework's own hooks; "
        f"train {trains:.1f} s; leak {s['leak']['verdict']} "
        f"{(s['leak']['slope_bytes_per_s'] or 0) / 2**20:.2f} MiB/s; kept {truth['kept']:.0f} x 4 MiB"
    )
    # The framework's validation time, within a second or 50 % (phase edges fall on batch boundaries); not the
    # ~90 % of the run that a train/eval switch seen only through .train()/.eval() calls gave with Lightning.
    assert abs(evals - truth["val_s"]) <= max(1.0, 0.5 * truth["val_s"]), s["phases"]
    # The training time too, against the framework's own (its fit less its evaluations). Not `trains > evals`:
    # on a loaded 2-core machine the Trainer's evaluations (their workers start inside them) take half the fit.
    train_truth = truth["fit_s"] - truth["val_s"]
    assert abs(trains - train_truth) <= max(1.0, 0.5 * train_truth), (trains, train_truth, s["phases"])
    workers = [p for p in s["processes"] if p["role"] == "dataloader_worker"]
    assert len(workers) >= 2
    # 4 MiB kept per validation batch: the floor rises, and it is the main process that keeps it.
    assert s["leak"]["verdict"] == "leak", s["leak"]
    assert s["leak"]["by_role"]["main"]["verdict"] == "leak"


def test_workers_alive_together_are_no_leak(record_dir):
    """Issue 23 #9: a clean Hugging Face Trainer whose evaluations start their loader's 2 workers beside the
    training's was called "a slow leak, 20 MiB/min" (the tree's floor rose as workers came and went) while the main
    and each role said no_leak. Beside it, a torch training that adds a validation loader (2 workers, 12 MiB each)
    every 4 s: its tree grows ~250 MiB with no process growing (memscope said "Memory grows steadily, 10 MiB/s in
    the DataLoader workers"). Both at once, ~40 s: a verdict needs 20 s of training."""
    pytest.importorskip("transformers")
    hf = memscope.run(
        [script("hf_trainer.py"), "--seconds", "25", "--eval-steps", "5"], record_dir=record_dir, output="capture"
    )
    more = memscope.run([script("more_loaders.py"), "--seconds", "24"], record_dir=record_dir, output="capture")
    for run in (more, hf):
        s = run.wait(240)
        assert s is not None and s["exit"]["cause"] == "ok", s and s["exit"]
        leak = s["leak"]
        assert leak["verdict"] == "no_leak", (run.command, leak)
        assert all(v["verdict"] != "leak" for v in leak["per_process"].values()), leak["per_process"]
        assert leak["growth"]["kind"] in ("flat", "spikes", "more_processes"), leak["growth"]
        assert leak["advice"] is None or leak["advice"].startswith(("No leak", "Only spikes")), leak["advice"]
    # The card says why the tree grew: more processes alive at once (their count rose), each one's own floor flat.
    assert more.summary()["leak"]["parts"] == "processes"
    assert more.summary()["leak"]["growth"]["kind"] == "more_processes"
    assert "only because more processes were alive" in more.summary()["leak"]["advice"]
