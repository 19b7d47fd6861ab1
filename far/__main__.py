import sys

from far.cli import main

sys.exit(main())
