"""python3 -m stoker.import_mds DIR OUT: a MosaicML Streaming (MDS) dataset into a stoker dataset
(stoker.import_mds; `--help` for the options)."""
import sys

from ._import import main

if __name__ == "__main__":
    sys.exit(main(fmt="mds"))
