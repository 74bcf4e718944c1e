"""Seeded value generators shared by the value tests."""

from __future__ import annotations

import random


def random_decimals(rng: random.Random, groups, size: int, n: int) -> list[bytes]:
    """n DECIMAL fields of that layout (binlake.binlog.values.decimal_groups): each digit group zero, random or all
    nines; half of them negative."""
    raws = []
    for _ in range(n):
        x = 0
        for nb, nd in groups:
            x = x << 8 * nb | rng.choice([0, rng.randrange(10**nd), 10**nd - 1])
        x |= 1 << (8 * size - 1)
        if rng.random() < 0.5:
            x ^= (1 << 8 * size) - 1
        raws.append(x.to_bytes(size, "big"))
    return raws
