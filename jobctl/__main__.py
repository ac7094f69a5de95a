"""``python -m jobctl``: the command line."""

from .cli import main

main()
