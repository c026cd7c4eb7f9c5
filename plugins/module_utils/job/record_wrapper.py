"""The wrapper that runs a training script under torch's error recording, written beside the job's
log by torch_job_unit (train_record_errors).
"""

from __future__ import annotations

# The launcher runs the script through this wrapper (written beside the job's log), so that
# an uncaught exception leaves torchrun an error file (torch's own `record`): torchrun then
# prints the exception's traceback in its summary, rank by rank. The script itself runs
# unchanged, as `python script.py ARGS` would run it. Once it has returned, the wrapper ends
# the process the way Python's shutdown starts it (the script's other threads joined, its
# atexit handlers run, its output flushed), then leaves without the native libraries'
# teardown: with gloo (torch 2.14) that teardown now and then aborts a process whose work is
# done, after destroy_process_group ("terminate called without an active exception", seen in
# 2 of about 100 jobs here), and torchrun would report a finished job as failed.
# multiprocessing's children end the same way (os._exit after their target returns).
RECORD_WRAPPER = '''"""Run a training script under torch's error recording (torch-cluster)."""
import atexit
import os
import runpy
import sys
import threading

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def finish() -> None:
    """End a process whose script has returned, as Python's shutdown would, without the
    native libraries' teardown."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
    finish()
'''
