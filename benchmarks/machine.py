"""The processor a benchmark ran on, for the headers of its results.

``platform.processor()`` is empty on many Linux hosts, and virtual machines often report
a generic model name ("Intel(R) Xeon(R) Processor"), so the CPU family and model numbers
from ``/proc/cpuinfo`` are added: they tell, say, an AMD EPYC of family 25 from one of
family 26, whose speeds differ.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path


def cpu() -> str:
    """The CPU's model name with its family and model numbers, and the number of logical CPUs."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu family", "model") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine()
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    return f"{name}, {os.cpu_count()} logical CPUs"


def describe() -> str:
    """:func:`cpu` and the operating system."""
    return f"{cpu()}, {platform.system()} {platform.release()}"
