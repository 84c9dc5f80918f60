"""`kvtier advise STARTUP_LOG`: the deployment a real startup log describes, as `kvtier explain
LOG` reads it, written into advise's own deployment flags.

Every setting the log states (engine, model, TP, fraction, KV dtype, page size, speculative
algorithm and draft tokens) and every figure explain takes as measured (SGLang: the free memory
after the weights load and the weights; vLLM: weights, activation, non-torch, CUDA graphs, the
card) becomes the flag `kvtier simulate` takes for it, so each option's
simulate_args reproduce its run with `kvtier simulate` alone. The log's own KV token count is
the pool of every option that leaves the pool as it is (`--device-tokens`); an option that
changes it is priced by the ledger from the log's measured figures.
"""

from __future__ import annotations

import argparse

from kvtier.cli.flags import ADVISE, EXPLAIN, SIMULATE, rows, settings
from kvtier.cli.flags.deployment import MEASURED_FIGURE
from kvtier.cli.flags.row import USED
from kvtier.engines.deployment import Deployment, field_default
from kvtier.errors import KvtierError
from kvtier.files import read_text


def read_log(args: argparse.Namespace) -> int:
    """Explain `args.log`, fill the deployment flags the operator left out from it; the KV
    token count the engine logged."""
    from kvtier.ledger.explain import explain_log

    if args.launch:
        raise KvtierError(
            f"advise {args.log}: the log states the deployment; drop the command after `--`"
        )
    text = read_text(args.log, "log")
    try:
        explanation = explain_log(text, settings(args, EXPLAIN))
    except KvtierError as exc:
        raise KvtierError(f"advise {args.log}: {exc}") from None
    observed = explanation.reconciliation.observed
    if observed is None:
        raise KvtierError(f"advise {args.log}: the log states no KV token count")
    deployment = explanation.deployment
    _fill(args, deployment)
    if args.gpu is None:
        raise KvtierError(
            f"advise {args.log}: the log does not name the GPU, and simulate's timing model "
            "needs it: pass --gpu (e.g. --gpu 'RTX PRO 6000')"
        )
    return int(observed.value)


def _fill(args: argparse.Namespace, d: Deployment) -> None:
    """Each advise flag simulate also takes, from the log where the operator gave none: a
    setting in the engine's own spelling where kvtier has it, a figure by its Measured name."""
    from kvtier.engines.launch import flag_table

    table = flag_table(d.engine)
    usable = [
        row
        for row in rows(ADVISE)
        if row.commands[ADVISE] == USED
        and row.commands.get(SIMULATE) == USED
        and d.engine.value not in row.engines
    ]
    given = {row.field for row in usable if row.field and getattr(args, row.dest) is not None}
    # the engine's own spelling first, then kvtier's first row for a field the engine lacks
    ordered = sorted(
        usable, key=lambda row: row.field is None or row.name != table.spelling(row.field)
    )
    for row in ordered:
        if getattr(args, row.dest) is not None:
            continue
        if row.field is not None and row.field not in given:
            given.add(row.field)
            value = d.value(row.field)
            default = field_default(row.field)
            if value is not None and value is not False and value != default:
                setattr(args, row.dest, value)
        elif row.field is None and row.dest in MEASURED_FIGURE:
            setattr(args, row.dest, d.measured.value(MEASURED_FIGURE[row.dest]))
    if args.engine is None:
        args.engine = d.engine.value
