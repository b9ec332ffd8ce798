"""The CLI does what the README says: every ``regionfed run`` / ``compare`` example in the
README (and the docs pages it links) parses, and its configuration validates."""

import re
import shlex
from pathlib import Path

import pytest
from helpers import shared_data

from regionfed.cli import build_parser, config_from_args

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def examples(page: Path) -> list[str]:
    """The ``regionfed run|compare …`` command lines of a page's bash blocks (continuations
    joined, comments dropped)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].split(" # ")[0].strip()
            if re.match(r"regionfed (run|compare)\b", line):
                commands.append(line)
    return commands


CASES = [(page.name, command) for page in PAGES for command in examples(page)]


def test_the_readme_has_examples_to_check():
    assert sum(name == "README.md" for name, _ in CASES) >= 8


@pytest.mark.parametrize("page, command", CASES)
def test_every_documented_command_line_is_a_valid_configuration(page, command, tmp_path,
                                                                monkeypatch):
    argv = shlex.split(command)[1:]
    if "--resume" in argv or "--help" in argv:
        return  # reads a run folder / prints the help
    prefix = "../shared/data/"  # the prepared data, wherever this checkout finds it
    argv = [str(shared_data(*a[len(prefix):].split("/"))) if a.startswith(prefix) else a
            for a in argv]
    if "--data-dir" in argv and not (ROOT / argv[argv.index("--data-dir") + 1]).exists():
        pytest.skip("the documented data folder is not beside this checkout")
    monkeypatch.chdir(ROOT)
    args = build_parser().parse_args(argv)
    config_from_args(args)  # raises ConfigError on any key or value it does not accept
