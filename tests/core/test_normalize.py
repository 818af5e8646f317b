"""RFC normalization: NFKC, case folding, whitespace collapse, edge C/P/Z stripping."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recurrence_ledger.schemas.normalize import bigram_overlap, bigrams, is_blank, normalize


@pytest.mark.parametrize(
    "raw,key",
    [
        (
            "GENERATED SOURCES ARE IN SYNC WITH THE OPENAPI CONTRACT ",
            "generated sources are in sync with the openapi contract",
        ),
        ("  Port\talready\n\nbound  ", "port already bound"),
        ("...pytest fails!!!", "pytest fails"),
        ("Straße", "strasse"),  # case folding, not lower()
        ("ｆｕｌｌｗｉｄｔｈ", "fullwidth"),  # NFKC
        ("ﬁle", "file"),  # NFKC ligature
        ("\u200bzero width\u200b", "zero width"),  # edge format characters (Cf)
        ("(inner, punctuation) stays", "inner, punctuation) stays"),
        ("a\u00a0b", "a b"),  # NBSP collapses
    ],
)
def test_examples(raw: str, key: str) -> None:
    assert normalize(raw) == key


@pytest.mark.parametrize("raw", ["", "   ", " ... ", "\t!?\n", "\u200b"])
def test_blank(raw: str) -> None:
    assert is_blank(raw)


@given(st.text())
def test_normalization_is_idempotent(text: str) -> None:
    assert normalize(normalize(text)) == normalize(text)


@given(st.text())
def test_keys_have_no_edge_space_or_punctuation(text: str) -> None:
    key = normalize(text)
    assert key == key.strip()
    assert "  " not in key


def test_bigrams_and_overlap() -> None:
    assert bigrams("a b c") == {("a", "b"), ("b", "c")}
    assert bigrams("single") == {("single",)}
    assert bigram_overlap("a b c d e f", "a b c d e f") == 1.0
    assert bigram_overlap("a b", "c d") == 0.0
    assert bigram_overlap("", "a") == 0.0
    # 4 shared of 5 distinct bigrams: exactly the RFC's 0.8 suggestion threshold.
    assert bigram_overlap("a b c d e", "a b c d e f") == 0.8
