"""The data pipeline: PySpark jobs over the proxy's request log (``purgatory-proxy report``).

Install with the ``[pipeline]`` extra (pyspark, matplotlib); Java 17 must be on the machine.
This package imports without pyspark: `pipeline.report.run_report` is where Spark starts, and
`pipeline.command` turns a missing extra into one line that says what to install.
It reads the request log as docs/request-log.md describes it and imports nothing of the proxy
(proxy/cli.py imports it, and hands the report the proxy's glossary of outcomes).
"""
