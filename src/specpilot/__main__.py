from specpilot.cli import main

main()
