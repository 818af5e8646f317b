"""Where each setting of a Kafka command came from: a flag, the environment, the config file, or its default.

``cliflags.load`` records an ``Origin`` per field while it builds the settings. The commands use them
to say where the connection came from (``--verbose``, the worker's start), to say once when an
environment variable overrides the config file (an exported ``KAFKA_BOOTSTRAP_SERVERS`` from one
quick start silently sent another's commands to the wrong broker), and to name both sources when one
secret is given twice.
"""

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["flag", "environment", "config file", "default"]
FLAG: Final = "flag"
ENVIRONMENT: Final = "environment"
CONFIG_FILE: Final = "config file"
DEFAULT: Final = "default"


@dataclass(frozen=True)
class Origin:
    """One setting's source: ``where`` is the flag, the variable, or the file and its table."""

    kind: Kind
    where: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.where}" if self.where else self.kind


#: A setting's origin when nothing recorded one (settings built in code, not by ``load``).
UNRECORDED: Final = Origin(DEFAULT)
