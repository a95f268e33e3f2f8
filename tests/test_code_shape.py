"""The code stays readable by a newcomer: short functions and classes, modules named for
what they hold (no two alike), imports that go one way only: from a floor of the house
to the floors below it, never up and never in a circle."""
import ast
from collections import defaultdict
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "pipeline"
MAX_FUNCTION = 60
MAX_CLASS = 150

# The floors of the house, lowest first. A module imports from its own floor or below;
# a folder (or top-level module) not listed here fails the test until it is placed.
FLOORS = [
    ["errors", "frames", "allocator"],
    ["redact"],
    ["config"],
    ["metrics"],
    ["runtime", "pictures", "preprocess", "decoders", "drawing"],
    ["engines", "catalog"],
    ["recording"],
    ["live"],
    ["events"],
    ["store"],
    ["sources", "stages", "sinks"],
    ["control"],
    ["web"],
    ["side_outputs"],
    ["graph", "preflight"],
    ["runloop", "reload", "status_view"],
    ["modelfile", "bench", "cluster"],
    ["cli", "__main__"],
]
FLOOR = {part: level for level, parts in enumerate(FLOORS) for part in parts}
# where a run opens model sessions; the model tools and the benchmark's limit open their own
RUN_PATH = ("preflight.py", "graph.py", "engines", "cluster")


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports() -> dict[str, set[str]]:
    """Each module's imports of the package's modules, type-checking ones included (an
    import made for a type hint ties the floors as much as any other)."""
    known = modules()
    out: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pipeline":
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    out[name].add(full if full in known else node.module)
            elif isinstance(node, ast.Import):
                out[name].update(a.name for a in node.names if a.name.split(".")[0] == "pipeline")
    return out


def floor(module: str) -> int | None:
    parts = module.split(".")
    return FLOOR.get(parts[1]) if len(parts) > 1 else None


def definitions(kind: tuple[type, ...]) -> list[tuple[str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, kind):
                where = f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"  # type: ignore[attr-defined]
                found.append((where, node.end_lineno - node.lineno + 1))  # type: ignore[attr-defined]
    return found


def test_no_function_is_longer_than_a_screen():
    long = [(w, n) for w, n in definitions((ast.FunctionDef, ast.AsyncFunctionDef)) if n > MAX_FUNCTION]
    assert not long, long


def test_no_class_is_longer_than_a_few_screens():
    long = [(w, n) for w, n in definitions((ast.ClassDef,)) if n > MAX_CLASS]
    assert not long, long


def test_no_two_modules_share_a_name():
    """A newcomer who looks for `encoder.py` opens the one there is."""
    names = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            names[path.name].append(str(path.relative_to(ROOT)))
    assert not {n: p for n, p in names.items() if len(p) > 1}


def test_every_folder_has_its_floor_and_imports_only_from_its_floor_or_below():
    unplaced = sorted({m.split(".")[1] for m in modules() if m != "pipeline" and floor(m) is None})
    assert not unplaced, f"place these in FLOORS: {unplaced}"
    upward = sorted(f"{a} -> {b}" for a, bs in imports().items() for b in bs
                    if b != "pipeline" and floor(b) is not None and floor(a) is not None and floor(b) > floor(a))
    assert not upward, upward


def test_no_module_imports_itself_through_others():
    graph = imports()
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(v: str) -> None:  # Tarjan: each strongly connected part of more than one module is a circle
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            part = []
            while True:
                w = stack.pop()
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(sorted(part))

    for module in modules():
        if module not in order:
            visit(module)
    assert not circles, circles


def test_stages_see_engines_only_through_their_protocol():
    """A fake engine stands in for a model in the stages' tests: they name no concrete engine."""
    seen = {b for a, bs in imports().items() if a.startswith("pipeline.stages") for b in bs
            if b.startswith("pipeline.engines")}
    assert seen <= {"pipeline.engines.protocol", "pipeline.engines.batching"}, seen


def test_a_run_opens_model_sessions_in_one_place():
    """One call creates a run's sessions (`engines.model_check.open_model`): checked once, handed on."""
    sites = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.parts[0] not in RUN_PATH:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "create_session":
                sites.append(f"{rel}:{node.lineno}")
    assert len(sites) == 1 and sites[0].startswith("engines/model_check.py"), sites
