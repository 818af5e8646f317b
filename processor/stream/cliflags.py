"""Command-line flags derived from the settings models, and the models loaded from flags, env and file.

One helper adds a flag per model field (name, help, metavar, choices from the
field; the help names the environment variable and the default), so a
setting is written once, in ``settings``. Flags default to ``SUPPRESS``: only
flags actually given reach the model, where they override the environment and
the config file; the model validates every source alike.
"""

import argparse
import os
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

from pydantic import SecretStr, ValidationError

from ..cliargs import path_arg
from ..exceptions import SettingsError
from .origins import CONFIG_FILE, DEFAULT, ENVIRONMENT, FLAG, Origin
from .settings import (
    CONFIG_ENV,
    KafkaConnection,
    SettingsModel,
    StreamSettings,
    TopicLayout,
    WorkerOptions,
    config_file,
    read_config_file,
)

_SEP: Final = "__"  # dest = "<section>__<field>": the same field name may exist in two models
M = TypeVar("M", bound=SettingsModel)

NAMING: Final = ("topic_prefix", "journal_topic", "app_id")


def _dest(model: type[SettingsModel], name: str) -> str:
    return f"{model.section}{_SEP}{name}"


def _choices(annotation: Any) -> tuple[str, ...] | None:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return tuple(str(a) for a in args)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for arg in args:
            found = _choices(arg)
            if found:
                return found
    return None


def _default_text(model: type[SettingsModel], name: str) -> str:
    info = model.model_fields[name]
    if info.default is None or info.default_factory is not None:  # a computed default: the help says it
        return ""
    if isinstance(info.default, bool):
        return "off" if not info.default else "on"
    return str(info.default)


def add_model_arguments(
    parser: argparse.ArgumentParser, model: type[SettingsModel], title: str, only: Iterable[str] | None = None
) -> None:
    """A flag per field of ``model`` (or of the fields named in ``only``)."""
    group = parser.add_argument_group(title)
    wanted = set(only) if only is not None else None
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("cli") is False or (wanted is not None and name not in wanted):
            continue
        names = [f"--{name.replace('_', '-')}"]
        if isinstance(extra.get("short"), str):
            names.insert(0, str(extra["short"]))
        default = _default_text(model, name)
        helptext = f"{info.description} (env {model.env_name(name)}{'; default ' + default if default else ''})"
        kwargs: dict[str, Any] = {
            "dest": _dest(model, name),
            "default": argparse.SUPPRESS,
            "help": helptext.replace("%", "%%"),
        }
        if info.annotation is bool:
            kwargs["action"] = "store_true"
        elif Path in (info.annotation, *typing.get_args(info.annotation)):
            kwargs["type"] = path_arg
            kwargs["metavar"] = extra.get("metavar", "PATH")
        else:
            choices = _choices(info.annotation)
            if choices:
                kwargs["choices"] = choices
            elif isinstance(extra.get("metavar"), str):
                kwargs["metavar"] = extra["metavar"]
        group.add_argument(*names, **kwargs)


def add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config",
        type=path_arg,
        metavar="FILE",
        default=argparse.SUPPRESS,
        help=f"TOML file with [kafka], [topics], [worker] tables (env {CONFIG_ENV}); flags and environment override it",
    )


def _flags(args: argparse.Namespace, model: type[SettingsModel]) -> dict[str, Any]:
    prefix = f"{model.section}{_SEP}"
    return {key[len(prefix) :]: value for key, value in vars(args).items() if key.startswith(prefix)}


def _describe(model: type[SettingsModel], error: ValidationError, source: str) -> str:
    problems = []
    for item in error.errors():
        loc = [str(part) for part in item["loc"]]
        name = next((n for n in model.model_fields if loc and (loc[0] == n or loc[0] == model.env_name(n))), None)
        if name is None:
            where = f"{'.'.join(loc)}: " if loc else ""
            problems.append(f"{where}{item['msg'].removeprefix('Value error, ')}{source}")
            continue
        where = f"--{name.replace('_', '-')} / {model.env_name(name)}{source}"
        value = item.get("input")
        shown = "" if isinstance(value, SecretStr) or "password" in name or value is None else f" (got {value!r})"
        problems.append(f"{name}{shown}: {item['msg'].removeprefix('Value error, ')} [{where}]")
    return "invalid settings: " + "; ".join(problems)


