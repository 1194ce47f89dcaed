"""stretto.progress: a rich bar on a terminal, nothing elsewhere."""

from __future__ import annotations

from stretto.progress import Progress, close_all


def test_a_bar_shows_the_label_the_count_and_what_is_left(capsys) -> None:
    bar = Progress(3, "ingesting", " files", enabled=True)
    for _ in range(3):
        bar.advance()
    bar.close()
    err = capsys.readouterr().err
    assert "stretto: ingesting" in err and "3/3" in err and "files" in err
    assert "0:00:00" in err  # the time left (rich's ETA column)
    assert bar.done == 3


def test_an_unknown_total_is_a_counter(capsys) -> None:
    bar = Progress(0, "search", " settings scored", enabled=True)
    bar.advance(5)
    bar.close()
    err = capsys.readouterr().err
    assert "stretto: search" in err and "5 settings scored" in err and "/" not in err


def test_silent_when_stderr_is_not_a_terminal(capsys) -> None:
    bar = Progress(2, "replay", " episodes")  # capsys' stderr is no terminal
    bar.advance(2)
    bar.close()
    assert capsys.readouterr() == ("", "")
    assert bar.done == 2


def test_bars_open_at_once_stack_and_close_all_closes_them(capsys) -> None:
    first = Progress(4, "promote, round 1", " sessions", enabled=True)
    first.advance()
    second = Progress(4, "promote, round 2", " sessions", enabled=True)
    second.advance()
    close_all()  # what main() does after a command, even one that failed half-way
    err = capsys.readouterr().err
    assert "round 1" in err and "round 2" in err
    assert err.rstrip("\n").endswith("\x1b[?25h")  # the cursor is shown again
    first.advance()  # a closed bar draws nothing more
    assert capsys.readouterr().err == ""
