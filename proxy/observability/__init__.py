# Strategy: each finished request goes to the Observer once; the rest read what it gathered.
"""Observability: what the proxy tells its operators about every request and itself.

observer.py        the one place a finished request is reported to
metrics.py         the Prometheus registry of one proxy, and the calls that move its series
collectors.py      the families built at scrape time: per-API requests, live state
request_log.py     the request log: one JSON line per request, written apart
outcomes.py        what can become of a request, with its meaning
error_peek.py      a response's top-level error code, read without decoding
http.py            the operators' endpoint: /metrics, /healthz, /readyz
readiness.py       why the proxy is not ready, by cause
logs.py            how log records are written: text or JSON lines
stream_address.py  the addresses of a stream's two ends, for log lines
"""
