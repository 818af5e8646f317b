"""The journal reader shared by replay and publish, and the TTY-only progress bar."""

import io
from pathlib import Path

from recurrence_ledger.processor.host.journalfile import JournalReader, Progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_reader_strips_line_endings_and_skips_blank_lines(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    journal.write_bytes(b'{"a": 1}\r\n\n   \n{"b": 2}\n{"c": 3}')
    with JournalReader(str(journal)) as reader:
        assert list(reader) == [(1, b'{"a": 1}'), (4, b'{"b": 2}'), (5, b'{"c": 3}')]
        assert reader.blank_lines == 2
        assert reader.read_bytes == reader.total_bytes == journal.stat().st_size


def test_progress_draws_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = Progress(total_bytes=100, stream=stream)
        progress.update(5, 50, force=True)
        progress.close()
    assert "50.0%" in terminal.getvalue() and "5 entries" in terminal.getvalue()
    assert pipe.getvalue() == ""
