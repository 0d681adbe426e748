"""One redaction for every sink: results, provenance, Hydra's files, logs, stdout, W&B.

What counts as a secret:

* the value (not a float) under a key whose name is a secret name (:func:`is_secret_name`, the
  same rule for config keys and environment variables, case-insensitive): one of its
  ``_``/``-``/``.`` separated parts is a credential word (key, apikey, token, secret, password,
  passwd, passphrase, pass, pwd, pat, auth, authorization, credential(s), bearer, cookie, session,
  signature, sig, privatekey), or a part *ends* with a credential word of five letters or more
  written without a separator (``APITOKEN``, ``CLIENTSECRET``, ``PGPASSWORD``), or the name is a
  connection string (``DATABASE_URL``, ``DB_URL``, ``*_DSN``, ``connection_string``) - so
  ``endpoint_auth``, ``api_key``, ``MYSQL_PWD``, ``DB_PASS`` and ``GITHUB_PAT`` are secrets,
  ``max_new_tokens`` and ``tokenizer`` are not; a credential word after ``per`` or before a
  measurement word (``chars_per_token``, ``token_match_rate``, ``prompt_token_limit``,
  ``first_token_timeout_s``) is not; names ending in ``_env`` name an environment variable and
  are kept, and so are ``PWD``/``OLDPWD`` (the shell's working directory);
* the value after a credential flag: a command-line flag whose name is a secret name
  (``--api-key VALUE``, ``--token VALUE``, ``--hf-token=VALUE``), as a list's next item
  (``server_args: [--api-key, VALUE]``) or in any text (a command line, an override, a YAML list);
* in any string: URL userinfo (``scheme://user:PASSWORD@host``), URL query parameters and
  ``name=value`` / ``name: value`` pairs whose name is a credential name, ``Bearer ...``,
  strings shaped like API keys (``sk-``, ``hf_``, ``ghp_``, JWTs ...);
* any value registered with :func:`remember` (the run's own secrets, found in its config)
  and the value of every environment variable whose name is a credential name.

Every sink goes through this module: results, provenance, Hydra's files, logs, stdout, the logs
of servers the harness starts (``backends.server_set``) and every value handed to a third party
(W&B: its config, summary and its settings - project, entity, name, group, tags, dir).
"""
from __future__ import annotations

import functools
import logging
import os
import re
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

REDACTED = "<redacted>"
SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "secrets", "password", "passwd", "passphrase", "pass", "pwd", "pat",
    "auth", "authorization", "credential", "credentials", "bearer", "cookie", "session", "signature", "sig",
    "privatekey",
})
# compound words without a separator (APITOKEN, CLIENTSECRET, PGPASSWORD): a part ending in one of
# these; the short words (key, pat, pwd, pass, sig, auth) only as whole parts (monkey, compass stay)
SUFFIX_WORDS = tuple(sorted((w for w in SECRET_WORDS if len(w) >= 5), key=len, reverse=True))
CONNECTION_NAMES = frozenset({"database_url", "db_url", "dsn", "database_dsn", "db_dsn", "connection_string",
                              "conn_string", "connection_uri", "database_uri", "db_uri"})
