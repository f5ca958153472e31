import sys

from unsloth_grpo.cli.main import main

sys.exit(main())
