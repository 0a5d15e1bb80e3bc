#!/usr/bin/env python3
"""Runs an example with bad arguments and checks that it fails cleanly: exit status exactly CODE
(not a signal, not an abort) and a message on stderr that starts with the program's name.

Usage: expect_exit.py CODE PROGRAM [ARG...]"""
import os
import subprocess
import sys


def main():
    code, program, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    run = subprocess.run([program] + args, capture_output=True, text=True, timeout=120)
    name = os.path.basename(program)
    shown = " ".join([name] + args)
    if run.returncode != code:
        how = f"signal {-run.returncode}" if run.returncode < 0 else f"exit status {run.returncode}"
        print(f"{shown}: {how}, expected exit status {code}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}")
        return 1
    if not run.stderr.startswith(name + ": "):
        print(f"{shown}: exit status {code} but stderr does not start with '{name}: ':\n{run.stderr}")
        return 1
    print(f"{shown}: exit status {code}: {run.stderr.splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
