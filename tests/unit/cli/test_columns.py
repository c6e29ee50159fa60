"""muster.slurm.columns: the one column engine of squeue, sinfo, sprio, sacct, sacctmgr, sshare."""

from __future__ import annotations

import pytest

from muster.cli.common import CommandError
from muster.slurm import columns

TABLE = {
    "i": ("JOBID", lambda r: str(r["id"]), True),
    "N": ("NODELIST", lambda r: r["nodes"], False),
}
ROWS = [{"id": 7, "nodes": "gpu[01-12],cpu01"}, {"id": 12345, "nodes": "n1"}]


@pytest.mark.parametrize(
    ("text", "width", "right", "cut", "want"),
    [
        ("abc", 5, True, True, "  abc"),
        ("abc", 5, False, True, "abc  "),
        ("abcdefg", 3, True, True, "abc"),
        ("abcdefg", 3, False, False, "abcdefg"),
        ("abc", 0, True, True, "abc"),
    ],
)
def test_fit(text, width, right, cut, want) -> None:
    assert columns.fit(text, width, right, cut) == want


def test_parse_format() -> None:
    assert columns.parse_format("%.18i %-9P|%j%%x %#N") == [
        ("", "i", 18, True),
        (" ", "P", 9, False),
        ("|", "j", 0, False),
        ("%x ", "N", -1, False),
    ]


def test_letter_columns_fit_cut_and_keep_literals() -> None:
    cols = columns.letter_columns("%.3i|%5N!", TABLE.get, "Invalid job format specification: {}")
    assert [c.key for c in cols] == ["i", "N", None]
    assert columns.render(ROWS, cols) == [
        "JOB|NODEL!",
        "  7|gpu[01-12],cpu01!",  # node lists are never cut
        "123|n1   !",
    ]


def test_unknown_letter_is_refused_in_the_commands_words() -> None:
    with pytest.raises(CommandError, match="Invalid job format specification: x"):
        columns.letter_columns("%x", TABLE.get, "Invalid job format specification: {}")


def test_sized_columns_take_the_longest_value_never_under_the_least() -> None:
    sized = columns.letter_columns("%#i %#N", TABLE.get, "", sized=True)
    assert columns.render(ROWS, sized, header=False, least=3) == [
        "7     gpu[01-12],cpu01",
        "12345 n1              ",
    ]
    # Without ``sized`` a # width prints the value as it is.
    raw = columns.letter_columns("%#i %#N", TABLE.get, "")
    assert columns.render(ROWS, raw, header=False) == ["7 gpu[01-12],cpu01", "12345 n1"]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("i", ["JOBID               ", "7                   "]),
        ("i:.4", ["JOBI", "   7"]),
        ("i:3x,N:", ["JOBx" + "NODELIST", "7  x" + "gpu[01-12],cpu01"]),
    ],
)
def test_named_columns_read_name_width_and_suffix(spec: str, want: list[str]) -> None:
    cols = columns.named_columns(spec, lambda name: TABLE.get(name.lower()) or TABLE.get(name.upper()), "{}")
    assert columns.render(ROWS[:1], cols) == want


def test_named_columns_put_the_separator_between_columns_only() -> None:
    cols = columns.named_columns("I:2,N:3", lambda n: TABLE.get(n) or TABLE.get(n.upper()), "", " ")
    assert columns.render(ROWS[1:], cols) == ["JO NOD", "12 n1 "]


def test_unknown_name_is_refused() -> None:
    with pytest.raises(CommandError, match="Invalid node format specification: Bogus"):
        columns.named_columns("Bogus", lambda _n: None, "Invalid node format specification: {}")


ACCT = {"jobid": ("JobID", -12, lambda r: r), "state": ("State", 10, lambda r: r)}


def test_field_list_reads_print_fields_names_and_widths() -> None:
    cols = columns.field_list("JobID, state%4,,STATE%-3", ACCT, 'Invalid field requested: "{}"')
    assert [(h, w) for h, w, _ in cols] == [("JobID", -12), ("State", 4), ("State", -3)]
    with pytest.raises(CommandError, match='Invalid field requested: "nope"'):
        columns.field_list("nope", ACCT, 'Invalid field requested: "{}"')
    with pytest.raises(CommandError, match='Invalid field requested: "state%x"'):
        columns.field_list("state%x", ACCT, 'Invalid field requested: "{}"')
    squeezed = columns.field_list("Job ID", ACCT, "Unknown field '{}'", squeeze=True)
    assert squeezed[0][0] == "JobID"


def test_field_widths_are_capped() -> None:
    cols = columns.field_list("state%99999999", ACCT, "{}")
    assert cols[0][1] == columns.MAX_FIELD_WIDTH
    assert columns.field_width("99999999999") == columns.MAX_FIELD_WIDTH


def test_printer_cuts_with_plus_and_writes_parsable_lines() -> None:
    cols = [("JobID", -5), ("State", 4)]
    rows = [["123456", "RUNNING"]]
    assert columns.Printer().lines(cols, rows) == ["JobID Sta+ ", "----- ---- ", "1234+ RUN+ "]
    assert columns.Printer(parsable=True, trailing=True).lines(cols, rows) == [
        "JobID|State|",
        "123456|RUNNING|",
    ]
    assert columns.Printer(parsable=True, header=False).lines(cols, rows) == ["123456|RUNNING"]


def _reference(rows: list, cols: list[columns.Column]) -> list[str]:
    """Each cell on its own: the width rules as Column states them."""
    out = []
    for row in rows:
        line = ""
        for c in cols:
            if c.value is None:
                line += c.prefix
                continue
            v = c.value(row)  # type: ignore[operator]
            if c.width > 0:
                v = v[: c.width] if c.cut else v
                v = v.rjust(c.width) if c.right else v.ljust(c.width)
            line += c.prefix + v + c.suffix
        out.append(line)
    return out


def test_rows_are_rendered_as_each_cell_on_its_own_would_be() -> None:
    rows = [{"a": "x"}, {"a": "a%sb%%c"}, {"a": "much longer than the width"}, {"a": ""}]
    get = lambda r: r["a"]  # noqa: E731
    for right in (True, False):
        for cut in (True, False):
            for width in (0, 1, 5):
                cols = [
                    columns.Column("%", "H", get, width, right, cut, "%s|"),
                    columns.Column("lit%%", "", None, 0, False, False, "ignored"),
                    columns.Column("", "G", get, 3, not right, True),
                ]
                assert columns.render(rows, cols, header=False) == _reference(rows, cols)
    assert columns.render(rows, [columns.Column("100%", "", None, 0, False, False)], header=False) == ["100%"] * 4
    assert columns.render(rows, [], header=False) == [""] * 4
