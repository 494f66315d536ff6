"""Which values are secret, and how they are kept out of everything we print or store.

A value is secret when its environment variable name looks like a credential
(HF_TOKEN, OPENAI_API_KEY, ...) or when it follows an argv flag that looks like one
(`--api-key X`, `--hf-token=X`). Secret values are masked in every diff, dump,
error and state file; the env file references them (`NAME=${NAME}`) instead of
storing them, and the supervisor passes the real value only in the spawned
process's environment.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence

MASK = "***"

#: whole words of a name or flag that mark a credential. Words, not substrings: MAX_TOKENS,
#: --max-num-batched-tokens and --num-speculative-tokens are counts, and masking "8192"
#: would blank every 8192 in the engine log shown to the user.
_SECRET_WORDS = frozenset({"token", "secret", "password", "passwd", "credential", "credentials", "apikey"})
_SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key")})


def _is_secret_words(words: list[str]) -> bool:
    lowered = [word.lower() for word in words if word]
    return any(word in _SECRET_WORDS for word in lowered) or any(
        pair in _SECRET_PAIRS for pair in itertools.pairwise(lowered)
    )


def is_secret_name(name: str) -> bool:
    """True for env names such as HF_TOKEN, OPENAI_API_KEY, DB_PASSWORD, MY_SECRET."""
    return _is_secret_words(name.split("_"))


def is_secret_flag(flag: str) -> bool:
    """True for argv flags such as --api-key, --hf-token or --ssl-keyfile-password."""
    return flag.startswith("-") and _is_secret_words(re.split(r"[-_]", flag.lstrip("-").split("=")[0]))


def secret_env_names(env: Mapping[str, str]) -> set[str]:
    return {name for name in env if is_secret_name(name)}


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of `env` with every secret value replaced by the mask (and a URL's password)."""
    return {
        name: (MASK if is_secret_name(name) and value else _USERINFO.sub(_mask_value, value))
        for name, value in env.items()
    }


def holds_secret(name: str, value: str) -> bool:
    """Whether an env variable's value is (or holds) a credential: by its name or a URL password."""
    return bool(value) and (is_secret_name(name) or bool(url_passwords(value)))


def mask_argv(argv: Sequence[str]) -> list[str]:
    """A copy of argv with the value after (or inside) a secret-looking flag masked."""
    masked: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            masked.append(MASK)
            hide_next = False
            continue
        flag, eq, _value = token.partition("=")
        if is_secret_flag(flag):
            if eq:
                masked.append(f"{flag}={MASK}")
            else:
                masked.append(token)
                hide_next = True
            continue
        masked.append(_USERINFO.sub(_mask_value, token))  # a URL's password
    return masked


def secret_values(env: Mapping[str, str], argv: Sequence[str] = ()) -> list[str]:
    """Every secret value in env and argv (longest first, for text redaction)."""
    masked = [*_secret_env_values(env), *_masked_argv_values(argv)]
    values = [v.partition("=")[2] if v.startswith("-") else v for v in masked]  # `--flag=value`
    values += [password for text in (*env.values(), *argv) for password in url_passwords(text)]
    return sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)


def _secret_env_values(env: Mapping[str, str]) -> list[str]:
    return [value for name, value in env.items() if is_secret_name(name) and value]


def _masked_argv_values(argv: Sequence[str]) -> list[str]:
    """The tokens of argv that `mask_argv` masks, as they were."""
    return [orig for orig, shown in zip(argv, mask_argv(argv), strict=True) if orig != shown]


def shown_argv(argv: Sequence[str]) -> str:
    """argv as one readable line with secret flag values masked, for an error message; a
    program text (`python3 -c SCRIPT`) is named by its size, not printed line by line."""

    def shown(arg: str) -> str:
        if "\n" in arg.strip():
            return f"<{arg.strip().count(chr(10)) + 1}-line script>"
        return repr(arg) if (not arg or any(c.isspace() for c in arg)) else arg

    return " ".join(shown(arg) for arg in mask_argv(argv))


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of every secret value in `text` by the mask."""
    for value in secrets:
        text = text.replace(value, MASK)
    return text


def redact_tree(value: object, secrets: Sequence[str]) -> object:
    """`redact` applied to every string inside lists and dicts (before JSON encoding,
    where a secret holding a tab or a quote would no longer match as written)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, list | tuple):
        return [redact_tree(item, secrets) for item in value]
    if isinstance(value, dict):
        return {key: redact_tree(item, secrets) for key, item in value.items()}
    return value


