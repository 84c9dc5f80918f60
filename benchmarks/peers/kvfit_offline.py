"""Run kvfit without a network: its Hugging Face metadata requests are answered from a local
JSON file (config.json from kvtier's catalog and a one-file listing sized like the checkpoint).

Runs in the tools virtualenv:  python kvfit_offline.py ANSWERS.json -- KVFIT_ARGS...
ANSWERS.json: {"config": {...config.json...}, "weight_bytes": N}
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    answers = json.loads(Path(sys.argv[1]).read_text())
    argv = sys.argv[sys.argv.index("--") + 1 :]

    import kvfit.hf as hf
    from kvfit.cli import main as kvfit_main

    def local_json(url: str, **_: Any) -> dict[str, Any]:
        if url.endswith("/config.json"):
            return answers["config"]
        if "/api/models/" in url:
            return {
                "sha": "local",
                "siblings": [{"rfilename": "model.safetensors", "size": answers["weight_bytes"]}],
            }
        raise hf.HuggingFaceError(f"offline: no local answer for {url}")

    hf._fetch_json = local_json
    return kvfit_main(argv)


if __name__ == "__main__":
    sys.exit(main())
