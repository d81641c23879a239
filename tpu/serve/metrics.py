"""Prometheus metrics of `tpu serve` (served at ``/metrics``).

Per model: ``tpu_requests_total`` (by outcome: ok, invalid, overloaded,
device, error), ``tpu_request_seconds`` (latency histogram),
``tpu_batch_samples`` (samples per chunk sent to a chip),
``tpu_queue_requests`` / ``tpu_queue_samples`` (admitted, not yet
answered). Per device, read from the pool at each scrape: ``tpu_device_up``,
``tpu_device_busy_seconds_total``, ``tpu_device_jobs_total``,
``tpu_device_chunks_total``, ``tpu_device_failures_total``,
``tpu_device_restarts_total``, ``tpu_device_chip_cycles_total``,
``tpu_device_mxu_active_cycles_total``, ``tpu_device_useful_macs_total`` and
``tpu_device_mxu_utilization`` (useful MACs over cycles x rows x cols).
"""

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily


__all__ = ["ServeMetrics"]

_LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60,
                    float("inf"))


class _PoolCollector:
    def __init__(self, pool):
        self.pool = pool

    def collect(self):
        cfg = self.pool.config
        families = {
            "up": GaugeMetricFamily("tpu_device_up", "1 while the device is working",
                                    labels=["device"]),
            "busy": GaugeMetricFamily("tpu_device_busy", "1 while the device runs a job",
                                      labels=["device"]),
            "util": GaugeMetricFamily("tpu_device_mxu_utilization",
                                      "useful MACs / (chip cycles x rows x cols), since start",
                                      labels=["device"]),
        }
        counters = {
            "busy_seconds": ("tpu_device_busy_seconds", "wall seconds spent running jobs"),
            "jobs": ("tpu_device_jobs", "jobs completed"),
            "chunks": ("tpu_device_chunks", "chunks (compiled batches) completed"),
            "failures": ("tpu_device_failures", "jobs the device failed"),
            "restarts": ("tpu_device_restarts", "times the device was opened anew"),
            "cycles": ("tpu_device_chip_cycles", "chip cycles of the programs run"),
            "mxu_active": ("tpu_device_mxu_active_cycles", "cycles rows entered the array"),
            "useful_macs": ("tpu_device_useful_macs", "multiply-accumulates of the models"),
        }
        made = {k: CounterMetricFamily(name, doc, labels=["device"])
                for k, (name, doc) in counters.items()}
        for stats in list(self.pool.stats.values()):
            label = [stats.name]
            families["up"].add_metric(label, 1.0 if stats.alive else 0.0)
            families["busy"].add_metric(label, 1.0 if stats.busy else 0.0)
            capacity = stats.cycles * cfg.rows * cfg.cols
            families["util"].add_metric(label, stats.useful_macs / capacity if capacity else 0.0)
            for key, family in made.items():
                family.add_metric(label, float(getattr(stats, key)))
        yield from families.values()
        yield from made.values()


class ServeMetrics:
    """The server's metrics, registered once in `registry`."""

    def __init__(self, pool, registry=REGISTRY):
        self.requests = Counter("tpu_requests", "inference requests by outcome",
                                ["model", "outcome"], registry=registry)
        self.latency = Histogram("tpu_request_seconds", "request latency, arrival to answer",
                                 ["model"], buckets=_LATENCY_BUCKETS, registry=registry)
        self.batch = Histogram("tpu_batch_samples", "samples per chunk sent to a chip",
                               ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512,
                                                   float("inf")), registry=registry)
        self.queue_requests = Gauge("tpu_queue_requests", "requests admitted and not answered",
                                    ["model"], registry=registry)
        self.queue_samples = Gauge("tpu_queue_samples", "samples admitted and not answered",
                                   ["model"], registry=registry)
        registry.register(_PoolCollector(pool))

    def request(self, model, outcome, seconds):
        self.requests.labels(model, outcome).inc()
        if outcome == "ok":
            self.latency.labels(model).observe(seconds)

    def observer(self, model):
        """The `Batcher` observer of `model`."""
        def observe(event, **values):
            if event == "batch":
                self.batch.labels(model).observe(values["samples"])
            elif event == "queue":
                self.queue_requests.labels(model).set(values["requests"])
                self.queue_samples.labels(model).set(values["samples"])
        return observe
