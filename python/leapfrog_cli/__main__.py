"""python -m leapfrog_cli: the same as the `leapfrog` command."""
import sys

from leapfrog_cli import main

sys.exit(main())
