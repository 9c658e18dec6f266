"""The config models' one-line errors (hpcprof.core.models): every kind of msgspec problem names
its field by the path the user wrote (a mapping's key included) and says what is expected."""

from __future__ import annotations

from typing import Any

import pytest

from hpcprof.config.experiment import Experiment
from hpcprof.config.site import SiteConfig, find_site
from hpcprof.core.errors import UserError
from hpcprof.core.models import dump, given_fields, validate
from hpcprof.tools.nsys.profiler import NSYS_TRACES
from hpcprof.workloads.args import DdpArgs, SeqparArgs


def site(**changes: Any) -> dict[str, Any]:
    return dump(find_site("polaris")) | changes


def error(model: type, data: Any) -> str:
    with pytest.raises(UserError) as caught:
        validate(model, data, "src")
    return caught.value.format_message()


@pytest.mark.parametrize(("data", "expected"), [
    (site(node={"gpus": -1}), "src: field 'node.gpus': expected an integer >= 0 (got -1)"),
    (site(node={"gpus": True}), "src: field 'node.gpus': expected an integer, got True"),
    (site(node={"gpus": "4"}), "src: field 'node.gpus': expected an integer, got '4'"),
    (site(node={"gpu": 4}), "src: unknown key 'node.gpu'; allowed keys: cores, gpus, max_nodes, ranks_per_node, "
                            "threads_per_core"),
    (site(gpu_affinity="left"), "src: field 'gpu_affinity': 'left' is not one of: 'none', 'identity', 'reverse'"),
    (site(name="a b"), "src: field 'name': 'a b' is not a site name: letters, digits and _.- only (got 'a b')"),
    (site(launcher={"kind": "mpiexec"}), "src: field 'launcher': launcher.flavor is required for mpiexec: pals, "
                                         "hydra, openmpi or auto"),
    (site(launcher={"kind": "mpiexec", "flavor": "auto"}), "src: launcher.flavor: auto asks the mpiexec of the machine "
     "that submits, which runs the ranks of a local site without a container only; set pals, hydra or openmpi"),
    (site(defaults={"walltime": "1:99:00"}), "src: field 'defaults.walltime': walltime must look like HH:MM:SS"),
    (site(queues={"debug": {}, "prod": {"by_nodes": [{"max_nodes": 10, "max_walltime": "x"}]}}),
     "src: field 'queues.prod.by_nodes.0.max_walltime': walltime must look like HH:MM:SS"),
    (site(queues={"debug": {}, "prod": {"max_nodes": "ten"}}),
     "src: field 'queues.prod.max_nodes': expected an integer or null, got 'ten'"),
    (site(env={"OK": "1", "FLAG": True}), "src: field 'env.FLAG': True is not an environment value"),
    (site(env={"OK": 1, "BASH_ENV": "x"}), "src: field 'env': environment variable BASH_ENV is reserved"),
    (site(peaks={"tflops": {"fp8": 10.0}}),
     "src: field 'peaks.tflops': key 'fp8': not one of: 'float32', 'tf32', 'bfloat16'"),
    (site(defaults={"queue": "a,walltime=9:00:00"}),
     "src: field 'defaults.queue': 'a,walltime=9:00:00' cannot go into a pbs directive"),
    ([1, 2], "src: expected a mapping, got a list"),
    ({k: v for k, v in site().items() if k != "launcher"}, "src: field 'launcher': required; add it"),
])
def test_each_problem_is_one_line_naming_its_field(data: Any, expected: str) -> None:
    assert error(SiteConfig, data).startswith(expected)


def test_numbers_in_env_become_text_and_dump_round_trips() -> None:
    loaded = validate(SiteConfig, site(env={"A": 1, "B": 2.5, "C": "x"}), "src")
    assert loaded.env == {"A": "1", "B": "2.5", "C": "x"}
    assert validate(SiteConfig, dump(loaded), "again") == loaded


