"""Hugging Face accelerate's own distributed self-test of main_process_first, as users run it.

The main process writes a file in the current folder first; after a barrier every other
process appends a line to it; the main process then reads it back and counts the lines.
It passes only when every rank of every node writes to the same file.
"""

from accelerate.test_utils.scripts.test_script import process_execution_check

if __name__ == "__main__":
    process_execution_check()
    print("accelerate's process execution check passed")
