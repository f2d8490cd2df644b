"""mkdocs hook: the home page is the README, and the reference page is filled from the argparse
parser and the config schema, at build time, so neither can drift from what it documents."""

import re
from pathlib import Path

from censusrecon.experiments.reference import cli_reference, config_reference

README = Path(__file__).resolve().parents[1] / "README.md"


def readme() -> str:
    """README.md with its links into docs/pages/ made relative to the site."""
    text = README.read_text(encoding="utf-8")
    text = re.sub(r"\[`docs/pages/`\]\(docs/pages/\)", "`docs/pages/`", text)
    return re.sub(r"\(docs/pages/([^)]+)\)", r"(\1)", text)


MARKERS = {"<!-- generated: readme -->": readme, "<!-- generated: commands -->": cli_reference,
           "<!-- generated: config -->": config_reference}


def on_page_markdown(markdown, page, config, files):
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
