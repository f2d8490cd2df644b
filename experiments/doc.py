"""A report as a list of blocks, written as Markdown and as one self-contained HTML file (figures embedded)."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path

from censusrecon.experiments.results import atomic_write_text

_INLINE = [(re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"), (re.compile(r"`(.+?)`"), r"<code>\1</code>"),
           (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"<em>\1</em>")]

_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;line-height:1.5;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:.92em}
th,td{border:1px solid #ccc;padding:.3em .6em}th{background:#f2f2f2}td.n{text-align:right;font-variant-numeric:tabular-nums}
img{max-width:100%;border:1px solid #eee}code{background:#f5f5f5;padding:0 .2em}h1{border-bottom:2px solid #ddd}"""


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    for pattern, repl in _INLINE:
        out = pattern.sub(repl, out)
    return out


@dataclass
class Doc:
    """Blocks in order: ("h", level, text), ("p", text), ("ul", items), ("table", header, rows,
    numeric columns), ("img", path, alt). Text may use **bold**, *italic* and `code`."""

    blocks: list = field(default_factory=list)

    def h(self, level: int, text: str) -> "Doc":
        self.blocks.append(("h", level, text))
        return self

    def p(self, text: str) -> "Doc":
        self.blocks.append(("p", text))
        return self

    def ul(self, items: list[str]) -> "Doc":
        if items:
            self.blocks.append(("ul", list(items)))
        return self

    def table(self, header: list[str], rows: list[list], numeric: set[int] | None = None) -> "Doc":
        numeric = numeric if numeric is not None else {i for i in range(1, len(header))}
        self.blocks.append(("table", header, [[str(c) for c in r] for r in rows], numeric))
        return self

    def img(self, path: Path, alt: str) -> "Doc":
        self.blocks.append(("img", Path(path), alt))
        return self

    # ---- renderers -----------------------------------------------------------------------
    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out += ["#" * b[1] + " " + b[2], ""]
            elif b[0] == "p":
                out += [b[1], ""]
            elif b[0] == "ul":
                out += [f"- {x}" for x in b[1]] + [""]
            elif b[0] == "table":
                _, header, rows, numeric = b
                out.append("| " + " | ".join(header) + " |")
                out.append("|" + "|".join("---:" if i in numeric else "---" for i in range(len(header))) + "|")
                out += ["| " + " | ".join(r) + " |" for r in rows] + [""]
            elif b[0] == "img":
                out += [f"![{b[2]}]({b[1].name})", ""]
        return "\n".join(out).rstrip() + "\n"

    def html(self, title: str) -> str:
        out = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
               f"<style>{_CSS}</style></head><body>"]
        for b in self.blocks:
            if b[0] == "h":
                slug = re.sub(r"[^a-z0-9]+", "-", b[2].lower()).strip("-")
                out.append(f"<h{b[1]} id='{slug}'>{_inline(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{_inline(b[1])}</p>")
            elif b[0] == "ul":
                out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in b[1]) + "</ul>")
            elif b[0] == "table":
                _, header, rows, numeric = b
                head = "".join(f"<th>{_inline(h)}</th>" for h in header)
                body = "".join("<tr>" + "".join(f"<td{' class=n' if i in numeric else ''}>{_inline(c)}</td>"
                                                for i, c in enumerate(r)) + "</tr>" for r in rows)
                out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            elif b[0] == "img":
                path = b[1]
                if path.exists():
                    data = base64.b64encode(path.read_bytes()).decode()
                    out.append(f"<p><img alt='{html.escape(b[2])}' src='data:image/png;base64,{data}'></p>")
                else:
                    out.append(f"<p><em>(figure {html.escape(path.name)} is missing)</em></p>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"

    def write(self, run_dir: Path, stem: str, title: str) -> tuple[Path, Path]:
        """Write ``stem``.md and ``stem``.html (self-contained) atomically; return their paths."""
        md, page = Path(run_dir) / f"{stem}.md", Path(run_dir) / f"{stem}.html"
        atomic_write_text(md, self.markdown())
        atomic_write_text(page, self.html(title))
        return md, page
