"""The docs' blocks marked ``<!-- runnable: secure -->`` run as written against the session's secured broker."""

import uuid
from pathlib import Path

import pytest

from devkit.topologies import SecureBroker
from tests.support.docblocks import Block, run_verbatim, runnable


@pytest.mark.parametrize("block", runnable("secure"), ids=lambda b: b.where)
def test_a_runnable_secure_block_runs_as_written(block: Block, secure_broker: SecureBroker, tmp_path: Path) -> None:
    prefix = f"docs{uuid.uuid4().hex[:8]}"
    output = run_verbatim(
        block, tmp_path / "scratch", up_line=secure_broker.line, env={"RECURRENCE_TOPIC_PREFIX": prefix}
    )
    # The admin created the topics; the reader, holding no ACL, is told which one and how to get the set.
    assert f"created      {prefix}.journal (journal)" in output
    assert f"--allow-principal User:newcomer --operation Read --topic {prefix}.ledger" in output
    assert "recurrence status: not authorized: User:newcomer may not DESCRIBE topics" in output
    assert "'recurrence acls --principal User:newcomer --role read'" in output and "exit 2" in output


def test_the_docs_have_a_secure_block() -> None:
    assert runnable("secure"), "docs/kafka.md's managed-Kafka section shows the secured broker"
