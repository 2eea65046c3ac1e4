"""Stage 2, building the evidence: decode samples and the healthy model, the onset and the trend,
the comparisons at matched conditions with their intervals (step series, bins, probes, controls,
prefill, prefix reuse, all of them together), the suspects, and what they gather into `Evidence`
(diagnostics.evidence.gathered)."""
