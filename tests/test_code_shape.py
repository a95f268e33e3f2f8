"""The code stays readable by a newcomer: no function over ~60 lines in the package, no
class over ~150 lines where the run's machinery lives (engines, runtime, the graph)."""
import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "pipeline"
MAX_FUNCTION = 60
MAX_CLASS = 150
CLASS_LIMITED = ("engines", "runtime", "graph.py")


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


def test_no_class_of_the_run_machinery_is_longer_than_a_few_screens():
    limited = [(w, n) for w, n in definitions((ast.ClassDef,))
               if Path(w.split(":")[0]).parts[1] in CLASS_LIMITED and n > MAX_CLASS]
    assert not limited, limited
