"""`hpcprof memory SNAPSHOT...`: each PyTorch memory snapshot's peak, what held it by site and by
kind, what grew, and (--html) the allocated bytes over its history with the peak marked (hpcprof.analysis.memory)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

import click

from hpcprof.core.errors import UserError

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from hpcprof.analysis.memory import DeviceMemory, Holder

GIB = float(1 << 30)


def gib(value: int) -> str:
    return f"{value / GIB:,.2f} GiB"


def holders_text(title: str, holders: list[Holder], top: int) -> list[str]:
    if not holders:
        return []
    width = max(len(h.site) for h in holders[:top])
    lines = [title]
    lines += [f"  {h.site:<{width}}  {gib(h.bytes):>14}  {h.blocks:>7,} block{'' if h.blocks == 1 else 's'}"
              if h.blocks else f"  {h.site:<{width}}  {gib(h.bytes):>14}" for h in holders[:top]]
    if len(holders) > top:
        lines.append(f"  ... {len(holders) - top:,} more sites")
    return lines


def device_text(name: str, found: DeviceMemory, top: int) -> str:
    """The terminal summary of one device of one snapshot."""
    when = (f"at {(found.peak_time_us - found.timeline[0][0]) / 1e6:,.3f} s of the history, event "
            f"{found.peak_event + 1:,} of {found.events:,}" if found.peak_event >= 0 and found.peak_time_us is not None
            and found.timeline else "where the history begins" if found.events else "at the snapshot (no history)")
    lines = [f"{name}, device {found.device}: peak {gib(found.peak)} allocated {when}; at the snapshot "
             f"{gib(found.end)} allocated, {gib(found.reserved)} reserved"]
    lines += [f"  {oom}" for oom in found.ooms]
    lines += holders_text("held at the peak, by site:", found.at_peak, top)
    lines += holders_text("held at the peak, by kind (from each allocation's stack):", found.kinds_at_peak, top)
    lines += holders_text("allocated during the history and still held at its end, by site:", found.growing, top)
    return "\n".join(lines)


def timeline_figure(name: str, found: DeviceMemory) -> go.Figure:
    """The allocated bytes over the history, the peak marked."""
    try:
        import plotly.graph_objects as go
    except ImportError:
        raise UserError("--html needs plotly (pip install plotly); without --html nothing needs it") from None

    origin = found.timeline[0][0] if found.timeline else 0
    xs = [(t - origin) / 1e6 for t, _ in found.timeline]
    fig = go.Figure(go.Scatter(x=xs, y=[v / GIB for _, v in found.timeline], mode="lines", line_shape="hv",
                               name="allocated"))
    if found.peak_event >= 0 and found.peak_time_us is not None:
        fig.add_trace(go.Scatter(x=[(found.peak_time_us - origin) / 1e6], y=[found.peak / GIB], mode="markers+text",
                                 text=[f"peak {gib(found.peak)}"], textposition="top center", name="peak",
                                 marker={"size": 11, "color": "crimson"}))
    fig.update_layout(title_text=f"{name}, device {found.device}: allocated memory over the history",
                      xaxis_title="time since the history began (s)", yaxis_title="allocated (GiB)", height=420)
    return fig


def write_html(path: Path, figures: list[go.Figure]) -> None:
    from plotly.offline import get_plotlyjs

    from hpcprof.core.atomic import atomic_write
    from hpcprof.core.safe_text import plotly_escaped

    parts = []
    for number, fig in enumerate(figures, 1):
        fig = plotly_escaped(fig)
        title = fig.layout.title.text or ""
        fig.update_layout(title_text=None)
        parts.append(f"<figure><figcaption>{html.escape(title)}</figcaption>"
                     f"{fig.to_html(full_html=False, include_plotlyjs=False, div_id=f'fig{number}')}</figure>")
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>hpcprof memory</title>"
            f"<script type='text/javascript'>{get_plotlyjs()}</script></head><body>{''.join(parts)}</body></html>")
    atomic_write(path, page, what="memory timeline", option="--html")


@click.command("memory")
@click.argument("snapshots", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--top", default=10, show_default=True, type=click.IntRange(min=1), help="sites shown per table")
@click.option("--html", "html_path", type=click.Path(path_type=Path), help="write the timelines, peak marked, here")
def memory(snapshots: tuple[Path, ...], top: int, html_path: Path | None) -> None:
    """Peak, holders by site and growth of PyTorch memory snapshots (torch.cuda.memory._dump_snapshot).

    A snapshot is read as plain data: one that would run code when unpickled is refused.
    A file that cannot be read is one line; the others are still read (exit code 2).
    """
    from hpcprof.analysis.memory import analyse, read_snapshot

    figures = []
    failed = False
    for path in snapshots:
        try:
            found = analyse(read_snapshot(path))
        except UserError as exc:
            click.echo(f"Error: {exc.format_message()}", err=True)
            failed = True
            continue
        if not found:
            click.echo(f"{path}: no device memory recorded")
        for device in found:
            click.echo(device_text(str(path), device, top))
            if html_path is not None:
                figures.append(timeline_figure(path.name, device))
    if html_path is not None and figures:
        write_html(html_path, figures)
        click.echo(f"wrote {html_path}")
    if failed:
        raise click.exceptions.Exit(2)
