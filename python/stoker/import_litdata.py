"""python3 -m stoker.import_litdata DIR OUT: a LitData optimized dataset into a stoker dataset
(stoker.import_litdata; `--help` for the options)."""
import sys

from ._import import main

if __name__ == "__main__":
    sys.exit(main(fmt="litdata"))
