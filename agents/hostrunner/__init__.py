"""The host-side cell runner as a package (Python 3.8+ standard library only).

`agents/runner.py` is the entry point a host runs; it puts its own directory on sys.path and
calls `hostrunner.commands.main()`. On the controller the same modules import as
`bench.agents.hostrunner` (the controller reads the pool format from `poolfmt`). Modules use
relative imports only and do nothing at import time. agents/README.md lists the modules.
"""

RUNNER_VERSION = "0.1.0"
