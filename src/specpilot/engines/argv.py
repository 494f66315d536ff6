"""The one reader of engine argv: which tokens are which flag, and their value text.

Everything that looks at engine flags (check's findings and values, the effective-args
rewrite, applying a fix, taking the model flag out of a pasted command, dropping the
speculative flags for a plan's plain twin) reads argv through `read_argv`, so they
agree on the edge cases the engines' argparse decides:

- `--flag=value` and `--flag value`; a boolean flag takes no value;
- a token is an option when it starts with `-`, unless it is a negative number
  (argparse reads `--max-running-requests -1` as the value -1);
- a unique prefix of a long flag is that flag (argparse's `allow_abbrev`, on in both
  engines); an ambiguous prefix is unknown;
- vLLM's parser rewrites argv first: `--max_num_seqs` is `--max-num-seqs`, `-O3` and
  `-O 3` are `--optimization-level 3`, and `--compilation-config.mode 3` sets one key
  of a JSON flag (`key_path`); SGLang's argparse refuses all three;
- `--no-<flag>` is whatever the release table lists it as (vLLM's negatable booleans); from
  vLLM 0.33.0 `--disable-x` negates `--enable-x` (the table's `negations`);
- a list flag takes every value up to the next option; `--` ends the options;
- a flag this release dropped reads its values as the newest older release that had it did.

Values stay text here; check converts them by the flag's kind (and merges dotted keys
into their JSON flag with `with_dotted_key`).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from specpilot.engines.flags import FlagInfo, ReleaseTable, former_flags
from specpilot.engines.human_int import human_int

_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def is_option(token: str) -> bool:
    """argparse's test: `-x`/`--x` is an option string, `-1` and `-` are values."""
    return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)


@dataclass(frozen=True)
class FlagUse:
    """One flag as it occurs in argv: `argv[start:stop]` is the flag and its values."""

    #: the option as typed, without `=value`
    typed: str
    #: the release's spelling it resolved to (the typed one, normalised); typed when unknown
    spelling: str
    #: None when the release defines no such flag
    flag: FlagInfo | None
    values: tuple[str, ...]
    inline: bool
    start: int
    stop: int
    #: `--compilation-config.mode 3` sets the key ("mode",) of the flag's JSON value
    key_path: tuple[str, ...] = ()

    @property
    def missing_value(self) -> bool:
        return self.flag is not None and self.flag.takes_value and not self.values

    @property
    def negated(self) -> bool:
        """`--no-<flag>` of a boolean whose own name does not start with `--no-`, or one of the
        negations the table lists (`--disable-x` of vLLM 0.33.0's `--enable-x`)."""
        if self.flag is None:
            return False
        if self.flag.negations:
            return self.spelling in self.flag.negations
        return self.spelling.startswith("--no-") and not self.flag.name.startswith("--no-")

    @property
    def text(self) -> str | None:
        """The value of a one-value flag (None for a boolean or a missing value)."""
        return self.values[0] if len(self.values) == 1 else None


@dataclass(frozen=True)
class ReadArgv:
    argv: tuple[str, ...]
    uses: tuple[FlagUse, ...]
    positional: tuple[str, ...]

    def last(self, dest: str) -> FlagUse | None:
        """The use argparse keeps for a dest: the last one."""
        found = [u for u in self.uses if u.flag is not None and u.flag.dest == dest]
        return found[-1] if found else None

    def tokens_of(self, use: FlagUse) -> list[str]:
        return list(self.argv[use.start : use.stop])

    def in_order(self) -> Iterator[FlagUse | str]:
        """Each flag use and each positional token, in argv order."""
        starts = {use.start: use for use in self.uses}
        i = 0
        while i < len(self.argv):
            use = starts.get(i)
            if use is None:
                yield self.argv[i]
                i += 1
            else:
                yield use
                i = use.stop

    def without(self, drop: Callable[[FlagUse], bool]) -> list[str]:
        """argv minus the uses `drop` selects, each with its values."""
        dropped = [u for u in self.uses if drop(u)]
        gone = {i for u in dropped for i in range(u.start, u.stop)}
        return [token for i, token in enumerate(self.argv) if i not in gone]


OPTIMIZATION_LEVEL = "--optimization-level"
#: the values vLLM takes after a separate `-O` (`-O 3`)
_SEPARATE_O_LEVELS = frozenset({"0", "1", "2", "3"})


def resolve(table: ReleaseTable, typed: str) -> tuple[str, FlagInfo | None]:
    """(the spelling, its flag) for an option as typed; (typed, None) when unknown."""
    index = table.by_spelling
    if typed in index:
        return typed, index[typed]
    if table.flexible_parser and typed.startswith("--") and "_" in typed:
        dashed = "--" + typed[2:].replace("_", "-")
        if dashed in index:
            return dashed, index[dashed]
    if typed.startswith("--"):
        matches = {id(f): (s, f) for s, f in index.items() if s.startswith(typed)}
        if len(matches) == 1:
            spelling, flag = next(iter(matches.values()))
            return spelling, flag
    return typed, None


