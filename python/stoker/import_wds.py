"""python3 -m stoker.import_wds SRC... OUT: WebDataset tar shards into a stoker dataset
(stoker.import_webdataset; `--help` for the options)."""
import sys

from ._import import main

if __name__ == "__main__":
    sys.exit(main())
