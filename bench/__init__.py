"""The benchmark product, installed as ``collectives.bench``: the ``collectives-bench`` command
(cli.py) and what it runs.

Cases and harness (cases.py, harness.py), point-to-point tests (p2p.py), nonblocking tests and
their overlap with computation (nonblocking.py), output formats (report.py, plot.py), the modes
that launch jobs (launches.py, with the machine-state probe state.py), the ``auto`` table's
tuning (tune.py), the cost model (model.py, and simulate.py's schedules walked over a node map)
and the default-configuration benchmark (default_path.py).
In the repository, beside them and not installed: the Slurm and PBS jobs (jobs/), the
emulated slow network (net/) and the studies (studies/).
"""
