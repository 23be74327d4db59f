"""The report over a run folder, for people: plots, report.md/.html, the README table, the power claims and
the `compare` markdown. Numbers come from the results layer (`results`: files, frame, figures, verdicts);
nothing here computes a figure.

    from reports.render import render_report
    render_report("runs/<run>")     # report.md, report.html, plots/
"""