def read_argv(table: ReleaseTable, argv: tuple[str, ...] | list[str]) -> ReadArgv:
    """Split argv into flag uses and positional arguments, as the release's parser would."""
    tokens = tuple(argv)
    uses: list[FlagUse] = []
    positional: list[str] = []
    # a prefix (`--tp`) is a scan of every spelling: once per distinct option, not per use,
    # so a spec with thousands of args reads in milliseconds
    resolved: dict[str, tuple[str, FlagInfo | None]] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":
            positional += tokens[i + 1 :]
            break
        if not is_option(token):
            positional.append(token)
            i += 1
            continue
        use = _use_at(table, tokens, i, resolved)
        uses.append(use)
        i = use.stop
    return ReadArgv(tokens, tuple(uses), tuple(positional))


def _use_at(
    table: ReleaseTable, tokens: tuple[str, ...], start: int, resolved: dict[str, tuple[str, FlagInfo | None]]
) -> FlagUse:
    """The use of the option `tokens[start]`, with the values that follow it."""
    if table.flexible_parser and (rewritten := _flexible(table, tokens, start)) is not None:
        return rewritten
    typed, inline, inline_value = tokens[start].partition("=")
    if typed not in resolved:
        resolved[typed] = resolve(table, typed)
    spelling, flag = resolved[typed]
    if inline:
        return FlagUse(typed, spelling, flag, (inline_value,), True, start, start + 1)
    # a flag this release dropped takes the values it took before (`--cuda-graph-bs 1 2 4`)
    most = _most_values(flag or former_flags(table).get(typed))
    after = tokens[start + 1 : None if most is None else start + 1 + most]
    values = tuple(itertools.takewhile(lambda token: not is_option(token), after))
    return FlagUse(typed, spelling, flag, values, False, start, start + 1 + len(values))


def _most_values(flag: FlagInfo | None) -> int | None:
    """How many of the tokens after a flag it takes, up to the next option (None: all of
    them, a list flag's); an unknown flag takes one."""
    if flag is None:
        return 1
    if flag.kind == "list":
        return None
    return 1 if flag.takes_value else 0


def _flexible(table: ReleaseTable, tokens: tuple[str, ...], start: int) -> FlagUse | None:
    """The use vLLM's argv rewrite makes of `tokens[start]`, when it rewrites it at all."""
    if tokens[start].startswith("-O") and (level := _optimization_level(table, tokens, start)) is not None:
        return level
    return _dotted_key(table, tokens, start)


def _optimization_level(table: ReleaseTable, tokens: tuple[str, ...], start: int) -> FlagUse | None:
    """`-O3`, `-O=3` and `-O 3` as `--optimization-level 3` (where the release has it)."""
    token = tokens[start]
    after = tokens[start + 1] if start + 1 < len(tokens) else None
    level = resolve(table, OPTIMIZATION_LEVEL)[1]
    if level is None:
        return None
    if token != "-O":
        value = token[3:] if token[2] == "=" else token[2:]
        return FlagUse("-O", OPTIMIZATION_LEVEL, level, (value,), True, start, start + 1)
    if after in _SEPARATE_O_LEVELS:
        return FlagUse("-O", OPTIMIZATION_LEVEL, level, (after,), False, start, start + 2)
    return None


def _dotted_key(table: ReleaseTable, tokens: tuple[str, ...], start: int) -> FlagUse | None:
    """`--compilation-config.mode 3`: one key of a JSON flag, its value inline or next."""
    typed, inline, inline_value = tokens[start].partition("=")
    if not typed.startswith("--") or "." not in typed:
        return None
    name, *keys = typed.removesuffix("+").split(".")
    spelling, flag = resolve(table, name)
    if flag is None:
        return None
    if inline:
        return FlagUse(typed, spelling, flag, (inline_value,), True, start, start + 1, tuple(keys))
    values = tokens[start + 1 : start + 2]
    return FlagUse(typed, spelling, flag, values, False, start, start + 1 + len(values), tuple(keys))


def json_object(value: object) -> dict[str, Any]:
    """A JSON flag's value as an object: itself when already one, else its text parsed;
    {} when absent, not JSON, or not an object (the flag's rule says why)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):
        return {}
    try:
        parsed = json.loads(value)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def with_dotted_key(kind: str, current: object, use: FlagUse) -> object:
    """A JSON flag's value with the key `use` sets, as vLLM's parser sets it
    (`--compilation-config.mode 3`): the text read as JSON, else a size like 80g, else
    as it is; `key+ a,b` is the list [a, b]. Text stays text for a flag of kind str."""
    text = use.values[0]
    item: object
    if use.typed.endswith("+"):
        item = text.split(",")
    else:
        try:
            item = json.loads(text)
        except ValueError:
            try:
                item = human_int(text)
            except ValueError:
                item = text
    config = dict(json_object(current))
    node = config
    for key in use.key_path[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[use.key_path[-1]] = item
    return config if kind == "json" else json.dumps(config)
