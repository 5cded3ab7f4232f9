"""`python -m edgeosc`: the command line (as in the Raspberry Pi bundle, where it is not installed)."""
from .cli import main

main()
