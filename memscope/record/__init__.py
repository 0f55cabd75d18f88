"""Layer 2: the record of a run (``writer``), its one reader (``reader``: all SQL) and the catalogue of runs."""
