"""The command and config reference, generated from the argparse parser and the config schema, so it cannot drift."""

from __future__ import annotations

import argparse
import types
import typing

from pydantic import BaseModel


def _escape(text: str) -> str:
    """A table cell's text: pipes escaped, one line, and angle brackets as entities (``OUT/<name>/``
    is text, not an HTML tag for the Markdown renderer to swallow)."""
    return str(text).replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def cli_reference() -> str:
    """Markdown: every command with its description and a table of its arguments."""
    from censusrecon.experiments.cli import build_parser

    parser = build_parser()
    out = [f"`censusrecon` — {_escape(parser.description)}", "", _escape(parser.epilog or ""), ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, p in sub.choices.items():
        out += [f"## censusrecon {name}", "", _escape(p.description or helps.get(name, "")), "", "```",
                p.format_usage().replace("usage: ", "").strip(), "```", "",
                "| argument | meaning |", "|---|---|"]
        for a in p._actions:
            if a.dest == "help":
                continue
            flag = ", ".join(a.option_strings) if a.option_strings else a.dest
            extra = ""
            if a.choices:
                extra = f" (one of: {', '.join(map(str, a.choices))})"
            if a.default not in (None, False, [], argparse.SUPPRESS) and a.option_strings and "default" not in (a.help or ""):
                extra += f" (default: {a.default})"
            out.append(f"| `{flag}` | {_escape(a.help or '')}{_escape(extra)} |")
        out.append("")
    return "\n".join(out)


def _type_words(annotation) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_words(a) for a in args if a is not type(None)) + (
            ", or null" if type(None) in args else "")
    if origin in (list, tuple):
        return "list of " + (_type_words(args[0]) if args else "values")
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    return getattr(annotation, "__name__", str(annotation))


def _model(annotation):
    """The config section a field holds, if any (also inside a list or an optional)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for a in typing.get_args(annotation):
        m = _model(a)
        if m is not None:
            return m
    return None


def _summary(model) -> str:
    """A section's meaning: the first sentence of its class docstring."""
    doc = " ".join((model.__doc__ or "").split())
    return doc.split(". ")[0].rstrip(".") + "." if doc else ""


def config_reference() -> str:
    """Markdown: every config key (dotted), its type, default and meaning, section by section."""
    from censusrecon.experiments.config import ExperimentConfig

    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str, seen: set) -> None:
        rows, subs = [], []
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            default = "required" if field.is_required() else repr(
                field.get_default(call_default_factory=True)) if not _model(field.annotation) else "see below"
            sub = _model(field.annotation)
            meaning = field.description or (_summary(sub) if sub is not None else "")
            rows.append(f"| `{key}` | {_escape(_type_words(field.annotation))} | {_escape(default)} | "
                        f"{_escape(meaning)} |")
            if sub is not None and sub not in seen:
                subs.append((sub, key))
        doc = (model.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        out.extend([f"## `{prefix.rstrip('.') or 'top level'}`", "", doc, "",
                    "| key | type | default | meaning |", "|---|---|---|---|", *rows, ""])
        for sub, key in subs:
            walk(sub, key + ".", seen | {sub})

    walk(ExperimentConfig, "", {ExperimentConfig})
    return "\n".join(out)
