import sys

try:
    from pipeline.cli import main
except KeyboardInterrupt:  # Ctrl-C while still starting up: just exit, as a run interrupted does
    sys.exit(130)

sys.exit(main())
