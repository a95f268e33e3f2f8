"""The README states what the code does: its option tables are the ones generated from
the config records, and every test its "Bad input" table names exists."""
import re

from conftest import ROOT
from pipeline.config.reference import BEGIN, END, reference


def test_the_option_tables_are_generated_from_the_code():
    text = (ROOT / "README.md").read_text()
    block = text[text.index(BEGIN): text.index(END) + len(END)]
    assert block == reference(), "README option tables are stale: run `make docs`"


def test_every_test_the_bad_input_table_cites_exists():
    text = (ROOT / "README.md").read_text()
    table = text[text.index("## Bad input"): text.index("## Benchmark")]
    cited = set(re.findall(r"`(test_\w+)`", table))
    defined = {m for path in (ROOT / "tests").rglob("test_*.py")
               for m in re.findall(r"^def (test_\w+)", path.read_text(), re.M)}
    assert cited and cited <= defined, cited - defined
