"""SGLang's rules: versions and eras (`pool`), default fraction and batch sizes (`defaults`),
pool formulas (`pool`, `hicache`), the ledger builder (`ledger`), launch flags (`flags`), the
startup and serving log grammars (`log`, `serving`)."""
