"""vLLM's rules: versions and eras, pool formulas and defaults (`pool`), the ledger builder
(`ledger`), launch flags (`flags`), the startup and serving log grammars (`log`, `serving`)."""
