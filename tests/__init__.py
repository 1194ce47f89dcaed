"""stretto's test suite.

Byte-code is cached for the suite even where PYTHONDONTWRITEBYTECODE is set (as in this
project's containers): without the cache every run compiles each imported module again and
pytest rewrites the asserts of every test module again, most of the time collection takes. The
caches go to `__pycache__/` (git-ignored); this package is imported before its conftest, so
everything the tests import after it is cached."""

import sys

sys.dont_write_bytecode = False
