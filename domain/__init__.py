"""The ledger's own terms, shared by both daemons and the CLI: who holds a GPU (``jobs``), how a
Slurm job ended (``states``), and a window's figures as every source hands them to the report
(``week``). It imports none of the product's other packages."""
