"""Stages 3 and 4, the claims and the decision: which comparison a claim rests on and whether it
survives the controls (claims), the verdict's rules in order (verdict), the checks and the caps on
how sure it may say it is, and the running verdict a soak asks after every probe cycle (live)."""
