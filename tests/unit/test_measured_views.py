"""A holder's own measured use, as `gpuattr top` and the demo print it: labelled as measured
with its source, once per pod, and absent where nothing measured the pod."""

from __future__ import annotations

import orjson

from contract import codec
from contract.inputs import DeviceUsage
from gpuattr.demo_view import _holders
from streams.core.devices.attribution import attribute
from streams.present.views import device_row, measured_text
from tests.unit.test_measured import CTX, ROWS, reading, sample


def test_top_and_the_demo_print_the_measured_use_of_measured_pods_only() -> None:
    usage = DeviceUsage("exporter", pods=(reading("train", 12000, 41), reading("infer", 0, 0)))
    ev, _ = attribute(sample(usage), ROWS, CTX)
    row = device_row(ev, None)
    assert measured_text(row, "ml", "train") == "measured 11.7 GiB · SM 41% (exporter)"
    assert measured_text(row, "web", "infer") == "measured 0.0 GiB · SM 0% (exporter)"
    assert measured_text(row, "lab", "notebook") is None  # not measured: nothing printed
    demo = _holders(orjson.loads(codec.encode(ev)))
    lines = demo.splitlines()
    assert sum("measured" in line for line in lines) == 2
    assert any("ml/train" in line and "measured 11.7 GiB · SM 41%" in line for line in lines)
    assert not any("lab/notebook" in line and "measured" in line for line in lines)
