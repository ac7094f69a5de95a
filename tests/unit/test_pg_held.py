"""What a PostgreSQL store remembers of its rows (jobctl.store.postgres.held): bounded, and its own revisions."""

from __future__ import annotations

from jobctl.store.postgres.held import Held


def test_a_run_of_own_revisions_is_mine_and_a_gap_starts_a_new_one() -> None:
    held = Held()
    held.wrote("a", 2)  # claim
    held.wrote("a", 3)  # renew
    held.wrote("a", 4)  # progress
    assert [held.mine("a", r) for r in (1, 2, 3, 4, 5)] == [False, True, True, True, False]
    held.wrote("a", 6)  # revision 5 was somebody else's (an intent): still news
    assert [held.mine("a", r) for r in (4, 5, 6)] == [False, False, True]
    assert not held.mine("b", 0)


def test_the_oldest_rows_and_revisions_are_forgotten_past_the_bound() -> None:
    held = Held(keep=2)
    for job_id in ("a", "b", "c"):
        held.hold((job_id, "x"))
        held.wrote(job_id, 1)
    assert held.get("a") is None and held.get("c") == ("c", "x")
    assert not held.mine("a", 1) and held.mine("b", 1) and held.mine("c", 1)
    held.hold(("b", "y"))  # kept afresh: now the newest
    held.hold(("d", "z"))
    assert held.get("b") == ("b", "y") and held.get("c") is None
    held.forget("b")
    assert held.get("b") is None
