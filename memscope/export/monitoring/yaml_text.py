"""Block-style YAML for the rules file: mappings, lists, strings and numbers, nothing else.

Rules files are YAML; the rules are plain data of five kinds of values, so a 30-line writer replaces a dependency
(PyYAML) that the package would carry for one subcommand. Strings are written double-quoted in JSON's escaping,
which YAML reads as the same string; ``promtool check rules`` reads the result in CI.
"""

from __future__ import annotations

import json
from typing import Any


def dump(value: Any) -> str:
    """``value`` as block-style YAML text, ending with a newline."""
    return "\n".join(_lines(value, 0)) + "\n"


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    raise TypeError(f"not a YAML scalar here: {type(v).__name__}")


def _lines(v: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, (dict, list)) and x:
                out.append(f"{pad}{k}:")
                out.extend(_lines(x, indent + 2))
            else:
                out.append(
                    f"{pad}{k}: {_scalar(x) if not isinstance(x, (dict, list)) else ('{}' if isinstance(x, dict) else '[]')}"
                )
        return out
    if isinstance(v, list):
        for x in v:
            sub = _lines(x, indent + 2) if isinstance(x, (dict, list)) else [f"{pad}  {_scalar(x)}"]
            out.append(f"{pad}- {sub[0].lstrip()}")
            out.extend(sub[1:])
        return out
    return [pad + _scalar(v)]
