"""The lock-free hot-path metrics export as regular Prometheus counters and histograms."""

from prometheus_client import generate_latest

from aggregator.metrics import AggregatorMetrics


def test_exchange_counts_and_latency_buckets_are_exported() -> None:
    metrics = AggregatorMetrics()
    metrics.exchanges["accepted"] += 3
    metrics.exchanges["invalid"] += 1
    for value in (0.00004, 0.0001, 0.0002, 0.5):
        metrics.exchange_latency.observe(value)
    text = generate_latest(metrics.registry).decode()
    assert 'carico_aggregator_exchanges_total{outcome="accepted"} 3.0' in text
    assert 'carico_aggregator_exchanges_total{outcome="invalid"} 1.0' in text
    assert 'carico_aggregator_exchanges_total{outcome="stale"} 0.0' in text
    # Buckets are cumulative and "le" is inclusive: 1e-4 falls into the 1e-4 bucket.
    assert 'carico_aggregator_exchange_latency_seconds_bucket{le="5e-05"} 1.0' in text
    assert 'carico_aggregator_exchange_latency_seconds_bucket{le="0.0001"} 2.0' in text
    assert 'carico_aggregator_exchange_latency_seconds_bucket{le="0.00025"} 3.0' in text
    assert 'carico_aggregator_exchange_latency_seconds_bucket{le="0.1"} 3.0' in text
    assert 'carico_aggregator_exchange_latency_seconds_bucket{le="+Inf"} 4.0' in text
    assert "carico_aggregator_exchange_latency_seconds_count 4.0" in text
    assert "carico_aggregator_exchange_latency_seconds_sum 0.5003" in text


def test_model_age_is_nan_before_the_first_model() -> None:
    text = generate_latest(AggregatorMetrics().registry).decode()
    assert "carico_aggregator_global_model_age_seconds NaN" in text
