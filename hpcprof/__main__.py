from hpcprof.cli import main

if __name__ == "__main__":  # not when mpi4py.futures workers import the main module
    main()
