#!/usr/bin/env python3
"""Prints the item order nb_dataset_shuffle must give, computed independently of the C code:
Fisher-Yates over 0..n-1 (i from n-1 down to 1, swapping i with j uniform in [0, i]),
driven by splitmix64 with rejection of draws below 2^64 mod (i + 1). tests/test_idx.c holds
the output for the arguments in its comment.

    python3 tests/golden/shuffle_order.py 10 42
"""
import sys

MASK = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return state, z ^ (z >> 31)


def shuffled(n, seed):
    order, state = list(range(n)), seed
    for i in range(n - 1, 0, -1):
        bound = i + 1
        reject_below = (1 << 64) % bound
        while True:
            state, r = splitmix64(state)
            if r >= reject_below:
                break
        j = r % bound
        order[i], order[j] = order[j], order[i]
    return order


n, seed = int(sys.argv[1]), int(sys.argv[2])
print(", ".join(map(str, shuffled(n, seed))))
