"""`tuner choose`: across the studies of one database (any GPU types and engines), the
configurations whose measured levels meet a per-user speed (and a TTFT target), ranked by cost
or throughput, with the winner exported as `tuner export --trial N` writes it."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from tuner.cli.app import StorageOpt, _open, _print_cost, _table, app, out
from tuner.spec.errors import BadInput, NoResult
from tuner.spec.names import folder_of


class By(str, Enum):
    cost = "cost"
    throughput = "throughput"


@app.command()
def choose(
    min_tok_s_per_user: Annotated[float, typer.Option(
        "--min-tok-s-per-user", min=0.0, metavar="X", help="The per-user speed the product "
        "needs: a level counts when 90% of its requests decode at least this fast (p90).")],
    storage: StorageOpt = None,
    studies: Annotated[str | None, typer.Option(
        "--studies", metavar="NAMES", help="Comma-separated study names (default: every "
        "study in the database).")] = None,
    ttft_p90_ms: Annotated[float | None, typer.Option(
        "--ttft-p90-ms", min=0.0, metavar="Y", help="And a TTFT p90 of at most Y ms.")] = None,
    by: Annotated[By, typer.Option("--by", help="Rank by USD per million output tokens "
                                   "(cheapest first) or by output tok/s per GPU.")] = By.cost,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Where the winner's files go "
                       "(default tuner-exports/STUDY).")] = None,
) -> None:
    """Choose across studies: the configurations meeting the targets, ranked, and the winner
    exported; exits 3 when none meets them."""
    from tuner.report.choice import GAP, choices_frame
    from tuner.report.export import default_formats, write_export
    from tuner.verdict.choose import Targets, choose

    store = _open(storage)
    chosen = _studies(store, studies)
    targets = Targets(min_tok_s_per_user, ttft_p90_ms)
    ranked = choose([(s, store.trials(s.name)) for s in chosen], targets, by.value)
    out.print(f"configurations reaching {targets.text()}, by {by.value}:")
    table = choices_frame(ranked, by.value)
    table[GAP] = ["winner" if i == 0 else _gap_text(g, by.value)
                  for i, g in enumerate(table[GAP])]
    out.print(_table(table))
    best = ranked[0]
    run = "its confirmation" if best.confirmed else "its first run"
    out.print(f"\nchosen: study {best.study.name} ({best.study.gpu_type}, {best.study.engine}), "
              f"trial {best.trial.number}, at c={best.level.concurrency} of {run}: "
              f"{best.tok_s_per_gpu:,.0f} output tok/s per GPU, per-user p90 "
              f"{best.level.tok_s_per_user_p90:,.1f} tok/s")
    _print_cost(best.study, best.trial, best.usd_per_mtok)
    directory = out_dir or folder_of(Path("tuner-exports"), best.study.name)
    for f in write_export(best.study, best.trial, directory, default_formats(best.study)):
        out.print(str(f))


def _studies(store, names: str | None) -> list:
    """The studies named (comma-separated), or every study; one line for a name not there."""
    every = store.list_studies()
    if not every:
        raise NoResult("the database holds no study yet: run `tuner run STUDY.yaml` first")
    if names is None:
        return every
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise BadInput("--studies is empty: name one or more studies, separated by commas")
    by_name = {s.name: s for s in every}
    missing = [n for n in wanted if n not in by_name]
    if missing:
        raise BadInput(f"--studies {names}: no study {', '.join(missing)} in this database "
                       f"(studies: {', '.join(by_name)})")
    return [by_name[n] for n in dict.fromkeys(wanted)]


def _gap_text(gap: float | None, by: str) -> str:
    """Costlier by +x% (by cost), or slower per GPU by -x% (by throughput)."""
    if gap is None or gap != gap:
        return "-"
    return f"{gap if by == 'cost' else -gap:+.1%}"