_PARTS = re.compile(r"[_\-.\s]+")
_NAME = r"[A-Za-z0-9_.\-]*"
_VALUE_SHAPES = re.compile(r"\b(sk-|hf_|ghp_|gho_|ghs_|github_pat_|xox[bap]-|eyJ)[A-Za-z0-9_\-.]{8,}")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)([^/@\s'\"]+)@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9_\-.=+/]{6,}")
# a URL's query parameters (before _PAIR, whose host:port match would swallow the rest of the URL)
_QUERY = re.compile(r"(?P<lead>[?&;])(?P<name>[A-Za-z0-9_.\-]+)=(?P<value>[^&#\s'\"]+)")
# name=value (command lines, query strings, overrides) and name: value (YAML, logs)
_PAIR = re.compile(r"(?P<name>[A-Za-z0-9_.\-+]+)(?P<sep>['\"]?\s*(?:=|:(?!//))\s*)(?P<q>['\"]?)(?P<value>[^\s&,;'\"}\]]+)")
# a credential flag and its value in text: "--api-key VALUE", "[--api-key,VALUE]", a YAML list's next item
_FLAG = re.compile(r"(?P<flag>(?<![\w\-])--?[A-Za-z][A-Za-z0-9_\-.]*)(?P<sep>\s*,\s*|\s*\n\s*-\s+|[ \t]+)"
                   r"(?P<q>['\"]?)(?P<value>[^\s,'\"\[\]{}]+)")
_KNOWN: set[str] = set()
MIN_SECRET_LEN = 6  # shorter values (e.g. 'true', '1') would redact ordinary text


# a credential word next to one of these names a measurement or a setting about it, not a secret:
# chars_per_token, token_match_rate, prompt_token_limit, first_token_timeout_s, key_dir, api_key_file
NOT_CREDENTIAL_AFTER = frozenset({"rate", "limit", "limits", "timeout", "count", "counts", "len", "length", "size",
                                  "frac", "fraction", "ratio", "match", "ms", "budget", "total", "id", "ids", "type",
                                  "types", "dir", "path", "file", "name", "names", "env"})
NOT_SECRET = frozenset({"full_key", "sort_key", "cache_key", "primary_key", "foreign_key", "key_type", "keys",
                        "keyerror", "key_error", "ssh_auth_sock", "xauthority", "key_dir", "pwd", "oldpwd",
                        "why_pass"})  # why_pass: why a cell's passes ran back to back (protocol)


def is_secret_name(name: Any) -> bool:
    return _is_secret_name(str(name))


@functools.lru_cache(maxsize=4096)  # called for every environment variable on every redacted string
def _is_secret_name(name: str) -> bool:
    text = name.lstrip("+~").lower()
    if text.endswith("_env") or text.endswith("-env"):
        return False
    leaf = text.rsplit(".", 1)[-1]
    if leaf in NOT_SECRET:
        return False
    if leaf.replace("-", "_") in CONNECTION_NAMES or leaf.endswith(("_database_url", "_dsn", "_db_url")):
        return True
    parts = [p for p in _PARTS.split(leaf) if p]
    for i, part in enumerate(parts):
        if part not in SECRET_WORDS and not part.endswith(SUFFIX_WORDS):
            continue
        after = parts[i + 1] if i + 1 < len(parts) else ""
        if (i > 0 and parts[i - 1] == "per") or after in NOT_CREDENTIAL_AFTER:
            continue  # a unit or a measurement (chars_per_token, token_match_rate), not a credential
        return True
    return leaf.replace("_", "").replace("-", "") in SECRET_WORDS


def is_credential_flag(item: Any) -> bool:
    """``--api-key``, ``-token``, ``--hf-token``: a flag whose value is a secret (``--api-key=VALUE``
    holds its value itself: a name=value pair)."""
    return isinstance(item, str) and item.startswith("-") and "=" not in item and is_secret_name(item.lstrip("-"))


def env_secrets() -> set[str]:
    return {v for k, v in os.environ.items() if is_secret_name(k) and len(v) >= MIN_SECRET_LEN}


def remember(value: Any) -> None:
    """Redact ``value`` (a secret string) wherever it appears from now on in this process."""
    if isinstance(value, str) and len(value) >= MIN_SECRET_LEN and value != REDACTED:
        _KNOWN.add(value)


def collect(obj: Any) -> None:
    """Remember the secrets in a config: values under secret names, URL passwords and query tokens."""
    if is_dataclass(obj):
        obj = asdict(obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            if is_secret_name(k) and isinstance(v, (str, int)) and not isinstance(v, bool):
                remember(str(v))
            collect(v)
    elif isinstance(obj, (list, tuple)):
        for flag, v in zip([None, *obj], obj):
            if is_credential_flag(flag) and isinstance(v, (str, int)) and not isinstance(v, bool):
                remember(str(v))
            collect(v)
    elif isinstance(obj, str):
        for m in _USERINFO.finditer(obj):
            userinfo = m.group(2)
            remember(userinfo.split(":", 1)[1] if ":" in userinfo else userinfo)
        for pattern in (_QUERY, _PAIR):
            for m in pattern.finditer(obj):
                if is_secret_name(m.group("name")):
                    remember(m.group("value"))
        for m in _FLAG.finditer(obj):
            if is_credential_flag(m.group("flag")):
                remember(m.group("value"))


def _pair(m: re.Match) -> str:
    if not is_secret_name(m.group("name")) or m.group("value") == REDACTED:
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{m.group('q')}{REDACTED}"


def redact_text(text: str) -> str:
    if not text:
        return text
    for secret in sorted(_KNOWN | env_secrets(), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _VALUE_SHAPES.sub(REDACTED, text)
    text = _QUERY.sub(lambda m: m.group(0) if not is_secret_name(m.group("name")) or m.group("value") == REDACTED
                      else f"{m.group('lead')}{m.group('name')}={REDACTED}", text)
    text = _FLAG.sub(_flag, text)
    return _PAIR.sub(_pair, text)


def _flag(m: re.Match) -> str:
    if not is_credential_flag(m.group("flag")) or m.group("value") == REDACTED:
        return m.group(0)
    return f"{m.group('flag')}{m.group('sep')}{m.group('q')}{REDACTED}"


def redact(obj: Any) -> Any:
    """A copy of ``obj`` (dataclass, dict, list, str, ...) with every secret replaced by ``<redacted>``."""
    if is_dataclass(obj) and not isinstance(obj, type):
        obj = asdict(obj)
    if isinstance(obj, dict):
        return {k: (REDACTED if is_secret_name(k) and v not in (None, "") and not isinstance(v, (dict, list, bool, float))
                    else redact(v)) for k, v in obj.items()}  # a float is a measurement, never a credential
    if isinstance(obj, (list, tuple)):
        return [REDACTED if is_credential_flag(flag) and v not in (None, "") and not isinstance(v, (dict, list, bool))
                else redact(v) for flag, v in zip([None, *obj], obj)]
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


def redact_file(path: Path) -> None:
    """Rewrite a text file, redacted (Hydra's config/overrides/log files).

    The redacted copy replaces the file atomically. When that copy cannot be written (a full
    disk, a file size limit), the file is rewritten in place (truncated first, which frees its
    space); when even that fails it is deleted. A secret-bearing file never stays, and no
    ``.redact.tmp`` is left behind.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return
    clean = redact_text(text)
    if clean == text:
        return
    tmp = path.with_name(f".{path.name}.redact.tmp")
    try:
        tmp.write_text(clean, encoding="utf-8", errors="surrogateescape")
        os.replace(tmp, path)
        return
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
    try:
        path.write_text(clean, encoding="utf-8", errors="surrogateescape")
        return
    except OSError as exc:
        logging.getLogger(__name__).warning("could not write %s redacted (%s): deleted it", path, exc)
    try:
        path.unlink()
    except OSError:  # truncate at least: the secret goes with the text
        try:
            os.truncate(path, 0)
        except OSError:
            pass


def redact_tree(root: Path, suffixes=(".yaml", ".yml", ".log", ".json", ".txt")) -> None:
    """Redact every text file under ``root`` (e.g. the ``.hydra`` folders inside a results folder)."""
    root = Path(root)
    if not root.is_dir():
        return
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in suffixes:
            redact_file(path)


class RedactingFilter(logging.Filter):
    """A handler filter: the formatted message (and any traceback) reaches the handler redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a broken format string is logged as it is
            return True
        record.msg, record.args = redact_text(message), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        if record.exc_info:
            record.exc_info = None  # formatted (redacted) above: handlers must not format it again
        return True


def install_log_filter() -> None:
    """Put the redacting filter on every handler of the root logger (idempotent)."""
    for handler in logging.getLogger().handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
