"""Compare two result trees file by file: did a change of code leave the results as they were?

    python bench/compare_results.py BEFORE AFTER [--json OUT] [--ignore KEY ...]

Every file present in either tree is compared: Parquet tables cell for cell (pandas, exact: floats bit for bit,
NaN equal to NaN), JSON and JSON lines value for value with the keys that say when or how long something ran left
out (``--ignore`` adds keys), YAML and Markdown text line for line with such lines left out, anything else
(pictures) byte for byte or, for PNG and PDF, only that both exist (their bytes carry a timestamp). Prints one line
per file and a summary; ``--json`` writes them, with the two trees' paths, for a record in bench/results/.
Exit status 0 when every file compares equal, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

#: keys whose values say when or how long, or which code ran (its digest, which a change of code changes by design):
#: never a result
VOLATILE = {"code_fingerprint", "code", "when", "seconds", "audit_seconds", "elapsed", "elapsed_seconds", "started", "finished", "wall_seconds",
            "created", "written", "time", "duration", "seconds_by_audit", "timing", "run_seconds", "fit_seconds",
            "unit_seconds", "compile"}


def _volatile(key, ignore: set[str]) -> bool:
    """A key that says how long or when: one of ``ignore``, or any key naming seconds (``seconds_unit``, ...)."""
    return key in ignore or (isinstance(key, str) and (key.startswith("seconds") or key.endswith("_seconds")))


def _strip(value, ignore: set[str]):
    if isinstance(value, dict):
        return {k: _strip(v, ignore) for k, v in value.items() if not _volatile(k, ignore)}
    if isinstance(value, list):
        return [_strip(v, ignore) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    return value


def _first_difference(a, b, where: str = "") -> str | None:
    """Where two JSON values first differ, in words; None where they are equal."""
    if type(a) is not type(b) and not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        return f"{where or 'value'}: {type(a).__name__} {str(a)[:80]!r} vs {type(b).__name__} {str(b)[:80]!r}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{where}.{k}: only {'after' if k in b else 'before'}"
            d = _first_difference(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {str(a)[:80]!r} vs {str(b)[:80]!r}"


def _json_values(path: Path):
    text = path.read_text()
    if path.suffix == ".jsonl":
        return [json.loads(x) for x in text.splitlines() if x.strip()]
    return json.loads(text)


def _text_lines(path: Path, ignore: set[str]) -> list[str]:
    return [x for x in path.read_text().splitlines()
            if not any(f"{k}:" in x or f"{k} " in x.lower() for k in ignore) and "seconds" not in x]


def compare_file(a: Path, b: Path, ignore: set[str]) -> str | None:
    """None where the two files hold the same results, else what differs first."""
    suffix = a.suffix
    if suffix == ".parquet":
        import pandas as pd

        x, y = pd.read_parquet(a), pd.read_parquet(b)
        if list(x.columns) != list(y.columns):
            return f"columns differ: {list(x.columns)} vs {list(y.columns)}"
        if len(x) != len(y):
            return f"{len(x)} rows vs {len(y)}"
        try:
            pd.testing.assert_frame_equal(x, y, check_exact=True)
        except AssertionError as e:
            return " ".join(str(e).split())[:300]
        return None
    if suffix in (".json", ".jsonl"):
        return _first_difference(_strip(_json_values(a), ignore), _strip(_json_values(b), ignore))
    if suffix in (".yaml", ".md", ".txt", ".csv"):
        la, lb = _text_lines(a, ignore), _text_lines(b, ignore)
        if la == lb:
            return None
        i = next((i for i, (p, q) in enumerate(zip(la, lb)) if p != q), min(len(la), len(lb)))
        return f"line {i + 1}: {(la[i] if i < len(la) else '')[:100]!r} vs {(lb[i] if i < len(lb) else '')[:100]!r}"
    if suffix in (".png", ".pdf", ".html"):
        return None  # pictures and the page that embeds them carry their making time; their data is compared above
    return None if a.read_bytes() == b.read_bytes() else "bytes differ"


def compare_trees(before: Path, after: Path, ignore: set[str]) -> dict:
    files = sorted({p.relative_to(before) for p in before.rglob("*") if p.is_file()}
                   | {p.relative_to(after) for p in after.rglob("*") if p.is_file()})
    out = {}
    for rel in files:
        a, b = before / rel, after / rel
        if not a.exists() or not b.exists():
            out[str(rel)] = f"only {'after' if b.exists() else 'before'}"
            continue
        out[str(rel)] = compare_file(a, b, ignore) or "equal"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--ignore", nargs="*", default=[], help="more keys to leave out of JSON files")
    ap.add_argument("--json", type=Path, help="write the comparison here")
    args = ap.parse_args(argv)
    ignore = VOLATILE | set(args.ignore)
    result = compare_trees(args.before, args.after, ignore)
    for rel, what in result.items():
        print(f"{'=' if what == 'equal' else '≠'} {rel}" + ("" if what == "equal" else f": {what}"))
    differ = [r for r, w in result.items() if w != "equal"]
    print(f"{len(result) - len(differ)} of {len(result)} files equal" + (f"; {len(differ)} differ" if differ else ""))
    if args.json:
        args.json.write_text(json.dumps({"before": str(args.before), "after": str(args.after),
                                         "ignored_keys": sorted(ignore), "files": result,
                                         "equal": not differ}, indent=1, ensure_ascii=False) + "\n")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
