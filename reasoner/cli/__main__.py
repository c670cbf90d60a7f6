import sys

from reasoner.cli import main

sys.exit(main())
