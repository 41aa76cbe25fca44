"""Render the golden text of every zoo model into a folder: one file per model.

    python tests/zoo/render_all.py OUT_DIR

The zoo suite runs this in fresh processes with different PYTHONHASHSEED values and
compares the files byte for byte with its own goldens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from catalogue import all_cases

from pytest_fwdorder import trace_forward

if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for zoo_case in all_cases():
        with torch.no_grad():
            trace = trace_forward(zoo_case.build(), *zoo_case.real_inputs())
        (out / f"{zoo_case.name}.txt").write_text(trace.render())
