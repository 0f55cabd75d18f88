"""cgroup v1 / v2 and /proc parsing on fixture trees."""

import os

from memscope.collect.host import find_memory_cgroup, parse_keyed, read_cgroup_memory, read_host_memory
from memscope.collect.procfs import parse_smaps_rollup, parse_stat


def write(root, path, text):
    full = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "w") as f:
        f.write(text)


def test_cgroup_v2_smallest_limit_up_the_tree_and_oom_kill(tmp_path):
    r = str(tmp_path)
    write(r, "/proc/self/mountinfo", "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev - cgroup2 cgroup2 rw,nsdelegate\n")
    write(r, "/proc/123/cgroup", "0::/user.slice/job-7\n")
    write(r, "/sys/fs/cgroup/memory.max", "max\n")
    write(r, "/sys/fs/cgroup/user.slice/memory.max", "2147483648\n")
    write(r, "/sys/fs/cgroup/user.slice/job-7/memory.max", "4294967296\n")
    write(r, "/sys/fs/cgroup/user.slice/job-7/memory.current", "1073741824\n")
    write(r, "/sys/fs/cgroup/user.slice/job-7/memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n")
    cg = find_memory_cgroup(123, root=r)
    assert cg is not None and cg.version == 2 and cg.path.endswith("user.slice/job-7")
    m = read_cgroup_memory(cg)
    assert (m.limit, m.usage, m.oom_kills) == (2 << 30, 1 << 30, 2)


def test_cgroup_v1_hybrid_prefers_the_memory_controller_and_ignores_unlimited(tmp_path):
    r = str(tmp_path)
    write(
        r,
        "/proc/self/mountinfo",
        "25 24 0:22 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "40 24 0:35 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n",
    )
    write(r, "/proc/9/cgroup", "4:memory:/docker/abc\n1:cpu:/docker/abc\n0::/docker/abc\n")
    write(r, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    write(r, "/sys/fs/cgroup/memory/docker/memory.limit_in_bytes", str(8 << 30))
    write(r, "/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "9223372036854771712\n")
    write(r, "/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", str(3 << 30))
    write(r, "/sys/fs/cgroup/memory/docker/abc/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    cg = find_memory_cgroup(9, root=r)
    assert cg is not None and cg.version == 1
    m = read_cgroup_memory(cg)
    assert (m.limit, m.usage, m.oom_kills) == (8 << 30, 3 << 30, 1)


def test_cgroup_v1_namespaced_mount_root(tmp_path):
    # Inside a container the memory mount's root is the container's own cgroup.
    r = str(tmp_path)
    write(r, "/proc/self/mountinfo", "40 30 0:35 /docker/abc /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n")
    write(r, "/proc/1/cgroup", "4:memory:/docker/abc\n")
    write(r, "/sys/fs/cgroup/memory/memory.limit_in_bytes", str(12 << 30))
    cg = find_memory_cgroup(1, root=r)
    assert read_cgroup_memory(cg).limit == 12 << 30


def test_no_cgroup_means_no_limit(tmp_path):
    assert find_memory_cgroup(1, root=str(tmp_path)) is None


def test_meminfo_and_vmstat(tmp_path):
    r = str(tmp_path)
    write(
        r,
        "/proc/meminfo",
        "MemTotal:       16000000 kB\nMemFree: 1000 kB\nMemAvailable:    8000000 kB\n"
        "SwapTotal: 2048 kB\nSwapFree: 1024 kB\n",
    )
    write(r, "/proc/vmstat", "nr_free_pages 12\noom_kill 3\n")
    h = read_host_memory(root=r)
    assert (h.total, h.available, h.swap_total, h.swap_used, h.oom_kills) == (
        16000000 * 1024,
        8000000 * 1024,
        2048 * 1024,
        1024 * 1024,
        3,
    )
    assert parse_keyed("oom_kill 5\nunder_oom 0") == {"oom_kill": 5, "under_oom": 0}


def test_stat_with_parentheses_in_the_name_and_smaps_rollup():
    st = parse_stat(
        b"4242 (pt (data) worker) S 4200 4200 4100 0 -1 4194560 " + b"0 " * 12 + b"777 " + b"0 " * 29 + b"139\n"
    )
    assert (st.pid, st.comm, st.state, st.ppid, st.starttime) == (4242, "pt (data) worker", "S", 4200, 777)
    assert st.exit_code == 139
    d = parse_smaps_rollup(
        b"55d0-7ffd ---p 0 00:00 0 [rollup]\nRss: 2048 kB\nPss: 1024 kB\nPss_Anon: 900 kB\nSwap: 8 kB\n"
    )
    assert d == {"Rss": 2 << 20, "Pss": 1 << 20, "Pss_Anon": 900 * 1024, "Swap": 8 * 1024}
