"""The README is the front door and the pages of docs/ state what the code does: the
README is short and names the two commands CI relies on; the reference's option tables
are the ones generated from the config records, its commands table shows every option of
the command line; the architecture's layout table names every module; every test the
"Bad input" table names exists."""
import re

from conftest import ROOT
from pipeline.config.reference import BEGIN, END, PAGE, reference


def section(page: str, heading: str) -> str:
    """A page's section, from its `## heading` to the next one."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end >= 0 else len(text)]


def test_the_readme_is_under_200_lines_and_names_make_run_and_make_test():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) < 200
    assert "make run" in text and "make test" in text  # .ci/run calls `make test`


def test_the_option_tables_are_generated_from_the_code():
    assert PAGE == ROOT / "docs" / "reference.md"
    text = PAGE.read_text(encoding="utf-8")
    block = text[text.index(BEGIN): text.index(END) + len(END)]
    assert block == reference(), "docs/reference.md option tables are stale: run `make docs`"


def test_every_test_the_bad_input_table_cites_exists():
    table = section("docs/operations.md", "Bad input")
    cited = set(re.findall(r"`(test_\w+)`", table))
    defined = {m for path in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", path.read_text(), re.M)}
    assert cited and cited <= defined, cited - defined


def test_the_commands_table_shows_every_option_of_every_command():
    import argparse

    from pipeline.cli import build_parser

    table = section("docs/reference.md", "Commands")

    def options(parser: argparse.ArgumentParser, path: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from options(sub, f"{path} {name}".strip())
            elif action.option_strings and "--help" not in action.option_strings:
                yield path, action.option_strings

    missing = [(path, flags) for path, flags in options(build_parser(), "")
               if not any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", table) for f in flags)]
    assert not missing, missing


def test_the_layout_table_names_every_module():
    text = section("docs/architecture.md", "Where things live")
    table = text[text.index("| where | what it does |"):]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `pipeline/([\w./]+)` \| (.*) \|$", table, re.M)}
    package = ROOT / "pipeline"
    missing = [f"{p.name} (top level)" for p in package.glob("*.py")
               if p.name not in ("__init__.py", "__main__.py") and p.name not in rows]
    for folder in (d for d in package.iterdir() if d.is_dir() and (d / "__init__.py").exists()):
        row = rows.get(f"{folder.name}/", "")
        missing += [f"{folder.name}/{p.name}" for p in folder.glob("*.py")
                    if p.name != "__init__.py" and f"`{p.name}`" not in row]
    assert not missing, missing
