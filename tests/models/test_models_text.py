"""The offline text corpora: deterministic, prose-like, calibration and evaluation disjoint."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from explorer.models import text


def test_corpora_are_deterministic():
    first = (text.evaluation_paragraphs(), text.calibration_paragraphs())
    text._evaluation.cache_clear()
    text._calibration.cache_clear()
    assert (text.evaluation_paragraphs(), text.calibration_paragraphs()) == first


def test_corpora_are_disjoint_and_large():
    ev, cal = text.evaluation_paragraphs(), text.calibration_paragraphs()
    assert len(ev) > 500 and len(cal) > 300
    assert not set(ev) & set(cal)
    assert all("\n" not in p and "  " not in p for p in ev + cal)


def test_calibration_modules_are_sorted_and_unique():
    mods = text.CALIBRATION_MODULES
    assert list(mods) == sorted(set(mods))


def test_paragraph_filter_drops_short_and_code():
    raw = (
        "A heading\n\none two three four five six seven eight nine\n\n>>> x = [1, 2, 3]  # 4 5 6 7"
    )
    assert text._paragraphs(raw, min_words=8) == ["one two three four five six seven eight nine"]


def test_sentences_hand_case():
    got = text.sentences(
        ["First sentence here has six words. No. Second one has exactly six words!"]
    )
    assert got == ["First sentence here has six words.", "Second one has exactly six words!"]


@given(st.lists(st.text(alphabet="abc .", min_size=0, max_size=60), max_size=5))
def test_sentences_respects_word_limits(paragraphs):
    for sentence in text.sentences(paragraphs, min_words=2, max_words=5):
        assert 2 <= len(sentence.split()) <= 5
