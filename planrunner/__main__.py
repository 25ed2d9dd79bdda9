import sys

from planrunner.cli import main

sys.exit(main())
