"""`python -m xladev.coverage --worker [OPTIONS_JSON]`: the worker process of `xladev coverage`."""

import json
import sys

from xladev.coverage._pool import worker_main

if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
    sys.exit(worker_main(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}))
sys.exit("usage: python -m xladev.coverage --worker [OPTIONS_JSON]  (see `xladev coverage`)")
