"""Hypothesis strategies the property tests share."""

from hypothesis import strategies as st

from recurrence_ledger.processor.synthetic import JournalSpec


def journal_specs(
    entries: tuple[int, int], scopes: tuple[int, int], conflicts: bool = True
) -> st.SearchStrategy[JournalSpec]:
    """Seeded synthetic journals of ``entries`` lines over ``scopes`` scopes (inclusive ranges), with a
    little garbage or none, and (``conflicts``) a few re-sent entries or none."""
    return st.builds(
        JournalSpec,
        entries=st.integers(min_value=entries[0], max_value=entries[1]),
        scopes=st.integers(min_value=scopes[0], max_value=scopes[1]),
        seed=st.integers(min_value=0, max_value=2**32),
        garbage_ratio=st.sampled_from([0.0, 0.05]),
        conflict_ratio=st.sampled_from([0.0, 0.05]) if conflicts else st.just(0.0),
    )
