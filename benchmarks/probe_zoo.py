"""Find the smallest input each torchvision model accepts, and what each check costs.

    python benchmarks/probe_zoo.py [names...]   # prints one JSON line per model

Used to fill tests/zoo/catalogue.py INPUT_SIDES; not part of the test run.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import torch
import torchvision

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "zoo"))
from catalogue import case, family_of

from pytest_fwdorder import trace_forward

CANDIDATES = {
    "video": [(4, 32), (8, 64), (16, 112), (16, 224)],
    "optical_flow": [64, 128, 224],
    "detection": [64, 128, 320],
}
DEFAULT = [32, 64, 96, 128, 160, 224, 299]


def probe(name: str) -> dict[str, object]:
    family = family_of(name)
    errors = []
    for side in CANDIDATES.get(family, DEFAULT):
        zoo_case = case(name, side)
        try:
            start = time.perf_counter()
            model = zoo_case.build()
            built = time.perf_counter()
            with torch.no_grad():
                trace = trace_forward(model, *zoo_case.real_inputs())
            traced = time.perf_counter()
        except Exception as error:
            errors.append(f"{side}: {type(error).__name__}: {str(error)[:120]}")
            continue
        result: dict[str, object] = {
            "name": name,
            "family": family,
            "side": side,
            "calls": len(trace),
            "build_s": round(built - start, 2),
            "trace_s": round(traced - built, 2),
        }
        try:
            start = time.perf_counter()
            with torch.no_grad():
                trace_forward(zoo_case.build, *zoo_case.inputs, device="meta")
            result["meta_s"] = round(time.perf_counter() - start, 2)
        except Exception as error:
            result["meta_error"] = f"{type(error).__name__}: {str(error)[:200]}"
        try:
            torch.fx.symbolic_trace(model)
            result["fx"] = True
        except Exception as error:
            result["fx"] = f"{type(error).__name__}: {str(error)[:80]}"
        result["rejected"] = errors
        return result
    return {"name": name, "family": family, "failed": errors}


if __name__ == "__main__":
    names = sys.argv[1:] or torchvision.models.list_models()
    for name in names:
        try:
            print(json.dumps(probe(name)), flush=True)
        except Exception:
            print(json.dumps({"name": name, "crashed": traceback.format_exc()[-300:]}), flush=True)
