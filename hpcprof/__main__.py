from hpcprof.cli import main

main()
