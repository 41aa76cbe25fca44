"""`python -m pytest_fwdorder`: the `fwdorder` command line."""

import sys

from pytest_fwdorder.cli.main import main

sys.exit(main())
