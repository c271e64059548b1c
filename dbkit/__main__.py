import sys

from dbkit.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
