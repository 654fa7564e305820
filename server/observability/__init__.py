"""Metrics, Prometheus endpoint and msgpack exports."""
