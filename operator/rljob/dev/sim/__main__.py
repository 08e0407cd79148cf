"""`python -m rljob.dev.sim --kubeconfig ... --state-dir ... --control-port N`."""

import sys

from rljob.dev.sim.server import main

sys.exit(main())
