import sys

from bench.cli.app import main

sys.exit(main())
