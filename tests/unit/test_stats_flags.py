"""The reader's flags on a cell's statistic: small n and wide spread (bench.judge.stats)."""

from bench.judge import stats


def test_reliability_flags_name_small_n_and_wide_spread():
    assert stats.reliability_flags(3, 0.04) == []
    assert stats.reliability_flags(1, None) == ["n=1 < 3: no spread"]
    assert stats.reliability_flags(2, 0.02) == ["n=2 < 3"]
    # four runs whose (max - min) / median is 0.452
    times = [1.0, 1.2, 1.52, 1.1]
    flags = stats.reliability_flags(len(times), stats.spread(times))
    assert flags == ["spread 45% > 10%"]
    assert stats.reliability_flags(5, stats.SPREAD_LIMIT) == []
