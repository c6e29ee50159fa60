"""Job names, comments and step names: control characters refused, all else kept."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from muster.core.errors import InvalidRequest
from muster.core.labels import check_label, unprintable_at


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("a\nb", 1),
        ("\rforged", 0),
        ("tab\there", 3),
        ("nul\x00", 3),
        ("esc\x1b[2J", 3),
        ("del\x7f", 3),
        ("nel\x85", 3),
        ("line\u2028sep", 4),
        ("para\u2029sep", 4),
    ],
)
def test_control_characters_and_line_breaks_are_found(text: str, at: int) -> None:
    assert unprintable_at(text) == at


@pytest.mark.parametrize("text", ["train", "my job|x", "a b  c", "ünïcødé-名前", "x" * 1024, "", "--:;()[]{}"])
def test_printable_text_is_kept(text: str) -> None:
    assert unprintable_at(text) is None
    check_label("job name", text)


def test_the_error_names_the_field_the_character_and_its_position() -> None:
    with pytest.raises(InvalidRequest, match=r"^Invalid job name: control character '\\n' at position 4$"):
        check_label("job name", "row\nforged|row")
    with pytest.raises(InvalidRequest, match=r"^Invalid comment: control character '\\r' at position 1$"):
        check_label("comment", "\r")
    check_label("comment", None)


@given(st.text())
def test_nothing_accepted_can_break_a_line(text: str) -> None:
    if unprintable_at(text) is None:
        assert len(text.splitlines()) <= 1
        assert "\t" not in text
