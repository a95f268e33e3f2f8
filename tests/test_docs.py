"""Docs that cannot rot: every YAML example in the README and `docs/` parses, and every one
that is a whole config passes what `pipeline validate` checks (its paths resolved as if
it sat in the repository's `configs/`); every `pipeline ...` command line shown in a shell
block is one the command line accepts; every link to a file of the repository (and to a
heading of a page) resolves. A collection that finds nothing fails: a page whose examples
stopped being found (a renamed fence, a moved page) must not pass by checking none."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```\s*$", re.S | re.M)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
INLINE = re.compile(r"`(pipeline [^`]+)`")
SHELL = ("sh", "bash", "console", "shell")
COMMAND = re.compile(r"^(?:\$ )?(?:\.venv/bin/)?(?:python3? -m )?pipeline (.*)$")
PLACEHOLDERS = ("[", "|", "...", "<", "…")  # a synopsis, not a command line


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def fenced(page: Path) -> list[tuple[str, int, str]]:
    """(language, line, text) of each fenced block of a page."""
    text = page.read_text(encoding="utf-8")
    return [(m.group(1), text.count("\n", 0, m.start()) + 1, m.group(2)) for m in FENCE.finditer(text)]


def cases(found: list[tuple[str, str]], what: str) -> list:
    """`found` as test cases, or one case that fails when there is none."""
    if found:
        return [pytest.param(where, text, id=where) for where, text in found]
    return [pytest.param(None, what, id=f"no {what} found")]


def examples() -> list[tuple[str, str]]:
    return [(f"{rel(p)}:{line}", body) for p in PAGES for lang, line, body in fenced(p) if lang in ("yaml", "yml")]


def is_whole_config(data) -> bool:
    return isinstance(data, dict) and {"sources", "graph"} <= set(data)


def configs_folder(tmp_path: Path) -> Path:
    """A folder that stands for the repository's `configs/`: `../models` and `../samples`
    from it are the repository's."""
    for name in ("models", "samples"):
        (tmp_path / name).symlink_to(ROOT / name)
    (tmp_path / "configs").mkdir()
    return tmp_path / "configs"


@pytest.mark.parametrize("where,body", cases(examples(), "YAML example"))
def test_every_yaml_example_parses_and_a_whole_config_passes_validate(where, body, tmp_path):
    from pipeline.preflight import check

    assert where is not None, f"no {body} in README.md or docs/"
    data = yaml.safe_load(body)
    assert isinstance(data, dict), f"{where}: a YAML example is a mapping (a config or a part of one)"
    if not is_whole_config(data):
        return
    path = configs_folder(tmp_path) / "example.yaml"
    path.write_text(body)
    checked = check(str(path), for_run=False)
    assert checked.problems == [], f"{where}: {checked.problems}"


def command_lines() -> list[tuple[str, str]]:
    """Command lines in shell blocks (```sh, ```bash, ```console): `pipeline ...`, `$ pipeline
    ...`, `.venv/bin/pipeline ...` or `python -m pipeline ...`, as the arguments after
    `pipeline`, a trailing `# comment` left out."""
    found = []
    for page in PAGES:
        for lang, line, body in fenced(page):
            if lang not in SHELL:
                continue
            for k, text in enumerate(body.replace("\\\n", " ").splitlines()):
                m = COMMAND.match(text.strip())
                if m:
                    found.append((f"{rel(page)}:{line + 1 + k}", "pipeline " + m.group(1).split(" #")[0].strip()))
    return found


def mentions() -> list[tuple[str, str]]:
    """Commands named in the text (`pipeline bench --load-sweep`): not whole lines."""
    found = []
    for page in PAGES:
        for k, text in enumerate(FENCE.sub("", page.read_text(encoding="utf-8")).splitlines()):
            found += [(f"{rel(page)}:{k + 1}", m.group(1)) for m in INLINE.finditer(text)
                      if not any(p in m.group(1) for p in PLACEHOLDERS)]
    return found


@pytest.mark.parametrize("where,line", cases(command_lines(), "pipeline command line in a shell block"))
def test_every_command_line_shown_is_accepted(where, line, capsys):
    from pipeline.cli import build_parser

    assert where is not None, f"no {line} in README.md or docs/"
    try:
        build_parser().parse_args(shlex.split(line)[1:])
    except SystemExit:
        pytest.fail(f"{where}: `{line}` is refused: {capsys.readouterr().err.strip().splitlines()[-1]}")


def test_every_command_named_in_the_text_exists_with_the_options_it_names():
    import argparse

    from pipeline.cli import build_parser

    wrong = []
    for where, line in mentions():
        parser, words = build_parser(), shlex.split(line)[1:]
        for word in words:
            subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if subs and not word.startswith("-"):
                if word not in subs[0].choices:
                    wrong.append(f"{where}: `{line}`: no command {word!r}")
                    break
                parser = subs[0].choices[word]
            elif word.startswith("-") and word.split("=")[0] not in parser._option_string_actions:
                wrong.append(f"{where}: `{line}`: no option {word!r}")
    assert not wrong, wrong


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", text, re.M)}


def test_every_link_to_a_file_or_a_heading_of_the_repository_resolves():
    broken = []
    for page in PAGES:
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):  # https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{rel(page)}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{rel(page)}: {target} (no such heading)")
    assert not broken, broken
