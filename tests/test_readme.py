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


def yaml_blocks(text: str) -> list[dict]:
    import yaml

    return [yaml.safe_load(m.group(1)) for m in re.finditer(r"^```yaml\n(.*?)^```$", text, re.S | re.M)]


def merged(base: dict, recipe: dict) -> dict:
    """`recipe` added to `base` as a user pastes it: mappings merged, anything else replaced."""
    out = dict(base)
    for key, value in recipe.items():
        out[key] = merged(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return out


def readme_recipes() -> list[tuple[str, dict]]:
    """Each YAML recipe of the README added to its "Your cameras" config (as if in configs/)."""
    (base,) = yaml_blocks(section("README.md", "Your cameras"))
    recipes = yaml_blocks(section("README.md", "Recipes"))
    assert base and recipes
    return [(f"{i}-{'+'.join(r)}", merged(base, r)) for i, r in enumerate(recipes)]


def own_configs_folder(root):
    """A `configs/` stand-in of its own for one recipe: each is its own config, beside the
    others would share (and be refused) one `out`."""
    from test_docs import configs_folder

    root.mkdir()
    return configs_folder(root)


def test_every_readme_recipe_in_the_readmes_config_passes_validate_as_written(tmp_path):
    """What a reader does: paste a recipe into the config above it and validate; the
    events recipe named a broker that does not resolve and passed, then lost every event."""
    import yaml

    from pipeline.preflight import check

    for name, config in readme_recipes():
        path = own_configs_folder(tmp_path / name) / "mine.yaml"
        path.write_text(yaml.safe_dump(config))
        assert check(str(path), for_run=False).problems == [], name


def test_every_readme_recipe_runs_with_what_it_names_here(tmp_path):
    """Each recipe run for a few frames: the cameras, broker, endpoint and port it names
    stand here for this machine's (the sample clip for a camera at 10.0.0.7, a local
    Mosquitto and endpoint, a free port); everything else as written."""
    import json
    import subprocess
    import sys

    import yaml
    from brokers import Mosquitto, Webhook, available, free_port

    from conftest import missing

    if available():
        missing(available())
    broker, hook = Mosquitto(tmp_path / "broker").start(), Webhook()
    try:
        for name, config in readme_recipes():
            for source in config["sources"]:
                for key in ("uri", "detect_uri"):
                    if "10.0.0.7" in source.get(key, ""):
                        source[key] = "../samples/vtest.mp4"
            outputs = config["outputs"]
            if "web" in outputs:
                outputs["web"]["port"] = free_port()
            events = outputs.get("events", {})
            if "mqtt" in events:
                events["mqtt"].update(host="127.0.0.1", port=broker.port)
            if "webhook" in events:
                events["webhook"]["url"] = hook.url
            path = own_configs_folder(tmp_path / name) / "mine.yaml"  # the README's configs/mine.yaml, one each
            path.write_text(yaml.safe_dump(config))
            r = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", str(path), "--max-frames", "3",
                                "-q", "--report", str(tmp_path / f"{name}.json")], capture_output=True, text=True,
                               cwd=ROOT, timeout=180)
            assert r.returncode == 0, (name, r.stderr[-2000:])
            report = json.loads((tmp_path / f"{name}.json").read_text())
            assert {c["processed"] for c in report["cameras"].values()} == {3}, (name, report["cameras"])
    finally:
        broker.stop()
        hook.server.shutdown()
