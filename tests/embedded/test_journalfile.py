"""The journal reader shared by replay and publish, and the TTY-only progress bar."""

import io
from pathlib import Path

from recurrence_ledger.processor.host.journalfile import HeldBack, JournalReader
from recurrence_ledger.processor.host.progress import Progress


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


def test_an_unterminated_last_line_is_held_back_unless_it_parses(tmp_path: Path) -> None:
    journal = tmp_path / "j.jsonl"
    cases = {
        b'{"a": 1}\n{"b": 2': HeldBack(2, 7),  # cut inside an object
        b'{"a": 1}\n{"s": "caf\xc3': HeldBack(2, 11),  # cut inside a UTF-8 character
        b'{"a": 1}\n{"b": 2}': None,  # whole, only its newline missing
        b'{"a": 1}\n{"n": 123456789012345678901234567890}': None,  # beyond 64 bits: still JSON
        b'{"a": 1}\n{"b"\n': None,  # a whole line that is not JSON is the engine's to dead-letter
    }
    for data, held in cases.items():
        journal.write_bytes(data)
        with JournalReader(str(journal)) as reader:
            lines = list(reader)
        assert reader.held_back == held, data
        assert len(lines) == (1 if held else 2), data


def test_progress_draws_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = Progress(total_bytes=100, stream=stream)
        progress.update(5, 50, force=True)
        progress.close()
    assert "50.0%" in terminal.getvalue() and "5 entries" in terminal.getvalue()
    assert pipe.getvalue() == ""