def test_experiment_paths_through_lists_and_nested_models() -> None:
    experiment = {"name": "e", "workload": {"kind": "command", "argv": ["a"]}}
    assert error(Experiment, experiment | {"profile": {"nsys": {"trace": ["cuda", "gpu"]}}}) == (
        "src: field 'profile.nsys.trace': unknown nsys trace 'gpu'; allowed: " + ", ".join(NSYS_TRACES))
    assert error(Experiment, experiment | {"sweep": {"resources.nodes": []}}) == (
        "src: field 'sweep': sweep key 'resources.nodes' has no values")
    assert error(Experiment, experiment | {"workload": {"kind": "command", "argv": ["a", 3]}}) == (
        "src: field 'workload.argv.1': expected text, got 3")
    assert error(Experiment, experiment | {"name": "../x"}) == (
        "src: field 'name': '../x' is not an experiment name: letters, digits and _.-, at most 64, starting with a "
        "letter or digit (got '../x')")


def test_options_take_text_and_remember_what_was_given() -> None:
    """The workloads' options are not strict (flags are text) and keep which fields the input gave,
    so that the argv reproduces them (a default given explicitly included)."""
    args = validate(SeqparArgs, {"iterations": "5", "check": "false", "sequence_length": 4608}, "seqpar")
    assert (args.iterations, args.check) == (5, False)
    assert given_fields(args) == {"iterations", "check", "sequence_length"}
    assert given_fields(SeqparArgs(iterations=5)) == {"iterations"}   # built in Python: those off their default
    assert error(SeqparArgs, {"iterations": "five"}) == "src: field 'iterations': expected an integer, got 'five'"
    assert error(DdpArgs, {}) == "src: echo_input or model_file is required"
    assert str(validate(DdpArgs, {"echo_input": "in"}, "ddp").echo_input) == "in"


@pytest.mark.parametrize("model", [SeqparArgs, DdpArgs])
def test_every_option_flag_says_what_it_does(model: type) -> None:
    """Each workload option's flag carries its description (an optional field's too: its Meta sits
    inside the union with None) and its default."""
    from hpcprof.core.models import field_help, fields
    from hpcprof.workloads.options import build_parser

    helps = {action.dest: action.help for action in build_parser(model, "x", "x", {})._actions}
    for field in fields(model):
        assert field_help(field), field.name
        assert helps[field.name].startswith(field_help(field)), (field.name, helps[field.name])
    assert helps["warmup_epochs" if model is DdpArgs else "iterations"].endswith("(default: 0)" if model is DdpArgs
                                                                                else "(default: 18)")


def test_the_profile_schema_is_the_profiler_tables() -> None:
    """`profile.tool` takes the table's tools (built-in order), each built-in tool's `profile.<tool>:`
    block is its options model and its program's site key is a field of the site's `paths:`."""
    from hpcprof import profilers
    from hpcprof.config.profile import ProfileConfig
    from hpcprof.config.site import ToolPaths
    from hpcprof.core.models import fields

    blocks = {field.name: field.type for field in fields(ProfileConfig)}
    minimal = {"name": "x", "workload": {"kind": "command", "argv": ["true"]}}
    for name, profiler in profilers.BUILTIN.items():
        assert blocks.get(name) is profiler.options, name
        assert profiler.paths_key is None or profiler.paths_key in {f.name for f in fields(ToolPaths)}, name
        experiment = validate(Experiment, {**minimal, "profile": {"tool": name}}, "src")
        assert experiment.profile.tool == name and dump(experiment)["profile"]["tool"] == name
    assert error(Experiment, {**minimal, "profile": {"tool": "rocprof"}}) == (
        "src: field 'profile.tool': 'rocprof' is not one of: 'nsys', 'ncu', 'torch', 'none'")
    assert error(Experiment, {**minimal, "profile": {"tool": 3}}) == "src: field 'profile.tool': expected text, got 3"