def _load(model: type[M], args: argparse.Namespace, source: str) -> M:
    try:
        return model(**_flags(args, model))
    except ValidationError as error:
        raise SettingsError(_describe(model, error, source)) from None


def _config_path(args: argparse.Namespace) -> Path | None:
    raw = getattr(args, "config", None) or os.environ.get(CONFIG_ENV) or None
    return Path(raw) if raw else None


#: The models by the ``StreamSettings`` attribute that holds each (the origins' keys).
_MODELS: Final[dict[str, type[SettingsModel]]] = {
    "kafka": KafkaConnection,
    "layout": TopicLayout,
    "worker": WorkerOptions,
}
#: Secrets that may come as a value or as a file, never both: (section, value field, file field, what).
_SECRETS: Final = (
    ("kafka", "sasl_password", "sasl_password_file", "SASL password"),
    ("worker", "http_token", "http_token_file", "web port's token"),
)
#: The notes already printed by this process (``load`` runs again when a command reports a refusal).
_SAID: set[str] = set()


def _origins(args: argparse.Namespace, data: Mapping[str, Any], path: Path | None) -> dict[str, Origin]:
    """Per ``<section>.<field>``: the source the models took its value from (flags, environment, file, default)."""
    found: dict[str, Origin] = {}
    for attribute, model in _MODELS.items():
        given = _flags(args, model)
        table = data.get(model.section, {})
        for name in model.model_fields:
            env = model.env_name(name)
            if name in given:
                origin = Origin(FLAG, f"--{name.replace('_', '-')}")
            elif os.environ.get(env):
                origin = Origin(ENVIRONMENT, env)
            elif isinstance(table, Mapping) and name in table:
                origin = Origin(CONFIG_FILE, f"{path} [{model.section}]")
            else:
                origin = Origin(DEFAULT)
            found[f"{attribute}.{name}"] = origin
    return found


def _overridden(data: Mapping[str, Any], path: Path | None, origins: Mapping[str, Origin]) -> list[str]:
    """One note per variable of the environment that overrides a value of the config file."""
    notes = []
    for attribute, model in _MODELS.items():
        table = data.get(model.section, {})
        for name in model.model_fields:
            origin = origins[f"{attribute}.{name}"]
            if origin.kind != ENVIRONMENT or not isinstance(table, Mapping) or name not in table:
                continue
            if os.environ.get(origin.where) == str(table[name]):
                continue  # the same value twice overrides nothing
            secret = "password" in name or "token" in name
            now = "" if secret else f" ({os.environ.get(origin.where)})"
            before = "" if secret else f" ({table[name]})"
            notes.append(
                f"{origin.where}{now} from the environment overrides {name}{before} of [{model.section}] in {path}"
            )
    return notes


def load(args: argparse.Namespace, *, connects: bool = True, program: str = "") -> StreamSettings:
    """The settings of one command: flags over environment over the config file over defaults, each with its
    origin. An environment variable that overrides the config file is said once on stderr (``program: ...``).
    ``connects=False``: the command only prints (``acls``), so the connection needs no credentials."""
    path = _config_path(args)
    data = read_config_file(path) if path is not None else {}
    source = f" / [{{}}] in {path}" if path is not None else ""
    origins = _origins(args, data, path)
    for section, value, file, what in _SECRETS:
        given = origins[f"{section}.{value}"], origins[f"{section}.{file}"]
        if all(origin.kind != DEFAULT for origin in given):
            raise SettingsError(f"the {what} is given twice: {value} ({given[0]}) and {file} ({given[1]}); keep one")
    with config_file(data, connects):
        settings = StreamSettings(
            kafka=_load(KafkaConnection, args, source.format(KafkaConnection.section)),
            layout=_load(TopicLayout, args, source.format(TopicLayout.section)),
            worker=_load(WorkerOptions, args, source.format(WorkerOptions.section)),
        ).with_origins(origins)
    name = program or f"recurrence {getattr(args, 'command', '')}".rstrip()
    for note in _overridden(data, path, origins):
        if note not in _SAID:
            _SAID.add(note)
            print(f"{name}: {note}", file=sys.stderr, flush=True)
    return settings
