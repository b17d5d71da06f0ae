import sys

from audit.verify.cli import main

sys.exit(main())
