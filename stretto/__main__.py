import sys

from stretto.cli import main

sys.exit(main())
