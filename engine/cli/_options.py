"""What the commands share to parse their flags: the Command record, the parser, and the option groups that
several commands take (the RunConfig flags, a row count, the launch options)."""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Literal, NoReturn

from engine.config import RunConfig, config_fields, field_choices, load_toml
from engine.errors import UsageError, printable
from engine.run.hostfit import HEAVY, OVERSUBSCRIBE_ENV
from engine.run.preflight import DEFAULT_TIMEOUT_S, TIMEOUT_ENV, set_time_limit

__all__ = [
    "Command",
    "Handler",
    "Options",
    "Parser",
    "add_config_flags",
    "config_from_args",
    "count",
    "launch_options",
    "launch_settings",
    "no_options",
]

Handler = Callable[[argparse.Namespace], int]
Options = Callable[["Parser"], None]


def no_options(p: Parser) -> None:
    """A command with no options besides --db."""


@dataclass(frozen=True)
class Command:
    """One row of the command table (engine/cli/__init__.py).

    handler(args) -> exit status; options(parser) adds its flags; help: its line in `--help`'s list (the
    handler's docstring is the command's own --help text). pending: when the RunLogs that waited for the store are
    stored, "before" the command, "after" it (a run never waits for the store), or "never". reads: the command
    only reads, so it stores nothing, not even what waits (it says so instead)."""

    handler: Handler
    options: Options
    help: str
    pending: Literal["before", "after", "never"] = "before"
    reads: bool = False


class Parser(argparse.ArgumentParser):
    """argparse with bad usage as one line (UsageError), and the registries' names in help read only when shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # (action, field, default's text) of each flag whose help lists a registry's names (add_config_flags)
        self.named_flags: list[tuple[argparse.Action, dataclasses.Field[Any], str]] = []

    def error(self, message: str) -> NoReturn:  # one line, not usage + traceback
        raise UsageError(f"{self.prog}: {message} (see --help)")

    def format_help(self) -> str:
        """Help, with the registries' names filled in only now: listing them imports torch (seconds), which a
        command that only runs (`run` launches a child that imports it) would pay for nothing."""
        for action, field, tail in self.named_flags:
            names = "|".join(field_choices(field) or ())
            action.help = f"{field.metadata['help']} [{names}]{tail}".replace("%", "%%")
        self.named_flags = []
        return super().format_help()


MAX_COUNT = 2**63 - 1  # DuckDB's BIGINT: a larger LIMIT is a binder error, not a result


def count(text: str) -> int:
    """argparse type of a row count (--limit, --max-rows): a whole number from 1 up; argparse names the flag."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"'{printable(text[:40])}' is not a whole number; give one from 1 up"
        ) from None
    if not 1 <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(
            f"{printable(text[:40])} is out of range; give a whole number from 1 to {MAX_COUNT}"
        )
    return value


def add_config_flags(p: Parser) -> None:
    """One flag per RunConfig field; the names of a registry's field are listed when help is shown (Parser)."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for f in config_fields():
        group = groups.setdefault(f.metadata["group"], p.add_argument_group(f"{f.metadata['group']} fields"))
        flag = "--" + f.name.replace("_", "-")
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        named = isinstance(f.metadata.get("choices"), str)  # a registry's names, not a fixed tuple
        choices = None if named else field_choices(f)
        tail = f" (default: {default!r})"
        help_ = f.metadata["help"] + (f" [{'|'.join(choices)}]" if choices else "") + tail
        help_ = help_.replace("%", "%%")  # argparse formats help with %
        if f.type == "bool":
            action = group.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help_
            )
        else:
            action = group.add_argument(
                flag, dest=f.name, default=None, metavar=str(f.type).upper().replace("[STR]", ""), help=help_
            )
        if named:
            p.named_flags.append((action, f, tail))


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The config of the flags and --config, checked against the schema (the machine: hostfit.check_rules)."""
    data: dict[str, Any] = {}
    if args.config:
        data.update(load_toml(args.config))
    for f in config_fields():
        value = getattr(args, f.name, None)
        if value is not None:
            data[f.name] = value
    return RunConfig.from_dict(data)


def launch_options(p: Parser) -> None:
    """What every launching command (run, sweep, tune) shares: preflight's time limit, insisting on oversubscribing."""
    p.add_argument(
        "--preflight-timeout",
        metavar="SECONDS",
        default=None,
        help=f"how long each call into a plugin may take while it is tried on one batch before launch "
        f"(default: ${TIMEOUT_ENV} or {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        help=f"run even when ranks or worker processes exceed {HEAVY}x this host's usable cores (memory "
        f"that cannot fit is refused regardless; also ${OVERSUBSCRIBE_ENV}=1)",
    )


def launch_settings(args: argparse.Namespace) -> None:
    """Set the launch options for this process and what it starts (the launchers read the environment)."""
    if args.preflight_timeout is not None:
        set_time_limit(args.preflight_timeout)
    if args.oversubscribe:
        os.environ[OVERSUBSCRIBE_ENV] = "1"
