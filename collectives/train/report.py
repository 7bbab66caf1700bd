"""What a training run prints: a table row per reported epoch (rank 0), the progress bar, and
the message of a run that diverged."""
import sys
import time

import numpy as np


class Reporter:
    """The reports of the run whose Context is ``ctx``; ``show_progress``: draw the progress bar."""

    def __init__(self, ctx, show_progress):
        self.ctx = ctx
        self.show_progress = show_progress

    def report(self, epoch, w, comm=None, force=False):
        """Evaluate at the end of ``epoch`` and print a table row on rank 0."""
        ctx, o = self.ctx, self.ctx.o
        if not force and (epoch + 1) % o["log_every"] and epoch + 1 != o["epochs"]:
            return
        F, train_m, test_m = ctx.objective.evaluate(w, comm)
        clock, history = ctx.clock.total, ctx.progress.history
        row = dict(epoch=epoch + 1, step=ctx.progress.t, objective=F, train=train_m, test=test_m,
                   compute=clock["compute"], comm=clock["comm"],
                   wait=clock["wait"], elapsed=time.perf_counter() - ctx.start)
        if ctx.progress.consensus is not None:
            row["consensus"] = ctx.progress.consensus
        row["training"] = row["elapsed"] - clock["eval"]  # wall time less evaluations
        history.append(row)
        if ctx.rank == 0:
            # no test column without a test set (--test-fraction 0), rather than a column of NaN
            test = "" if ctx.n_test == 0 else f" {test_m:>10.4f}"
            # optional columns: wait when measured, consensus distance for the local models
            extra = [(f"{'wait s':>8}", f"{row['wait']:>8.3f}")] if o["measure_wait"] else []
            if "consensus" in row:
                extra.append((f"{'consensus':>10}", f"{row['consensus']:>10.3e}"))
            if len(history) == 1:
                metric = "acc" if ctx.is_classifier else "rmse"
                head = "" if ctx.n_test == 0 else f" {'test ' + metric:>10}"
                self._print(f"{'epoch':>6} {'step':>7} {'objective':>18} {'train ' + metric:>10}{head} "
                            f"{'compute s':>10} {'comm s':>8}" + "".join(" " + h for h, _ in extra))
            self._print(f"{row['epoch']:>6} {row['step']:>7} {F:>18.12f} {train_m:>10.4f}{test} "
                        f"{row['compute']:>10.3f} {row['comm']:>8.3f}" + "".join(" " + v for _, v in extra))

    def diverged(self):
        """The message for a run whose objective or parameters stopped being finite: where it
        happened (the first report that saw it, else the current step) and what to try."""
        ctx = self.ctx
        bad = next((r for r in ctx.progress.history if not np.isfinite(r["objective"])), None)
        where = f"epoch {bad['epoch']} (step {bad['step']})" if bad else f"step {ctx.progress.t}"
        hint = (f"try a smaller --lr (now {ctx.o['lr']:g})" if ctx.o["optimizer"] in ("sgd", "adam")
                else "try a larger --lam or standardized features")
        return f"training diverged: the objective is not finite from {where}; {hint}"

    def _print(self, line):
        if self.show_progress:
            sys.stderr.write("\r\033[K")
        print(line, flush=True)

    def bar(self, epoch, step, steps):
        """Redraw rank 0's progress bar."""
        if self.show_progress:
            width = 30
            done = int(width * (step + 1) / max(steps, 1))
            sys.stderr.write(f"\repoch {epoch + 1}/{self.ctx.o['epochs']} [{'#' * done}{'.' * (width - done)}] "
                             f"{step + 1}/{steps}")
            sys.stderr.flush()