#: a secret-looking name and the value a log line prints after it: `'api_key': ['sk-1']`,
#: `api_key='sk-1'`, `"hf_token": "x"`, `HF_TOKEN=x`, `--api-key sk-1` (argv quoted in a log)
_ASSIGNMENT = re.compile(
    r"""(?P<name>-{0,2}[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>['"]?\s*[:=]\s*|\s+)"""
    r"""(?P<value>\[[^\]]*\]|'[^']*'|"[^"]*"|[^\s,;)}\]'"]+)"""
)
#: values a log prints for an unset secret: nothing to hide
_UNSET = frozenset({"None", "null", "[]", "''", '""', "[None]", "True", "False", "true", "false"})
#: a count ("#new-token: 6", "max_tokens=8192") is never a credential
_NUMBER = re.compile(r"[-+]?[0-9][0-9.,eE+-]*")


def _mask_assignment(match: re.Match[str]) -> str:
    name, sep, value = match.group("name", "sep", "value")
    argv_like = name.startswith("--")
    if (not argv_like and not sep.strip()) or value in _UNSET or _NUMBER.fullmatch(value):
        return match.group(0)
    if not _is_secret_words(re.split(r"[-_.]", name.lstrip("-"))):
        return match.group(0)
    if value[0] in "'\"":
        shown = f"{value[0]}{MASK}{value[0]}"
    elif value[0] == "[":
        shown = f"['{MASK}']"
    else:
        shown = MASK
    return f"{name}{sep}{shown}"


#: a credential after an auth scheme: `Bearer sk-1` anywhere, `Authorization: Basic dXM6cHc=`
_BEARER = re.compile(
    r"(?i)(?:\bbearer\s+|\bauthorization['\"]?\s*[:=]\s*['\"]?(?:[A-Za-z]+\s+)?)(?P<value>[A-Za-z0-9._~+/=:-]{4,})"
)
#: the password of a URL's userinfo: `https://user:pw@host` (the user name stays)
_USERINFO = re.compile(r"(?i)(?P<lead>\b[a-z][a-z0-9+.-]*://[^/\s:@'\"]*:)(?P<value>[^/\s@'\"]+)@")
#: prose a server writes when it quotes a key back: `Incorrect API key provided: sk-1`
_PROSE = re.compile(
    r"(?i)\b(?P<lead>(?:api[ _-]?key|access[ _-]?token|token|password|secret)(?: provided| given| used)?"
    r"\s*[:=]\s*['\"]?)(?P<value>[^\s'\",;]{4,})"
)

#: a credential recognised by its own published shape wherever it stands (prose with no name
#: before it: `401: token hf_... is invalid`): Hugging Face access tokens, OpenAI-style keys,
#: GitHub tokens; long enough that a word (`hf_transfer`, `sk-learn`) never matches
_SHAPED = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<value>hf_[A-Za-z0-9]{30,}|sk-[A-Za-z0-9_-]{20,}|gh[opsur]_[A-Za-z0-9]{30,})"
)


def _mask_value(match: re.Match[str]) -> str:
    value = match.group("value")
    if value in _UNSET or _NUMBER.fullmatch(value) or value.lower() in ("bearer", "basic") or value == MASK:
        return match.group(0)
    start, end = match.start("value") - match.start(), match.end("value") - match.start()
    return match.group(0)[:start] + MASK + match.group(0)[end:]


