"""Run the gsm8k recipe's command line with one fault armed inside the process.

Used by ``tests/test_faults.py`` for faults that must strike at an exact point of a run (inside a
checkpoint write, inside a given step), where a signal sent from outside would land only by luck::

    python tests/fault_driver.py '{"point": "torch.save", "at": 3}' --preset smoke --output-dir RUN ...

``point``:
- ``torch.save``: the ``at``-th file ``torch.save`` writes into a checkpoint gets half its bytes,
  then the process is killed with SIGKILL (optimizer, scheduler or RNG state cut short);
- ``marker``: the ``at``-th checkpoint gets its completeness marker, then SIGKILL strikes before
  the rename that publishes it;
- ``enospc``: the ``at``-th file ``torch.save`` writes into a checkpoint gets 100 bytes, then the
  write fails with ENOSPC (a full disk);
- ``stop``: the first time the Trainer fires ``event`` (``on_step_begin``, ``on_pre_optimizer_step``,
  ``on_log`` or ``on_save``) in step ``step`` or later, the process prints
  ``fault_driver: stopped at <event> of step <n>`` and stops itself with SIGSTOP, before any
  callback sees the event. The test then sends the signal it wants to deliver at exactly that
  point, and SIGCONT; the run cannot move on while the test decides, however fast the machine is.
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


#: Events fired before the step they belong to is counted in ``state.global_step``.
_BEFORE_COUNT = ("on_step_begin", "on_pre_optimizer_step")


def arm(spec: dict) -> None:
    import torch

    from unsloth_grpo.training import checkpoint as ckpt

    count = {"n": 0}
    def on_checkpoint_save(fault) -> None:
        """Wrap ``torch.save``: its ``at``-th write into a checkpoint calls ``fault(obj, f, ...)`` instead."""
        real_save = torch.save

        def save(obj, f, *args, **kwargs):
            if isinstance(f, (str, os.PathLike)) and f"{os.sep}checkpoint-" in os.fspath(f):
                count["n"] += 1
                if count["n"] == spec["at"]:
                    return fault(real_save, obj, f, *args, **kwargs)
            return real_save(obj, f, *args, **kwargs)

        torch.save = save

    if spec["point"] == "torch.save":
        def half_written(real_save, obj, f, *args, **kwargs):
            buf = io.BytesIO()
            real_save(obj, buf, *args, **kwargs)
            with open(f, "wb") as fh:
                fh.write(buf.getvalue()[: len(buf.getvalue()) // 2])
            _kill()

        on_checkpoint_save(half_written)
    elif spec["point"] == "marker":
        real_marker = ckpt.write_marker

        def write_marker(directory, **kwargs):
            path = real_marker(directory, **kwargs)
            count["n"] += 1
            if count["n"] == spec["at"]:
                _kill()
            return path

        ckpt.write_marker = write_marker
    elif spec["point"] == "enospc":
        import errno

        def disk_full(real_save, obj, f, *args, **kwargs):
            with open(f, "wb") as fh:
                fh.write(b"\0" * 100)
            raise OSError(errno.ENOSPC, "No space left on device", os.fspath(f))

        on_checkpoint_save(disk_full)
    elif spec["point"] == "stop":
        from transformers.trainer_callback import CallbackHandler

        real_call = CallbackHandler.call_event

        def call_event(self, event, args, state, control, **kwargs):
            if not count["n"] and event == spec["event"]:
                step = state.global_step + (1 if event in _BEFORE_COUNT else 0)
                if step >= spec["step"]:
                    count["n"] = 1
                    print(f"fault_driver: stopped at {event} of step {step}", flush=True)
                    os.kill(os.getpid(), signal.SIGSTOP)
            return real_call(self, event, args, state, control, **kwargs)

        CallbackHandler.call_event = call_event
    else:
        raise SystemExit(f"unknown fault point {spec['point']!r}")


if __name__ == "__main__":
    arm(json.loads(sys.argv[1]))
    from unsloth_grpo.recipes.gsm8k import main

    sys.exit(main(sys.argv[2:]))
