"""Argument types shared by every ``recurrence`` subcommand (exit codes: ``exceptions``)."""

import argparse

__all__ = [
    "non_negative_int",
    "partition_count_arg",
    "path_arg",
    "port_number",
    "positive_int",
    "ratio",
]


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be non-negative")
    return value


def ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def partition_count_arg(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 256:
        raise argparse.ArgumentTypeError("must be 1..256")
    return value


def port_number(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("must be a port number, 0..65535")
    return value


def path_arg(text: str) -> str:
    """A file or folder flag: never empty (an empty path would mean the current directory, silently)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path: give a file or folder (. is the current directory)")
    return text
