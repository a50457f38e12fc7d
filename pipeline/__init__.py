"""The data pipeline: PySpark jobs over the proxy's request log (``purgatory-proxy report``).

Install with the ``[pipeline]`` extra (pyspark, matplotlib); Java 17 must be on the machine.
This package imports without pyspark: `pipeline.report.run_report` is where Spark starts, and
`pipeline.command` turns a missing extra into one line that says what to install.
"""
