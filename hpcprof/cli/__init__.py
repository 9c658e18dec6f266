"""The `hpcprof` command line. Sub-commands are imported only when run, so `hpcprof nsys stats`
does not pay for the run machinery (and nothing but `bench` imports torch)."""

from __future__ import annotations

import gc
import importlib

import click

from hpcprof.core.errors import as_user_error

#: command name -> "module:attribute"
COMMANDS = {
    "sites": "hpcprof.cli.sites:sites",
    "render": "hpcprof.cli.render_submit:render",
    "submit": "hpcprof.cli.render_submit:submit",
    "status": "hpcprof.cli.status:status",
    "cancel": "hpcprof.cli.status:cancel",
    "collect": "hpcprof.cli.collect:collect",
    "resubmit": "hpcprof.cli.render_submit:resubmit",
    "report": "hpcprof.cli.report:report",
    "compare": "hpcprof.cli.report:compare",
    "diff": "hpcprof.cli.diff:diff",
    "logs": "hpcprof.cli.report:logs",
    "templates": "hpcprof.cli.templates:templates",
    "nsys": "hpcprof.tools.nsys.analysis.cli:nsys",
    "trace": "hpcprof.tools.torch.analysis.cli:trace",
    "ncu": "hpcprof.tools.ncu.analysis.cli:ncu",
    "memory": "hpcprof.cli.memory:memory",
    "bench": "hpcprof.cli.bench:bench",
    "doctor": "hpcprof.cli.doctor:doctor",
}
SHORT_HELP = {
    "sites": "List the available site configs; `sites init NAME` writes your own.",
    "render": "Render job script and rank wrapper without submitting.",
    "submit": "Render an experiment for a site and submit every sweep point.",
    "status": "Show the state of runs.",
    "cancel": "Cancel runs.",
    "collect": "Collect finished runs into results/ and the store (or, --submit, as a job).",
    "resubmit": "Submit failed (or any ended) runs again as new runs linked to the old ones.",
    "report": "Headline metrics of runs (terminal), or an HTML report with plots (--html).",
    "compare": "Compare runs or sweep points: parameters against headline metrics.",
    "diff": "Compare two profiles (nsys exports, Kineto traces) per kernel, category, collective, with verdicts.",
    "logs": "Print a run's job log or one rank's log.",
    "templates": "Editable copies of the job-script templates.",
    "nsys": "nsys stats reports and distributed analyses of Nsight Systems exports.",
    "trace": "HTA's analyses of torch.profiler traces.",
    "ncu": "Nsight Compute kernel metrics (Echo's table).",
    "memory": "Peak, holders by site and growth of PyTorch memory snapshots.",
    "bench": "Run a built-in workload directly under any launcher.",
    "doctor": "Run a site's job-start checks here and print what they found.",
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, _, attr = COMMANDS[name].partition(":")
        return getattr(importlib.import_module(module), attr)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                            list[str]]:
        """The command `args` name, imported. Where the program's entry paused the cyclic collector
        (`hpcprof.__main__`), start-up ends here: what it made (modules, classes, functions) is
        frozen out of every later collection and the collector runs again for the command's work."""
        resolved = super().resolve_command(ctx, args)
        if not gc.isenabled():
            gc.freeze()
            gc.enable()
        return resolved

    def invoke(self, ctx: click.Context) -> object:
        """Run the command; known failures of bad input become one line and exit code 2. Output
        to a stream whose encoding cannot write a character (an ASCII-only terminal) gets its ASCII
        stand-in (safe_text.honour_encoding)."""
        from hpcprof.core.safe_text import honour_encoding

        honour_encoding()
        try:
            return super().invoke(ctx)
        except (OSError, UnicodeError, RecursionError, ValueError, RuntimeError) as exc:
            error = as_user_error(exc)
            if error is None:
                raise
            raise error from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SHORT_HELP[name]) for name in COMMANDS])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hpcprof")
def main() -> None:
    """Profile distributed PyTorch work on HPC clusters.

    \b
    hpcprof submit EXP.yaml --site polaris     render, submit, record
    hpcprof status / cancel RUN                follow the runs
    hpcprof collect; hpcprof report            analyse profiles, store and show results
    """
