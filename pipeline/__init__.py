"""The data pipeline: PySpark jobs over the proxy's request log (``purgatory-proxy report``).

Install with the ``[pipeline]`` extra (pyspark, matplotlib); Java 17 must be on the machine.
"""

from pipeline.report import run_report

__all__ = ["run_report"]