def _mask_assignments(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        masked = _mask_assignment(match)
        if masked != match.group(0):
            return masked
        # not a secret's name: its value may still hold an assignment (`export HF_TOKEN=x`)
        name, sep, value = match.group("name", "sep", "value")
        return f"{name}{sep}{_ASSIGNMENT.sub(one, value)}" if _ASSIGNMENT.search(value) else masked

    return _ASSIGNMENT.sub(one, text)


def mask_log_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Text to store or show (a log line, an error, a server's answer quoted back): every known
    secret value masked (`redact`), and a value in any shape that names a credential: after a
    secret-looking name (`api_key='sk-1'`, `"hf_token": "x"`, `HF_TOKEN=x`, YAML `api_key: x`,
    `--api-key x`, `--hf-token=x`; an engine echoing its args: vLLM's `non-default args:
    {'api_key': [...]}`, SGLang's `ServerArgs(api_key='...')`), after an auth scheme
    (`Authorization: Bearer x`), a URL's password (`https://user:x@host`), a server's prose
    (`Incorrect API key provided: x`) and a token of a known shape anywhere (`hf_...`, `sk-...`)."""
    text = redact(text, secrets)
    for pattern in (_USERINFO, _BEARER, _PROSE, _SHAPED):
        text = pattern.sub(_mask_value, text)
    return _mask_assignments(text)


def mask_fields(value: object) -> object:
    """A JSON value (request fields, --extra-body) with the value of every key named like a
    credential (`api_key`, `hf_token`, `password`) masked, at any depth, and every string
    passed through `mask_log_text` (a URL with a password)."""
    if isinstance(value, str):
        return mask_log_text(value)
    if isinstance(value, list | tuple):
        return [mask_fields(item) for item in value]
    if isinstance(value, dict):
        return {
            key: (
                MASK if _is_secret_words(re.split(r"[-_.]", str(key))) and value[key] else mask_fields(item)
            )
            for key, item in value.items()
        }
    return value


def field_secrets(value: object) -> list[str]:
    """The values `mask_fields` hides, to redact where a server quotes them back."""
    found: list[str] = []
    if isinstance(value, list | tuple):
        for item in value:
            found += field_secrets(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            if _is_secret_words(re.split(r"[-_.]", str(key))) and isinstance(item, str | int | float):
                found.append(str(item))
            else:
                found += field_secrets(item)
    return [v for v in found if len(v) >= 4]


def url_passwords(text: str) -> list[str]:
    """The passwords of the URLs in `text` (`https://user:pw@host`)."""
    return [m.group("value") for m in _USERINFO.finditer(text) if len(m.group("value")) >= 4]


def url_without_credentials(url: str) -> str:
    """`scheme://user:password@host/...` as `scheme://host/...`: a URL to store or print."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    authority, slash, path = rest.partition("/")
    return f"{scheme}{sep}{authority.rpartition('@')[2]}{slash}{path}"


def shown_url(url: str) -> str:
    """A URL for an error line: no credentials, and no query or fragment (they may hold a token)."""
    stripped = url_without_credentials(url)
    cut = min((i for i in (stripped.find("?"), stripped.find("#")) if i >= 0), default=-1)
    return stripped if cut < 0 else f"{stripped[:cut]}?{MASK}"


#: what an exact secret value a server echoed into an answer becomes in the rows written
CONTENT_MARKER = "[secret removed]"


def replace_secrets(text: str, secrets: Sequence[str]) -> tuple[str, int]:
    """`text` with every exact secret value replaced by CONTENT_MARKER, and how many were."""
    count = 0
    for value in secrets:
        found = text.count(value)
        if found:
            count += found
            text = text.replace(value, CONTENT_MARKER)
    return text, count


def mask_tree(value: object, secrets: Sequence[str] = ()) -> object:
    """A JSON value to store or show with no credential: every string through `mask_log_text`,
    and a list of strings (an argv) through `mask_argv` first, so `["--api-key", "K"]` hides K
    whether or not K is known."""
    if isinstance(value, str):
        return mask_log_text(value, secrets)
    if isinstance(value, list | tuple):
        items = list(value)
        if items and all(isinstance(item, str) for item in items):
            items = mask_argv(items)
        return [mask_tree(item, secrets) for item in items]
    if isinstance(value, dict):
        return {key: mask_tree(item, secrets) for key, item in value.items()}
    return value


def unmask_argv(masked: Sequence[str], original: Sequence[str]) -> list[str]:
    """`masked` (an argv stored through `mask_argv`, flags added or changed since) with each
    masked value back as `original` has it: told apart by the flag before it."""
    shown = mask_argv(original)
    known = {
        (before, token): value
        for before, token, value in zip(["", *shown], shown, original, strict=False)
        if token != value
    }
    return [known.get((before, token), token) for before, token in zip(["", *masked], masked, strict=False)]
