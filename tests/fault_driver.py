"""Run the gsm8k recipe's command line with one fault armed inside the process.

Used by ``tests/test_faults.py`` for faults that must strike *inside* a checkpoint write, where a
signal sent from outside would land only by luck::

    python tests/fault_driver.py '{"point": "torch.save", "at": 3}' --preset smoke --output-dir RUN ...

``point``:
- ``torch.save``: the ``at``-th file ``torch.save`` writes into a checkpoint gets half its bytes,
  then the process is killed with SIGKILL (optimizer, scheduler or RNG state cut short);
- ``marker``: the ``at``-th checkpoint gets its completeness marker, then SIGKILL strikes before
  the rename that publishes it.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys


def _kill() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def arm(spec: dict) -> None:
    import torch

    from unsloth_grpo.training import checkpoint as ckpt

    count = {"n": 0}
    if spec["point"] == "torch.save":
        real_save = torch.save

        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)) and f"{os.sep}checkpoint-" in os.fspath(f):
                count["n"] += 1
                if count["n"] == spec["at"]:
                    buf = io.BytesIO()
                    real_save(obj, buf, *args, **kwargs)
                    with open(f, "wb") as fh:
                        fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
                    _kill()
            return real_save(obj, f, *args, **kwargs)

        torch.save = save
    elif spec["point"] == "marker":
        real_marker = ckpt.write_marker

        def write_marker(directory, **kwargs):
            path = real_marker(directory, **kwargs)
            count["n"] += 1
            if count["n"] == spec["at"]:
                _kill()
            return path

        ckpt.write_marker = write_marker
    else:
        raise SystemExit(f"unknown fault point {spec['point']!r}")


if __name__ == "__main__":
    arm(json.loads(sys.argv[1]))
    from unsloth_grpo.recipes.gsm8k import main

    sys.exit(main(sys.argv[2:]))
