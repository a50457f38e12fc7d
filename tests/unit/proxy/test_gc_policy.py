"""proxy/gc_policy.py, in a fresh interpreter (it changes process-wide state)."""

from __future__ import annotations

import json
import subprocess
import sys

from proxy.gc_policy import YOUNG_THRESHOLD


def test_serving_freezes_start_up_objects_and_collects_the_young_generation_rarely() -> None:
    script = (
        "import gc, json\n"
        "default = gc.get_threshold()\n"
        "from proxy.gc_policy import tune_for_serving\n"
        "tune_for_serving()\n"
        "print(json.dumps([default, gc.get_threshold(), gc.get_freeze_count()]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    default, tuned, frozen = json.loads(done.stdout)
    assert tuned == [YOUNG_THRESHOLD, default[1], default[2]]
    assert frozen > 1000  # the interpreter's and the proxy's modules, at least
