"""The house (ARCHITECTURE.md): imports go one way. `lint-imports` checks the layers in CI; this checks what a
layers contract cannot see, a circle inside one layer (session/run <-> session/launch, say), counting lazy and
type-only imports too, as grimp reads them."""

import pytest

grimp = pytest.importorskip("grimp")


def _circles(graph):
    """The strongly connected groups of two or more modules (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    return out


def test_no_import_circles():
    graph = grimp.build_graph("memscope", include_external_packages=False)
    assert len(graph.modules) > 50  # the whole package was read
    assert _circles(graph) == []


def test_the_circle_finder_finds_a_circle():
    class Graph:  # a, b import each other; c imports a
        modules = {"a", "b", "c"}
        edges = {"a": {"b"}, "b": {"a"}, "c": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges[m]

    assert _circles(Graph()) == [["a", "b"]]
