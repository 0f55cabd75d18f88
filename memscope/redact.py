"""Secrets out of command lines: what looks like a credential is replaced by ``***`` before a command line is stored
or shown (the record, the summary, ``report``, ``ls``, the Prometheus label, the dashboard).

What counts as a secret (the README's one line says the same):

- the value of an option or assignment whose name's last word is one of ``SECRET_WORDS`` — ``--hf_token=…``,
  ``--token …``, ``--password …``, ``--api-key …``, ``OPENAI_API_KEY=…``, ``trainer.wandb_key=…`` — in an argument
  of its own or inside one (``bash -c "python t.py --token …"``); ``--token-file PATH`` and ``--max-tokens 20`` are
  not secrets (their last word is another);
- the value of an HTTP header of such a name given as an argument (``curl -H "PRIVATE-TOKEN: …"``,
  ``-H "X-Api-Key: …"``);
- the password of a URL (``https://user:***@host``) and the credentials of an HTTP authorization
  (``Bearer ***``);
- anything of a known token format wherever it stands (``TOKEN_FORMATS``: Hugging Face ``hf_``, OpenAI/Anthropic
  ``sk-``, GitHub ``ghp_``/``github_pat_``, Slack ``xox…-``, AWS ``AKIA…``, GitLab, Google, PyPI, npm, JWTs);
  the prefix stays, so that a person still sees which key it was.

Over-redaction is the cheaper error: ``--sort-key name`` shows as ``--sort-key ***``. Standard library only (layer 0).
"""

from __future__ import annotations

import re
from typing import Iterable

MASK = "***"

# The last word of a name (split at "-", "_", "."; any case) that makes its value a secret.
SECRET_WORDS = (
    "token",
    "secret",
    "password",
    "passwd",
    "passphrase",
    "key",
    "apikey",
    "credential",
    "credentials",
    "auth",
    "cookie",
)
_SECRET_NAME = re.compile(r"(?:^|[-_.+])(?:" + "|".join(SECRET_WORDS) + r")$", re.I)

