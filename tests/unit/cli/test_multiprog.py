"""``srun --multi-prog``: the file's ranks, the `*` line, %t/%o, and Slurm's errors."""

from __future__ import annotations

import pytest

from muster.cli.common import CommandError
from muster.cli.multiprog import parse_multi_prog


def test_ranks_ranges_star_and_substitutions() -> None:
    mp = parse_multi_prog("f", "# c\n\n4 echo four\n0,2-3 run 'a b' %t.%o %%t  # trailing\n* rest %t\n")
    assert mp.argv_for(6) == {
        4: ["echo", "four"],
        0: ["run", "a b", "0.0", "%t"],
        2: ["run", "a b", "2.1", "%t"],
        3: ["run", "a b", "3.2", "%t"],
        1: ["rest", "1"],
        5: ["rest", "5"],
    }


@pytest.mark.parametrize(
    ("text", "ntasks", "message"),
    [
        ("0 a\n0 b\n", 1, "task 0 is named twice"),
        ("0-x a\n", 1, "invalid task ranks"),
        ("3-1 a\n", 4, "invalid task ranks"),
        ("0\n", 1, "needs task ranks and a program"),
        ("# nothing\n", 1, "no program"),
        ("0 'open\n", 1, "f:1:"),
        ("0 a\n", 2, "No executable program specified for task 1"),
        ("0-4 a\n", 2, "Invalid task id 2"),
    ],
)
def test_bad_files_say_what_is_wrong(text: str, ntasks: int, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        parse_multi_prog("f", text).argv_for(ntasks)


def test_a_trailing_backslash_continues_the_line() -> None:
    prog = parse_multi_prog("f", "1-2 hostname\n0,3   echo aaaa \\\ntask:%t:offset:%o bbbb\n")
    argv = prog.argv_for(4)
    assert argv[0] == ["echo", "aaaa", "task:0:offset:0", "bbbb"]
    assert argv[3] == ["echo", "aaaa", "task:3:offset:1", "bbbb"] and argv[1] == ["hostname"]
