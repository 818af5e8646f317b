"""What the topics and tables of one deployment are called, from its topic prefix and app id.

The stream code reads these names; nothing here talks to a broker or reads a setting.
"""

from typing import Final

from pydantic import BaseModel, ConfigDict

#: Faust table names (their changelogs are "<app id>-<table>-changelog").
TABLE_NAME: Final = "state"
PATTERNS_TABLE_NAME: Final = "patterns"


class TopicNames(BaseModel):
    model_config = ConfigDict(frozen=True)

    journal: str
    ledger: str
    review: str
    dead_letters: str
    changelog: str
    # Issue 11: the statistics table topic, the pattern suggestions, and the patterns agent's own topics.
    statistics: str
    patterns: str
    recurred: str  # ``recurred`` observations re-keyed by signature key (engine agent -> patterns agent)
    patterns_changelog: str
    snapshots: str  # partition snapshots of both tables (issue 8)

    def outputs(self) -> tuple[str, str, str]:
        """The ledger topics: together they hold exactly the embedded runner's ledger."""
        return (self.ledger, self.review, self.dead_letters)


def topic_names(prefix: str, group_id: str, journal: str | None = None) -> TopicNames:
    """The names of a deployment with topic prefix ``prefix`` and app id (consumer group) ``group_id``."""
    return TopicNames(
        journal=journal or f"{prefix}.journal",
        ledger=f"{prefix}.ledger",
        review=f"{prefix}.review",
        dead_letters=f"{prefix}.dead-letters",
        # Faust names a table's changelog "<app id>-<table>-changelog".
        changelog=f"{group_id}-{TABLE_NAME}-changelog",
        statistics=f"{prefix}.statistics",
        patterns=f"{prefix}.patterns",
        # Internal to one app id, like its changelogs (Kafka Streams: "<app id>-<name>-repartition").
        recurred=f"{group_id}-recurred-repartition",
        patterns_changelog=f"{group_id}-{PATTERNS_TABLE_NAME}-changelog",
        snapshots=f"{group_id}-snapshots",
    )
