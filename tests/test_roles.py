"""Role detection on process tables shaped like the seed incidents."""

from memscope.collect.roles import ProcInfo, classify, python_target

PY = "/usr/bin/python3"


def table(*rows):
    return {pid: ProcInfo(pid, ppid, name, tuple(cmd.split())) for pid, ppid, name, cmd in rows}


def test_uv_run_wrapper_main_and_twenty_compile_workers():
    # Seed 004: the monitor watched the uv wrapper; the real training process had 20 compile workers.
    rows = [
        (141489, 1, "uv", "uv run model-garden serve"),
        (141495, 141489, "python3", f"{PY} /venv/bin/model-garden serve"),
        (
            141614,
            141495,
            "python3",
            f"{PY} /venv/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py --workers=20",
        ),
    ]
    rows += [
        (141658 + i, 141614, "python3", f"{PY} -c from multiprocessing.spawn import spawn_main") for i in range(19)
    ]
    roles = classify(table(*rows), 141489)
    assert roles[141489] == "wrapper"
    assert roles[141495] == "main"
    assert [roles[p] for p in roles if p >= 141614] == ["compile_worker"] * 20


def test_dataloader_workers_by_name_and_resource_tracker_as_helper():
    rows = [
        (10, 1, "python3", f"{PY} train.py --threads 16"),
        (11, 10, "python3", f"{PY} -c from multiprocessing.resource_tracker import main;main(5)"),
    ]
    rows += [(20 + i, 10, "pt_data_worker", f"{PY} train.py --threads 16") for i in range(16)]
    roles = classify(table(*rows), 10, script="train.py")
    assert roles[10] == "main" and roles[11] == "helper"
    assert sum(r == "dataloader_worker" for r in roles.values()) == 16


def test_bash_script_forks_python_and_python_m_module():
    rows = [
        (5, 1, "bash", "/bin/bash train_stage_2.sh"),
        (6, 5, "python3", f"{PY} -u -m src.training.train --n_way 4"),
        (7, 6, "pt_data_worker", f"{PY} -u -m src.training.train --n_way 4"),
    ]
    roles = classify(table(*rows), 5)
    assert roles == {5: "wrapper", 6: "main", 7: "dataloader_worker"}


def test_torchrun_ranks_under_the_launcher():
    rows = [
        (100, 1, "torchrun", f"{PY} /venv/bin/torchrun --nproc-per-node 2 train.py"),
        (101, 100, "python3", f"{PY} -u train.py"),
        (102, 100, "python3", f"{PY} -u train.py"),
        (103, 101, "pt_data_worker", f"{PY} -u train.py"),
    ]
    roles = classify(table(*rows), 100)
    assert roles == {100: "wrapper", 101: "rank", 102: "rank", 103: "dataloader_worker"}


def test_agent_report_wins_and_unrelated_child_is_other():
    rows = [
        (1000, 1, "python3", f"{PY} -m launcher.tool train.py"),
        (1001, 1000, "python3", f"{PY} train.py"),
        (1002, 1001, "nvidia-smi", "nvidia-smi --query"),
    ]
    roles = classify(table(*rows), 1000, agent_main=1001)
    assert roles == {1000: "wrapper", 1001: "main", 1002: "other"}


def test_python_target_parsing():
    assert python_target(["python3", "-u", "-X", "dev", "train.py", "--lr", "1"]).value == "train.py"
    assert python_target(["python3.11", "-m", "torch.distributed.run"]).kind == "module"
    assert python_target(["python", "-c", "print(1)"]).kind == "code"
    assert python_target(["bash", "x.sh"]) is None
