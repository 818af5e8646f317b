"""The replay's paths checked against each other before any write: the journal, ``--state`` and ``--out``."""

import os
import stat
from contextlib import suppress
from pathlib import Path

from ..exceptions import SettingsError
from ..host.journalfile import check_journal
from ..host.printable import shown


def real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


def _same_file(first: str | Path, second: Path) -> bool:
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet): compare where they would be
        return real(first) == real(second)


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or parent in child.parents


def _linked_into(directory: Path, target: Path) -> bool:
    """Is ``target`` a (hard) link to a file of ``directory`` or of a folder inside it (the stores')?"""
    try:
        wanted = target.stat()
    except OSError:
        return False
    for folder, _, names in os.walk(directory):
        for name in names:
            with suppress(OSError):
                if os.path.samestat(os.stat(os.path.join(folder, name)), wanted):
                    return True
    return False


def check_paths(journal: str, state: Path, out: Path) -> None:
    """Refuse an unreadable journal, or --out that is the journal or part of the state, before any write.

    A ledger appended to its own journal reads its records back forever; one
    inside the state directory corrupts RocksDB. Symbolic links are resolved
    and existing files compared by identity, so a link or hard link is caught.
    """
    check_journal(journal)
    state_real, out_real = real(state), real(out)
    if journal != "-" and _same_file(journal, out):
        raise SettingsError(f"--out {shown(out)} is the journal itself; write the ledger to another file")
    if _inside(out_real, state_real) or _inside(state_real, out_real) or _linked_into(state, out):
        raise SettingsError(
            f"--out {shown(out)} and --state {shown(state)} overlap; keep the ledger outside the state directory"
        )
    if journal != "-" and _inside(real(journal), state_real):
        raise SettingsError(f"the journal {shown(journal)} is inside --state {shown(state)}; move it out")
    try:
        mode = out.stat().st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise SettingsError(
            f"--out {shown(out)} is not a regular file; the ledger must be one (it is checked and repaired in place)"
        )
