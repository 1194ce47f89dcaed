import sys

from stretto.cli.main import main

sys.exit(main())
