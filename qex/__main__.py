from qex.cli import main

main()
