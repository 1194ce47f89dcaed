"""stretto.offline.reports.reliability: ECE over given bin edges, Brier, AUC, the reliability
table."""

from __future__ import annotations

import pytest

from stretto.offline.reports.reliability import EDGES, auc, brier, ece, measures, reliability

SCORES = [0.8, 0.8, 0.2, 0.03]
USED = [True, False, False, False]


def test_the_reliability_table_and_ece_by_hand() -> None:
    assert reliability(SCORES, USED) == [
        {"from": 0.0, "to": 0.05, "count": 1, "mean_score": 0.03, "used": 0.0},
        {"from": 0.2, "to": 0.3, "count": 1, "mean_score": 0.2, "used": 0.0},
        {"from": 0.8, "to": 0.9, "count": 2, "mean_score": 0.8, "used": 0.5},
    ]
    assert ece(SCORES, USED) == pytest.approx(1 / 4 * 0.03 + 1 / 4 * 0.2 + 2 / 4 * 0.3)
    assert brier(SCORES, USED) == pytest.approx((0.04 + 0.64 + 0.04 + 0.0009) / 4)


def test_the_edges_are_a_parameter() -> None:
    tenths = [i / 10 for i in range(10)] + [1.0001]
    halves = (0.0, 0.5, 1.0001)
    assert [r["count"] for r in reliability(SCORES, USED, halves)] == [2, 2]
    assert ece(SCORES, USED, halves) == pytest.approx(
        2 / 4 * abs(0.115 - 0.0) + 2 / 4 * abs(0.8 - 0.5)
    )
    assert reliability(SCORES, USED, tenths)[0] == {
        "from": 0.0,
        "to": 0.1,
        "count": 1,
        "mean_score": 0.03,
        "used": 0.0,
    }
    # a score of exactly 1 has a bin (the last edge is above 1)
    assert reliability([1.0], [True])[-1]["from"] == EDGES[-2]


def test_nothing_to_score_is_none() -> None:
    assert ece([], []) is None and brier([], []) is None and auc([], []) is None
    assert measures([], []) == {
        "count": 0,
        "used": 0,
        "ece": None,
        "brier": None,
        "auc": None,
        "bins": [],
    }


def test_auc_with_mid_ranks() -> None:
    assert auc([0.1, 0.4, 0.35, 0.8], [False, True, False, True]) == 1.0
    assert auc([0.5, 0.5, 0.5], [True, False, True]) == 0.5
    assert auc([0.2, 0.6, 0.4], [True, False, False]) == 0.0
    assert auc([0.9, 0.1], [True, True]) is None
