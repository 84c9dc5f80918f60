"""Which TP group SGLang splits one part of a model over under DP attention: the full TP group,
or the attention-TP group (tp / dp) where the part's model file passes it, by file and release
(attention.py for the attention projections, lm_head.py for the LM head)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from kvtier.engines.deployment import Deployment
from kvtier.engines.sglang import versions
from kvtier.engines.sglang.versions import V0_3_0
from kvtier.engines.version import Version
from kvtier.errors import KvtierError
from kvtier.model.description import ModelSpec


class Words(NamedTuple):
    """How kvtier says one part's split: the reason's subject, the part as a refusal names it,
    the split's cause and group, and what a file that never / from a release passes it does."""

    name: str
    noun: str
    why: str
    label: str
    never: str
    takes: str


# the flag that asks for a part's attention-TP split -> its words
WORDS = {
    "--enable-dp-attention": Words(
        "attention", "attention", "DP attention", "TP",
        "builds it at full TP under DP attention", "takes attention TP",
    ),
    "--enable-dp-lm-head": Words(
        "the LM head", "LM head", "--enable-dp-lm-head", "attention TP",
        "ignores --enable-dp-lm-head", "follows --enable-dp-lm-head",
    ),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class PartSplit:
    """One part's rule: the flag that asks for its attention-TP split, the model file per
    architecture and the first release each file passes the attention-TP group."""

    flag: str
    files: Mapping[str, str]  # architecture -> the model file that builds the part
    follows: Mapping[str, Version]  # model file -> the first release it passes the group

    def ranks(self, model: ModelSpec, d: Deployment) -> tuple[int, str]:
        """The ranks the part is split over and why; an architecture whose file is not read
        here is refused in one line, where taking either group would be a guess."""
        w, attn_tp = WORDS[self.flag], d.tp // d.dp
        file = self.files.get(model.architecture)
        if file is None:
            raise KvtierError(
                f"{model.architecture} ({model.model_id}): kvtier has not read which ranks "
                f"SGLang's model file splits its {w.noun} over under {self.flag} (full "
                f"TP{d.tp} or attention TP{attn_tp}); drop {self.flag}"
            )
        since = self.follows.get(file)
        if since is None:
            return d.tp, f"{w.name} at TP{d.tp} ({file} {w.never})"
        if versions.DEFAULT.resolve(d.engine_version) < since:
            return d.tp, f"{w.name} at TP{d.tp} ({file} {w.takes} from v{since})"
        where = f"{file} from v{since}" if since > V0_3_0 else file
        return attn_tp, f"{w.name} at {w.label}{attn_tp} ({w.why}; {where})"
