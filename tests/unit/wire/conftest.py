"""Shared setup for the wire unit tests."""

from __future__ import annotations

import warnings

# kafka-python 3.0.12 loads its JSON schemas at import time with
# importlib.resources.read_text, which Python 3.11 deprecates. Import the modules the
# tests use once, quietly: the noise is theirs, not ours.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.protocol.admin.cluster
    import kafka.protocol.consumer.fetch
    import kafka.protocol.consumer.offsets
    import kafka.protocol.metadata.api_versions
    import kafka.protocol.metadata.find_coordinator
    import kafka.protocol.metadata.metadata
    import kafka.protocol.producer.produce  # noqa: F401
