"""The metrics' label sets stay bounded whatever clients send."""

from __future__ import annotations

from app.store.metrics import Metrics


def _request_series(metrics: Metrics) -> set[str]:
    return {
        line.split(" ")[0]
        for line in metrics.render().decode().splitlines()
        if line.startswith("teleuploader_http_requests_total{")
    }


def test_a_method_nobody_serves_is_one_label_whatever_its_name() -> None:
    # A method is any token a client cares to send: each used to be a label
    # set of its own, kept by the registry for the life of the process.
    metrics = Metrics()
    for n in range(500):
        metrics.observe_request("unmatched", f"X{n}", 405, 0.001)
    metrics.observe_request("unmatched", "PROPFIND", 405, 0.001)
    series = _request_series(metrics)
    assert series == {
        'teleuploader_http_requests_total{method="OTHER",route="unmatched",status="405"}',
        'teleuploader_http_requests_total{method="PROPFIND",route="unmatched",status="405"}',
    }
