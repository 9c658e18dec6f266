"""Kernel category rules a site or an experiment adds (`kernel_categories:`): each names a
category and the regular expression (Python `re`, searched anywhere in the kernel's name) that
puts a kernel in it. They are tried before hpcprof's own table (hpcprof/analysis/categories.py),
the experiment's before the site's, the first match deciding."""

from __future__ import annotations

import re
import string

from hpcprof.core.models import FieldError, Model, run_checks

#: a category: dotted words, as it ends a metric name (`gpu.<category>`); `{group}` takes the
#: text of a named group of the pattern (hpcprof's own `nccl.{collective}`)
CATEGORY = re.compile(r"(?:[A-Za-z][A-Za-z0-9_]*|\{[A-Za-z_][A-Za-z0-9_]*\})(?:\.(?:[A-Za-z0-9_]+|\{[A-Za-z_][A-Za-z0-9_]*\}))*")


def check_pattern(value: str) -> None:
    """A Python regular expression, searched anywhere in a kernel's name; one matching every name is refused."""
    try:
        compiled = re.compile(value)
    except re.error as exc:
        raise ValueError(f"not a regular expression ({exc}); fix it, e.g. 'my_fused_adam|apex_lamb'") from None
    if compiled.search("") is not None:
        raise ValueError("matches every kernel name (it matches the empty text); make it name something")


def placeholders(category: str) -> set[str]:
    """The `{group}` names a category takes from its pattern."""
    return {name for _, name, _, _ in string.Formatter().parse(category) if name}


class KernelCategoryRule(Model):
    """One rule: kernels whose name `pattern` matches (re.search) are in `category`."""

    category: str
    pattern: str

    def __post_init__(self) -> None:
        run_checks(self, {"category": check_category, "pattern": check_pattern})
        missing = placeholders(self.category) - set(re.compile(self.pattern).groupindex)
        if missing:
            raise FieldError("category", f"takes {{{', '.join(sorted(missing))}}} but the pattern has no such "
                                         "named group (write (?P<name>...) in the pattern)")


def check_category(value: str) -> None:
    """Dotted words (letters, digits, _); a part may be a `{group}`: the text of that named group of the pattern."""
    if not CATEGORY.fullmatch(value):
        raise ValueError("not a category: dotted words of letters, digits and _, starting with a "
                         "letter (e.g. moe or attention.paged)")
