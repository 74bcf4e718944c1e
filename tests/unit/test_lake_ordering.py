"""Order keys sort exactly like binlog positions; net-change reduction keeps the last change per key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from binlake.lake.ordering import net_changes, order_key, split_key

positions = st.tuples(st.integers(0, 2**24 - 1), st.integers(0, 2**40 - 1), st.integers(0, 2**32 - 1),
                      st.integers(0, 2**20 - 1))


@given(positions, positions)
def test_order_key_sorts_like_the_position_tuple(a, b) -> None:
    assert (order_key(*a) < order_key(*b)) == (a < b)
    assert split_key(order_key(*a)) == a
    assert order_key(*a) < 10**38  # fits decimal(38,0)


def test_order_key_rejects_out_of_range() -> None:
    with pytest.raises(ValueError):
        order_key(1, 2**40, 0, 0)


def test_net_changes_last_wins_and_key_changes_leave_tombstones() -> None:
    changes = [
        (1, "insert", None, (1,), {"id": 1, "v": "a"}, "t1"),
        (2, "insert", None, (2,), {"id": 2, "v": "b"}, "t1"),
        (3, "update", (1,), (1,), {"id": 1, "v": "a2"}, "t2"),
        (4, "update", (2,), (20,), {"id": 20, "v": "b"}, "t2"),  # key change
        (5, "delete", (1,), None, None, "t3"),
        (6, "insert", None, (3,), {"id": 3, "v": "c"}, "t3"),
    ]
    net = net_changes(changes)
    assert set(net) == {(1,), (2,), (20,), (3,)}
    assert net[(1,)].deleted and net[(1,)].seq == 5
    assert net[(2,)].deleted and net[(2,)].seq == 4
    assert net[(20,)].row == {"id": 20, "v": "b"} and net[(20,)].seq == 4
    assert net[(3,)].row["v"] == "c"


def test_net_changes_refuses_out_of_order_input() -> None:
    with pytest.raises(ValueError, match="binlog order"):
        net_changes([(2, "insert", None, (1,), {}, None), (1, "insert", None, (2,), {}, None)])
