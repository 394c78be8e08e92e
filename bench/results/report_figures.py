"""The report's figures as inline SVG text: bench.results.plots draws each matrix figure of
the report's data (bench.results.report_data), figstyle.svg_text makes it an <svg> element with
ids of its own. None when matplotlib is absent (the report says how to get figures)."""

from __future__ import annotations


def svgs(data: dict) -> dict[str, str | None] | None:
    """{figure kind: <svg> text, or None where the figure could not be drawn}; None without
    matplotlib."""
    try:
        from bench.results import figstyle, plots    # matplotlib: loaded only when used
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "matplotlib":
            raise
        return None
    from bench.errors import BenchError
    out: dict[str, str | None] = {}
    for i, f in enumerate(data["figures"]):
        svg = []
        for j, part in enumerate(f["matrices"]):     # one figure per campaign
            try:
                fig = plots.figure(f["kind"], part["matrix"], [part["campaign"]])
            except BenchError:
                continue
            svg.append(figstyle.svg_text(fig, f"f{i}-{j}-"))
        out[f["kind"]] = "\n".join(svg) or None
    return out


def has_matplotlib() -> bool:
    import importlib.util
    return importlib.util.find_spec("matplotlib") is not None
