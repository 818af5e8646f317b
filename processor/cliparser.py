"""``recurrence``'s argument parser: a mistake is reported by the (sub)command it was made in.

argparse reports an unknown flag from the top-level parser, with the top-level
usage, however deep the subcommand it was given to. ``parse_command_line``
parses in two passes instead: the first collects what no parser knew, the
second hands it to the subcommand that was chosen, which prints its own usage
and names the flag (and the flag or command it is closest to).
"""

import argparse
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any, Final, NoReturn

_NUMBER: Final = re.compile(r"-\d+(\.\d*)?|-\.\d+")


def _closest(word: str, candidates: Iterable[str]) -> str | None:
    import difflib  # noqa: PLC0415 - only a mistake needs it

    # Compared without their dashes: every flag shares "--", which would make any two look alike.
    bare = {candidate.lstrip("-"): candidate for candidate in candidates}
    found = difflib.get_close_matches(word.lstrip("-"), list(bare), n=1, cutoff=0.7)
    return bare[found[0]] if found else None


class CommandParser(argparse.ArgumentParser):
    """An ArgumentParser that remembers its subcommand groups (argparse keeps them private)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subcommand_groups: list[Any] = []

    def add_subparsers(self, **kwargs: Any) -> Any:
        group = super().add_subparsers(**kwargs)  # its parsers are CommandParsers too (argparse's default)
        self.subcommand_groups.append(group)
        return group

    def parse_command_line(self, arguments: Sequence[str] | None = None) -> argparse.Namespace:
        """``parse_args``, with an unknown flag reported by the subcommand it was given to.

        First pass: each word that looks like a flag is checked against the parser it goes to (the
        top level's before the command, the command's after it); an unknown one is refused there,
        before argparse would report a missing argument instead (``recurrence --bogus``, ``stats
        --stae x``). Second pass: argparse proper; what it leaves over is refused by the chosen command.
        """
        given = list(sys.argv[1:] if arguments is None else arguments)
        self._refuse_unknown_flags(given)
        namespace, unknown = self.parse_known_args(given)
        if unknown:
            self.chosen(namespace).unrecognized(unknown)
        return namespace

    def chosen(self, namespace: argparse.Namespace) -> "CommandParser":
        """The innermost (sub)command parser the parsed command line chose."""
        parser = self
        while True:
            for group in parser.subcommand_groups:
                name = getattr(namespace, group.dest, None)
                if name in group.choices:
                    parser = group.choices[name]
                    break
            else:
                return parser

    def unrecognized(self, unknown: Sequence[str]) -> NoReturn:
        flags = [word for word in unknown if word.startswith("-")]
        hint = ""
        if len(flags) == 1:
            closest = _closest(flags[0].split("=", 1)[0], self._option_string_actions)
            if closest is not None:
                hint = f" (did you mean {closest}?)"
        if self.subcommand_groups and flags:
            hint += f"; a command's own flags follow the command: {self.prog} COMMAND --help lists them"
        plural = "s" if len(unknown) > 1 else ""
        self.error(f"unrecognized argument{plural}: {' '.join(unknown)}{hint}")

    def _knows(self, word: str) -> bool:
        if not word.startswith("-") or word == "-" or _NUMBER.fullmatch(word):
            return True  # a value (argparse reads a negative number as one too)
        if not word.startswith("--"):
            return word[:2] in self._option_string_actions  # -p3: a short flag with its value attached
        name = word.split("=", 1)[0]
        return any(option.startswith(name) for option in self._option_string_actions)  # abbreviations

    def _refuse_unknown_flags(self, given: Sequence[str]) -> None:
        parser = self
        for word in given:
            if word == "--":
                return
            if not parser._knows(word):
                parser.unrecognized([word])
            if not word.startswith("-"):
                for group in parser.subcommand_groups:
                    if word in group.choices:
                        parser = group.choices[word]
                        break

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # A near miss of a command or a choice is named (`recurrence stat`: did you mean 'stats'?).
        choices = action.choices
        if choices is not None and isinstance(value, str) and value not in choices:
            closest = _closest(value, (str(choice) for choice in choices))
            if closest is not None:
                listed = ", ".join(repr(str(choice)) for choice in choices)
                raise argparse.ArgumentError(
                    action, f"invalid choice: {value!r}: did you mean {closest!r}? (choose from {listed})"
                )
        super()._check_value(action, value)
