"""pyhot: a CPU-bound Python program with a known hot chain for the agent's Python frames test.

outer() -> middle() -> hot_leaf(), called at module level, for argv[1] seconds. Run it with
Debian's /usr/bin/python3 (3.11). tests/integration/test_agent.py asserts the line numbers below:
keep the def lines and the hot line where they are (HOT_LINE names the hot one).
"""
import sys
import time

HOT_LINE = 16


def hot_leaf(n):
    total = 0
    for i in range(n):
        total += i * i  # HOT_LINE
    return total


def middle(deadline):
    while time.monotonic() < deadline:
        hot_leaf(20000)


def outer(seconds):
    middle(time.monotonic() + seconds)


outer(float(sys.argv[1]) if len(sys.argv) > 1 else 2.0)
