"""The `hpcprof` run commands, one module per job; `hpcprof.cli.COMMANDS` names them. Their shared
options are in `hpcprof.cli_options`, their shared helpers in `hpcprof.commands.common`."""