# Known formats: kept prefix, then the secret part.
TOKEN_FORMATS = (
    r"hf_[A-Za-z0-9]{20,}",  # Hugging Face
    r"sk-[A-Za-z0-9_-]{20,}",  # OpenAI (sk-proj-…), Anthropic (sk-ant-…), and others' secret keys
    r"gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub
    r"github_pat_[A-Za-z0-9_]{20,}",
    r"xox[abposr]-[A-Za-z0-9-]{10,}",  # Slack
    r"(?:AKIA|ASIA)[A-Z0-9]{16}",  # AWS access key id
    r"glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"AIza[0-9A-Za-z_-]{35}",  # Google API key
    r"pypi-[A-Za-z0-9_-]{50,}",  # PyPI
    r"npm_[A-Za-z0-9]{36}",  # npm
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # a JWT (header.payload.signature)
)
_TOKEN = re.compile(
    r"(?<![A-Za-z0-9])(" + "|".join(f"(?:{f})" for f in TOKEN_FORMATS) + r")(?![A-Za-z0-9])",
)
_PREFIX = re.compile(r"^(hf_|sk-|gh[pousr]_|github_pat_|xox[abposr]-|AKIA|ASIA|glpat-|AIza|pypi-|npm_|eyJ)")
# An HTTP authorization header's credentials: "Authorization: Bearer <token>", "Basic <base64>".
_AUTH_SCHEME = re.compile(r"(?<![A-Za-z0-9])((?:Bearer|Basic|Token)\s+)([A-Za-z0-9._~+/=-]{8,})", re.I)
# scheme://user:password@host
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])([A-Za-z][A-Za-z0-9+.-]*://[^\s/:@'\"]*:)([^\s/@'\"]+)(@)")
# Inside a string (a shell command in one argument, a command line stored joined): NAME=VALUE and --NAME VALUE.
_VALUE = r"(\"[^\"]*\"|'[^']*'|[^\s\"']+)"
_ASSIGN_IN_TEXT = re.compile(r"(?<![^\s\"'])([-+]{0,2}[A-Za-z_][\w.+-]*)(=)" + _VALUE)
_OPTION_IN_TEXT = re.compile(r"(?<![^\s\"'])(--?[A-Za-z][\w.-]*)(\s+)" + r"(?!-)" + _VALUE)
# An HTTP header given on a command line (`curl -H "PRIVATE-TOKEN: …"`, `-H "X-Api-Key: …"`): NAME: VALUE.
_HEADER_IN_TEXT = re.compile(r"(?<![^\s\"'])([A-Za-z][\w.-]*)(:[ \t]*)" + _VALUE)


def is_secret_name(name: str) -> bool:
    """Whether the value of an option or variable of this name is a secret (``--hf_token``, ``API_KEY``)."""
    return bool(_SECRET_NAME.search(name.lstrip("-+")))


def redact_text(text: str) -> str:
    """``text`` with every secret in it replaced by ``***`` (a command line as one string, a shell command)."""
    if not text:
        return text
    out = _TOKEN.sub(_mask_token, text)
    out = _URL_PASSWORD.sub(lambda m: m.group(1) + MASK + m.group(3), out)
    out = _AUTH_SCHEME.sub(lambda m: m.group(1) + MASK, out)
    out = _ASSIGN_IN_TEXT.sub(_mask_named, out)
    out = _HEADER_IN_TEXT.sub(_mask_named, out)
    return _OPTION_IN_TEXT.sub(_mask_named, out)


def redact_argv(argv: Iterable[object]) -> list[str]:
    """The command line ``argv`` with every secret replaced by ``***``: the value after a secret option given
    alone (``--token VALUE``), the value of ``NAME=VALUE`` with a secret name, and what ``redact_text`` finds
    inside each argument."""
    out: list[str] = []
    hide_next = False
    for a in (str(x) for x in argv):
        if hide_next and not a.startswith("--"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        if a.startswith("-") and "=" not in a and is_secret_name(a):
            hide_next = True
            out.append(a)
            continue
        name, eq, _value = a.partition("=")
        if eq and " " not in name and is_secret_name(name):
            out.append(redact_text(name) + "=" + MASK)
            continue
        out.append(redact_text(a))
    return out


# Where command lines stand in the data of the record's events: an agent's hello and exec (argv, orig_argv), the
# processes named at the end (cmdline), anything that names a command.
ARGV_KEYS = frozenset({"argv", "orig_argv", "cmdline", "command"})


def redact_fields(data: object) -> object:
    """``data`` (an event's JSON-able data) with the command lines in it (under ``ARGV_KEYS``, at any depth)
    redacted; the rest as it is. The same object when nothing changed."""
    if isinstance(data, dict):
        out = {}
        changed = False
        for k, v in data.items():
            if k in ARGV_KEYS and isinstance(v, (list, tuple)):
                nv: object = redact_argv(v)
            elif k in ARGV_KEYS and isinstance(v, str):
                nv = redact_text(v)
            else:
                nv = redact_fields(v)
            changed = changed or nv != v
            out[k] = nv
        return out if changed else data
    if isinstance(data, list):
        items = [redact_fields(v) for v in data]
        return items if any(a is not b for a, b in zip(items, data)) else data
    return data


def _mask_token(m: re.Match[str]) -> str:
    p = _PREFIX.match(m.group(1))
    return (p.group(1) if p else "") + MASK


def _mask_named(m: re.Match[str]) -> str:
    if not is_secret_name(m.group(1)) or m.group(3).strip("\"'") in ("", MASK):
        return m.group(0)
    v = m.group(3)
    quote = v[0] if v[0] in "\"'" and len(v) > 1 else ""
    return m.group(1) + m.group(2) + quote + MASK + quote
